import Foundation
import Glibc
import NinePClient
import NinePProtocol
import NinePTransport
import TestSupport
import XCTest

/// Real mounts of `9bbsd --profile gen1`, the older board: chat reads never wait (a caught-up
/// read is 0 bytes at once), each room is a 49-line ring that drops its oldest line silently,
/// and every reader shares one cursor, that of whoever last wrote anything. One test per
/// defect the mount had against a real Gen-1 board; each failed before the fixes.
final class Gen1BoardTests: XCTestCase {
  /// `tail -f` of a room whose backlog was already read shows the next post. The board answers
  /// the mount's first read with nothing at once; that must not open the room at size 0,
  /// which sends GNU tail reading to an end that never comes.
  func testTailFollowsACaughtUpRoomOnATerminal() throws {
    let rig = try MountRig.start(.gen1TCP, for: self, serverArguments: ["--log-level", "trace"])
    let ada = try BoardClient(rig.server.address, uname: "ada", for: self)
    for n in 1...3 { try ada.post("backlog \(n)") }
    // A first reader takes the backlog: ada is the last writer, so hers is every reader's cursor.
    XCTAssertEqual(try ada.readRoom().count, 3)
    XCTAssertEqual(try ada.readRoom(), [], "ada is not caught up")
    // Look the room up first, so the empty reads from now on are the room feed's (a listing's
    // confirming read may add one: two are waited for).
    try sh("stat \(rig.path("chat/lobby")) >/dev/null")
    let emptyReads = { rig.server.log.components(separatedBy: "-> Rread count=0").count - 1 }
    let before = emptyReads()

    // On a terminal, as people run it (tail flushes a line at once there).
    let tail = try TerminalChild("/usr/bin/tail", ["-f", rig.path("chat/lobby")])
    try tail.start()
    addTeardownBlock { tail.stop() }
    XCTAssertTrue(
      waitUntil(timeout: 10) { emptyReads() >= before + 2 },
      "the room feed never read the caught-up room")
    let posted = ContinuousClock.now
    try ada.post("fresh line")
    let shown = waitUntil(timeout: 5) { tail.text.contains("ada: fresh line\n") }
    print("tail -f of a caught-up Gen-1 room: shown \(shown) after \(posted.duration(to: .now))")
    XCTAssertTrue(shown, "tail -f printed nothing within 5 s: \(tail.text.debugDescription)")
    XCTAssertEqual(chatTexts(tail.text), ["fresh line"], tail.text)
    rig.assertNoViolations()
  }

  /// A line that lands as the room's last reader closes is not lost: the read the close
  /// flushes may already carry it, and the board has moved the (shared) cursor past it.
  func testNoPostLostWhenTheLastReaderClosesAsItLands() throws {
    // 25 ms per request, served in order: no reply is instant, so the feed reads back to back
    // and a read is always queued behind the post, answered just after the close.
    let rig = try MountRig.start(
      .gen1TCP, for: self, serverArguments: ["--processing-delay", "25", "--log-level", "trace"])
    let bob = try BoardClient(rig.server.address, uname: "bob", for: self)
    let room = rig.path("chat/lobby")
    try bob.post("seed")  // a room opens on its first line
    XCTAssertEqual(chatTexts(try sh("timeout 10 head -n 1 \(room)")), ["seed"])
    let reads = { rig.server.log.components(separatedBy: "<- Tread").count - 1 }
    let rounds = 40
    for n in 1...rounds {
      let before = reads()
      let fd = open(room, O_RDONLY)
      guard fd >= 0 else {
        return XCTFail("open of the room failed: \(String(cString: strerror(errno)))")
      }
      // Post once the room feed is reading the board, then close at once.
      let reading = waitUntil(timeout: 10) { reads() > before }
      try bob.post("line \(n)")
      close(fd)
      guard reading else { return XCTFail("round \(n): the room feed never read the board") }
    }
    try bob.post("end")
    let reader = try background(self, "/bin/cat", [room])
    XCTAssertTrue(
      waitUntil(timeout: 15) { chatTexts(reader.text).last == "end" },
      "the last post never showed: \(reader.text)")
    let texts = chatTexts(reader.text)
    let counts = Dictionary(texts.map { ($0, 1) }, uniquingKeysWith: +)
    let lost = (1...rounds).filter { counts["line \($0)"] == nil }
    let twice = (1...rounds).filter { (counts["line \($0)"] ?? 0) > 1 }
    print("\(rounds) posts as the reader closed: \(lost.count) lost, \(twice.count) twice")
    XCTAssertEqual(lost, [], "lines lost")
    XCTAssertEqual(twice, [], "lines shown more than once")
    XCTAssertEqual(texts, ["seed"] + (1...rounds).map { "line \($0)" } + ["end"])
    rig.assertNoViolations()
  }

