import Foundation
import Glibc
import TestSupport
import XCTest

/// GNU `tail -f` of rooms as people run it: on a terminal, with a 30 s poll (`-s 30`), so a
/// line that shows within seconds proves the mount woke tail (its own loop would sleep 30 s).
final class TailFollowTests: XCTestCase {
  /// Seconds a woken tail may take; its own poll is 30 s.
  private let prompt: TimeInterval = 5

  func testTailFollowPrintsEachPostAtOnce() throws {
    let rig = try MountRig.start(.multiplexTCP, for: self)
    try post(rig, "before tail")
    let tail = try follow(rig, ["chat/lobby"])
    XCTAssertNotNil(tail.waitForOutput("before tail", timeout: prompt), tail.text)
    for index in 1...3 {
      try post(rig, "line \(index)")
      XCTAssertNotNil(
        tail.waitForOutput("line \(index)", timeout: prompt), "tail -f -s 30 printed: \(tail.text)")
    }
    // A tail that inherited descriptors from its shell (a log open for writing, /dev/null)
    // follows at once too.
    let log = rig.directory + "/inherited.log"
    let inherited = try TerminalChild(
      "/bin/sh",
      ["-c", "exec 7>'\(log)' 8</dev/null; exec tail -f -s 30 '\(rig.path("chat/lobby"))'"])
    try inherited.start()
    addTeardownBlock { inherited.stop() }
    XCTAssertNotNil(inherited.waitForOutput("line 3", timeout: prompt), inherited.text)
    try post(rig, "inherited")
    XCTAssertNotNil(inherited.waitForOutput("inherited", timeout: prompt), inherited.text)
    // tail -n 0 -f reads nothing before it follows (it only seeks to the end).
    let fromNow = try follow(rig, ["chat/lobby"], flags: ["-n", "0", "-f"])
    XCTAssertTrue(
      waitUntil(timeout: prompt) { waitChannel(fromNow.pid) == "request_wait_answer" },
      "tail -n 0 -f was not held")
    try post(rig, "from now on")
    XCTAssertNotNil(fromNow.waitForOutput("from now on", timeout: prompt), fromNow.text)
    // tail -F (by name) too.
    let byName = try follow(rig, ["chat/lobby"], flags: ["-F"])
    XCTAssertNotNil(byName.waitForOutput("line 3", timeout: prompt), byName.text)
    try post(rig, "by name")
    XCTAssertNotNil(byName.waitForOutput("by name", timeout: prompt), byName.text)
  }

  func testCtrlZFgAndCtrlCStayPrompt() throws {
    let rig = try MountRig.start(.multiplexTCP, for: self)
    try post(rig, "start")
    // tail's own poll (1 s): an interrupted fstat is answered with the size as it was, so after
    // `fg` tail sleeps its poll once before the mount holds its fstat again.
    let tail = try follow(rig, ["chat/lobby"], poll: "1")
    XCTAssertNotNil(tail.waitForOutput("start", timeout: prompt), tail.text)
    XCTAssertTrue(waitUntil(timeout: prompt) { waitChannel(tail.pid) == "request_wait_answer" })

    tail.signal(SIGTSTP)
    XCTAssertTrue(waitUntil(timeout: 0.5) { tail.state == "T" }, "Ctrl-Z did not stop tail")
    tail.signal(SIGCONT)
    try post(rig, "after fg")
    XCTAssertNotNil(tail.waitForOutput("after fg", timeout: 2.5), tail.text)
    XCTAssertTrue(tail.isRunning, "tail gave up after Ctrl-Z: \(tail.text)")
    // Held again: the next line shows at once.
    XCTAssertTrue(waitUntil(timeout: prompt) { waitChannel(tail.pid) == "request_wait_answer" })
    try post(rig, "held again")
    XCTAssertNotNil(tail.waitForOutput("held again", timeout: 0.5), tail.text)

    XCTAssertTrue(waitUntil(timeout: prompt) { waitChannel(tail.pid) == "request_wait_answer" })
    tail.signal(SIGINT)
    XCTAssertTrue(tail.wait(timeout: 0.5), "Ctrl-C did not end tail")
  }

  func testOthersAreNotHeldWhileTailWaits() throws {
    let rig = try MountRig.start(.multiplexTCP, for: self)
    try post(rig, "hello")
    let tail = try follow(rig, ["chat/lobby"])
    XCTAssertNotNil(tail.waitForOutput("hello", timeout: prompt), tail.text)
    XCTAssertTrue(waitUntil(timeout: prompt) { waitChannel(tail.pid) == "request_wait_answer" })
    let room = rig.path("chat/lobby")
    // Each would time out (and fail) if it waited for the room to grow.
    try sh("ls -l \(rig.path("chat"))", timeout: 3)
    try sh("stat \(room)", timeout: 3)
    XCTAssertTrue(try sh("head -n 1 \(room)", timeout: 3).contains("hello"))
    try sh(
      "python3 -c 'import os,sys; f=os.open(sys.argv[1], os.O_RDONLY); os.fstat(f); os.fstat(f)' \(room)",
      timeout: 3)
    XCTAssertTrue(tail.isRunning)
  }

