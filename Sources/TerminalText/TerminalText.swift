/// Text from a server (names, error strings, TXT records) made safe to print and to paste.
///
/// A board's name or an error string is the far end's choice: printed raw, an escape
/// sequence in it can rewrite the user's terminal, and a quote in it can turn a suggested
/// command into a different one. Everything mount9bbs prints itself goes through here; the
/// contents of room files do not (a file is bytes, and reading it is the user's choice).
public enum TerminalText {
  /// `text` with every control character (C0, DEL, C1), bidirectional control and invisible
  /// character (``isUnsafe(_:)``) written as a visible escape (`\x1B`, `\u{202E}`), and a backslash doubled, so the
  /// escape cannot be forged. Newlines and tabs stay when `keepingLayout` is set (for text
  /// mount9bbs lays out itself), and are escaped otherwise (one field, one line).
  public static func escaped(_ text: String, keepingLayout: Bool = false) -> String {
    var result = ""
    result.reserveCapacity(text.utf8.count)
    for scalar in text.unicodeScalars {
      switch scalar.value {
      case 0x0A where keepingLayout, 0x09 where keepingLayout:
        result.unicodeScalars.append(scalar)
      case 0x5C where !keepingLayout:
        result += "\\\\"
      case _ where isUnsafe(scalar):
        result += visibleEscape(scalar.value)
      default:
        result.unicodeScalars.append(scalar)
      }
    }
    return result
  }

  /// `text` as one line (of a log, of an environment variable a script echoes): every
  /// control character (newlines and carriage returns included) and bidirectional override
  /// written as a visible escape, tabs kept. A room name or error string from a server cannot
  /// start a forged record or reach a terminal. Backslashes stay as they are, so text escaped
  /// before (a room line as its file shows it) stays readable.
  public static func oneLine(_ text: String) -> String {
    guard text.unicodeScalars.contains(where: { $0 != "\t" && isUnsafe($0) }) else { return text }
    var result = ""
    result.reserveCapacity(text.utf8.count)
    for scalar in text.unicodeScalars {
      if scalar != "\t" && isUnsafe(scalar) {
        result += visibleEscape(scalar.value)
      } else {
        result.unicodeScalars.append(scalar)
      }
    }
    return result
  }

  /// `word` quoted for a POSIX shell (and for bash and zsh typed interactively): as it is when
  /// it holds only characters no shell treats specially, in single quotes otherwise, and in
  /// `$'…'` with every unusual byte as `\xNN` when it holds control characters, so the quoted
  /// form is also safe to show on a terminal. `!` is quoted too: bash's history expansion
  /// reaches inside double quotes.
  public static func shellQuoted(_ word: String) -> String {
    if !word.isEmpty && word.unicodeScalars.allSatisfy(isPlain) { return word }
    guard word.unicodeScalars.contains(where: isUnsafe) else {
      return "'" + word.replacing("'", with: "'\\''") + "'"
    }
    var result = "$'"
    for scalar in word.unicodeScalars {
      switch scalar {
      case "'", "\\": result += "\\" + String(scalar)
      case "!": result += "\\x21"
      case _ where isUnsafe(scalar):
        for byte in String(scalar).utf8 { result += "\\x" + hex(UInt32(byte), width: 2) }
      default:
        result.unicodeScalars.append(scalar)
      }
    }
    return result + "'"
  }

  /// A control character (C0, DEL, C1), a bidirectional control, an invisible character or a
  /// line or paragraph separator: what a terminal acts on, or shows other than as written.
  ///
  /// Invisible: zero width space (U+200B), zero width joiner (U+200D), word joiner (U+2060)
  /// and the byte order mark used as one (U+FEFF): they make two names that look alike differ,
  /// or hide a name's end. U+2028 and U+2029 end a line for some programs and not others. The
  /// zero width non-joiner (U+200C) stays: Persian and Indic text needs it. A joiner between
  /// two emoji is kept where room lines are shown (``VisibleControls``).
  public static func isUnsafe(_ scalar: Unicode.Scalar) -> Bool { isUnsafe(scalar.value) }

  /// ``isUnsafe(_:)`` of a scalar value (for bytes being decoded).
  public static func isUnsafe(_ value: UInt32) -> Bool {
    switch value {
    case 0x00...0x1F, 0x7F...0x9F, 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: true
    case 0x200B, 0x200D, 0x2060, 0xFEFF, 0x2028, 0x2029: true
    default: false
    }
  }

  /// The zero width joiner, kept between two emoji (a family, a profession) in room lines.
  public static let zeroWidthJoiner: UInt32 = 0x200D

  /// Whether `value` is an emoji (or a part of one: a skin tone, the emoji variation
  /// selector) that a zero width joiner may follow or precede. ASCII digits, `#` and `*` are
  /// emoji only with a keycap: they are not.
  public static func joinsEmoji(_ value: UInt32) -> Bool {
    guard value > 0x7F, let scalar = Unicode.Scalar(value) else { return false }
    return value == 0xFE0F || scalar.properties.isEmoji
  }

  /// The visible form of an unsafe scalar value: `\x1B` up to 0xFF, `\u{202E}` above.
  public static func visibleEscape(_ value: UInt32) -> String {
    value <= 0xFF ? "\\x" + hex(value, width: 2) : "\\u{" + hex(value, width: 4) + "}"
  }

  private static func isPlain(_ scalar: Unicode.Scalar) -> Bool {
    switch scalar {
    case "a"..."z", "A"..."Z", "0"..."9", "-", "_", ".", "/", ",", ":", "@", "%", "+", "=":
      return true
    default:
      return false
    }
  }

  private static func hex(_ value: UInt32, width: Int) -> String {
    let digits = String(value, radix: 16, uppercase: true)
    return String(repeating: "0", count: max(0, width - digits.count)) + digits
  }
}
