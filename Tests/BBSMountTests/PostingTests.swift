import Foundation
import NinePTransport
import TestSupport
import XCTest

/// Posting never hangs (issue 23 part 6): a post returns once delivered or safely queued,
/// is delivered exactly once when the link answers, never waits behind an outbox replay, and
/// is never routed by a room listing that failed. Real `9bbsd`, real mounts, `echo >`.
final class PostingTests: XCTestCase {
  let fixture = BoardFixture("mount9bbs-posting")

  override func setUpWithError() throws {
    try fixture.setUp()
    try startServer()
  }

  override func tearDown() { fixture.tearDown() }

  /// Starts (or restarts) 9bbsd on the same socket and data directory.
  func startServer() throws { try fixture.startServer(listening: ["unix!" + fixture.serverSocket]) }

  /// Mounts with a private outbox directory and a short keepalive (`options` may override).
  func mount(_ address: String, options: [String] = [], name: String = "mnt") throws -> String {
    try fixture.mount(address, options: ["keepalive=1"] + options, name: name)
  }

  /// An `echo` that `timeout` ends (status 124) if the write blocks; its status and seconds.
  func timedPost(_ text: String, to file: String, limit: Int = 10) throws -> (Int32, Double) {
    let started = Date()
    let result = try shell(
      "timeout \(limit) /bin/sh -c \"/bin/echo '\(text)' > \(file)\"", timeout: Double(limit + 10))
    return (result.status, Date().timeIntervalSince(started))
  }

  /// The lines of `chat/outbox` after its header (nil if it cannot be read).
  func outboxLines(_ mountpoint: String) -> [String]? {
    guard let result = try? shell("cat \(mountpoint)/chat/outbox", timeout: 10), result.status == 0
    else { return nil }
    let lines = result.output.split(separator: "\n").map(String.init)
    guard lines.first == "ROOM\tAGE\tATTEMPTS\tLAST-ERROR" else { return nil }
    return Array(lines.dropFirst())
  }

  func occurrences(of text: String, in output: String) -> Int {
    output.components(separatedBy: text).count - 1
  }

