import TerminalText

/// Text from the network (unames, identities, room and file names) made safe for the log.
///
/// A client chooses these bytes: written raw, an escape sequence in one rewrites the terminal
/// of whoever reads the log, and a newline forges a log line. Control characters, bidirectional
/// controls and invisible characters become visible escapes (`\x1B`, `\u{202E}`), and a
/// backslash is doubled so an escape cannot be forged (``TerminalText/escaped(_:keepingLayout:)``).
enum LogText {
  static func escaped(_ text: String) -> String { TerminalText.escaped(text) }
}
