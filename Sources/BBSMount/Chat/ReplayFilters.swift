/// Drops some lines of what a room feed received.
protocol LineFilter {
  /// `data` without the lines this filter drops (it remembers what it let through).
  mutating func filter(_ data: [UInt8]) -> [UInt8]
}

/// Drops exact copies of recent lines (stamp, author and text alike): what a board that keys
/// every reader's place by its last writer replays for a new poster (docs/board-facts.md §1.3).
/// A line genuinely repeated by the same author in the same second is dropped too; that is
/// the price on such a board, and the filter is only armed there.
struct EchoFilter: LineFilter {
  static let window = 512
  private var known: Set<[UInt8]>
  private var order: [[UInt8]]

  init(lines: [ArraySlice<UInt8>]) {
    order = lines.map { Array($0.last == UInt8(ascii: "\n") ? $0.dropLast() : $0) }
    known = Set(order)
  }

  mutating func filter(_ data: [UInt8]) -> [UInt8] {
    keptLines(of: data) { line in
      let key = Array(line.last == UInt8(ascii: "\n") ? line.dropLast() : line)
      guard known.insert(key).inserted else { return false }
      order.append(key)
      if order.count > Self.window * 2 {
        for old in order.prefix(order.count - Self.window) { known.remove(old) }
        order.removeFirst(order.count - Self.window)
      }
      return true
    }
  }
}

/// Drops lines a reconnected room replays: exact copies (stamp, author and text) of lines the
/// transcript already had, in the backlog the server sends before the room is caught up.
///
/// It is armed when a room is read again after a lost read or a remount and disarmed by the
/// room feed at the first sign the backlog is over (a parked read, a short reply), so a line
/// said again later, or said while we were away with the same text at another time, is shown:
/// "ok", "+1" and a bot's `!ping` repeat all day. Lines it lets through join the known set, so
/// a backlog that repeats itself shows each line once.
struct ReplayFilter: LineFilter {
  static let window = 2000
  private var known: Set<[UInt8]>

  init(lines: [ArraySlice<UInt8>]) {
    known = Set(lines.map { Self.key(of: $0) })
  }

  mutating func filter(_ data: [UInt8]) -> [UInt8] {
    keptLines(of: data) { known.insert(Self.key(of: $0)).inserted }
  }

  /// The line without its newline.
  static func key(of line: ArraySlice<UInt8>) -> [UInt8] {
    Array(line.last == UInt8(ascii: "\n") ? line.dropLast() : line)
  }
}

/// Drops the second copy of a post this mount sent again after the link died under its first
/// send (9P cannot say whether that one landed, and a 9BBS post carries no id to deduplicate
/// by): a line `AUTHOR: TEXT` is dropped when a line with the same author and text was among
/// the room's recent lines or came earlier since the post went again. Only the mount's own
/// resent texts are watched, each for ``lifetime``; other users' repeats always show.
struct RepeatFilter: LineFilter {
  static let lifetime: Duration = .seconds(60)
  /// How far back a first copy is looked for: the lines just before the link died.
  static let recent = 64
  private struct Expected {
    let suffix: [UInt8]
    let until: ContinuousClock.Instant
    var seen: Set<[UInt8]>
  }
  private var expected: [Expected] = []

  var isEmpty: Bool { expected.isEmpty }

  /// Watches for copies of `text` (as the room shows it), given the room's `recent` lines.
  mutating func expect(_ text: [UInt8], recent lines: [ArraySlice<UInt8>]) {
    let suffix = Array(": ".utf8) + text
    let seen = Set(lines.map { Self.body(of: $0) }.filter { $0.ends(with: suffix) })
    expected.append(Expected(suffix: suffix, until: .now + Self.lifetime, seen: seen))
  }

