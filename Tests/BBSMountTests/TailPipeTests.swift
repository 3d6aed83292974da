import Foundation
import TestSupport
import XCTest

/// GNU `tail -f` of rooms into a pipe, as scripts run it (`tail -n 0 -f room | while read …`):
/// tail flushes a pipe only after a pass that read nothing, then sleeps its second. The mount
/// answers that pass at once (tail flushes what it read) and holds the `fstat` after the sleep
/// until a room grows: before each post tail must be seen waiting in that `fstat`
/// (`request_wait_answer`), not in its sleep, and the line then reaches the pipe.
final class TailPipeTests: XCTestCase {
  private let prompt: TimeInterval = 5

  private func post(_ rig: MountRig, _ text: String) throws {
    try sh("echo '\(text)' > \(rig.path("chat/post"))")
  }

  /// `tail` with its standard output a pipe to the test.
  private func followIntoPipe(_ rig: MountRig, _ rooms: [String], flags: [String] = ["-f"])
    throws -> ChildProcess
  {
    let tail = ChildProcess("/usr/bin/tail", flags + rooms.map(rig.path))
    try tail.start()
    addTeardownBlock { tail.stop() }
    return tail
  }

  private func assertHeld(_ tail: ChildProcess, file: StaticString = #filePath, line: UInt = #line)
  {
    XCTAssertTrue(
      waitUntil(timeout: prompt) {
        waitChannel(tail.process.processIdentifier) == "request_wait_answer"
      },
      "tail was not held in fstat", file: file, line: line)
  }

  func testTailIntoAPipeDeliversALineAfterAQuietSpellAtOnce() throws {
    for setup in [Setup.multiplexTCP, .deviceSeqpacket] {
      let rig = try MountRig.start(setup, for: self)
      try post(rig, "before tail")
      let tail = try followIntoPipe(rig, ["chat/lobby"])
      XCTAssertTrue(waitUntil(timeout: prompt) { tail.text.contains("before tail") }, tail.text)
      for index in 1...3 {
        assertHeld(tail)
        try post(rig, "piped \(index)")
        XCTAssertTrue(
          waitUntil(timeout: prompt) { tail.text.contains("piped \(index)") },
          "\(setup): tail -f -s 30 | … printed: \(tail.text)")
      }
    }
  }

  func testTwoRoomsAndFromNowIntoAPipe() throws {
    let rig = try MountRig.start(.multiplexTCP, for: self)
    try post(rig, "lobby start")
    try sh("echo 'tech start' > \(rig.path("chat/tech"))")
    let tail = try followIntoPipe(rig, ["chat/lobby", "chat/tech"])
    XCTAssertTrue(waitUntil(timeout: prompt) { tail.text.contains("tech start") }, tail.text)
    assertHeld(tail)
    try sh("echo 'in tech' > \(rig.path("chat/tech"))")
    XCTAssertTrue(waitUntil(timeout: prompt) { tail.text.contains("in tech") }, tail.text)
    assertHeld(tail)
    try post(rig, "in lobby")
    XCTAssertTrue(waitUntil(timeout: prompt) { tail.text.contains("in lobby") }, tail.text)

    // A bot's form: from now on, nothing replayed.
    let bot = try followIntoPipe(rig, ["chat/lobby"], flags: ["-n", "0", "-f"])
    assertHeld(bot)
    try post(rig, "!ping")
    XCTAssertTrue(waitUntil(timeout: prompt) { bot.text.contains("!ping") }, bot.text)
    XCTAssertFalse(bot.text.contains("lobby start"), bot.text)
  }
}
