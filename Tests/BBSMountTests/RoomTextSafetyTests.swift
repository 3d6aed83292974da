import Foundation
import TestSupport
import XCTest

/// A line someone else posts cannot drive the terminal of whoever follows the room: `tail -f`
/// on a terminal shows their escape sequences as text. `-o rawtext` keeps the bytes.
final class RoomTextSafetyTests: XCTestCase {
  private let hostile = #"printf 'look \033[31mRED \033]0;pwned\007 \302\233 \342\200\256txt\n'"#

  private func followAndPost(_ rig: MountRig) throws -> TerminalChild {
    try shell("echo 'before it' > '\(rig.path("chat/post"))'")
    let tail = try TerminalChild("/usr/bin/tail", ["-f", rig.path("chat/lobby")])
    try tail.start()
    addTeardownBlock { tail.stop() }
    XCTAssertNotNil(tail.waitForOutput("before it", timeout: 10), tail.text)
    XCTAssertEqual(try shell("\(hostile) > '\(rig.path("chat/post"))'").status, 0)
    try shell("echo 'after it' > '\(rig.path("chat/post"))'")
    XCTAssertNotNil(tail.waitForOutput("after it", timeout: 10), tail.text)
    return tail
  }

  func testOtherUsersEscapesReachTheTerminalAsText() throws {
    for setup in [Setup.multiplexTCP, .deviceSeqpacket] {
      let rig = try MountRig.start(setup, for: self)
      let tail = try followAndPost(rig)
      XCTAssertTrue(
        tail.text.contains(#"look \x1B[31mRED \x1B]0;pwned\x07 \x9B \u{202E}txt"#), tail.text)
      XCTAssertFalse(tail.text.contains("\u{1B}"), "a raw ESC reached the terminal: \(tail.text)")
      XCTAssertFalse(tail.text.contains("\u{202E}"), tail.text)
      // What tail -n shows afterwards (from the transcript) is the same.
      let lines = try shell("tail -n 2 '\(rig.path("chat/lobby"))'").output
      XCTAssertTrue(lines.contains(#"\x1B[31mRED"#), lines)
      XCTAssertFalse(lines.contains("\u{1B}"), lines)
    }
  }

  func testRawTextKeepsTheBytes() throws {
    let rig = try MountRig.start(.multiplexTCP, for: self, mountOptions: ["rawtext"])
    let tail = try followAndPost(rig)
    XCTAssertTrue(tail.text.contains("look \u{1B}[31mRED"), tail.text)
  }
}