  mutating func filter(_ data: [UInt8]) -> [UInt8] {
    let now = ContinuousClock.now
    expected.removeAll { $0.until <= now }
    guard !expected.isEmpty else { return data }
    return keptLines(of: data) { line in
      let body = Self.body(of: line)
      guard let index = expected.firstIndex(where: { body.ends(with: $0.suffix) }) else {
        return true
      }
      if expected[index].seen.contains(body) {
        expected.remove(at: index)
        return false
      }
      expected[index].seen.insert(body)
      return true
    }
  }

  /// The line without a leading `[…] ` stamp and without its newline.
  static func body(of line: ArraySlice<UInt8>) -> [UInt8] {
    var line = line
    if line.last == UInt8(ascii: "\n") { line = line.dropLast() }
    if line.first == UInt8(ascii: "["), let close = line.firstIndex(of: UInt8(ascii: "]")),
      line.index(after: close) < line.endIndex, line[line.index(after: close)] == UInt8(ascii: " ")
    {
      return Array(line[line.index(close, offsetBy: 2)...])
    }
    return Array(line)
  }
}

extension Array where Element == UInt8 {
  fileprivate func ends(with suffix: [UInt8]) -> Bool {
    count >= suffix.count && self[(count - suffix.count)...].elementsEqual(suffix)
  }
}

/// The lines of `data` (each with its newline; the last may have none) that `keep` accepts.
private func keptLines(of data: [UInt8], _ keep: (ArraySlice<UInt8>) -> Bool) -> [UInt8] {
  var kept: [UInt8] = []
  var start = data.startIndex
  while start < data.endIndex {
    let end = data[start...].firstIndex(of: UInt8(ascii: "\n")).map { $0 + 1 } ?? data.endIndex
    if keep(data[start..<end]) { kept += data[start..<end] }
    start = end
  }
  return kept
}

/// What a room's received bytes go through before its transcript: other users' controls made
/// visible, then lines a board sent again dropped.
struct RoomLineFilters {
  /// Makes other users' control characters visible (nil with `-o rawtext`).
  private var controls: VisibleControls?
  /// Set once the server answered a caught-up read with nothing at once (a board that does
  /// not park reads). Such a board (Gen-1) keys every reader's place by its last writer, so
  /// a new author replays the whole ring: exact copies of recent lines are dropped.
  var echoes: EchoFilter?
  /// Set for a while after a reconnect, to drop lines the transcript already has.
  var dedupe: ReplayFilter?
  /// Second copies of this mount's own posts sent again after a lost link.
  private var repeats = RepeatFilter()

  init(rawText: Bool) {
    controls = rawText ? nil : VisibleControls()
  }

  /// `data` made visible and less what the filters drop, with a line for the log per drop.
  mutating func filter(_ data: [UInt8], room: String) -> (kept: [UInt8], drops: [String]) {
    var data = data
    var drops: [String] = []
    // Visible first: the filters compare lines with the transcript's, which are visible.
    if var visible = controls {
      data = visible.escape(data)
      controls = visible
    }
    let echoed = drop(&data, through: &echoes)
    if echoed > 0 {
      drops.append("room feed \(room): dropped \(echoed) bytes the board sent again")
    }
    let replayed = drop(&data, through: &dedupe)
    if replayed > 0 { drops.append("room feed \(room): dropped \(replayed) replayed bytes") }
    if !repeats.isEmpty {
      let before = data.count
      data = repeats.filter(data)
      if data.count < before {
        drops.append("room feed \(room): dropped the second copy of a post sent again")
      }
    }
    return (data, drops)
  }

  /// Drops from `data` what `filter` (if any) drops; how many bytes.
  private func drop<Filter: LineFilter>(_ data: inout [UInt8], through filter: inout Filter?) -> Int
  {
    guard let kept = filter?.filter(data) else { return 0 }
    let dropped = data.count - kept.count
    data = kept
    return dropped
  }

  /// Watches for a second copy of `text` (a post of this mount sent again) after `recent`.
  mutating func expectRepeat(of text: [UInt8], recent: [ArraySlice<UInt8>]) {
    var shown = text
    if var visible = controls { shown = visible.escape(text) }
    repeats.expect(shown, recent: recent)
  }
}
