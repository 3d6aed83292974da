/// Drops exact copies of recent lines (stamp, author and text alike): what a board that keys
/// every reader's place by its last writer sends again when someone new posts (facts §1.3).
/// A line genuinely repeated by the same author in the same second is dropped too; that is
/// the price on such a board, and the filter is only armed there.
struct EchoFilter {
  static let window = 512
  private var known: Set<[UInt8]>
  private var order: [[UInt8]]

  init(lines: [ArraySlice<UInt8>]) {
    order = lines.map { Array($0.last == UInt8(ascii: "\n") ? $0.dropLast() : $0) }
    known = Set(order)
  }

  mutating func filter(_ data: [UInt8]) -> [UInt8] {
    var kept: [UInt8] = []
    var start = data.startIndex
    while start < data.endIndex {
      let end = data[start...].firstIndex(of: UInt8(ascii: "\n")).map { $0 + 1 } ?? data.endIndex
      let line = data[start..<end]
      let key = Array(line.last == UInt8(ascii: "\n") ? line.dropLast() : line)
      if known.insert(key).inserted {
        kept += line
        order.append(key)
        if order.count > Self.window * 2 {
          for old in order.prefix(order.count - Self.window) { known.remove(old) }
          order.removeFirst(order.count - Self.window)
        }
      }
      start = end
    }
    return kept
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
struct ReplayFilter {
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
    var kept: [UInt8] = []
    var start = data.startIndex
    while start < data.endIndex {
      let end = data[start...].firstIndex(of: UInt8(ascii: "\n")).map { $0 + 1 } ?? data.endIndex
      let line = data[start..<end]
      if known.insert(Self.body(of: line)).inserted { kept += line }
      start = end
    }
    return kept
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
