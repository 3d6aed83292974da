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

  /// Invisible characters make a name that looks like another (`bob` with a zero width space
  /// in it) or hide where a line ends: they come out escaped. A joiner between two emoji, and
  /// the non-joiner Persian needs, pass.
  func testInvisibleCharactersAndSeparatorsBecomeText() {
    XCTAssertEqual(visible("bo\u{200B}b: hi\n"), "bo\\u{200B}b: hi\n")
    XCTAssertEqual(visible("\u{FEFF}x\u{2060}y\n"), "\\u{FEFF}x\\u{2060}y\n")
    XCTAssertEqual(visible("a\u{2028}b\u{2029}c\n"), "a\\u{2028}b\\u{2029}c\n")
    XCTAssertEqual(visible("a\u{200D}b 🎉\u{200D}\n"), "a\\u{200D}b 🎉\\u{200D}\n")
    let emoji = "👩‍🚀 👨‍👩‍👧 ❤️‍🔥 می‌خواهم\n"
    XCTAssertEqual(visible(emoji), emoji)
  }

  /// A joiner after an emoji at the end of a reply waits for what follows it.
  func testAJoinerCutBetweenRepliesIsDecidedByWhatFollows() throws {
    let astronaut = Array("👩\u{200D}🚀\n".utf8)
    let cut = try XCTUnwrap(astronaut.firstIndex(of: 0xE2)) + 3  // right after the joiner
    XCTAssertEqual(visible([Array(astronaut[..<cut]), Array(astronaut[cut...])]), "👩\u{200D}🚀\n")
    let hidden = Array("🎉\u{200D}".utf8)
    XCTAssertEqual(visible([hidden, Array("bob\n".utf8)]), "🎉\\u{200D}bob\n")
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