  /// The issue's frozen server: `echo` blocked 20.6 s and returned 0 with no sign of the
  /// queue. Now it returns within ~2 s, `chat/outbox` shows the post, and when the server
  /// wakes its late Rwrite counts: the post is there once, and the outbox empties.
  func testPostToAFrozenServerReturnsAtOnceAndArrivesOnce() throws {
    let mnt = try mount("unix!" + fixture.serverSocket, options: ["keepalive=10"])
    // The auditor's link must outlive the freeze too: a reader whose session the keepalive
    // ends while the board is frozen can lose the line the board then hands the dead session.
    let audit = try mount(
      "unix!" + fixture.serverSocket, options: ["uname=auditor", "keepalive=10"], name: "audit")
    let reader = try fixture.startBackground("exec tail -f -s 0.2 \(audit)/chat/lobby")
    XCTAssertTrue(waitUntil(timeout: 10) { self.linkState(of: mnt) == "up" })
    XCTAssertEqual(try timedPost("awake", to: mnt + "/chat/post").0, 0)
    XCTAssertTrue(waitUntil(timeout: 10) { reader.text.contains("awake") }, reader.text)
    XCTAssertEqual(try shell("ls \(mnt)/chat").status, 0)  // a mount in use has listed it
    // What became of the post, as chat/events tells it (a new open starts from now).
    let events = try fixture.startBackground("exec tail -f -s 0.2 \(mnt)/chat/events")

    fixture.server?.signal(SIGSTOP)
    defer { fixture.server?.signal(SIGCONT) }
    // A while later, as a user would post: the mount's cached names have expired.
    Thread.sleep(forTimeInterval: 1.5)
    let (status, seconds) = try timedPost("frozen hello", to: mnt + "/chat/post")
    XCTAssertEqual(status, 0, fixture.mounts.first?.child.text ?? "")
    XCTAssertLessThan(seconds, 4, "a post to a frozen server held the writer")
    let queued = outboxLines(mnt)
    XCTAssertEqual(queued?.count, 1, "chat/outbox: \(String(describing: queued))")
    let fields = queued?.first?.split(separator: "\t").map(String.init) ?? []
    XCTAssertEqual(fields.first, "lobby")
    XCTAssertEqual(fields.count, 4)
    XCTAssertEqual(fields.dropFirst(2).first, "1", "attempts: \(fields)")
    // A room file and a `room:` line follow the same rules (queued behind the first).
    let tech = try fixture.startBackground("exec tail -f -s 0.2 \(audit)/chat/tech")
    for (text, file) in [("frozen room", "chat/tech"), ("tech:frozen prefix", "chat/post")] {
      let (status, seconds) = try timedPost(text, to: mnt + "/" + file)
      XCTAssertEqual(status, 0, "\(file): \(fixture.mounts.first?.child.text ?? "")")
      XCTAssertLessThan(seconds, 4, "a post to a frozen server held the writer of \(file)")
    }
    XCTAssertEqual(outboxLines(mnt)?.map { $0.prefix(5) }, ["lobby", "tech\t", "tech\t"])

    fixture.server?.signal(SIGCONT)
    XCTAssertTrue(
      waitUntil(timeout: 20) { reader.text.contains("frozen hello") }, "never delivered")
    XCTAssertTrue(waitUntil(timeout: 10) { self.outboxLines(mnt) == [] }, "outbox not emptied")
    XCTAssertTrue(
      waitUntil(timeout: 10) {
        events.text.contains("\tpost\tqueued\tlobby\t")
          && events.text.contains("\tpost\tsent\tlobby\t-\n")
      }, "chat/events: \(events.text)")
    XCTAssertTrue(
      waitUntil(timeout: 20) { chatTexts(tech.text) == ["frozen room", "frozen prefix"] },
      tech.text)
    // Posts go one at a time in order: a repeat would be on the board before these markers.
    XCTAssertEqual(try timedPost("lobby marker", to: mnt + "/chat/post").0, 0)
    XCTAssertEqual(try timedPost("tech:tech marker", to: mnt + "/chat/post").0, 0)
    XCTAssertTrue(waitUntil(timeout: 10) { reader.text.contains("lobby marker") }, reader.text)
    XCTAssertTrue(waitUntil(timeout: 10) { tech.text.contains("tech marker") }, tech.text)
    XCTAssertEqual(occurrences(of: "frozen hello", in: reader.text), 1, reader.text)
    XCTAssertEqual(chatTexts(tech.text), ["frozen room", "frozen prefix", "tech marker"])
  }