  /// A board that serves one connection at a time (9p4z's TCP transport): a room opens and
  /// posting works on the one session the mount has. A second session's Tversion would sit in
  /// the listen backlog until the request timeout (30 s).
  func testOneConnectionAtATime() throws {
    let rig = try MountRig.start(
      .gen1TCP, for: self, serverArguments: ["--max-connections", "1"])
    let room = rig.path("chat/lobby")
    var started = ContinuousClock.now
    try sh("echo 'one at a time' > \(rig.path("chat/post"))", timeout: 45)
    let posting = started.duration(to: .now)
    started = .now
    let head = try shell("timeout 40 head -n 1 \(room)", timeout: 45)
    let opening = started.duration(to: .now)
    print("one connection at a time: post took \(posting), head -n 1 took \(opening)")
    XCTAssertEqual(head.status, 0, "head -n 1 did not finish in 40 s: \(head.output)")
    XCTAssertEqual(chatTexts(head.output), ["one at a time"], head.output)
    XCTAssertLessThan(posting, .seconds(10), "posting waited")
    XCTAssertLessThan(opening, .seconds(10), "the room waited for a second session")

    // And it streams there: a reader sees the next post.
    let reader = try background(self, "/bin/cat", [room])
    XCTAssertTrue(waitUntil(timeout: 10) { chatTexts(reader.text) == ["one at a time"] })
    try sh("echo 'and another' > \(rig.path("chat/post"))", timeout: 15)
    XCTAssertTrue(
      waitUntil(timeout: 10) { chatTexts(reader.text) == ["one at a time", "and another"] },
      reader.text)
    rig.assertNoViolations()
  }

  /// A Gen-1 board does not clunk fids when a client goes (each holds a node in its small
  /// heap): the mount gives every fid back itself when it is unmounted.
  func testUnmountingGivesEveryFidBack() throws {
    let rig = try MountRig.start(.gen1TCP, for: self)
    try sh("echo 'browse me' > \(rig.path("chat/post"))")
    try sh(
      "ls \(rig.path("chat")) \(rig.path("etc")) \(rig.path("rooms")) \(rig.path("rooms/lobby"))"
        + " && cat \(rig.path("etc/motd")) && head -n 1 \(rig.path("chat/lobby"))")
    rig.mount.stop()
    let log = { rig.server.log }
    XCTAssertTrue(
      waitUntil(timeout: 10) {
        log().components(separatedBy: "disconnected").count - 1
          == log().components(separatedBy: " connected").count - 1
      }, log())
    XCTAssertFalse(log().contains("left open"), log())
  }

  /// A burst after a quiet spell loses nothing: an idle room is still polled often enough to
  /// catch up before the 49-line ring drops what the burst pushed through it.
  func testBurstAfterIdleLosesNothing() throws {
    // 10 ms per request, as on a real board; traced, to see the feed's polls.
    let rig = try MountRig.start(
      .gen1TCP, for: self, serverArguments: ["--processing-delay", "10", "--log-level", "trace"])
    let bob = try BoardClient(rig.server.address, uname: "bob", for: self)
    try bob.post("ready")
    let reader = try background(self, "/bin/cat", [rig.path("chat/lobby")])
    XCTAssertTrue(waitUntil(timeout: 10) { chatTexts(reader.text) == ["ready"] }, reader.text)
    // The point: a room nobody speaks in for a while, long enough for the feed's idle backoff
    // to reach its longest pause, whatever that is: the gaps between its polls stop growing.
    let idle = ContinuousClock.now
    let settled = waitForSteadyPolls(of: rig.server)
    XCTAssertTrue(settled.steady, "the feed's polls never settled: \(settled.gaps)")
    let quiet = idle.duration(to: .now)
    let burst = (1...120).map { "burst \($0)" }
    let started = ContinuousClock.now
    for text in burst { try bob.post(text) }
    let posting = started.duration(to: .now)
    let ended = waitUntil(timeout: 15) { chatTexts(reader.text).last == "burst 120" }
    let texts = Array(chatTexts(reader.text).dropFirst())
    let lost = burst.filter { !texts.contains($0) }
    print(
      "120 posts in \(posting) after \(quiet) idle (poll gaps \(settled.gaps)):"
        + " \(texts.count) lines shown, \(lost.count) lost, \(texts.count - Set(texts).count) twice"
    )
    XCTAssertTrue(ended, "the last post never showed")
    XCTAssertEqual(lost.count, 0, "lost: \(lost)")
    XCTAssertEqual(texts, burst, "not every line once, in order")
    rig.assertNoViolations()
  }

