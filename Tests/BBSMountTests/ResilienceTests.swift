import Foundation
import NinePTransport
import TestSupport
import XCTest

/// The link drops, the server dies and comes back, the daemon restarts: nothing is lost,
/// nothing is shown twice, no reader sees end-of-file, and Ctrl-C and unmount stay prompt.
/// Real `9bbsd` and `mount9bbs` processes, real mounts, a fault proxy in between.
final class ResilienceTests: XCTestCase {
  let fixture = BoardFixture("mount9bbs-resilience")

  override func setUpWithError() throws {
    try fixture.setUp()
    try startServer()
  }

  override func tearDown() { fixture.tearDown() }

  /// Starts (or restarts) 9bbsd on the same socket and data directory.
  func startServer() throws {
    try fixture.startServer(
      listening: ["unix!" + fixture.serverSocket], extra: ["--log-level", "debug"])
  }

  /// Mounts with a short keepalive, every mount's outbox in one state directory (a daemon that
  /// restarts finds its predecessor's).
  func mount(_ address: String, options: [String] = [], name: String = "mnt") throws -> String {
    try fixture.mount(
      address, options: ["keepalive=1"] + options, name: name,
      stateDirectory: fixture.directory + "/state")
  }

  /// Lines of the form "wN k" in `text`, checked for completeness, order and duplicates.
  func assertEveryPostOnce(
    _ text: String, writers: Int, posts: Int, _ who: String, file: StaticString = #filePath,
    line: UInt = #line
  ) {
    var seen: [Int: [Int]] = [:]
    for entry in text.split(separator: "\n") {
      guard let range = entry.range(of: #"w\d+ \d+$"#, options: .regularExpression) else {
        continue
      }
      let fields = entry[range].dropFirst().split(separator: " ")
      guard fields.count == 2, let writer = Int(fields[0]), let number = Int(fields[1]) else {
        continue
      }
      seen[writer, default: []].append(number)
    }
    for writer in 1...writers {
      let numbers = seen[writer] ?? []
      XCTAssertEqual(
        numbers, Array(1...posts),
        "\(who): writer \(writer) lines missing, repeated or out of order",
        file: file, line: line)
    }
  }

  // MARK: - Tests

  /// 3 writers × 200 posts through the mount and 5 `tail -f` readers; the server is killed
  /// with SIGKILL in the middle and restarted: every reader gets every post exactly once, in
  /// each writer's order, and no reader sees an error or end-of-file.
  func testServerKilledAndRestartedUnderLoad() throws {
    let mnt = try mount("unix!" + fixture.serverSocket)
    var readers: [ChildProcess] = []
    for index in 0..<5 {
      readers.append(
        try fixture.startBackground(
          "exec tail -f -s 0.2 \(mnt)/chat/lobby 2>\(fixture.directory)/tail\(index).err"))
    }
    XCTAssertTrue(waitUntil(timeout: 10) { self.linkState(of: mnt) == "up" })
    var writers: [ChildProcess] = []
    for writer in 1...3 {
      writers.append(
        try fixture.startBackground(
          "for n in $(seq 200); do echo \"w\(writer) $n\" > \(mnt)/chat/post || echo FAIL $n >&2; done"
        ))
    }
    // Kill the server while the posts flow, bring it back a moment later.
    XCTAssertTrue(waitUntil(timeout: 30) { readers[0].text.contains("w1 40") })
    fixture.killServer()
    XCTAssertTrue(
      waitUntil(timeout: 10) { self.linkState(of: mnt) == "down" }, "the outage was not seen")
    Thread.sleep(forTimeInterval: 0.5)  // posts made now go to the outbox
    try startServer()
    for writer in writers {
      XCTAssertTrue(writer.wait(timeout: 120), "a writer hung")
      XCTAssertEqual(writer.process.terminationStatus, 0)
      XCTAssertFalse(writer.text.contains("FAIL"), "a post failed: \(writer.text)")
    }
    for (index, reader) in readers.enumerated() {
      XCTAssertTrue(
        waitUntil(timeout: 60) {
          reader.text.contains("w1 200") && reader.text.contains("w2 200")
            && reader.text.contains("w3 200")
        },
        "reader \(index) did not get everything: \(reader.text.suffix(300))")
    }
    // A moment more, so that a late duplicate would show.
    Thread.sleep(forTimeInterval: 1)
    for (index, reader) in readers.enumerated() {
      XCTAssertTrue(reader.isRunning, "reader \(index) ended")
      assertEveryPostOnce(reader.text, writers: 3, posts: 200, "reader \(index)")
      let errors =
        (try? String(contentsOfFile: "\(fixture.directory)/tail\(index).err", encoding: .utf8))
        ?? ""
      XCTAssertEqual(errors, "", "reader \(index) saw an error")
    }
    let report = statusJSON(of: mnt)
    XCTAssertGreaterThanOrEqual((report?["link"] as? [String: Any])?["reconnects"] as? Int ?? 0, 1)
  }

