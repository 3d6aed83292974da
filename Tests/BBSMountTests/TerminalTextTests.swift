import Foundation
import TerminalText
import TestSupport
import XCTest

/// Server strings made safe to print (no control character reaches the terminal) and to
/// paste (a quoted word is that word to bash, typed interactively, and nothing runs).
final class TerminalTextTests: XCTestCase {
  func testControlsAndOverridesAreEscaped() {
    XCTAssertEqual(TerminalText.escaped("plain name"), "plain name")
    XCTAssertEqual(TerminalText.escaped("a\u{1B}[2Jb"), "a\\x1B[2Jb")
    XCTAssertEqual(TerminalText.escaped("bell\u{07}\u{7F}\u{9B}"), "bell\\x07\\x7F\\x9B")
    XCTAssertEqual(TerminalText.escaped("two\nlines\t"), "two\\x0Alines\\x09")
    XCTAssertEqual(TerminalText.escaped("rtl\u{202E}txt"), "rtl\\u{202E}txt")
    // A backslash is doubled, so `\x1B` in a name cannot pass for an escaped ESC.
    XCTAssertEqual(TerminalText.escaped("a\\x1B"), "a\\\\x1B")
    // Layout of mount9bbs's own making stays; controls inside it do not.
    XCTAssertEqual(
      TerminalText.escaped("line 1\n\tline 2\u{1B}\n", keepingLayout: true),
      "line 1\n\tline 2\\x1B\n")
    XCTAssertEqual(TerminalText.escaped("ünïcödé ☃"), "ünïcödé ☃")
  }

  /// Zero width characters and line separators in a board's names and errors come out as
  /// escapes, in logs and in what a script reads (`oneLine`) alike.
  func testInvisibleCharactersAreEscaped() {
    XCTAssertEqual(TerminalText.escaped("GRID\u{200B}9"), "GRID\\u{200B}9")
    XCTAssertEqual(
      TerminalText.oneLine("bob\u{200D}\u{FEFF}\u{2028}"), "bob\\u{200D}\\u{FEFF}\\u{2028}")
    XCTAssertEqual(TerminalText.shellQuoted("a\u{200B}b"), "$'a\\xE2\\x80\\x8Bb'")
  }

  func testPlainWordsStayUnquoted() {
    XCTAssertEqual(TerminalText.shellQuoted("tcp:127.0.0.1:5640"), "tcp:127.0.0.1:5640")
    XCTAssertEqual(TerminalText.shellQuoted("ble!THE_GRID"), "'ble!THE_GRID'")
    XCTAssertEqual(TerminalText.shellQuoted(""), "''")
  }

  /// Each hostile word, quoted, reaches a command as exactly that word, in an interactive bash
  /// with history expansion on, and runs nothing.
  func testQuotedWordsRoundTripThroughInteractiveBash() throws {
    let directory = try makeTemporaryDirectory("terminal-text")
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let canary = directory + "/pwned"
    let words = [
      "mdns!Evil'; touch \(canary); echo '",
      "mdns!$(touch \(canary))",
      "mdns!`touch \(canary)`",
      "mdns!\"; touch \(canary); \"",
      "ble!!!",
      "ble!a\\b\\'c",
      "mdns!esc\u{1B}]0;title\u{07}\ttab\nnewline",
      "mdns!ünï ☃ \u{202E}",
    ]
    for (index, word) in words.enumerated() {
      let quoted = TerminalText.shellQuoted(word)
      XCTAssertFalse(
        quoted.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F },
        "control characters in \(quoted)")
      let output = directory + "/out\(index)"
      let script = "set -H\nprintf '%s' \(quoted) > \(output)\nexit\n"
      let scriptPath = directory + "/script\(index)"
      try Data(script.utf8).write(to: URL(fileURLWithPath: scriptPath))
      // Interactive (-i), so history expansion is on, as in a terminal.
      let bash = ChildProcess(
        "/bin/bash", ["-c", "exec /bin/bash --norc --noprofile -i < '\(scriptPath)'"])
      try bash.start()
      XCTAssertTrue(bash.wait(timeout: 10), bash.text)
      let received = try Data(contentsOf: URL(fileURLWithPath: output))
      XCTAssertEqual(String(decoding: received, as: UTF8.self), word, "quoted as \(quoted)")
      XCTAssertFalse(FileManager.default.fileExists(atPath: canary), "\(quoted) ran a command")
    }
  }
}
