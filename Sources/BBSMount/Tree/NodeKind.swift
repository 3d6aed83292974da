/// What a path in the mounted tree is, as far as the mount's behaviour goes.
///
/// 9BBS servers describe their synthetic files badly (walk says directory, stat says length 0,
/// the listing says file), so behaviour is decided by path first and by the server second.
public enum NodeKind: Sendable, Equatable {
  case directory
  /// An ordinary file: read and written by offset.
  case file
  /// A chat room: offset-less stream, fanned out locally from one room feed.
  case room(name: String)
  /// `/chat/post`: write-only, one post per line.
  case post
  /// `/chat/users`: offset-less, read once per open.
  case users
  /// `/chat/log`: a directory of the mount's own, one transcript file per room.
  case roomLogs
  /// `/chat/log/ROOM`: a room's transcript as a file that ends (see RoomLog.swift).
  case roomLog(name: String)
  /// `/chat/outbox`: the mount's queued posts, rendered at each open, read-only.
  case outbox
  /// `/chat/unread`, `/chat/mentions`, `/chat/events`: the mount's own (Awareness/).
  case awareness(AwarenessFile)
}

/// Classifies paths by the 9BBS layout: `/chat/…` at the root or under `/srv/bbs/` (a device's
/// union namespace), plus user-configured stream globs.
public struct PathClassifier: Sendable {
  /// Extra paths treated as streams (`-o stream=GLOB`), fnmatch-style.
  public var streamGlobs: [String]

  public init(streamGlobs: [String] = []) { self.streamGlobs = streamGlobs }

  /// The BBS prefix of `components`: `[]` for a BBS at the root, `["srv", "bbs"]` under /srv.
  static func bbsRelative(_ components: [String]) -> ArraySlice<String> {
    if components.count >= 2 && components[0] == "srv" && components[1] == "bbs" {
      return components.dropFirst(2)
    }
    return components[...]
  }

  /// The kind the path's position implies, or nil when the server decides.
  public func kind(of components: [String]) -> NodeKind? {
    let path = "/" + components.joined(separator: "/")
    if streamGlobs.contains(where: { Glob.matches($0, path) }), let last = components.last {
      return .room(name: last)
    }
    let relative = Self.bbsRelative(components)
    if relative.count == 3, relative.first == "chat", relative.dropFirst().first == "log",
      let name = relative.last
    {
      return .roomLog(name: name)
    }
    guard relative.count == 2, relative.first == "chat", let name = relative.last else {
      return nil
    }
    switch name {
    case "post": return .post
    case "users": return .users
    case RoomLogs.directoryName: return .roomLogs
    case "outbox": return .outbox
    case _ where AwarenessFile(rawValue: name) != nil:
      return AwarenessFile(rawValue: name).map { .awareness($0) }
    default: return .room(name: name)
    }
  }

  /// Whether `components` is a board room directory (`/rooms/<room>`), where new files are
  /// messages sent whole at close.
  public func isBoardRoom(_ components: [String]) -> Bool {
    let relative = Self.bbsRelative(components)
    return relative.count == 2 && relative.first == "rooms"
  }

  /// Whether `components` is a 9BBS chat directory (`/chat`), whose files are its rooms,
  /// `post` and `users` (and the mount's own `log` directory).
  public func isChatDirectory(_ components: [String]) -> Bool {
    Self.bbsRelative(components) == ["chat"]
  }
}

/// Minimal fnmatch: `*` (not crossing `/`), `**` (anything), `?`, literal characters.
enum Glob {
  static func matches(_ pattern: String, _ text: String) -> Bool {
    match(Array(pattern.utf8)[...], Array(text.utf8)[...])
  }

  private static func match(_ pattern: ArraySlice<UInt8>, _ text: ArraySlice<UInt8>) -> Bool {
    guard let first = pattern.first else { return text.isEmpty }
    let slash = UInt8(ascii: "/")
    switch first {
    case UInt8(ascii: "*"):
      let rest = pattern.dropFirst()
      if rest.first == UInt8(ascii: "*") {
        let after = rest.dropFirst()
        for index in text.indices + [text.endIndex] where match(after, text[index...]) {
          return true
        }
        return false
      }
      var index = text.startIndex
      while true {
        if match(rest, text[index...]) { return true }
        if index == text.endIndex || text[index] == slash { return false }
        index += 1
      }
    case UInt8(ascii: "?"):
      guard let next = text.first, next != slash else { return false }
      return match(pattern.dropFirst(), text.dropFirst())
    default:
      guard text.first == first else { return false }
      return match(pattern.dropFirst(), text.dropFirst())
    }
  }
}
