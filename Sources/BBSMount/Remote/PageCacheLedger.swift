import FuseKit
import NinePProtocol
import Synchronization

/// Which server version of each file the kernel's page cache holds, so a second open keeps
/// the cached pages (`keep_cache`) when the server's entry has not changed since, and drops
/// them when it has. A write through the mount forgets the file: the next open reads afresh.
final class PageCacheLedger: Sendable {
  /// What identifies a version of a server file: its qid (path and version), length and mtime.
  struct Version: Equatable, Sendable {
    var qid: Qid
    var length: UInt64
    var mtime: UInt32

    init(_ stat: Stat) {
      qid = stat.qid
      length = stat.length
      mtime = stat.mtime
    }
  }

  private struct Table {
    var versions: [FuseInode: Version] = [:]
    var writes: [FuseInode: UInt64] = [:]
  }
  private let table = Mutex(Table())

  /// Records that an open of `inode` at `version` goes through the page cache; true if the
  /// pages cached by an earlier open are of the same version and may be kept.
  func open(_ inode: FuseInode, at version: Version) -> Bool {
    table.withLock { table in
      defer { table.versions[inode] = version }
      return table.versions[inode] == version
    }
  }

  /// The file changed through the mount (or is opened without the cache): cached pages must go.
  func forget(_ inode: FuseInode) {
    table.withLock { table in
      table.versions[inode] = nil
      table.writes[inode, default: 0] &+= 1
    }
  }

  /// A number that changes every time `inode` is forgotten: what was read of it before is
  /// stale once this moves (``ReadAhead`` checks it).
  func generation(of inode: FuseInode) -> UInt64 {
    table.withLock { $0.writes[inode] ?? 0 }
  }
}
