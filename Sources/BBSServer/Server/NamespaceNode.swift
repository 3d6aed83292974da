import NinePProtocol

/// One node of the served tree (docs/board-facts.md §1.2), known by what it is rather than by an
/// allocated handle, so a fid is just a node value and clunking frees nothing.
enum NamespaceNode: Hashable, Sendable {
  case root
  case etcDir
  case etcFile(EtcField)
  case netsDir
  case netsFile(String)
  case roomsDir
  case boardRoom(String)
  case boardMessage(room: String, id: UInt32)
  case chatDir
  case chatPost
  case chatUsers
  case chatRoom(String)
  /// A path inside the `--files` area; `[]` is the area's root.
  case files([String])

  /// The 9BBS node kind, kept in the upper 32 bits of qid.path (`enum bbs_node_type`).
  var kind: UInt64 {
    switch self {
    case .root: return 0
    case .roomsDir: return 1
    case .boardRoom: return 2
    case .boardMessage: return 3
    case .etcDir: return 4
    case .etcFile: return 5
    case .netsDir: return 6
    case .netsFile: return 5
    case .chatDir: return 8
    case .chatRoom: return 9
    case .chatPost: return 10
    case .chatUsers: return 11
    case .files: return 12
    }
  }

  /// Whether the node really is a directory (what listings say).
  var isDirectory: Bool {
    switch self {
    case .root, .etcDir, .netsDir, .roomsDir, .boardRoom, .chatDir: return true
    case .etcFile, .netsFile, .boardMessage, .chatPost, .chatUsers, .chatRoom: return false
    case .files: return false  // decided by the file system; see FilesArea
    }
  }

  /// The node's name in its parent's listing.
  var name: String {
    switch self {
    case .root: return "/"
    case .etcDir: return "etc"
    case .etcFile(let field): return field.rawValue
    case .netsDir: return "nets"
    case .netsFile(let name): return name
    case .roomsDir: return "rooms"
    case .boardRoom(let name): return name
    case .boardMessage(_, let id): return String(id)
    case .chatDir: return "chat"
    case .chatPost: return "post"
    case .chatUsers: return "users"
    case .chatRoom(let name): return name
    case .files(let path): return path.last ?? "files"
    }
  }

  /// The parent node (root's parent is root).
  var parent: NamespaceNode {
    switch self {
    case .root, .etcDir, .roomsDir, .chatDir: return .root
    case .etcFile, .netsDir: return .etcDir
    case .netsFile: return .netsDir
    case .boardRoom: return .roomsDir
    case .boardMessage(let room, _): return .boardRoom(room)
    case .chatPost, .chatUsers, .chatRoom: return .chatDir
    case .files(let path): return path.isEmpty ? .root : .files(Array(path.dropLast()))
    }
  }

  /// A short path for log lines.
  var path: String {
    switch self {
    case .root: return "/"
    case .files(let parts): return "/files" + parts.map { "/" + $0 }.joined()
    default:
      let parentPath = parent.path
      return (parentPath == "/" ? "" : parentPath) + "/" + name
    }
  }
}

/// Stable hash of a string into 32 bits (FNV-1a), for qid paths of named nodes.
func stableHash32(_ string: String) -> UInt64 {
  var hash: UInt32 = 2_166_136_261
  for byte in string.utf8 {
    hash ^= UInt32(byte)
    hash = hash &* 16_777_619
  }
  return UInt64(hash)
}
