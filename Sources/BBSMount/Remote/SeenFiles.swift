import NinePClient
import Synchronization

/// Small files the mount has read whole, by path and server version, so that an open while
/// the link is stalled or down answers with what the mount last saw (`cat etc/motd` on a
/// frozen board), as listings and posts do.
///
/// Only a read-only open's sequential reads from offset 0 to the end are kept, and only when
/// they add up to the length the server gave for that version (a file that changed while it
/// was read is not kept), or the server gives no length (a board's files all say 0).
final class SeenFiles: Sendable {
  /// Files larger than this are not kept (a board's /etc files are a few hundred bytes).
  static let largestFile = 64 << 10
  /// All files kept together at most; the oldest go first.
  static let capacity = 2 << 20

  private struct Entry {
    var version: PageCacheLedger.Version
    var bytes: [UInt8]
    var stamp: UInt64
  }

  private struct Table {
    var entries: [[String]: Entry] = [:]
    var bytes = 0
    var clock: UInt64 = 0
  }
  private let table = Mutex(Table())

  /// What the mount last read of `path`, if it read that `version` whole.
  func bytes(of path: [String], at version: PageCacheLedger.Version) -> [UInt8]? {
    table.withLock { table in
      guard let entry = table.entries[path], Self.same(entry.version, version) else { return nil }
      return entry.bytes
    }
  }

  /// Whether `kept` and `now` are one version of a file. The qid's path is left out: a board
  /// gives one file different ones in a listing and in a walk (the path already names it).
  private static func same(_ kept: PageCacheLedger.Version, _ now: PageCacheLedger.Version)
    -> Bool
  {
    kept.qid.version == now.qid.version && kept.length == now.length && kept.mtime == now.mtime
  }

  /// Keeps `bytes` as the whole of `path` at `version`.
  func keep(_ bytes: [UInt8], of path: [String], at version: PageCacheLedger.Version) {
    // A board gives every file length 0: then the length says nothing.
    guard bytes.count <= Self.largestFile,
      version.length == 0 || UInt64(bytes.count) == version.length
    else { return }
    table.withLock { table in
      table.clock += 1
      table.bytes -= table.entries[path]?.bytes.count ?? 0
      table.entries[path] = Entry(version: version, bytes: bytes, stamp: table.clock)
      table.bytes += bytes.count
      while table.bytes > Self.capacity,
        let oldest = table.entries.min(by: { $0.value.stamp < $1.value.stamp })
      {
        table.bytes -= oldest.value.bytes.count
        table.entries[oldest.key] = nil
      }
    }
  }

  /// The mount wrote, removed or renamed `path`: what it read before is no longer the file.
  func forget(_ path: [String]) {
    table.withLock { table in
      if let entry = table.entries.removeValue(forKey: path) { table.bytes -= entry.bytes.count }
    }
  }

  /// Collects one open's reads while they run from offset 0 without a gap, and keeps the
  /// file once a read comes back short (the end) with every byte of `version`.
  final class Capture: Sendable {
    private let files: SeenFiles
    private let path: [String]
    private let version: PageCacheLedger.Version
    /// Nil once the reads left the sequence (a seek, a gap, a spliced reply) or ended.
    private let collected = Mutex<[UInt8]?>([])

    init(files: SeenFiles, path: [String], version: PageCacheLedger.Version) {
      self.files = files
      self.path = path
      self.version = version
    }

    /// A read of `size` bytes at `offset` came back with `pieces`.
    func read(at offset: UInt64, size: Int, got pieces: [ReadData]) {
      let whole = collected.withLock { collected -> [UInt8]? in
        guard var bytes = collected, offset == UInt64(bytes.count) else {
          collected = nil
          return nil
        }
        var count = 0
        for piece in pieces {
          guard case .memory(let slice) = piece else {
            collected = nil
            return nil
          }
          bytes += slice
          count += slice.count
        }
        guard bytes.count <= SeenFiles.largestFile else {
          collected = nil
          return nil
        }
        if count < size {
          collected = nil
          return bytes
        }
        collected = bytes
        return nil
      }
      if let whole { files.keep(whole, of: path, at: version) }
    }
  }
}
