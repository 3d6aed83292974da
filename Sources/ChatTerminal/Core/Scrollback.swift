/// A room's transcript as the pane shows it: its lines (bounded), the "── new ──" marker
/// before the first unread one, and how far the view is scrolled back.
public struct Scrollback: Sendable {
  public private(set) var lines: [StyledLine] = []
  /// Index into ``lines`` the "── new ──" marker is drawn before.
  public private(set) var markerPosition: Int?
  /// Rows the view is scrolled up from the bottom (0: following new lines).
  public private(set) var offset = 0
  /// Lines kept; older ones go.
  public let capacity: Int
  /// Lines that came while the view was scrolled back (reset once it follows again).
  public private(set) var arrivedWhileBack = 0
  /// Your own lines on their way to the board, drawn below the others until it echoes them.
  public var pending: [StyledLine] = []

  public init(capacity: Int = 5000) { self.capacity = capacity }

  public static let marker = StyledLine([Span("── new ──", .marker)])

  /// Adds a line at the bottom; a view scrolled back stays on what it shows.
  public mutating func append(_ line: StyledLine, width: Int) {
    lines.append(line)
    if offset > 0 {
      offset += Wrapping.rows(of: line, width: width).count
      arrivedWhileBack += 1
    }
    if lines.count > capacity {
      let excess = lines.count - capacity
      lines.removeFirst(excess)
      if let position = markerPosition {
        markerPosition = position - excess >= 0 ? position - excess : nil
      }
    }
  }

  /// Puts the marker before the last `count` lines (nil or 0: no marker).
  public mutating func markUnread(last count: Int?) {
    guard let count, count > 0, count <= lines.count else {
      markerPosition = nil
      return
    }
    markerPosition = lines.count - count
  }

  /// Puts the marker at the bottom: the next line appended is the first unread one.
  public mutating func markFromHere() { markerPosition = lines.count }

  /// The lines with the marker in place.
  private func logicalLines() -> [StyledLine] {
    guard let position = markerPosition, position < lines.count else { return lines + pending }
    var result = lines
    result.insert(Self.marker, at: position)
    return result + pending
  }

  /// Up to `count` rows, counted from the bottom, top to bottom.
  public func rowsFromBottom(count: Int, width: Int) -> [Row] {
    // Collected bottom up and turned once (inserting at the front each time is quadratic on
    // a long PgUp).
    var reversed: [Row] = []
    let all = logicalLines()
    var index = all.count - 1
    while index >= 0 && reversed.count < count {
      reversed.append(contentsOf: Wrapping.rows(of: all[index], width: width).reversed())
      index -= 1
    }
    return Array(reversed.prefix(count).reversed())
  }

  /// The rows the pane shows, top to bottom (fewer than `height` when the room is short).
  public func visibleRows(height: Int, width: Int) -> [Row] {
    let rows = rowsFromBottom(count: height + offset, width: width)
    return Array(rows.prefix(max(0, rows.count - offset)).suffix(height))
  }

  /// PgUp: a page back, stopping at the top.
  public mutating func pageUp(height: Int, width: Int) {
    let page = max(1, height - 1)
    let available = rowsFromBottom(count: offset + page + height, width: width).count
    offset = min(offset + page, max(0, available - height))
  }

  /// PgDn: a page forward, stopping at the bottom (following again).
  public mutating func pageDown(height: Int) {
    offset = max(0, offset - max(1, height - 1))
    if offset == 0 { arrivedWhileBack = 0 }
  }

  public mutating func scrollToBottom() {
    offset = 0
    arrivedWhileBack = 0
  }

  /// Of the lines that came while scrolled back, those still wholly below the view (the
  /// status line's "N new below").
  public func newBelow(width: Int) -> Int {
    guard offset > 0, arrivedWhileBack > 0 else { return 0 }
    var rows = 0
    var below = 0
    for line in lines.reversed().prefix(arrivedWhileBack) {
      rows += Wrapping.rows(of: line, width: width).count
      guard rows <= offset else { break }
      below += 1
    }
    return below
  }
}
