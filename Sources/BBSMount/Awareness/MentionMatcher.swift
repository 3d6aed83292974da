/// Whether a room line mentions the user: it names one of their names (user name, nickname,
/// identity) or a highlight word, in any case, as a whole word ("bob" is not in "bobby").
struct MentionMatcher: Sendable {
  /// Lower-cased words, each non-empty.
  let words: [[UInt8]]

  init(names: [String]) {
    words = Set(names.map { $0.lowercased() }.filter { !$0.isEmpty }).sorted().map {
      Array($0.utf8)
    }
  }

  func matches(_ text: Substring) -> Bool {
    guard !words.isEmpty else { return false }
    let folded = Array(text.lowercased().utf8)
    return words.contains { Self.contains(folded, word: $0) }
  }

  /// Letters, digits and `_` (and any byte of a multi-byte character) make up words.
  private static func isWordByte(_ byte: UInt8) -> Bool {
    byte >= 0x80 || (byte >= 0x30 && byte <= 0x39) || (byte >= 0x61 && byte <= 0x7A)
      || (byte >= 0x41 && byte <= 0x5A) || byte == 0x5F
  }

  private static func contains(_ text: [UInt8], word: [UInt8]) -> Bool {
    guard word.count <= text.count else { return false }
    var start = 0
    while start + word.count <= text.count {
      if text[start] == word[0] && text[start..<(start + word.count)].elementsEqual(word) {
        let before = start == 0 || !isWordByte(text[start - 1]) || !isWordByte(word[0])
        let end = start + word.count
        let after = end == text.count || !isWordByte(text[end]) || !isWordByte(word[word.count - 1])
        if before && after { return true }
      }
      start += 1
    }
    return false
  }
}

/// A room line as the room file shows it: `[HH:MM:SS] AUTHOR: TEXT`.
struct RoomLine {
  let author: String
  let text: Substring

  init(_ line: String) {
    var rest = Substring(line)
    if rest.hasPrefix("["), let close = rest.firstIndex(of: "]") {
      rest = rest[rest.index(after: close)...].drop { $0 == " " }
    }
    if let colon = rest.range(of: ": ") {
      author = String(rest[..<colon.lowerBound])
      text = rest[colon.upperBound...]
    } else {
      author = ""
      text = rest
    }
  }
}
