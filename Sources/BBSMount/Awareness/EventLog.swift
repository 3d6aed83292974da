import Foundation
import Glibc
import TerminalText

/// One thing `chat/events` reports.
public enum AwarenessEvent: Sendable, Equatable {
  case message(room: String, author: String)
  case mention(room: String, author: String)
  case roomAdded(String)
  case roomRemoved(String)
  /// Rooms added beyond those reported one by one in the same listing change.
  case roomsAdded(more: Int)
  /// Rooms removed beyond those reported one by one in the same listing change.
  case roomsRemoved(more: Int)
  case userArrived(String)
  case userLeft(String)
  /// `state` is `up`, `down` or `reconnecting`.
  case link(state: String, reason: String)
  /// `state` is `queued`, `sent` or `failed`; a sent post's reason is `-`.
  case post(state: String, room: String, reason: String)
  case backlogIncomplete(room: String)

  /// The kind and fields, unescaped.
  var fields: [String] {
    switch self {
    case .message(let room, let author): ["message", room, author]
    case .mention(let room, let author): ["mention", room, author]
    case .roomAdded(let room): ["room-added", room]
    case .roomRemoved(let room): ["room-removed", room]
    case .roomsAdded(let more): ["rooms-added", String(more)]
    case .roomsRemoved(let more): ["rooms-removed", String(more)]
    case .userArrived(let name): ["user-arrived", name]
    case .userLeft(let name): ["user-left", name]
    case .link(let state, let reason): ["link", state, reason.isEmpty ? "-" : reason]
    case .post(let state, let room, let reason):
      ["post", state, room, reason.isEmpty ? "-" : reason]
    case .backlogIncomplete(let room): ["backlog-incomplete", room]
    }
  }
}

/// `chat/events`: one tab-separated line per event, `TIME\tKIND\tFIELDS…`, streamed to every
/// open of the file (each open starts from now).
public final class EventLog: Sendable {
  let streams: StreamFanOut

  init(streams: StreamFanOut) { self.streams = streams }

  /// Reports `event` to every reader of `chat/events`. Other parts of the mount (the outbox's
  /// queued/sent/failed, the users list) call this.
  public func record(_ event: AwarenessEvent, at time: Date = Date()) {
    guard streams.hasReaders else { return }
    streams.publish(Array(Self.line(event, at: time).utf8))
  }

  /// The event's line, newline included.
  static func line(_ event: AwarenessEvent, at time: Date) -> String {
    ([Self.timestamp(time)] + event.fields.map(Self.escaped)).joined(separator: "\t") + "\n"
  }

  /// A field safe for `read` and `awk`: tab, newline, backslash and control characters
  /// written as `\t`, `\n`, `\\` and `\xNN`, bidirectional overrides as `\u{202e}`.
  static func escaped(_ field: String) -> String {
    var result = ""
    result.reserveCapacity(field.utf8.count)
    for scalar in field.unicodeScalars {
      switch scalar.value {
      case 0x09: result += "\\t"
      case 0x0A: result += "\\n"
      case 0x5C: result += "\\\\"
      case 0..<0x20, 0x7F, 0x80..<0xA0:
        result += "\\x" + String(format: "%02x", scalar.value)
      case _ where TerminalText.isUnsafe(scalar):
        // A bidirectional override would reorder what a terminal shows after it.
        result += "\\u{" + String(scalar.value, radix: 16) + "}"
      default: result.unicodeScalars.append(scalar)
      }
    }
    return result
  }

  /// A room name as the first field of a space-separated line (`chat/unread`,
  /// `chat/mentions`): escaped as an event field, a space written `\x20`, a room named `-`
  /// `\x2d`.
  static func roomField(_ room: String) -> String {
    // "-" is the room of the line each open of `chat/mentions` starts with.
    room == "-" ? "\\x2d" : escaped(room).replacing(" ", with: "\\x20")
  }

  /// UTC ISO 8601 with milliseconds: `2026-11-25T18:20:01.123Z`.
  static func timestamp(_ date: Date) -> String {
    let interval = date.timeIntervalSince1970
    var seconds = time_t(interval.rounded(.down))
    var millis = Int(((interval - Double(seconds)) * 1000).rounded(.down))
    if millis >= 1000 {
      seconds += 1
      millis -= 1000
    }
    var parts = tm()
    gmtime_r(&seconds, &parts)
    return String(
      format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", Int(parts.tm_year) + 1900,
      Int(parts.tm_mon) + 1, Int(parts.tm_mday), Int(parts.tm_hour), Int(parts.tm_min),
      Int(parts.tm_sec), millis)
  }
}
