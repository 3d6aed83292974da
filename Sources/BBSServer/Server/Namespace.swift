import Glibc
import NinePProtocol
import Synchronization

/// The 9BBS tree (docs/board-facts.md §1.2) served from a ``Board``: walks, stats, listings, reads,
/// writes and creates. Chat-room reads (which may park) are the session's business.
///
/// In the device and gen1 profiles (`device`), walks and Tstat reproduce `bbs_create_node`: only message and /etc
/// files are files; every other node says QTDIR with mode 0755 but no DMDIR and length 0, and
/// some qid paths differ from the listing's.
final class Namespace: Sendable {
  let board: Board
  let files: FilesArea?
  let device: Bool
  /// Gen-1's `bbs->authenticated_user`: the uname of the last Twrite on any file from any
  /// connection (nil before the first), whose cursor every Gen-1 chat read uses.
  private let lastWriter = Mutex<String?>(nil)

  init(board: Board, files: FilesArea?, device: Bool) {
    self.board = board
    self.files = files
    self.device = device
  }

  /// The board-wide user of a Gen-1 board: the last writer, else `guest`.
  var authenticatedUser: String {
    lastWriter.withLock { $0 } ?? "guest"
  }

  /// Records a Gen-1 Twrite's uname as the board-wide user (an empty uname counts as `guest`).
  func noteWriter(_ uname: String) {
    lastWriter.withLock { $0 = uname.isEmpty ? "guest" : uname }
  }

  private static let owner = "zephyr"

  /// `/etc/nets` entries. A device lists nets it can't read (docs/board-facts.md §1.2); this server
  /// belongs to no net, so the default profile lists none.
  private var nets: [String] { device ? etcNets : [] }

  // MARK: Walking

  /// The child `name` of `node`, or nil. `..` goes to the parent.
  func walk(from node: NamespaceNode, name: String) -> NamespaceNode? {
    if name == ".." { return node.parent }
    if device && name.utf8.count > 63 { return nil }  // the device's walk buffer
    switch node {
    case .root:
      switch name {
      case "etc": return .etcDir
      case "rooms": return .roomsDir
      case "chat": return .chatDir
      case "files": return files == nil ? nil : .files([])
      default: return nil
      }
    case .etcDir:
      if name == "nets" { return .netsDir }
      return EtcField(rawValue: name).map { .etcFile($0) }
    case .netsDir:
      return nets.contains(name) ? .netsFile(name) : nil
    case .roomsDir:
      return board.rooms.hasRoom(name) ? .boardRoom(name) : nil
    case .boardRoom(let room):
      guard let message = try? board.rooms.message(in: room, named: name) else { return nil }
      return .boardMessage(room: room, id: message.id)
    case .chatDir:
      switch name {
      case "post": return .chatPost
      case "users": return .chatUsers
      default: return board.chat.roomNames.contains(name) ? .chatRoom(name) : nil
      }
    case .files(let path):
      guard let files, FilesArea.isValidName(name), (try? files.info(path + [name])) != nil
      else { return nil }
      return .files(path + [name])
    case .etcFile, .netsFile, .boardMessage, .chatPost, .chatUsers, .chatRoom:
      return nil
    }
  }

  /// Whether the node still exists (rooms and messages cannot vanish, files can).
  func isDirectory(_ node: NamespaceNode) -> Bool {
    if case .files(let path) = node { return (try? files?.info(path))?.isDirectory ?? false }
    return node.isDirectory
  }

  // MARK: Qids and stats

  /// A stable number for the node within its kind.
  private func identity(_ node: NamespaceNode) -> UInt64 {
    switch node {
    case .root: return 0
    case .etcDir: return 0
    case .roomsDir: return 1
    case .chatDir: return 2
    case .etcFile(let field): return UInt64(EtcField.allCases.firstIndex(of: field) ?? 0)
    case .netsDir: return 7
    case .netsFile(let name): return 100 + UInt64(etcNets.firstIndex(of: name) ?? 0)
    case .boardRoom(let name), .chatRoom(let name): return stableHash32(name)
    case .boardMessage(_, let id): return UInt64(id)
    case .chatPost: return 0
    case .chatUsers: return 1
    case .files(let path):
      return (try? files?.info(path))?.inode ?? stableHash32(path.joined(separator: "/"))
    }
  }

