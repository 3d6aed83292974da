import CNcursesw
import TerminalText

/// Text as the chat pane shows it: other users' control characters and escape sequences as
/// visible text (``TerminalText``'s form, so a line looks as `tail -f` shows it), tabs as
/// spaces, and the width each character takes on the terminal.
public enum DisplayText {
  /// `text` safe to hand to the terminal: nothing in it is a control character. A line the
  /// mount already made visible stays as it is (`\x1B` is printable); a `rawtext` mount's raw
  /// escape bytes are made visible here.
  public static func safe(_ text: String) -> String {
    TerminalText.escaped(text, keepingLayout: true)
      .replacing("\t", with: "    ")
      .replacing("\n", with: "\\n")
  }

  /// Columns `character` takes: 2 for wide (CJK, most emoji), 0 for a combining mark alone, 1
  /// otherwise (and for anything the C library cannot measure).
  public static func width(of character: Character) -> Int {
    guard let first = character.unicodeScalars.first else { return 0 }
    if first.value < 0x7F { return first.value < 0x20 ? 0 : 1 }
    let measured = Int(chat_wcwidth(first.value))
    return measured < 0 ? 1 : measured
  }

  /// Columns `text` takes.
  public static func width(of text: some StringProtocol) -> Int {
    text.reduce(0) { $0 + width(of: $1) }
  }
}

/// How a piece of the chat pane is drawn; the view maps each to colours and attributes.
public enum TextStyle: Sendable, Equatable {
  case plain
  /// The `[HH:MM:SS]` stamp.
  case stamp
  /// An author's name, coloured by ``AuthorColors``.
  case author(Int)
  /// Your own name.
  case ownName
  /// A line that mentions you.
  case mention
  /// The client's own notes (joins, errors, help).
  case notice
  /// The "── new ──" marker and date lines.
  case marker
  case error
}

/// A run of text in one style.
public struct Span: Sendable, Equatable {
  public var text: String
  public var style: TextStyle

  public init(_ text: String, _ style: TextStyle) {
    self.text = text
    self.style = style
  }
}

/// One logical line of the pane (a chat line, a marker, a notice), before wrapping.
public struct StyledLine: Sendable, Equatable {
  public var spans: [Span]
  /// Columns continuation rows are indented by (so wrapped text lines up under the text).
  public var hangingIndent: Int

  public init(_ spans: [Span], hangingIndent: Int = 0) {
    self.spans = spans
    self.hangingIndent = hangingIndent
  }

  public var plainText: String { spans.map(\.text).joined() }
}

/// One screen row of a wrapped line.
public struct Row: Sendable, Equatable {
  public var indent: Int
  public var spans: [Span]

  public var plainText: String {
    String(repeating: " ", count: indent) + spans.map(\.text).joined()
  }
}

/// Wrapping lines to the pane's width: at the last space that fits, else mid-word; wide
/// characters never split across rows.
public enum Wrapping {
  public static func rows(of line: StyledLine, width: Int) -> [Row] {
    let width = max(width, 1)
    var characters: [(Character, TextStyle)] = []
    for span in line.spans {
      for character in span.text { characters.append((character, span.style)) }
    }
    if characters.isEmpty { return [Row(indent: 0, spans: [])] }
    let indent = line.hangingIndent < width / 2 ? line.hangingIndent : 0
    var rows: [Row] = []
    var start = 0
    while start < characters.count {
      let available = rows.isEmpty ? width : width - indent
      var used = 0
      var end = start
      var lastSpace: Int? = nil
      while end < characters.count {
        let columns = DisplayText.width(of: characters[end].0)
        if used + columns > available { break }
        if characters[end].0 == " " { lastSpace = end }
        used += columns
        end += 1
      }
      if end == start { end = start + 1 }  // a character wider than the row: alone on it
      var next = end
      if end < characters.count, let space = lastSpace, space > start {
        end = space
        next = space + 1
      }
      rows.append(Row(indent: rows.isEmpty ? 0 : indent, spans: spans(characters[start..<end])))
      start = next
    }
    return rows
  }

  private static func spans(_ characters: ArraySlice<(Character, TextStyle)>) -> [Span] {
    var result: [Span] = []
    for (character, style) in characters {
      if let last = result.last, last.style == style {
        result[result.count - 1].text.append(character)
      } else {
        result.append(Span(String(character), style))
      }
    }
    return result
  }
}