  /// Posts made while the server is down are stored, and delivered once it is back; posts
  /// still stored when the daemon dies go out from the next mount of the same BBS.
  func testPostsWhileDownSurviveTheServerAndTheDaemon() throws {
    let mnt = try mount("unix!" + fixture.serverSocket)
    let reader = try fixture.startBackground("exec tail -f -s 0.2 \(mnt)/chat/lobby")
    XCTAssertTrue(waitUntil(timeout: 10) { self.linkState(of: mnt) == "up" })
    fixture.killServer()
    XCTAssertTrue(waitUntil(timeout: 10) { self.linkState(of: mnt) == "down" })
    for text in ["offline one", "offline two"] {
      XCTAssertEqual(
        try shell("echo '\(text)' > \(mnt)/chat/post").status, 0, "offline post refused")
    }
    XCTAssertEqual((statusJSON(of: mnt)?["outbox"] as? Int), 2)
    try startServer()
    XCTAssertTrue(
      waitUntil(timeout: 30) { reader.text.contains("offline two") },
      "stored posts not delivered: \(reader.text)")
    XCTAssertTrue(reader.text.contains("offline one"))
    XCTAssertTrue(waitUntil(timeout: 10) { (self.statusJSON(of: mnt)?["outbox"] as? Int) == 0 })

    // Now the daemon dies with a post stored: the next mount sends it.
    fixture.killServer()
    XCTAssertTrue(waitUntil(timeout: 10) { self.linkState(of: mnt) == "down" })
    XCTAssertEqual(try shell("echo 'left behind' > \(mnt)/chat/post").status, 0)
    reader.stop(grace: 1)
    fixture.crashMounts()
    XCTAssertFalse(isMounted(mnt))
    try startServer()
    let again = try mount("unix!" + fixture.serverSocket, name: "again")
    let second = try fixture.startBackground("exec tail -f -s 0.2 \(again)/chat/lobby")
    XCTAssertTrue(
      waitUntil(timeout: 30) { second.text.contains("left behind") },
      "the post left in the outbox was not sent by the next mount: \(second.text)")
  }

  /// `-o outbox=off`: an offline post fails at once instead of waiting.
  func testOfflinePostFailsWithoutOutbox() throws {
    let mnt = try mount("unix!" + fixture.serverSocket, options: ["outbox=off"])
    XCTAssertTrue(waitUntil(timeout: 10) { self.linkState(of: mnt) == "up" })
    let online = try shell("echo 'online' > \(mnt)/chat/post")
    XCTAssertEqual(online.status, 0, "\(online.output)\n\(fixture.mounts.first?.child.text ?? "")")
    fixture.killServer()
    XCTAssertTrue(waitUntil(timeout: 10) { self.linkState(of: mnt) == "down" })
    let started = Date()
    // coreutils echo names the errno (dash's builtin says "I/O error" for any failure).
    let result = try shell("/bin/echo 'nowhere' > \(mnt)/chat/post", timeout: 20)
    XCTAssertNotEqual(result.status, 0)
    XCTAssertTrue(
      result.output.contains("not connected"),
      "\(result.output)\n\(fixture.mounts.first?.child.text ?? "")"
    )
    XCTAssertLessThan(Date().timeIntervalSince(started), 5)
  }

