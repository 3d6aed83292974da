import Foundation

/// What a board's `[HH:MM:SS]` stamps count.
public enum StampKind: Sendable, Equatable {
  /// Time since the board booted, hours not wrapping (a 9BBS device: `k_uptime_get()`).
  case uptime
  /// The UTC time of day (9bbsd's own profile).
  case utc
}

/// Turns a board's stamps into the local times lines were said, as the chat shows them.
///
/// Uptime boards: a live line happened when it arrived (the board sends it at once), which
/// also tells when the board booted; history lines are placed by that boot time, or, before
/// any line arrived live, by the one the newest stamp implies (it was said no later than now).
/// UTC boards: the stamp is converted, counting the days back where stamps pass midnight.
struct StampClock: Sendable {
  /// A guess from the mount's profile, corrected by the first live line that contradicts it.
  private(set) var kind: StampKind
  /// When the board's uptime was 0, for an uptime board, once known.
  private(set) var boot: Date?

  /// How far two boot times may differ and still be one boot (the line's time on the way).
  static let sameBoot: TimeInterval = 120

  init(kind: StampKind) {
    self.kind = kind
  }

  /// When a line with `stamp` (seconds) arriving live at `now` was said.
  mutating func live(stamp: Int?, at now: Date) -> Date {
    guard let stamp else { return now }
    // A line said now whose stamp is not now in UTC (or has more than 23 hours) counts uptime.
    if kind == .utc,
      stamp >= 86400 || abs(now.timeIntervalSince(Self.utcDate(stamp, before: now))) > Self.sameBoot
    {
      kind = .uptime
    }
    switch kind {
    case .uptime:
      let implied = now.addingTimeInterval(-Double(stamp))
      // The earliest boot time of one boot is the truest: every later one includes a delay.
      if let boot, abs(boot.timeIntervalSince(implied)) <= Self.sameBoot {
        self.boot = min(boot, implied)
      } else {
        boot = implied
      }
      return now
    case .utc:
      return Self.utcDate(stamp, before: now)
    }
  }

  /// When each history line (oldest first, by its stamp in seconds) read at `now` was said;
  /// nil for a line without a stamp.
  mutating func history(_ stamps: [Int?], at now: Date) -> [Date?] {
    var dates: [Date?] = Array(repeating: nil, count: stamps.count)
    var later: Date?
    if kind == .utc, stamps.contains(where: { ($0 ?? 0) >= 86400 }) { kind = .uptime }
    if kind == .uptime, boot == nil, let newest = stamps.last(where: { $0 != nil }) ?? nil {
      boot = now.addingTimeInterval(-Double(newest))
    }
    for index in stamps.indices.reversed() {
      guard let stamp = stamps[index] else { continue }
      var date: Date
      switch kind {
      case .uptime:
        // A stamp larger than a later one is from before a restart: no later than that line.
        date = (boot ?? now).addingTimeInterval(Double(stamp))
      case .utc:
        // The latest such time of day before the next line: a day back where stamps wrap.
        date = Self.utcDate(stamp, before: later ?? now)
      }
      date = min(date, later ?? now, now)
      dates[index] = date
      later = date
    }
    return dates
  }

  /// The latest moment at or before `limit` (and a minute of clock skew) whose UTC time of
  /// day is `stamp` seconds.
  static func utcDate(_ stamp: Int, before limit: Date) -> Date {
    let seconds = limit.timeIntervalSince1970
    let midnight = (seconds / 86400).rounded(.down) * 86400
    var date = Date(timeIntervalSince1970: midnight + Double(stamp % 86400))
    if date.timeIntervalSince(limit) > 60 { date = date.addingTimeInterval(-86400) }
    return date
  }

  /// `HH:MM:SS` of `date` in the local time zone.
  static func localText(_ date: Date) -> String {
    var calendar = Calendar(identifier: .gregorian)
    calendar.timeZone = TimeZone.current
    let parts = calendar.dateComponents([.hour, .minute, .second], from: date)
    return String(format: "%02d:%02d:%02d", parts.hour ?? 0, parts.minute ?? 0, parts.second ?? 0)
  }
}