  func testTailFollowsSeveralRoomsAndAFileElsewhere() throws {
    let rig = try MountRig.start(.multiplexTCP, for: self)
    try post(rig, "lobby first")
    try post(rig, "tech:tech first")
    let rooms = try follow(rig, ["chat/lobby", "chat/tech"])
    XCTAssertNotNil(rooms.waitForOutput("tech first", timeout: prompt), rooms.text)
    for index in 1...2 {
      try post(rig, "tech:in tech \(index)")
      XCTAssertNotNil(rooms.waitForOutput("in tech \(index)", timeout: prompt), rooms.text)
      try post(rig, "in lobby \(index)")
      XCTAssertNotNil(rooms.waitForOutput("in lobby \(index)", timeout: prompt), rooms.text)
    }
    // With a file outside the mount tail keeps its own poll (the mount cannot see that file
    // grow), here the default second: both the room and the file still show.
    let log = rig.directory + "/local.log"
    FileManager.default.createFile(atPath: log, contents: Data("log start\n".utf8))
    let mixed = try TerminalChild("/usr/bin/tail", ["-f", rig.path("chat/lobby"), log])
    try mixed.start()
    addTeardownBlock { mixed.stop() }
    XCTAssertNotNil(mixed.waitForOutput("log start", timeout: prompt), mixed.text)
    try "log more\n".appendLine(to: log)
    XCTAssertNotNil(mixed.waitForOutput("log more", timeout: prompt), mixed.text)
    try post(rig, "mixed room")
    XCTAssertNotNil(mixed.waitForOutput("mixed room", timeout: prompt), mixed.text)
  }

  func testTailAndCatIntoAPipeLogEveryLine() throws {
    let rig = try MountRig.start(.multiplexTCP, for: self)
    try post(rig, "first")
    let room = rig.path("chat/lobby")
    // Their standard output is a pipe the test reads: `tail -f room | …`, `cat room | …`.
    let piped = try background(self, "/usr/bin/tail", ["-f", room])
    let catted = try background(self, "/bin/cat", [room])
    XCTAssertTrue(waitUntil(timeout: prompt) { piped.text.contains("first") }, piped.text)
    for index in 1...3 {
      try post(rig, "piped \(index)")
      // tail flushes a pipe after a pass with no input: within its one-second poll.
      XCTAssertTrue(waitUntil(timeout: 2.5) { piped.text.contains("piped \(index)") }, piped.text)
      XCTAssertTrue(waitUntil(timeout: 0.5) { catted.text.contains("piped \(index)") }, catted.text)
    }
    XCTAssertEqual(chatTexts(piped.text), ["first", "piped 1", "piped 2", "piped 3"])
    XCTAssertEqual(chatTexts(catted.text), ["first", "piped 1", "piped 2", "piped 3"])
  }

  func testEightRoomsOnADevice() throws {
    let rooms = (0..<8).map { "r\($0)" }
    let rig = try MountRig.start(.deviceSeqpacket, for: self, rooms: rooms)
    for room in rooms { try post(rig, "\(room):hello \(room)") }
    let tails = try rooms.map { try follow(rig, ["chat/\($0)"]) }
    for (room, tail) in zip(rooms, tails) {
      XCTAssertNotNil(tail.waitForOutput("hello \(room)", timeout: 10), "\(room): \(tail.text)")
    }
    for round in 1...2 {
      for room in rooms { try post(rig, "\(room):round \(round) in \(room)") }
      for (room, tail) in zip(rooms, tails) {
        XCTAssertNotNil(
          tail.waitForOutput("round \(round) in \(room)", timeout: prompt),
          "\(room) (tail \(waitChannel(tail.pid) ?? "?")): \(tail.text)")
      }
    }
    rig.assertNoViolations()
  }

  func testCopiesOfRoomsEnd() throws {
    let rig = try MountRig.start(.multiplexTCP, for: self)
    try post(rig, "keep me")
    try post(rig, "tech:and me")
    let backup = rig.directory + "/backup"
    // cp -r opens with O_NOFOLLOW: each room is copied as far as it goes, and cp ends.
    try sh("cp -r \(rig.path("chat")) \(backup)", timeout: 15)
    XCTAssertTrue(
      try String(contentsOfFile: backup + "/lobby", encoding: .utf8).contains("keep me"))
    XCTAssertTrue(try String(contentsOfFile: backup + "/tech", encoding: .utf8).contains("and me"))
    // The documented way for grep and wc.
    let counted = try sh(
      "dd if=\(rig.path("chat/lobby")) iflag=nofollow status=none | grep -c 'keep me'", timeout: 5)
    XCTAssertEqual(counted.trimmingCharacters(in: .whitespacesAndNewlines), "1")
    // examples/room-logger.sh logs each line as it arrives.
    let logger = try background(
      self, "/bin/sh", [PackagePaths.path("examples/room-logger.sh"), rig.mountpoint, "lobby"])
    XCTAssertTrue(waitUntil(timeout: prompt) { logger.text.contains("keep me") }, logger.text)
    try post(rig, "logged live")
    XCTAssertTrue(waitUntil(timeout: 2) { logger.text.contains("logged live") }, logger.text)
  }

  // MARK: Helpers

  private func post(_ rig: MountRig, _ text: String) throws {
    try sh("echo '\(text)' > \(rig.path("chat/post"))")
  }

  /// GNU tail following `rooms` on a terminal, with a 30 s poll unless told otherwise.
  private func follow(
    _ rig: MountRig, _ rooms: [String], flags: [String] = ["-f"], poll: String = "30"
  ) throws -> TerminalChild {
    let tail = try TerminalChild("/usr/bin/tail", flags + ["-s", poll] + rooms.map(rig.path))
    try tail.start()
    addTeardownBlock { tail.stop() }
    return tail
  }
}

/// Where a process sleeps in the kernel (`request_wait_answer`: waiting for a FUSE reply).
func waitChannel(_ pid: pid_t) -> String? {
  try? String(contentsOfFile: "/proc/\(pid)/wchan", encoding: .utf8)
}

extension String {
  fileprivate func appendLine(to path: String) throws {
    let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
    defer { try? handle.close() }
    try handle.seekToEnd()
    try handle.write(contentsOf: Data(utf8))
  }
}