  /// While the link is down (the proxy refuses connections), a blocked reader still ends on
  /// Ctrl-C at once, `ls` answers from what the mount knows, and unmount is prompt; status
  /// shows the outage, then the recovery.
  func testInterruptUnmountAndStatusWhileLinkIsDown() throws {
    let proxy = try FaultProxy(
      listen: .unix(path: fixture.directory + "/proxy.sock"),
      server: .unix(path: fixture.serverSocket))
    defer { proxy.stop() }
    let mnt = try mount("unix!" + fixture.directory + "/proxy.sock")
    XCTAssertEqual(try shell("ls \(mnt)/etc").output.contains("motd"), true)
    let cat = try fixture.startBackground("exec cat \(mnt)/chat/lobby")
    XCTAssertTrue(waitUntil(timeout: 10) { self.linkState(of: mnt) == "up" })

    proxy.setRefusing(true)
    XCTAssertTrue(waitUntil(timeout: 10) { self.linkState(of: mnt) == "down" }, "outage not seen")
    let report = statusJSON(of: mnt)
    XCTAssertNotNil((report?["link"] as? [String: Any])?["reason"] as? String)

    // The reader waits (no EOF, no error) and Ctrl-C ends it at once.
    XCTAssertTrue(cat.isRunning)
    let interrupted = Date()
    cat.signal(SIGINT)
    XCTAssertTrue(cat.wait(timeout: 2), "cat ignored Ctrl-C while the link was down")
    XCTAssertLessThan(Date().timeIntervalSince(interrupted), 2)

    // Metadata comes from what the mount knows.
    let listed = Date()
    let ls = try shell("ls \(mnt)/etc", timeout: 20)
    XCTAssertEqual(ls.status, 0, ls.output)
    XCTAssertTrue(ls.output.contains("motd"))
    XCTAssertLessThan(Date().timeIntervalSince(listed), 3)

    // Recovery shows in status.
    proxy.setRefusing(false)
    XCTAssertTrue(waitUntil(timeout: 40) { self.linkState(of: mnt) == "up" }, "no recovery")
    XCTAssertGreaterThanOrEqual(
      ((statusJSON(of: mnt)?["link"] as? [String: Any])?["reconnects"] as? Int) ?? 0, 1)

    // Down again, with a reader blocked: unmount is prompt.
    _ = try fixture.startBackground("exec cat \(mnt)/chat/lobby")
    proxy.setRefusing(true)
    XCTAssertTrue(waitUntil(timeout: 10) { self.linkState(of: mnt) == "down" })
    let unmounting = Date()
    let result = try shell("\(BuiltProducts.path(of: "mount9bbs")) -u \(mnt)", timeout: 20)
    XCTAssertEqual(result.status, 0, result.output)
    XCTAssertLessThan(Date().timeIntervalSince(unmounting), 5)
    XCTAssertFalse(isMounted(mnt))
  }

  /// A connection cut in the middle of a message, and a link that stalls (keepalives go
  /// unanswered): the mount notices, reconnects, and chat goes on.
  func testCutMidMessageAndStalledLinkRecover() throws {
    let proxy = try FaultProxy(
      listen: .unix(path: fixture.directory + "/proxy.sock"),
      server: .unix(path: fixture.serverSocket))
    defer { proxy.stop() }
    let mnt = try mount("unix!" + fixture.directory + "/proxy.sock")
    let reader = try fixture.startBackground("exec tail -f -s 0.2 \(mnt)/chat/lobby")
    XCTAssertTrue(waitUntil(timeout: 10) { self.linkState(of: mnt) == "up" })

    proxy.cutMidMessage()
    XCTAssertEqual(try shell("echo 'across a cut' > \(mnt)/chat/post", timeout: 30).status, 0)
    XCTAssertTrue(waitUntil(timeout: 30) { reader.text.contains("across a cut") }, reader.text)

    proxy.setStalled(true)
    XCTAssertTrue(
      waitUntil(timeout: 20) { self.linkState(of: mnt) == "down" },
      "a stalled link was not detected by keepalives")
    proxy.setStalled(false)
    XCTAssertTrue(waitUntil(timeout: 40) { self.linkState(of: mnt) == "up" })
    XCTAssertEqual(try shell("echo 'after the stall' > \(mnt)/chat/post", timeout: 30).status, 0)
    XCTAssertTrue(waitUntil(timeout: 30) { reader.text.contains("after the stall") }, reader.text)
    XCTAssertEqual(reader.text.components(separatedBy: "across a cut").count, 2, "duplicated line")
    XCTAssertTrue(reader.isRunning)
  }
}
