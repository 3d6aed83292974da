/// Each author's colour: the same name always gets the same one (in every room, on every
/// run), from a hash of the name (FNV-1a) over a palette of readable colours.
public enum AuthorColors {
  /// How many colours authors are spread over (the view's palette).
  public static let paletteSize = 6

  public static func index(for author: String) -> Int {
    var hash: UInt32 = 0x811c_9dc5
    for byte in author.utf8 { hash = (hash ^ UInt32(byte)) &* 0x0100_0193 }
    return Int(hash % UInt32(paletteSize))
  }
}

/// Whether a line names you: any of `names` as a whole word, case-insensitive (`@alice`,
/// `alice:` and `alice,` count; `malice` does not).
public enum Mentions {
  public static func mentions(_ text: String, names: [String]) -> Bool {
    let lowered = text.lowercased()
    for name in names where !name.isEmpty {
      let needle = name.lowercased()
      var searchStart = lowered.startIndex
      while let range = lowered.range(of: needle, range: searchStart..<lowered.endIndex) {
        let beforeOK =
          range.lowerBound == lowered.startIndex
          || !isWordCharacter(lowered[lowered.index(before: range.lowerBound)])
        let afterOK =
          range.upperBound == lowered.endIndex || !isWordCharacter(lowered[range.upperBound])
        if beforeOK && afterOK { return true }
        searchStart = range.upperBound
      }
    }
    return false
  }

  private static func isWordCharacter(_ character: Character) -> Bool {
    character.isLetter || character.isNumber || character == "_" || character == "-"
  }
}
