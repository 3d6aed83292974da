import Logging
import Synchronization
import XCTest

@testable import BBSServer

final class ChatHubTests: XCTestCase {
  private func makeChat(
    rooms: [String] = ["lobby", "tech"], limits: BoardLimits = .standard,
    clock: ManualBoardClock = ManualBoardClock()
  ) throws -> ChatHub {
    try ChatHub(
      rooms: rooms, limits: limits, clock: clock, store: InMemoryBoardStore(),
      logger: Logger(label: "test"))
  }

  private func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

  func testRoutingByColonWithinFirst32Bytes() throws {
    let chat = try makeChat()
    XCTAssertEqual(
      try chat.post(payload: Array("tech:hi there\n".utf8), author: "alice").room, "tech")
    XCTAssertEqual(
      try chat.post(payload: Array("plain text\n".utf8), author: "alice").room, "lobby")
    XCTAssertThrowsError(try chat.post(payload: Array("hello: there".utf8), author: "a")) {
      XCTAssertEqual($0 as? BoardError, .notFound)
    }
    XCTAssertThrowsError(try chat.post(payload: Array(":text".utf8), author: "a")) {
      XCTAssertEqual($0 as? BoardError, .notFound)
    }
    let late = String(repeating: "x", count: 40) + ": not a room"
    XCTAssertEqual(try chat.post(payload: Array(late.utf8), author: "a").room, "lobby")
  }

  func testNewlineStrippingAndTruncation() throws {
    let chat = try makeChat()
    // One post is one line: "a\n\n" is the line "a" and a blank line, which is dropped; a
    // CRLF ends a line.
    XCTAssertEqual(
      try chat.post(payload: Array("lobby:a\n\n".utf8), author: "a").text, Array("a".utf8))
    XCTAssertEqual(
      try chat.post(payload: Array("lobby:b\r\n".utf8), author: "a").text, Array("b".utf8))
    XCTAssertEqual(
      text(try chat.read(room: "lobby", user: "r", count: 4096)).split(
        separator: "\n", omittingEmptySubsequences: false
      ).map { $0.split(separator: " ", maxSplits: 2).dropFirst(2).first ?? "" },
      ["a", "b", ""])
    XCTAssertThrowsError(try chat.post(payload: Array("lobby:c\rd".utf8), author: "a")) {
      XCTAssertEqual($0 as? BoardError, .invalidArgument)
    }
    let long = try chat.post(
      payload: Array(("lobby:" + String(repeating: "y", count: 400)).utf8),
      author: BoardUser(String(repeating: "n", count: 50)))
    XCTAssertEqual(long.text.count, 255)
    XCTAssertEqual(long.author.utf8.count, 31)
  }

  func testWallClockLineFormatAndBacklog() throws {
    // 1738005432123 ms = 2025-01-27 19:17:12 UTC.
    let chat = try makeChat(clock: ManualBoardClock(wallMillis: 1_738_005_432_123))
    try chat.post(payload: Array("lobby:hello".utf8), author: "alice")
    XCTAssertEqual(
      text(try chat.read(room: "lobby", user: "bob", count: 512)), "[19:17:12] alice: hello\n")
    XCTAssertEqual(try chat.read(room: "lobby", user: "bob", count: 512), [])
  }

  func testUptimeClockHoursAreNotWrapped() throws {
    let clock = ManualBoardClock(uptimeMillis: (123 * 3600 + 4 * 60 + 5) * 1000)
    let chat = try makeChat(limits: .device, clock: clock)
    try chat.post(payload: Array("x".utf8), author: "a")
    XCTAssertEqual(text(try chat.read(room: "lobby", user: "b", count: 512)), "[123:04:05] a: x\n")
    let early = try makeChat(limits: .device, clock: ManualBoardClock(uptimeMillis: 61_000))
    try early.post(payload: Array("y".utf8), author: "a")
    XCTAssertEqual(text(try early.read(room: "lobby", user: "b", count: 512)), "[00:01:01] a: y\n")
  }

  func testCursorsPerUserAndWholeLines() throws {
    let chat = try makeChat(clock: ManualBoardClock(wallMillis: 0))
    for word in ["one", "two", "three"] { try chat.post(payload: Array(word.utf8), author: "a") }
    // Each line is "[00:00:00] a: one\n" = 18 bytes (19 for three).
    XCTAssertEqual(
      text(try chat.read(room: "lobby", user: "bob", count: 40)),
      "[00:00:00] a: one\n[00:00:00] a: two\n")
    XCTAssertEqual(
      text(try chat.read(room: "lobby", user: "carol", count: 512)).split(separator: "\n").count, 3)
    XCTAssertEqual(
      try chat.read(room: "lobby", user: "bob", count: 10), [], "line longer than count")
    XCTAssertEqual(try chat.readOrPark(room: "lobby", user: "bob", count: 10, wake: {}), .empty)
    XCTAssertEqual(
      text(try chat.read(room: "lobby", user: "bob", count: 512)), "[00:00:00] a: three\n")
    XCTAssertThrowsError(try chat.read(room: "nope", user: "bob", count: 512))
  }

