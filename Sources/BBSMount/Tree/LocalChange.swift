import Foundation
import FuseKit

/// The mount's own changes to a node that the server's entry may not show yet: the size and
/// times its writes, truncates, `O_TRUNC` opens and creates gave it (and, for a directory, the
/// times an entry made, removed or renamed in it gave it).
///
/// Why: the kernel (no writeback cache) takes every size getattr answers as the truth. A size
/// from a listing fetched before the mount's last write would shrink the file under its
/// writer: an append lands at the old end, a read stops there, `fstat` and `SEEK_END` lie.
///
/// Reconciling with the server (``InodeTable/record(path:kind:stat:asOf:)``): the server's
/// entry replaces this once it was asked for after the last change landed and no write is on
/// its way; until then this wins, so a file never shrinks under its writer, and a change
/// made by someone else shows up with the first entry fetched after the mount's own.
struct LocalChange: Sendable, Equatable {
  /// The size as the mount made it; nil for a directory.
  var size: UInt64?
  /// mtime and ctime, whole seconds as the server keeps them (so the times do not step back
  /// when the server's entry takes over).
  var modified: UInt32
  var changed: UInt32
  /// Writes answered (or sent) but not yet answered by the server.
  var writesInFlight = 0
  /// When the last change reached the server.
  var landed: ContinuousClock.Instant

  /// Now as a 9P time.
  static var now: UInt32 { UInt32(clamping: Int(Date().timeIntervalSince1970)) }

  /// Whether a server entry asked for at `asked` shows everything this holds.
  func isSuperseded(byEntryAskedAt asked: ContinuousClock.Instant) -> Bool {
    writesInFlight == 0 && asked > landed
  }
}

extension InodeTable {
  /// A write of `end - offset` bytes to `inode` is on its way: the file is at least `end`
  /// long and was modified now.
  func writeStarted(_ inode: FuseInode, end: UInt64) {
    changeLocally(inode) { change in
      change.size = max(change.size ?? 0, end)
      change.writesInFlight += 1
      change.modified = LocalChange.now
      change.changed = change.modified
    }
  }

  /// `writes` writes to `inode` were answered by the server (or failed, or were dropped). Not
  /// clamped at 0: write-behind may report a write settled just before its start is counted.
  func writeLanded(_ inode: FuseInode, writes: Int = 1) {
    changeLocally(inode) { change in
      change.writesInFlight -= writes
      change.landed = .now
    }
  }

  /// The server truncated or extended `inode` to `length` (setattr, `O_TRUNC`), at
  /// `modified` (now unless the same request set the time).
  func resized(_ inode: FuseInode, to length: UInt64, modified: UInt32? = nil) {
    changeLocally(inode) { change in
      change.size = length
      change.modified = modified ?? LocalChange.now
      change.changed = LocalChange.now
      change.landed = .now
    }
  }

  /// The server took a change of `inode`'s times or mode (setattr without a size).
  func attributesChanged(_ inode: FuseInode, modified: UInt32?) {
    changeLocally(inode) { change in
      if let modified { change.modified = modified }
      change.changed = LocalChange.now
      change.landed = .now
    }
  }

  /// The server took `change` (a setattr's Twstat).
  func changed(_ inode: FuseInode, by change: MetadataChange) {
    let modified = change.stat.mtime == .max ? nil : change.stat.mtime
    if change.stat.length != .max {
      resized(inode, to: change.stat.length, modified: modified)
    } else {
      attributesChanged(inode, modified: modified)
    }
  }

  /// An entry of the directory `inode` was created, removed or renamed through the mount.
  func entriesChanged(_ inode: FuseInode) {
    changeLocally(inode) { change in
      change.modified = LocalChange.now
      change.changed = change.modified
      change.landed = .now
    }
  }
}
