import Foundation
import FuseKit
import NinePProtocol

#if canImport(Glibc)
  import Glibc
#endif

/// What the kernel is told about a node: its kind, `stat` attributes and cache timeouts.
///
/// Ordinary files and directories show the server's entry; rooms, post files and the users
/// list are served locally (a room's size and mtime are its transcript's), owned by the
/// mounting user.
struct NodeAttributes: Sendable {
  let options: MountOptions
  let classifier: PathClassifier
  let feeds: RoomFeeds
  /// The mtime of nodes the server gives none for.
  let started: Date

  /// The kind of a node: by path for the 9BBS files, else from the server's entry.
  func kind(of path: [String], stat: Stat) -> NodeKind {
    if let known = classifier.kind(of: path) {
      // A listing that says directory overrides a stream guess (a real dir named like a room).
      if stat.mode.isDirectory && stat.qid.isDirectory { return .directory }
      return known
    }
    return stat.qid.isDirectory || stat.mode.isDirectory ? .directory : .file
  }

  /// Whether the mount, not the server, knows the node's attributes.
  func isLocal(_ kind: NodeKind) -> Bool {
    switch kind {
    case .room, .post, .users, .roomLogs, .roomLog, .outbox, .awareness: true
    case .directory, .file: false
    }
  }

  func timeout(for node: InodeTable.Node) -> Double {
    // Rooms grow all the time: no attribute caching, so fstat sees growth at once.
    isLocal(node.kind) ? 0 : options.attributeTimeout.timeInterval
  }

  func entry(for node: InodeTable.Node) -> FuseEntry {
    FuseEntry(
      inode: node.inode, attributes: attributes(for: node), attributeTimeout: timeout(for: node),
      entryTimeout: options.attributeTimeout.timeInterval)
  }

  func attributes(for node: InodeTable.Node) -> stat {
    var attributes = stat()
    attributes.st_ino = UInt(node.inode)
    attributes.st_uid = options.uid
    attributes.st_gid = options.gid
    attributes.st_blksize = 4096
    let modified = describe(node, in: &attributes) ?? started
    attributes.st_mode &= ~mode_t(options.umask & 0o777)
    // Rounded up without overflow: a server may list a length of 2⁶⁴−1 (clamped to Int.max).
    let size = max(0, attributes.st_size)
    attributes.st_blocks = size / 512 + (size % 512 == 0 ? 0 : 1)
    stampTimes(of: node, in: &attributes, modified: modified)
    return attributes
  }

  /// Sets what the node's kind decides: type and mode, link count, size. Returns when a
  /// room's (or its transcript's) feed last changed, nil for other kinds.
  private func describe(_ node: InodeTable.Node, in attributes: inout stat) -> Date? {
    let permissions = node.stat?.mode.permissions ?? 0o755
    attributes.st_nlink = 1
    switch node.kind {
    case .directory:
      // A board's Tstat of a directory says 0755 without DMDIR and its listing may say less:
      // the owner can always list and enter those. An entry that says DMDIR (a files area,
      // a directory the mount made) means its mode as it is (`mkdir -m 0151`).
      let exact = node.stat?.mode.isDirectory ?? false
      attributes.st_mode = S_IFDIR | mode_t(exact ? permissions : permissions | 0o500)
      attributes.st_nlink = 2 + UInt(node.subdirectories ?? 0)
      // Removed, or renamed over, with a descriptor still open on it (rmdir's the kernel
      // clears itself; a rename over it only drops its cached attributes).
      if node.unlinked { attributes.st_nlink = 0 }
    case .file:
      attributes.st_mode = S_IFREG | mode_t(permissions)
      // cat and cp size their buffers by st_blksize: a megabyte per request (FUSE's largest)
      // instead of 128 KiB, so a large file moves in an eighth of the round trips.
      attributes.st_blksize = 1 << 20
      attributes.st_size = Int(clamping: node.local?.size ?? node.stat?.length ?? 0)
      if node.unlinked { attributes.st_nlink = 0 }
    case .room:
      attributes.st_mode = S_IFREG | (options.readOnly ? 0o444 : 0o644)
      if let feed = feeds.existing(node.path) {
        attributes.st_size = Int(clamping: feed.length)
        return feed.modified
      }
    case .post:
      attributes.st_mode = S_IFREG | 0o222
    case .users:
      attributes.st_mode = S_IFREG | 0o444
    case .roomLogs:
      attributes.st_mode = S_IFDIR | 0o555
      attributes.st_nlink = 2
    case .roomLog:
      attributes.st_mode = S_IFREG | 0o444
      if let feed = feeds.existing(RoomLogs.roomPath(of: node.path)) {
        attributes.st_size = Int(clamping: feed.extent.count)
        return feed.modified
      }
    case .outbox, .awareness:
      // A stream's size is its reader's (RoomFollowing); `unread` is rendered at open.
      attributes.st_mode = S_IFREG | 0o444
    }
    return nil
  }

  /// Sets the times: the server's where it keeps them (a files area does; a board says 0),
  /// the mount's own changes the server's entry may not show yet (LocalChange), else
  /// `modified`.
  private func stampTimes(of node: InodeTable.Node, in attributes: inout stat, modified: Date) {
    var mtime = modified
    var atime: Date?
    let onServer = node.kind == .file || node.kind == .directory
    if let server = node.stat, server.mtime != 0, onServer {
      mtime = Date(timeIntervalSince1970: TimeInterval(server.mtime))
      if server.atime != 0 { atime = Date(timeIntervalSince1970: TimeInterval(server.atime)) }
    }
    var ctime = mtime
    if let local = node.local, onServer {
      mtime = Date(timeIntervalSince1970: TimeInterval(local.modified))
      ctime = Date(timeIntervalSince1970: TimeInterval(local.changed))
    }
    attributes.st_mtim = Self.spec(mtime)
    attributes.st_ctim = Self.spec(max(ctime, mtime))
    attributes.st_atim = Self.spec(atime ?? mtime)
  }

  private static func spec(_ date: Date) -> timespec {
    timespec(
      tv_sec: Int(date.timeIntervalSince1970),
      tv_nsec: Int((date.timeIntervalSince1970.truncatingRemainder(dividingBy: 1)) * 1e9))
  }
}
