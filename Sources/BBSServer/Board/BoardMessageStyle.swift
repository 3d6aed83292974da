import Foundation
import Glibc

/// How a board message file reads.
public enum BoardMessageStyle: Sendable, Equatable {
  /// A device's rendering (docs/board-facts.md §1.4): `Date:` is raw ms, `Subject:` only what the
  /// writer's header said (often empty).
  case device
  /// A readable one: an RFC 2822 `Date:` (UTC), and a `Subject:` taken from the body's first
  /// line when the writer gave none. `X-Date-N:` keeps the milliseconds.
  case standard
}

/// Bytes of a subject taken from a body, at most (a header line stays readable).
private let impliedSubjectLimit = 72

/// The subject of a message whose writer gave none: its first non-blank line (cut at a
/// character boundary), or `(no subject)`.
func impliedSubject(of body: [UInt8]) -> String {
  let lines = String(decoding: body, as: UTF8.self).split(whereSeparator: \.isNewline)
  guard
    let first = lines.lazy.map({ $0.trimmingCharacters(in: .whitespaces) })
      .first(where: { !$0.isEmpty })
  else { return "(no subject)" }
  return truncateUTF8(first, maxBytes: impliedSubjectLimit)
}

/// `millis` since the Unix epoch as an RFC 2822 date in UTC: `Mon, 27 Jan 2025 19:17:12 +0000`.
func rfc2822Date(millis: UInt64) -> String {
  var seconds = time_t(clamping: millis / 1000)
  var parts = tm()
  guard gmtime_r(&seconds, &parts) != nil else { return String(millis) }
  let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
  let months = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
  ]
  func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
  let day = days[Int(parts.tm_wday) % 7]
  let month = months[Int(parts.tm_mon) % 12]
  return
    "\(day), \(two(parts.tm_mday)) \(month) \(parts.tm_year + 1900) \(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) +0000"
}