  /// The issue's 120 s case: posts queued from before, and the link stalls while they are
  /// re-sent. A new post is queued behind them at once instead of waiting for the replay;
  /// when the link answers everything arrives once, in order, and `chat/outbox` empties.
  func testNewPostIsNotBlockedBehindAStalledReplay() throws {
    let proxy = try FaultProxy(
      listen: .unix(path: fixture.directory + "/proxy.sock"),
      server: .unix(path: fixture.serverSocket))
    defer { proxy.stop() }
    let mnt = try mount("unix!" + fixture.directory + "/proxy.sock", options: ["keepalive=10"])
    let audit = try mount("unix!" + fixture.serverSocket, options: ["uname=auditor"], name: "audit")
    let reader = try fixture.startBackground("exec tail -f -s 0.2 \(audit)/chat/lobby")
    XCTAssertTrue(waitUntil(timeout: 10) { self.linkState(of: mnt) == "up" })
    XCTAssertEqual(try shell("ls \(mnt)/chat").status, 0)  // rooms known while down

    proxy.setRefusing(true)
    XCTAssertTrue(waitUntil(timeout: 30) { self.linkState(of: mnt) == "down" }, "outage not seen")
    for number in 1...3 {
      XCTAssertEqual(try timedPost("stored \(number)", to: mnt + "/chat/post").0, 0)
    }
    XCTAssertEqual(outboxLines(mnt)?.count, 3)

    // The link comes back slow, and stalls once the replay has begun.
    proxy.setDelay(0.3)
    proxy.setRefusing(false)
    XCTAssertTrue(
      waitUntil(timeout: 40) { (self.statusJSON(of: mnt)?["outbox"] as? Int ?? 3) < 3 },
      "the replay never started")
    proxy.setStalled(true)
    defer { proxy.setStalled(false) }

    let (status, seconds) = try timedPost("fresh post", to: mnt + "/chat/post")
    XCTAssertEqual(status, 0, "the new post failed or was blocked (124 = timeout)")
    XCTAssertLessThan(seconds, 4, "a new post waited behind the outbox replay")
    XCTAssertGreaterThanOrEqual(outboxLines(mnt)?.count ?? 0, 2)

    proxy.setStalled(false)
    proxy.setDelay(0)
    XCTAssertTrue(
      waitUntil(timeout: 40) { reader.text.contains("fresh post") }, "never delivered")
    XCTAssertTrue(waitUntil(timeout: 10) { self.outboxLines(mnt) == [] }, "outbox not emptied")
    // Posts go one at a time in order: a repeat would be on the board before this marker.
    XCTAssertEqual(try timedPost("marker", to: mnt + "/chat/post").0, 0)
    XCTAssertTrue(waitUntil(timeout: 10) { reader.text.contains("marker") }, reader.text)
    let texts = chatTexts(reader.text).filter { $0.hasPrefix("stored") || $0 == "fresh post" }
    XCTAssertEqual(texts, ["stored 1", "stored 2", "stored 3", "fresh post"], reader.text)
  }

  /// `chat/outbox` is a read-only listed file: a post made offline is shown with its room,
  /// age, attempts and why it waits, writes to it are refused, and it empties on delivery.
  func testOutboxFileListsQueuedPostsAndIsReadOnly() throws {
    let mnt = try mount("unix!" + fixture.serverSocket)
    XCTAssertTrue(waitUntil(timeout: 10) { self.linkState(of: mnt) == "up" })
    XCTAssertEqual(outboxLines(mnt), [])
    XCTAssertTrue(try shell("ls \(mnt)/chat").output.split(separator: "\n").contains("outbox"))
    fixture.killServer()
    XCTAssertTrue(waitUntil(timeout: 10) { self.linkState(of: mnt) == "down" })
    XCTAssertEqual(try timedPost("offline", to: mnt + "/chat/tech").0, 0)
    let lines = outboxLines(mnt) ?? []
    XCTAssertEqual(lines.count, 1, "\(lines)")
    XCTAssertTrue(lines.first?.hasPrefix("tech\t") ?? false, "\(lines)")
    XCTAssertTrue(lines.first?.hasSuffix("\t0\tlink down") ?? false, "\(lines)")
    // The state directory cleaned under the mount: the next post still finds a home.
    try FileManager.default.removeItem(atPath: fixture.directory + "/state-mnt")
    XCTAssertEqual(try timedPost("after cleaning", to: mnt + "/chat/tech").0, 0)
    XCTAssertEqual(outboxLines(mnt)?.count, 2)
    let write = try shell("/bin/echo x > \(mnt)/chat/outbox")
    XCTAssertNotEqual(write.status, 0)
    XCTAssertTrue(write.output.contains("Permission denied"), write.output)
    let truncate = try shell("truncate -s 0 \(mnt)/chat/outbox")
    XCTAssertNotEqual(truncate.status, 0, "truncating chat/outbox succeeded")
    XCTAssertEqual(outboxLines(mnt)?.count, 2)
    try startServer()
    XCTAssertTrue(waitUntil(timeout: 30) { self.outboxLines(mnt) == [] }, "outbox not emptied")
  }

