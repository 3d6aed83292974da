/// Whole lines out of each feed's data, which arrives in pieces that need not end at a line
/// end: the start of an unfinished line is kept per feed until its end comes.
///
/// A line longer than ``longestLine`` (a hostile server's endless line) is cut there and given
/// out as one line; the rest of it, up to its newline, is dropped rather than taken for
/// another line.
struct FeedLines {
  let longestLine: Int
  /// The start of a line each feed has not finished yet.
  private var partial: [ObjectIdentifier: [UInt8]] = [:]
  /// Feeds in the middle of a line that was cut: its rest is not another line.
  private var cut: Set<ObjectIdentifier> = []

  init(longestLine: Int) { self.longestLine = longestLine }

  /// The lines `data` completes for `feed`, newlines left out.
  mutating func lines(in data: [UInt8], from feed: ObjectIdentifier) -> [ArraySlice<UInt8>] {
    var buffer = partial.removeValue(forKey: feed) ?? []
    var data = data[...]
    if cut.contains(feed) {
      // The rest of a line already given out: one line, one record.
      guard let newline = data.firstIndex(of: UInt8(ascii: "\n")) else { return [] }
      cut.remove(feed)
      data = data[(newline + 1)...]
    }
    buffer.append(contentsOf: data)
    var lines: [ArraySlice<UInt8>] = []
    var start = buffer.startIndex
    while let newline = buffer[start...].firstIndex(of: UInt8(ascii: "\n")) {
      lines.append(buffer[start..<newline])
      start = newline + 1
    }
    let rest = Array(buffer[start...])
    if rest.count > longestLine {
      lines.append(rest[...])
      cut.insert(feed)
    } else if !rest.isEmpty {
      partial[feed] = rest
    }
    return lines
  }

  /// Feeds with an unfinished line kept.
  var feedsWithPartialLines: Int { partial.count }
}
