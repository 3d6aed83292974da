import CFuse3
import Glibc

/// One name in a directory listing.
public struct DirectoryEntry: Sendable {
  /// The name (no slashes).
  public var name: String
  /// Inode, attributes and timeouts. Plain readdir uses only the inode and the file type bits
  /// of `st_mode`; readdirplus sends all of it.
  public var entry: FuseEntry

  /// An entry with full attributes (for readdirplus).
  public init(name: String, entry: FuseEntry) {
    self.name = name
    self.entry = entry
  }

  /// An entry with only an inode and a mode (enough for plain readdir).
  public init(name: String, inode: FuseInode, mode: mode_t) {
    var st = stat()
    st.st_mode = mode
    self.init(name: name, entry: FuseEntry(inode: inode, attributes: st))
  }
}

/// Collects directory entries for one readdir or readdirplus reply, never more than the size
/// the kernel asked for (`fuse_add_direntry` / `fuse_add_direntry_plus`).
///
/// Each entry carries the offset of the entry after it: the kernel's next readdir continues
/// from there. Use it while the request is outstanding, then ``FuseRequest/replyDirectory(_:)``.
public struct DirectoryBuffer: Sendable {
  private let request: FuseRequest
  /// Whether entries are readdirplus entries (full attributes, counted as lookups).
  public let plus: Bool
  private(set) var bytes: [UInt8]
  /// Bytes filled so far.
  public private(set) var used = 0
  /// Entries added so far.
  public private(set) var count = 0

  /// A buffer for a reply of at most `size` bytes (the readdir request's `size`).
  public init(request: FuseRequest, size: Int, plus: Bool) {
    self.request = request
    self.plus = plus
    bytes = [UInt8](repeating: 0, count: max(0, size))
  }

  /// Adds `entry`, whose successor lives at `nextOffset`. Returns false, adding nothing, when
  /// the entry does not fit: stop there and reply.
  public mutating func add(_ entry: DirectoryEntry, nextOffset: Int64) -> Bool {
    let raw = request.raw
    let plus = plus
    let used = used
    let needed = bytes.withUnsafeMutableBytes { b -> Int in
      let rest = b.count - used
      let dst = b.baseAddress.map { ($0 + used).assumingMemoryBound(to: CChar.self) }
      if plus {
        var e = entry.entry.cValue
        return fuse_add_direntry_plus(raw, dst, rest, entry.name, &e, off_t(nextOffset))
      } else {
        var st = entry.entry.attributes
        return fuse_add_direntry(raw, dst, rest, entry.name, &st, off_t(nextOffset))
      }
    }
    guard needed <= bytes.count - used else { return false }
    self.used += needed
    count += 1
    return true
  }
}