  /// The qid a listing shows.
  func listingQid(_ node: NamespaceNode) -> Qid {
    let isDir = isDirectory(node)
    let low = identity(node) & 0xFFFF_FFFF
    return Qid(type: isDir ? .directory : .file, path: node.kind << 32 | low)
  }

  /// The qid a walk, attach, open or create returns.
  func walkQid(_ node: NamespaceNode) -> Qid {
    guard device else { return listingQid(node) }
    var path = node.kind << 32 | (identity(node) & 0xFFFF_FFFF)
    switch node {
    case .root, .etcDir, .roomsDir, .chatDir, .etcFile, .netsDir, .netsFile, .chatPost,
      .chatUsers:
      // A device puts a heap pointer here; the listing puts an index.
      path = node.kind << 32 | (0x2000_0000 | (identity(node) & 0x0FFF_FFFF))
    default: break
    }
    return Qid(type: deviceWalkIsFile(node) ? .file : .directory, path: path)
  }

  private func deviceWalkIsFile(_ node: NamespaceNode) -> Bool {
    switch node {
    case .etcFile, .netsFile, .boardMessage: return true
    case .files: return !isDirectory(node)
    default: return false
    }
  }

  /// The entry a listing of the node's parent shows for it.
  func listingStat(_ node: NamespaceNode, user: BoardUser) -> Stat {
    var mode: FileMode
    var length: UInt64 = 0
    var mtime: UInt32 = 0
    var atime: UInt32 = 0
    switch node {
    case .etcFile(let field):
      mode = FileMode(permissions: field.isWritable && board.etc.isAdmin(user.id) ? 0o644 : 0o444)
      if !device { length = UInt64(board.etc.read(field).count) }
    case .netsFile: mode = FileMode(permissions: 0o644)
    case .boardMessage(let room, let id):
      mode = FileMode(permissions: 0o644)
      if let message = try? board.rooms.message(in: room, id: id) {
        if board.limits.messageStyle == .device {
          length = UInt64(message.body.count)  // a device lists the body's length only
        } else {
          length = UInt64(message.rendered(.standard).count)
          mtime = UInt32(clamping: message.date / 1000)
          atime = mtime
        }
      }
    case .chatPost: mode = FileMode(permissions: 0o200)
    case .chatUsers, .chatRoom: mode = FileMode(permissions: 0o444)
    case .files(let path):
      if let info = try? files?.info(path) { return filesStat(path, info) }
      mode = FileMode(permissions: 0o644 & (files?.writable == true ? 0o777 : 0o555))
    default: mode = FileMode(permissions: 0o755, .directory)
    }
    return Stat(
      qid: listingQid(node), mode: mode, atime: atime, mtime: mtime, length: length,
      name: node.name, uid: Self.owner, gid: Self.owner, muid: Self.owner)
  }

  /// The entry of the files area's `path`, from what the area says of it (one stat).
  func filesStat(_ path: [String], _ info: FileInfo) -> Stat {
    let permissions = info.permissions & (files?.writable == true ? 0o777 : 0o555)
    let kind = NamespaceNode.files(path).kind
    return Stat(
      qid: Qid(
        type: info.isDirectory ? .directory : .file, path: kind << 32 | (info.inode & 0xFFFF_FFFF)),
      mode: FileMode(permissions: permissions, info.isDirectory ? .directory : []),
      atime: info.atime, mtime: info.mtime, length: info.isDirectory ? 0 : info.size,
      name: NamespaceNode.files(path).name, uid: Self.owner, gid: Self.owner, muid: Self.owner)
  }

  /// What Tstat says about a node.
  func stat(_ node: NamespaceNode, user: BoardUser) -> Stat {
    guard device else { return listingStat(node, user: user) }
    if case .files = node { return listingStat(node, user: user) }
    let isFile = deviceWalkIsFile(node)
    return Stat(
      qid: walkQid(node), mode: FileMode(permissions: isFile ? 0o644 : 0o755), length: 0,
      name: node.name, uid: Self.owner, gid: Self.owner, muid: Self.owner)
  }