  func testRingDropsOldest() throws {
    let chat = try makeChat(limits: .device)
    for index in 0..<60 { try chat.post(payload: Array("m\(index)".utf8), author: "a") }
    let lines = text(try chat.read(room: "lobby", user: "b", count: 1 << 16)).split(separator: "\n")
    XCTAssertEqual(lines.count, 49)
    XCTAssertTrue(lines.first?.hasSuffix("a: m11") ?? false)
  }

  func testWaiterFiresOnceOnPostToItsRoom() throws {
    let chat = try makeChat()
    let fired = Mutex(0)
    guard
      case .parked = try chat.readOrPark(
        room: "lobby", user: "b", count: 512,
        wake: {
          fired.withLock { $0 += 1 }
        })
    else { return XCTFail("expected to park") }
    try chat.post(payload: Array("tech:elsewhere".utf8), author: "a")
    XCTAssertEqual(fired.withLock { $0 }, 0)
    try chat.post(payload: Array("lobby:here".utf8), author: "a")
    try chat.post(payload: Array("lobby:again".utf8), author: "a")
    XCTAssertEqual(fired.withLock { $0 }, 1)
    let id = try chat.addWaiter(room: "tech") { fired.withLock { $0 += 10 } }
    XCTAssertTrue(chat.removeWaiter(id))
    try chat.post(payload: Array("tech:x".utf8), author: "a")
    XCTAssertEqual(fired.withLock { $0 }, 1)
    XCTAssertFalse(chat.removeWaiter(id))
  }

  /// A board's rule (device and gen1): every user who ever read, idle since their last read.
  func testBoardUsersListRegisteredOnReadWithIdle() throws {
    let clock = ManualBoardClock()
    let chat = try makeChat(limits: .device, clock: clock)
    try chat.post(payload: Array("hi".utf8), author: "poster")
    _ = try chat.read(room: "lobby", user: "alice", count: 512)
    clock.advance(millis: 5_000)
    _ = try chat.read(room: "tech", user: "bob", count: 512)
    clock.advance(millis: 2_000)
    XCTAssertEqual(text(chat.usersList(count: 512)), "alice (idle: 7s)\nbob (idle: 2s)\n")
    XCTAssertEqual(text(chat.usersList(count: 20)), "alice (idle: 7s)\n")
  }

  /// 9bbsd's own rule: the users with a session attached now, idle since their last read,
  /// post or attach; a reader who left is gone, one who has not read yet is there.
  func testUsersListShowsWhoIsAttachedNow() throws {
    let clock = ManualBoardClock()
    let chat = try makeChat(clock: clock)
    chat.arrive("alice")
    chat.arrive("bob")
    chat.arrive("bob")
    clock.advance(millis: 3_000)
    _ = try chat.read(room: "lobby", user: "alice", count: 512)
    _ = try chat.read(room: "lobby", user: "carol", count: 512)
    clock.advance(millis: 2_000)
    XCTAssertEqual(text(chat.usersList(count: 512)), "alice (idle: 2s)\nbob (idle: 5s)\n")
    chat.leave("alice")
    chat.leave("bob")
    XCTAssertEqual(text(chat.usersList(count: 512)), "bob (idle: 5s)\n")
    chat.leave("bob")
    XCTAssertEqual(text(chat.usersList(count: 512)), "")
    // A board lists whoever read, whether attached or not.
    let board = try makeChat(limits: .device, clock: clock)
    board.arrive("dave")
    XCTAssertEqual(text(board.usersList(count: 512)), "")
  }

  func testDeviceUserTableFullOnNinthReader() throws {
    let chat = try makeChat(limits: .device)
    for index in 0..<8 { _ = try chat.read(room: "lobby", user: "u\(index)", count: 512) }
    XCTAssertThrowsError(try chat.read(room: "lobby", user: "u8", count: 512)) {
      XCTAssertEqual($0 as? BoardError, .outOfMemory)
    }
    XCTAssertNoThrow(try chat.post(payload: Array("still posts".utf8), author: "u8"))
  }
}
