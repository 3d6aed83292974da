/// The input line: the text being typed, its cursor, and the history of lines sent (↑/↓).
public struct LineEditor: Sendable {
  public private(set) var characters: [Character] = []
  /// Index into ``characters`` the next character goes before.
  public private(set) var cursor = 0
  public private(set) var history: [String] = []
  /// Where ↑/↓ stand in ``history``; `history.count` is the line being typed.
  private var historyIndex = 0
  /// What was being typed before ↑ went into history, given back by ↓ past the newest.
  private var draft: [Character] = []
  public let historyLimit: Int

  public init(historyLimit: Int = 500) { self.historyLimit = historyLimit }

  public var text: String { String(characters) }

  /// Inserts `text` at the cursor. Keys come a Unicode scalar at a time, so what was typed
  /// is joined again into whole characters: 👍 then a skin tone is one 👍🏽 (Ctrl-B and
  /// Backspace move over it whole, never between its scalars).
  public mutating func insert(_ text: String) {
    let before = String(characters[..<cursor]) + text
    let joined = Array(before + String(characters[cursor...]))
    cursor = min(Array(before).count, joined.count)
    characters = joined
  }

  /// Backspace.
  public mutating func deleteBackward() {
    guard cursor > 0 else { return }
    characters.remove(at: cursor - 1)
    cursor -= 1
  }

  /// Delete.
  public mutating func deleteForward() {
    guard cursor < characters.count else { return }
    characters.remove(at: cursor)
  }

  public mutating func moveLeft() { cursor = max(0, cursor - 1) }
  public mutating func moveRight() { cursor = min(characters.count, cursor + 1) }
  public mutating func moveToStart() { cursor = 0 }
  public mutating func moveToEnd() { cursor = characters.count }

  /// Alt-B / Ctrl-←: to the start of the word before the cursor.
  public mutating func moveWordLeft() {
    while cursor > 0 && characters[cursor - 1] == " " { cursor -= 1 }
    while cursor > 0 && characters[cursor - 1] != " " { cursor -= 1 }
  }

  /// Alt-F / Ctrl-→: past the end of the word after the cursor.
  public mutating func moveWordRight() {
    while cursor < characters.count && characters[cursor] == " " { cursor += 1 }
    while cursor < characters.count && characters[cursor] != " " { cursor += 1 }
  }

  /// Ctrl-W: deletes the word before the cursor.
  public mutating func deleteWordBackward() {
    let end = cursor
    moveWordLeft()
    characters.removeSubrange(cursor..<end)
  }

  /// Ctrl-U: deletes everything before the cursor.
  public mutating func deleteToStart() {
    characters.removeSubrange(0..<cursor)
    cursor = 0
  }

  /// Ctrl-K: deletes everything from the cursor on.
  public mutating func deleteToEnd() { characters.removeSubrange(cursor...) }

  /// Ctrl-C: the line is dropped (not kept in history).
  public mutating func clear() {
    characters = []
    cursor = 0
    historyIndex = history.count
  }

  /// Replaces the whole line (a completion), cursor at `cursor` (the end by default).
  public mutating func replace(with text: String, cursor: Int? = nil) {
    characters = Array(text)
    self.cursor = min(cursor ?? characters.count, characters.count)
  }

  /// Enter: the line as typed, kept in history (unless empty or a repeat of the last), and
  /// the input emptied.
  public mutating func submit() -> String {
    let line = text
    if !line.isEmpty && history.last != line {
      history.append(line)
      if history.count > historyLimit { history.removeFirst(history.count - historyLimit) }
    }
    characters = []
    cursor = 0
    historyIndex = history.count
    draft = []
    return line
  }

  /// ↑: the previous line of history.
  public mutating func historyUp() {
    guard historyIndex > 0 else { return }
    if historyIndex == history.count { draft = characters }
    historyIndex -= 1
    characters = Array(history[historyIndex])
    cursor = characters.count
  }

  /// ↓: the next line of history, then what was being typed.
  public mutating func historyDown() {
    guard historyIndex < history.count else { return }
    historyIndex += 1
    characters = historyIndex == history.count ? draft : Array(history[historyIndex])
    cursor = characters.count
  }

  /// The part of the line to show in `width` columns so the cursor is on screen, and the
  /// cursor's column in it.
  public func visible(width: Int) -> (text: String, cursorColumn: Int) {
    let width = max(width, 2)
    var start = 0
    // A pasted tab is text: shown as one column (→), sent as a tab.
    func columnsOf(_ character: Character) -> Int {
      character == "\t" ? 1 : DisplayText.width(of: character)
    }
    func columns(_ range: Range<Int>) -> Int {
      characters[range].reduce(0) { $0 + columnsOf($1) }
    }
    // Keep the cursor within the last column; scroll by whole characters.
    while columns(start..<cursor) > width - 1 { start += 1 }
    var end = start
    var used = 0
    while end < characters.count {
      let next = columnsOf(characters[end])
      if used + next > width { break }
      used += next
      end += 1
    }
    let shown = String(characters[start..<end].map { $0 == "\t" ? "→" : $0 })
    return (shown, columns(start..<cursor))
  }
}