  /// Someone new posting does not show the room again: the board restarts every reader at the
  /// start of its ring for a new author, and the copies must not reach the reader.
  func testANewAuthorDoesNotReplayTheRing() throws {
    let rig = try MountRig.start(.gen1TCP, for: self)
    let alice = try BoardClient(rig.server.address, uname: "alice", for: self)
    let old = (1...40).map { "old \($0)" }
    for text in old { try alice.post(text) }
    let reader = try background(self, "/bin/cat", [rig.path("chat/lobby")])
    XCTAssertTrue(waitUntil(timeout: 10) { chatTexts(reader.text) == old }, reader.text)

    let carol = try BoardClient(rig.server.address, uname: "carol", for: self)
    try carol.post("carol is new here")
    XCTAssertTrue(
      waitUntil(timeout: 10) { chatTexts(reader.text).contains("carol is new here") },
      reader.text)
    // carol is now the last writer, so her next line replays nothing: once it shows, every
    // copy the first one brought has shown too.
    try carol.post("carol again")
    XCTAssertTrue(waitUntil(timeout: 10) { chatTexts(reader.text).last == "carol again" })
    let texts = chatTexts(reader.text)
    print(
      "a new author on a caught-up room: \(texts.count - old.count - 2) old lines shown again")
    XCTAssertEqual(texts, old + ["carol is new here", "carol again"])
    rig.assertNoViolations()
  }
}

/// Waits (at least a second, at most `timeout`) until a room feed polling `server`'s idle room
/// does so at a steady pace: the last gaps between its reads (`<- Tread` in the trace log) no
/// longer grow (each within a fifth of the one before) and are at least 0.1 s. With a 300 ms
/// cap that is about 1.3 s of quiet; a feed backing off to seconds takes as long as its ramp.
private func waitForSteadyPolls(of server: ServerProcess, timeout: TimeInterval = 20)
  -> (steady: Bool, gaps: [Double])
{
  let reads = { server.log.components(separatedBy: "<- Tread").count - 1 }
  let started = Date()
  var last = (count: reads(), time: started)
  var gaps: [Double] = []
  let steady = waitUntil(timeout: timeout, interval: 0.005) {
    let now = Date()
    let count = reads()
    if count != last.count {
      gaps.append(now.timeIntervalSince(last.time))
      last = (count, now)
    }
    guard now.timeIntervalSince(started) >= 1, gaps.count >= 4 else { return false }
    let recent = gaps.suffix(3)
    return recent.allSatisfy { $0 >= 0.1 }
      && zip(recent, recent.dropFirst()).allSatisfy { $1 <= $0 * 1.2 }
  }
  return (steady, gaps.map { ($0 * 1000).rounded() / 1000 })
}

/// Another client of the board: a 9P session of its own (not through a mount) that posts to
/// the lobby and reads it, closed with the test.
private final class BoardClient: @unchecked Sendable {
  let session: Session
  private var postFid: Fid?

  init(_ address: String, uname: String, for test: XCTestCase) throws {
    let transport = try dial(try TransportAddress(parsing: address))
    session = try Session.connect(
      transport: transport,
      configuration: SessionConfiguration(
        profile: .multiplex, uname: uname, requestTimeout: .seconds(10)))
    test.addTeardownBlock { [session] in session.close() }
  }

  /// Posts one line to the lobby (Gen-1 wants `room:text` in one Twrite); returns once the
  /// board has it.
  func post(_ text: String) throws {
    let fid: Fid
    if let postFid {
      fid = postFid
    } else {
      fid = try open("chat/post", mode: .write)
      postFid = fid
    }
    let data = Array("lobby:\(text)".utf8)
    let count = try wait("post \(text)") {
      session.write(fid, offset: 0, data: data, completion: $0)
    }
    guard count == data.count else { throw HarnessError("short post: \(count) of \(data.count)") }
  }

  /// One read of the lobby (the board answers at once): the lines it gave.
  func readRoom() throws -> [ChatLine] {
    let fid = try open("chat/lobby", mode: .read)
    defer { session.clunk(fid) }
    let data = try wait("read the lobby") {
      session.read(fid, offset: 0, count: 8000, completion: $0)
    }
    return chatLines(String(decoding: data, as: UTF8.self))
  }

  private func open(_ path: String, mode: OpenMode) throws -> Fid {
    let walked = try wait("walk \(path)") { session.walk(Session.components(path), completion: $0) }
    _ = try wait("open \(path)") { session.open(walked.fid, mode: mode, completion: $0) }
    return walked.fid
  }

  /// Runs one callback operation and waits for it (bounded: the session's own timeout is 10 s).
  private func wait<T: Sendable>(
    _ what: String, _ start: (@escaping @Sendable (Result<T, NinePError>) -> Void) -> Void
  ) throws -> T {
    let done = DispatchSemaphore(value: 0)
    let box = ResultBox<T>()
    start {
      box.result = $0
      done.signal()
    }
    guard done.wait(timeout: .now() + 15) == .success, let result = box.result else {
      throw HarnessError("\(what): no answer within 15 s")
    }
    return try result.get()
  }
}

private final class ResultBox<T: Sendable>: @unchecked Sendable {
  var result: Result<T, NinePError>?
}
