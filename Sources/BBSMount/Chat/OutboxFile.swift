import Foundation

/// `chat/outbox`: the posts waiting in the outbox, rendered at each open.
///
/// A header line `ROOM\tAGE\tATTEMPTS\tLAST-ERROR`, then one tab-separated line per queued
/// post, oldest first; AGE in whole seconds, LAST-ERROR `-` when there is none. Fields are
/// escaped as `chat/events` escapes them (tab, newline, backslash, control characters as
/// `\t`, `\n`, `\\`, `\xNN`), so a line is always one post.
enum OutboxFile {
  static let header = "ROOM\tAGE\tATTEMPTS\tLAST-ERROR\n"

  static func render(_ posts: [QueuedPost], now: Date = Date()) -> [UInt8] {
    var text = header
    for post in posts {
      let age = max(0, Int(now.timeIntervalSince(post.queued)))
      text +=
        [escape(post.room), String(age), String(post.attempts), escape(post.lastError ?? "-")]
        .joined(separator: "\t") + "\n"
    }
    return Array(text.utf8)
  }

  /// One field made safe for a tab-separated line.
  static func escape(_ field: String) -> String {
    var escaped = ""
    for scalar in field.unicodeScalars {
      switch scalar {
      case "\t": escaped += "\\t"
      case "\n": escaped += "\\n"
      case "\\": escaped += "\\\\"
      case _
      where scalar.value < 0x20 || scalar.value == 0x7F || (0x80..<0xA0).contains(scalar.value):
        escaped += "\\x" + String(format: "%02X", scalar.value)
      default: escaped.unicodeScalars.append(scalar)
      }
    }
    return escaped
  }
}
