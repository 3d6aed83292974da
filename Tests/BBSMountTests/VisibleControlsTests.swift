import XCTest

@testable import BBSMount

/// Other users' control characters in room lines come out as visible text.
final class VisibleControlsTests: XCTestCase {
  private func visible(_ pieces: [[UInt8]]) -> String {
    var escaper = VisibleControls()
    let bytes = pieces.flatMap { escaper.escape($0) } + escaper.finish()
    return String(decoding: bytes, as: UTF8.self)
  }

  private func visible(_ text: String) -> String { visible([Array(text.utf8)]) }

  func testEscapeSequencesAndControlsBecomeText() {
    XCTAssertEqual(
      visible("look \u{1B}[31mRED \u{1B}]0;pwned\u{07}\n"), "look \\x1B[31mRED \\x1B]0;pwned\\x07\n"
    )
    XCTAssertEqual(
      visible("[14:41:00] bob: x\r[14:41:00] sysop: y\n"),
      "[14:41:00] bob: x\\x0D[14:41:00] sysop: y\n")
    XCTAssertEqual(visible("del\u{7F} nul\u{00}\n"), "del\\x7F nul\\x00\n")
    // C1 controls in UTF-8 (U+009B is CSI), and bidirectional overrides.
    XCTAssertEqual(visible("a\u{9B}31mb\n"), "a\\x9B31mb\n")
    XCTAssertEqual(visible("evil\u{202E}txt.exe\n"), "evil\\u{202E}txt.exe\n")
  }

  func testTextTabsAndUTF8PassUnchanged() {
    let text = "[12:00:00] zoë: héllo\twörld — ✓ 🎉 \\x1B stays as typed\n"
    XCTAssertEqual(visible(text), text)
  }

  func testBytesThatAreNotUTF8AreEscaped() {
    // A lone C1 byte (8-bit CSI), a lone continuation byte, an overlong NUL, a surrogate.
    XCTAssertEqual(
      visible([[0x61, 0x9B, 0x62, 0x80, 0xC0, 0x80, 0xED, 0xA0, 0x80, 0x0A]]),
      "a\\x9Bb\\x80\\xC0\\x80\\xED\\xA0\\x80\n")
  }

  func testSequenceCutBetweenRepliesIsJoined() {
    let snowman = Array("☃".utf8)  // E2 98 83
    XCTAssertEqual(visible([[0x61, snowman[0]], [snowman[1]], [snowman[2], 0x0A]]), "a☃\n")
    let csi = Array("\u{9B}".utf8)  // C2 9B
    XCTAssertEqual(visible([[0x61, csi[0]], [csi[1], 0x0A]]), "a\\x9B\n")
    // Cut and never finished: escaped when the data ends.
    XCTAssertEqual(visible([[0x61, 0xE2, 0x98]]), "a\\xE2\\x98")
  }
}