  /// The children of a directory node, in listing order.
  func children(_ node: NamespaceNode) throws(NinePFailure) -> [NamespaceNode] {
    switch node {
    case .root: return [.etcDir, .roomsDir, .chatDir] + (files == nil ? [] : [.files([])])
    case .etcDir: return EtcField.allCases.map { .etcFile($0) } + [.netsDir]
    case .netsDir: return nets.map { .netsFile($0) }
    case .roomsDir: return board.rooms.roomNames.map { .boardRoom($0) }
    case .boardRoom(let room):
      do {
        return try board.rooms.messages(in: room).map { .boardMessage(room: room, id: $0.id) }
      } catch {
        throw NinePFailure(error, operation: "read")
      }
    case .chatDir: return [.chatPost, .chatUsers] + board.chat.roomNames.map { .chatRoom($0) }
    case .files(let path):
      guard let files else { throw NinePFailure.noSuchFile }
      return try files.list(path).map { .files(path + [$0.name]) }
    default: throw NinePFailure(errno: ENOTDIR, operation: "read")
    }
  }

  /// A directory's stat entries, encoded, in listing order: what a read of it from offset 0
  /// goes through. A files-area directory is read once, one stat per entry.
  func directoryEntries(_ node: NamespaceNode, user: BoardUser) throws(NinePFailure) -> [[UInt8]] {
    if case .files(let path) = node, let files {
      return try files.list(path).map { filesStat(path + [$0.name], $0.info).encoded() }
    }
    return try children(node).map { listingStat($0, user: user).encoded() }
  }

  /// A directory read of `entries`: the whole entries starting at byte `offset`, at most
  /// `count` bytes.
  static func directoryRead(_ entries: [[UInt8]], offset: UInt64, count: Int) -> [UInt8] {
    var out: [UInt8] = []
    var position: UInt64 = 0
    for entry in entries {
      defer { position += UInt64(entry.count) }
      if position < offset { continue }
      if out.count + entry.count > count { break }
      out += entry
    }
    return out
  }

  /// A directory read: whole stat entries starting at byte `offset` of the listing, at most
  /// `count` bytes.
  func readDirectory(_ node: NamespaceNode, offset: UInt64, count: Int, user: BoardUser)
    throws(NinePFailure)
    -> [UInt8]
  {
    Self.directoryRead(try directoryEntries(node, user: user), offset: offset, count: count)
  }

  // MARK: Reading and writing

  /// Reads a node that is not a chat room (those park; see ConnectionHandler).
  func read(_ node: NamespaceNode, offset: UInt64, count: Int, user: BoardUser, fd: Int32?)
    throws(NinePFailure) -> [UInt8]
  {
    func slice(_ bytes: [UInt8]) -> [UInt8] {
      guard offset < UInt64(bytes.count) else { return [] }
      let start = Int(offset)
      return Array(bytes[start..<min(bytes.count, start + count)])
    }
    switch node {
    case .etcFile(let field): return slice(board.etc.read(field))
    case .netsFile: throw NinePFailure(errno: ENOENT, operation: "read")
    case .boardMessage(let room, let id):
      do {
        return slice(try board.rooms.message(in: room, id: id).rendered(board.limits.messageStyle))
      } catch {
        throw NinePFailure(error, operation: "read")
      }
    case .chatPost: throw NinePFailure(errno: EINVAL, operation: "read")
    case .chatUsers: return board.chat.usersList(count: count)
    case .chatRoom(let room):
      do {
        return try board.chat.read(room: room, user: user, count: count)
      } catch {
        throw NinePFailure(error, operation: "read")
      }
    case .files:
      if let fd {
        var buffer = [UInt8](repeating: 0, count: count)
        let got = buffer.withUnsafeMutableBytes {
          pread(fd, $0.baseAddress, count, off_t(clamping: offset))
        }
        guard got >= 0 else { throw NinePFailure(errno: errno, operation: "read") }
        return Array(buffer[0..<got])
      }
      return try readDirectory(node, offset: offset, count: count, user: user)
    case .root, .etcDir, .netsDir, .roomsDir, .boardRoom, .chatDir:
      return try readDirectory(node, offset: offset, count: count, user: user)
    }
  }

