/// The awareness and outbox files' formats (`chat/unread`, `chat/mentions`, `chat/events`,
/// `chat/outbox`) and `chat/users`, parsed. Every parser skips a line it cannot read.
public enum MountFormats {
  /// `chat/unread`: `ROOM COUNT` a line, the room one field (a space in it written `\x20`).
  public static func unread(_ text: String) -> [String: Int] {
    var counts: [String: Int] = [:]
    for line in text.split(separator: "\n") {
      guard let space = line.lastIndex(of: " "), let count = Int(line[line.index(after: space)...]),
        count >= 0
      else { continue }
      // The room is one field, escaped as an event field (a space as `\x20`).
      counts[unescape(line[..<space])] = count
    }
    return counts
  }

  /// One `chat/mentions` line, `ROOM LINE`: the room (escaped as in `chat/unread`) and the
  /// room line.
  public static func mention(_ line: Substring) -> (room: String, line: RoomLine)? {
    // A bare `-` is the mount's own line an open starts with (a room named "-" is `\x2d`).
    guard let space = line.firstIndex(of: " "), line[..<space] != "-" else { return nil }
    let room = unescape(line[..<space])
    guard !room.isEmpty else { return nil }
    return (room, RoomLine(parsing: line[line.index(after: space)...]))
  }

  /// The words `chat/mentions` says it looks for, from the line it starts with
  /// (`- [10:00:00] mount9bbs: mentions of alice, deploy`), nil for any other line.
  public static func mentionWords(_ line: Substring) -> [String]? {
    let marker = " mount9bbs: mentions of "
    guard line.hasPrefix("- "), let range = line.range(of: marker) else { return nil }
    return line[range.upperBound...].components(separatedBy: ", ").map { unescape($0[...]) }
      .filter { !$0.isEmpty }
  }

  /// `chat/outbox`: the number of queued posts (the lines after the header).
  public static func outboxCount(_ text: String) -> Int {
    max(0, text.split(separator: "\n").count - 1)
  }

  /// `chat/users`: the names, from `NAME (idle: Ns)` lines (a bare name is a name too).
  public static func users(_ text: String) -> [String] {
    text.split(separator: "\n").compactMap { line in
      let name = line.range(of: " (idle:").map { line[..<$0.lowerBound] } ?? line
      return name.isEmpty ? nil : String(name)
    }
  }

  /// One `chat/events` line: `TIME\tKIND\tFIELDS...`, fields unescaped.
  public static func event(_ line: Substring) -> ChatEvent? {
    let fields = line.split(separator: "\t", omittingEmptySubsequences: false).map(unescape)
    guard fields.count >= 2 else { return nil }
    let rest = Array(fields.dropFirst(2))
    func field(_ index: Int) -> String? { index < rest.count ? rest[index] : nil }
    switch fields[1] {
    case "message":
      guard let room = field(0), let author = field(1) else { return nil }
      return .message(room: room, author: author)
    case "mention":
      guard let room = field(0), let author = field(1) else { return nil }
      return .mention(room: room, author: author)
    case "room-added": return field(0).map { .roomAdded($0) }
    case "room-removed": return field(0).map { .roomRemoved($0) }
    case "user-arrived": return field(0).map { .userArrived($0) }
    case "user-left": return field(0).map { .userLeft($0) }
    case "link":
      guard let state = field(0).flatMap(LinkState.init(rawValue:)) else { return nil }
      return .link(state, reason: field(1) ?? "")
    case "post":
      guard let outcome = field(0), let room = field(1) else { return nil }
      return .post(outcome: outcome, room: room, reason: field(2) ?? "")
    case "backlog-incomplete": return field(0).map { .backlogIncomplete($0) }
    default: return .other(fields[1])
    }
  }

  /// Undoes the events file's escapes: `\t`, `\n`, `\\`, `\xNN` and `\u{NNNN}` (each a
  /// character: `\x85` is U+0085).
  static func unescape(_ field: Substring) -> String {
    guard field.contains("\\") else { return String(field) }
    var bytes: [UInt8] = []
    var iterator = Array(field.utf8)[...]
    func append(_ value: UInt32) {
      bytes += Array(String(Unicode.Scalar(value).map(Character.init) ?? "\u{FFFD}").utf8)
    }
    while let byte = iterator.popFirst() {
      guard byte == UInt8(ascii: "\\"), let next = iterator.first else {
        bytes.append(byte)
        continue
      }
      switch next {
      case UInt8(ascii: "t"): bytes.append(0x09); iterator.removeFirst()
      case UInt8(ascii: "n"): bytes.append(0x0A); iterator.removeFirst()
      case UInt8(ascii: "\\"): bytes.append(0x5C); iterator.removeFirst()
      case UInt8(ascii: "x") where iterator.count >= 3:
        let digits = String(decoding: iterator.dropFirst().prefix(2), as: UTF8.self)
        if let value = UInt8(digits, radix: 16) {
          append(UInt32(value))
          iterator.removeFirst(3)
        } else {
          bytes.append(byte)
        }
      case UInt8(ascii: "u") where iterator.dropFirst().first == UInt8(ascii: "{"):
        let digits = iterator.dropFirst(2).prefix { $0 != UInt8(ascii: "}") }
        if digits.count <= 6, iterator.count > 2 + digits.count,
          let value = UInt32(String(decoding: digits, as: UTF8.self), radix: 16)
        {
          append(value)
          iterator.removeFirst(3 + digits.count)
        } else {
          bytes.append(byte)
        }
      default: bytes.append(byte)
      }
    }
    return String(decoding: bytes, as: UTF8.self)
  }
}

/// The link's state as `chat/events` reports it.
public enum LinkState: String, Sendable, Equatable {
  /// `stalled`: the link is up but a request has gone unanswered for 2 s.
  case up, stalled, down, reconnecting
}

/// One line of `chat/events`.
public enum ChatEvent: Sendable, Equatable {
  case message(room: String, author: String)
  case mention(room: String, author: String)
  case roomAdded(String)
  case roomRemoved(String)
  case userArrived(String)
  case userLeft(String)
  case link(LinkState, reason: String)
  case post(outcome: String, room: String, reason: String)
  case backlogIncomplete(String)
  /// A kind this client does not know (a newer mount).
  case other(String)
}
