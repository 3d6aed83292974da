import BBSMount
import Foundation
import TerminalText

#if canImport(Glibc)
  import Glibc
#endif

/// The CLI's user-facing output: whole lines to stdout or stderr, written at once.
enum Console {
  /// A line (or lines) to stdout; any control character left in it is shown escaped.
  static func output(_ text: String) {
    let safe = TerminalText.escaped(text, keepingLayout: true)
    put(safe.hasSuffix("\n") ? safe : safe + "\n", to: 1)
  }

  /// A line (or lines) to stderr; any control character left in it is shown escaped.
  static func error(_ text: String) {
    let safe = TerminalText.escaped(text, keepingLayout: true)
    put(safe.hasSuffix("\n") ? safe : safe + "\n", to: 2)
  }

  /// Text of mount9bbs's own making to stderr as it is (the progress line's cursor moves).

  static func errorRaw(_ text: String) {
    put(text, to: 2)
  }

  private static func put(_ text: String, to descriptor: Int32) {
    var bytes = Array(text.utf8)[...]
    while !bytes.isEmpty {
      let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
      if written < 0 && errno == EINTR { continue }
      if written <= 0 { return }
      bytes = bytes.dropFirst(written)
    }
  }
}

/// Writes a line to stderr (Swift 6 rejects touching `stderr` directly).
enum Diagnostics {
  /// Writes `message` as a line; control characters in it (from a server's error string, a
  /// board's name) are shown escaped rather than sent to the terminal.
  static func fail(_ message: String) {
    Console.error(message)
  }
}