  /// Issue 26: a chat listing that failed counted as "no rooms", so `tech:hi` went to the
  /// lobby as text. A line that names its room now fails clearly when the rooms cannot be
  /// listed, and a line that names none is still queued.
  func testFailedRoomListingNeverMisroutesAPost() throws {
    // watch=none: a watching mount lists chat/ at once, and a listing seen once routes posts.
    let mnt = try mount("unix!" + fixture.serverSocket, options: ["watch=none"])
    XCTAssertTrue(waitUntil(timeout: 10) { self.linkState(of: mnt) == "up" })
    fixture.killServer()
    XCTAssertTrue(waitUntil(timeout: 10) { self.linkState(of: mnt) == "down" })
    let (named, seconds) = try timedPost("tech:misrouted", to: mnt + "/chat/post")
    XCTAssertNotEqual(named, 0, "a post naming a room was taken without the room list")
    XCTAssertNotEqual(named, 124, "the post hung")
    XCTAssertLessThan(seconds, 4)
    XCTAssertEqual(try timedPost("plain offline", to: mnt + "/chat/post").0, 0)
    try startServer()
    let audit = try mount("unix!" + fixture.serverSocket, options: ["uname=auditor"], name: "audit")
    let reader = try fixture.startBackground("exec tail -f -s 0.2 \(audit)/chat/lobby")
    XCTAssertTrue(waitUntil(timeout: 30) { reader.text.contains("plain offline") }, reader.text)
    XCTAssertTrue(waitUntil(timeout: 10) { self.outboxLines(mnt) == [] })
    XCTAssertFalse(reader.text.contains("misrouted"), reader.text)
  }

  /// A post the board refuses fails its write (the shell says "Invalid argument", all an
  /// errno can say), and chat/events and the log say why in words: before, nothing did.
  func testARefusedPostSaysWhy() throws {
    let mnt = try mount("unix!" + fixture.serverSocket)
    let events = try fixture.startBackground("exec tail -f -s 0.2 \(mnt)/chat/events")
    XCTAssertTrue(waitUntil(timeout: 10) { events.text.contains("\tlink\tup") }, events.text)
    let refused = try shell(
      "/bin/bash -c \"printf 'bell \\\\007 here\\\\n' > \(mnt)/chat/tech\"", timeout: 20)
    XCTAssertNotEqual(refused.status, 0, refused.output)
    XCTAssertTrue(refused.output.contains("Invalid argument"), refused.output)
    XCTAssertTrue(
      waitUntil(timeout: 10) {
        events.text.contains(
          "\tpost\trefused\ttech\tit holds a control character, which the board does not take (the board said \"invalid argument\")"
        )
      }, "chat/events: \(events.text)")
  }

  /// A board room named `outbox` is hidden by the mount's file (listed once, logged once);
  /// posts still reach it as `outbox:text`.
  func testABoardRoomNamedOutboxIsShadowed() throws {
    let board = try ServerProcess(transport: "unix", rooms: ["lobby", "outbox"])
    defer { board.stop() }
    let mnt = try mount(board.address)
    XCTAssertTrue(waitUntil(timeout: 10) { self.linkState(of: mnt) == "up" })
    let names = try shell("ls \(mnt)/chat").output.split(separator: "\n")
    XCTAssertEqual(names.filter { $0 == "outbox" }.count, 1, "\(names)")
    XCTAssertEqual(outboxLines(mnt), [])
    // Taken by the board (a room it did not have would fail the write; nothing is queued).
    XCTAssertEqual(try timedPost("outbox:to the room", to: mnt + "/chat/post").0, 0)
    XCTAssertEqual(outboxLines(mnt), [])
    let audit = try mount(board.address, options: ["uname=auditor"], name: "audit")
    XCTAssertEqual(try shell("ls \(audit)/chat").status, 0)
    XCTAssertEqual(outboxLines(audit), [], "the board room showed through")
    XCTAssertTrue(
      waitUntil(timeout: 10) {
        (self.fixture.mounts.first?.child.text ?? "").contains("the server has a room /chat/outbox")
      }, self.fixture.mounts.first?.child.text ?? "")
  }
}
