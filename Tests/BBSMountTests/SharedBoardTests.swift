import Foundation
import NinePTransport
import TestSupport
import XCTest

/// A board a club shares: few sessions (a device serves 4), several members' mounts, each of
/// which would like extra sessions for its room feeds. Real `9bbsd --profile device`, real
/// mounts, a fault proxy in between.
final class SharedBoardTests: XCTestCase {
  let fixture = BoardFixture("mount9bbs-shared")

  override func setUpWithError() throws {
    try fixture.setUp()
  }

  override func tearDown() { fixture.tearDown() }

  /// Three members on a 4-session board, each following two rooms, lose the link together.
  /// Before, the first two back each took two sessions and the third stayed refused until
  /// someone unmounted. Now every member's primary comes back first, extra sessions wait for
  /// the others, and every member sees all three members' posts.
  func testAfterADropoutEveryMemberOfAFullBoardGetsBackIn() throws {
    try fixture.startServer(
      listening: ["unix!" + fixture.serverSocket], extra: ["--profile", "device"])
    let proxy = try FaultProxy(
      listen: .unix(path: fixture.directory + "/proxy.sock"),
      server: .unix(path: fixture.serverSocket))
    defer { proxy.stop() }
    let members = ["ann", "bob", "cyd"]
    // Mounted first, so each has its primary before any feed wants an extra session.
    var mounts: [String] = []
    for member in members {
      mounts.append(
        try fixture.mount(
          "unix!" + fixture.directory + "/proxy.sock",
          options: ["profile=device", "keepalive=1", "uname=\(member)"], name: member))
    }
    var tails: [ChildProcess] = []
    for mount in mounts {
      tails.append(try fixture.startBackground("exec tail -f -s 0.2 \(mount)/chat/lobby"))
      _ = try fixture.startBackground("exec tail -f -s 0.2 \(mount)/chat/tech > /dev/null")
    }
    try sh("echo 'before the cut' > \(mounts[0])/chat/post")
    for (index, tail) in tails.enumerated() {
      XCTAssertTrue(
        waitUntil(timeout: 15) { tail.text.contains("before the cut") },
        "\(members[index]) did not follow the lobby: \(tail.text)")
    }

    // The radio drops for 10 s: every connection cut, every new one refused.
    proxy.setRefusing(true)
    for mount in mounts {
      XCTAssertTrue(waitUntil(timeout: 10) { self.linkState(of: mount) == "down" })
    }
    Thread.sleep(forTimeInterval: 10)
    proxy.setRefusing(false)
    let back = Date()

    for (index, mount) in mounts.enumerated() {
      try sh("echo 'back from \(members[index])' > \(mount)/chat/post", timeout: 30)
    }
    // The reconnect backoff after 10 s down is at most ~12.5 s; 40 s is the club's bound.
    for (index, tail) in tails.enumerated() {
      let seen = waitUntil(timeout: 40 - Date().timeIntervalSince(back)) {
        members.allSatisfy { tail.text.contains("back from \($0)") }
      }
      let status = statusJSON(of: mounts[index])?["link"] ?? "no status"
      XCTAssertTrue(
        seen, "\(members[index]) (link \(status)) saw only: \(tail.text)")
    }
    print(
      String(
        format: "SharedBoardTests: every member saw all posts %.1f s after the link returned",
        Date().timeIntervalSince(back)))
    // Once the others could be back (13.5 s after a 10 s outage), the board's fourth session
    // goes to one member, whose feeds move there and park; nobody holds more.
    XCTAssertTrue(
      waitUntil(timeout: 30) {
        mounts.contains { streamSessions($0).contains { ($0["parkedReads"] as? Int ?? 0) > 0 } }
      }, "no member's feeds moved to a stream session")
    XCTAssertLessThanOrEqual(mounts.map { streamSessions($0).count }.reduce(0, +), 1)
  }

  /// The stream sessions `mount` holds, from its status.
  private func streamSessions(_ mount: String) -> [[String: Any]] {
    let sessions = statusJSON(of: mount)?["sessions"] as? [[String: Any]] ?? []
    return sessions.filter { $0["role"] as? String == "stream" }
  }

  /// Two members hold all four sessions of a board (each its primary and a stream session for
  /// the rooms it follows) when a third mounts. Before, she was told `board full` until one
  /// of them unmounted. Now the board takes back the newest extra session for her; its
  /// member follows on his primary, and his next extra session is refused (he is in already),
  /// so no session changes hands again.
  func testANewcomerGetsInWhenOthersHoldEverySession() throws {
    try fixture.startServer(
      listening: ["unix!" + fixture.serverSocket], extra: ["--profile", "device"])
    var mounts: [String] = []
    var tails: [ChildProcess] = []
    for member in ["ann", "bob"] {
      let mount = try fixture.mount(
        "unix!" + fixture.serverSocket, options: ["profile=device", "uname=\(member)"],
        name: member)
      mounts.append(mount)
      tails.append(try fixture.startBackground("exec tail -f -s 0.2 \(mount)/chat/lobby"))
      _ = try fixture.startBackground("exec tail -f -s 0.2 \(mount)/chat/tech > /dev/null")
      XCTAssertTrue(
        waitUntil(timeout: 15) { self.streamSessions(mount).count == 1 },
        "\(member) has no stream session")
    }
    // Every session of the board is taken; cyd mounts all the same.
    let cyd = try fixture.mount(
      "unix!" + fixture.serverSocket, options: ["profile=device", "uname=cyd"], name: "cyd")
    try sh("echo 'hello from cyd' > \(cyd)/chat/post", timeout: 30)
    for (index, tail) in tails.enumerated() {
      XCTAssertTrue(
        waitUntil(timeout: 15) { tail.text.contains("hello from cyd") },
        "member \(index) did not see cyd's post: \(tail.text)")
    }
    // One of the two gave his extra session back, and it stays that way.
    XCTAssertTrue(
      waitUntil(timeout: 10) { mounts.map { self.streamSessions($0).count }.reduce(0, +) == 1 })
    Thread.sleep(forTimeInterval: 3)
    XCTAssertEqual(mounts.map { streamSessions($0).count }.reduce(0, +), 1)
    let log = fixture.server?.text ?? ""
    XCTAssertEqual(log.components(separatedBy: "taking back session").count - 1, 1, log)
    try sh("echo 'and ann' > \(mounts[0])/chat/post", timeout: 30)
    XCTAssertTrue(waitUntil(timeout: 15) { tails[1].text.contains("and ann") }, tails[1].text)
  }

  /// A board with no session free says so: the mount fails with the board's words, not with
  /// "the server closed the connection".
  func testAFullBoardSaysItIsFull() throws {
    try fixture.startServer(
      listening: ["unix!" + fixture.serverSocket],
      extra: ["--profile", "device", "--connection-cap", "1"])
    let first = try fixture.mount(
      "unix!" + fixture.serverSocket, options: ["profile=device", "sessions=1"], name: "first")
    XCTAssertEqual(linkState(of: first), "up")
    let second = fixture.directory + "/second"
    try FileManager.default.createDirectory(atPath: second, withIntermediateDirectories: true)
    let refused = try shell(
      "\(BuiltProducts.path(of: "mount9bbs")) unix!\(fixture.serverSocket) \(second) -o profile=device 2>&1",
      timeout: 30)
    XCTAssertNotEqual(refused.status, 0, refused.output)
    XCTAssertTrue(
      refused.output.contains("board full (all 1 sessions in use)"), refused.output)
  }
}