  /// Writes a node; returns the count to report. `data` is usually a view into the request
  /// frame: a file-area write goes from there to the file without a copy.
  func write(
    _ node: NamespaceNode, offset: UInt64, data: ArraySlice<UInt8>, user: BoardUser, fd: Int32?
  )
    throws(NinePFailure) -> Int
  {
    do {
      switch node {
      case .chatPost:
        try board.chat.post(payload: Array(data), author: user)
        return data.count
      case .etcFile(let field):
        return try board.etc.write(field, offset: offset, data: Array(data), user: user.id)
      case .boardMessage(let room, let id):
        return try board.rooms.write(in: room, id: id, offset: offset, data: Array(data))
      case .files:
        guard let fd else { throw NinePFailure(errno: EISDIR, operation: "write") }
        let wrote = data.withUnsafeBytes {
          pwrite(fd, $0.baseAddress, data.count, off_t(clamping: offset))
        }
        guard wrote >= 0 else { throw NinePFailure(errno: errno, operation: "write") }
        return wrote
      default:
        throw NinePFailure(errno: EISDIR, operation: "write")
      }
    } catch let error as BoardError {
      throw NinePFailure(error, operation: "write")
    } catch let error as NinePFailure {
      throw error
    } catch {
      throw NinePFailure(errno: EIO, operation: "write")
    }
  }

  /// Tcreate in `parent`: a board room at the root, a message in a board room, a file or
  /// directory in the files area. Returns the new node and, for files, an open descriptor.
  func create(
    in parent: NamespaceNode, name: String, perm: FileMode, mode: OpenMode, user: BoardUser
  ) throws(NinePFailure) -> (node: NamespaceNode, fd: Int32?) {
    do {
      switch parent {
      case .root:
        try board.createRoomAtRoot(name)
        return (.boardRoom(name), nil)
      case .boardRoom(let room):
        let message = try board.rooms.createMessage(in: room, name: name, author: user.name)
        return (.boardMessage(room: room, id: message.id), nil)
      case .files(let path):
        guard let files else { throw NinePFailure.noSuchFile }
        // 9P2000 makes regular files and directories; the 9P2000.u kinds (symbolic link,
        // device, pipe, socket, setuid) would be made as a plain file of the wrong kind.
        let known: UInt32 =
          FileMode([.directory, .appendOnly, .exclusive, .temporary]).rawValue | 0o777
        guard perm.rawValue & ~known == 0 else {
          throw NinePFailure(errno: EINVAL, operation: "create")
        }
        let fd = try files.create(
          in: path, name: name, directory: perm.isDirectory, permissions: perm.permissions,
          mode: mode)
        return (.files(path + [name]), fd)
      default:
        throw NinePFailure(errno: EPERM, operation: "create")
      }
    } catch let error as BoardError {
      throw NinePFailure(error, operation: "create")
    } catch let error as NinePFailure {
      throw error
    } catch {
      throw NinePFailure(errno: EIO, operation: "create")
    }
  }

  /// Twstat in the default profile: a files-area entry changes as stat(5) says (see
  /// ``FilesArea/change(_:to:)``); elsewhere only a wstat that changes nothing is accepted.
  /// Returns the node afterwards (a rename moves it).
  ///
  /// Every entry belongs to one owner, so uid, gid and muid may only name it again: a change
  /// of owner or group is refused (`not authorized`), never dropped.
  func wstat(_ node: NamespaceNode, _ wanted: Stat) throws(NinePFailure) -> NamespaceNode {
    for owner in [wanted.uid, wanted.gid, wanted.muid] where !owner.isEmpty {
      guard owner == Self.owner else { throw NinePFailure(errno: EPERM, operation: "wstat") }
    }
    guard case .files(let path) = node, let files else {
      var unchanged = Stat.unchanged
      (unchanged.uid, unchanged.gid, unchanged.muid) = (wanted.uid, wanted.gid, wanted.muid)
      guard wanted == unchanged else { throw NinePFailure("wstat not supported") }
      return node
    }
    return .files(try files.change(path, to: wanted))
  }

  /// Tremove: only files-area entries can go; the BBS has no deletion.
  func remove(_ node: NamespaceNode) throws(NinePFailure) {
    guard case .files(let path) = node, let files else {
      throw NinePFailure(errno: ENOTSUP, operation: "remove")
    }
    try files.remove(path)
  }
}
