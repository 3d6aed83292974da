/// Drops some lines of what a room feed received.
protocol LineFilter {
  /// `data` without the lines this filter drops (it remembers what it let through).
  mutating func filter(_ data: [UInt8]) -> [UInt8]
}

/// Drops exact copies of recent lines (stamp, author and text alike): what a board that keys
/// every reader's place by its last writer sends again when someone new posts (facts §1.3).
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

/// Drops lines a reconnected room replays: those whose text (the line without its
/// `[HH:MM:SS] ` stamp, which a restarted board recomputes) the transcript already had.
///
/// It is active for a short window after the reconnect, long enough for the backlog and for
/// posts the outbox sends again. Lines it lets through join the known set: a post that landed
/// before the outage but reached us only in the replayed backlog may arrive a second time when
/// the outbox, never having seen its reply, sends it again. A genuinely repeated line by the
/// same author inside that window is dropped too, the price of never showing a line twice.
struct ReplayFilter: LineFilter {
  static let window = 2000
  static let lifetime: Duration = .seconds(15)
  private var known: Set<[UInt8]>
  private let until: ContinuousClock.Instant

  init(lines: [ArraySlice<UInt8>]) {
    known = Set(lines.map { Self.body(of: $0) })
    until = .now + Self.lifetime
  }

  var isExpired: Bool { ContinuousClock.now >= until }

  mutating func filter(_ data: [UInt8]) -> [UInt8] {
    keptLines(of: data) { known.insert(Self.body(of: $0)).inserted }
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
