import Foundation
import TestSupport
import XCTest

/// A line someone else posts cannot drive the terminal of whoever follows the room: `tail -f`
/// on a terminal shows their escape sequences as text. `-o rawtext` keeps the bytes. A real
/// board keeps whatever it is given (so does 9bbsd's device profile); 9bbsd itself refuses a
/// post with control characters.
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
    for setup in [Setup.deviceSeqpacket, .gen1TCP] {
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
    let rig = try MountRig.start(.deviceSeqpacket, for: self, mountOptions: ["rawtext"])
    let tail = try followAndPost(rig)
    XCTAssertTrue(tail.text.contains("look \u{1B}[31mRED"), tail.text)
  }

  /// 9bbsd's own profile refuses such a post, and the writer hears why.
  func testNineBBSDRefusesAPostWithControlCharacters() throws {
    let rig = try MountRig.start(.multiplexTCP, for: self)
    let refused = try shell("\(hostile) > '\(rig.path("chat/post"))'")
    XCTAssertNotEqual(refused.status, 0, refused.output)
    // The writer is told why (dash's printf says only "I/O error"; the errno is EINVAL).
    let errno = try shell(
      "python3 -c 'import os,sys\ntry:\n  fd=os.open(sys.argv[1],os.O_WRONLY)\n  os.write(fd,b\"a\\033[31mb\\n\")\n  os.close(fd)\n  print(0)\nexcept OSError as e:\n  print(e.errno)' '\(rig.path("chat/post"))'"
    ).output
    XCTAssertEqual(errno, "\(EINVAL)\n")
    try shell("echo 'after it' > '\(rig.path("chat/post"))'")
    let lines = try shell("tail -n 3 '\(rig.path("chat/lobby"))'").output
    XCTAssertTrue(lines.contains("after it"), lines)
    XCTAssertFalse(lines.contains("look"), lines)
  }
}
