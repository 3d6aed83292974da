import Foundation
import TestSupport
import XCTest

@testable import BBSMount

/// Issue 24 against a ``HostileChatServer`` (a board whose behaviour the test sets): the name
/// the board shows for the user's own posts, rooms coming and going. Real mounts (user alice).
final class AwarenessBoardTests: XCTestCase {
  private func text(_ path: String) -> String {
    (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
  }

  /// Waits (bounded) for `chat/unread` of `mount` to read `expected`.
  private func waitForUnread(
    _ mount: MountProcess, _ expected: String, timeout: TimeInterval = 10,
    file: StaticString = #filePath, line: UInt = #line
  ) {
    var last = ""
    let seen = waitUntil(timeout: timeout, interval: 0.05) {
      last = text(mount.mountpoint + "/chat/unread")
      return last == expected
    }
    XCTAssertTrue(
      seen, "chat/unread is \(last.debugDescription), expected \(expected.debugDescription)",
      file: file, line: line)
  }

  /// Posts `text` to `room` through the mount, in one write.
  private func post(_ text: String, to room: String, in mount: MountProcess) throws {
    let handle = try XCTUnwrap(FileHandle(forWritingAtPath: mount.mountpoint + "/chat/" + room))
    try handle.write(contentsOf: Data((text + "\n").utf8))
    try handle.close()
  }

  /// Starts `cat` of the stream `file` and has bob say lines in `room` until it shows one, so
  /// what the test says next comes after its open. The markers are read away (unread 0).
  private func startReader(
    _ file: String, of mount: MountProcess, server: HostileChatServer, room: String = "lobby",
    marker: String = "alice ready"
  ) throws -> ChildProcess {
    let reader = try background(self, "/bin/cat", [mount.mountpoint + "/chat/" + file])
    var count = 0
    XCTAssertTrue(
      waitUntil(timeout: 15, interval: 0.2) {
        count += 1
        server.say("\(marker) \(count)", by: "bob", in: room)
        return reader.text.contains(marker) || reader.text.contains("\t\(room)\tbob")
      }, reader.text)
    // Markers said before the reader showed one may still be on their way: one more line,
    // said after them, shows when they have all arrived.
    server.say("\(marker) last", by: "lastmarker", in: room)
    XCTAssertTrue(
      waitUntil(timeout: 10) {
        reader.text.contains("\(marker) last") || reader.text.contains("\t\(room)\tlastmarker\n")
      }, reader.text)
    // Reading the room to its end resets its count.
    _ = try sh("timeout 10 tail -n 1 '\(mount.mountpoint)/chat/\(room)'")
    return reader
  }

  /// Has "sentinel" say a line in `room` and waits until `events` shows it: every line said
  /// before it has been counted (unread counts only grow meanwhile, so a count checked after
  /// this is final, not one passing by).
  private func settle(
    _ server: HostileChatServer, _ events: ChildProcess, room: String = "lobby",
    file: StaticString = #filePath, line: UInt = #line
  ) {
    server.say("settled", by: "sentinel", in: room)
    XCTAssertTrue(
      waitUntil(timeout: 10) { events.text.contains("\tmessage\t\(room)\tsentinel\n") },
      events.text, file: file, line: line)
  }

  /// `cat` of `chat/events`, once it has opened it (it shows the line each open starts with).
  private func openEvents(_ mount: MountProcess) throws -> ChildProcess {
    let reader = try background(self, "/bin/cat", [mount.mountpoint + "/chat/events"])
    XCTAssertTrue(waitUntil(timeout: 10) { reader.text.contains("\tlink\t") }, reader.text)
    return reader
  }

  // MARK: The name the board shows

  /// The board shows alice's posts under "Alicia" (a nickname she never told the mount): her
  /// own echo is not unread and "Alicia" in bob's line is a mention.
  func testTheNameTheBoardShowsForOwnPostsIsLearned() throws {
    let server = try HostileChatServer(rooms: [.init("lobby")])
    addTeardownBlock { server.stop() }
    server.echoAuthor = { _ in "Alicia" }
    server.release()
    let mount = try mountHostileChat(server, state: try makeTemporaryDirectory("aware-state"))
    waitForUnread(mount, "lobby 0\n")
    let mentions = try startReader("mentions", of: mount, server: server)
    let events = try openEvents(mount)
    waitForUnread(mount, "lobby 0\n")
    try post("hello from me", to: "lobby", in: mount)
    XCTAssertTrue(
      waitUntil(timeout: 10) { server.posts.count == 1 }, "the post did not reach the board")
    server.say("hi Alicia, welcome", by: "bob", in: "lobby")
    server.say("one of mine from elsewhere", by: "alicia", in: "lobby")
    settle(server, events)
    // Only bob's line and the sentinel's are news.
    waitForUnread(mount, "lobby 2\n")
    XCTAssertTrue(
      waitUntil(timeout: 10) { mentions.text.contains("hi Alicia, welcome") }, mentions.text)
    XCTAssertFalse(mentions.text.contains("hello from me"), mentions.text)
    XCTAssertFalse(mentions.text.contains("settled"), mentions.text)
  }

  /// The learned name is kept with the unread counts: after a remount "Alicia" is a mention
  /// and her lines are hers before she posts again.
  func testALearnedNameIsKeptAcrossARemount() throws {
    let server = try HostileChatServer(rooms: [.init("lobby")])
    addTeardownBlock { server.stop() }
    server.echoAuthor = { _ in "Alicia" }
    server.release()
    let state = try makeTemporaryDirectory("aware-state")
    let first = try mountHostileChat(server, state: state)
    waitForUnread(first, "lobby 0\n")
    let events = try openEvents(first)
    try post("hello from me", to: "lobby", in: first)
    XCTAssertTrue(waitUntil(timeout: 10) { server.posts.count == 1 })
    settle(server, events)
    first.stop()
    server.echoAuthor = nil
    let again = try mountHostileChat(server, state: state)
    let mentions = try startReader("mentions", of: again, server: server)
    let eventsAgain = try openEvents(again)
    waitForUnread(again, "lobby 0\n")
    server.say("hi Alicia, back?", by: "bob", in: "lobby")
    server.say("from my other device", by: "Alicia", in: "lobby")
    settle(server, eventsAgain)
    waitForUnread(again, "lobby 2\n")
    XCTAssertTrue(
      waitUntil(timeout: 10) { mentions.text.contains("hi Alicia, back?") }, mentions.text)
    XCTAssertTrue(mentions.text.contains("mount9bbs: mentions of alice, alicia"), mentions.text)
  }

  /// A board renaming alice on every echo: the names learned stay few (the newest), so an old
  /// one's lines count as anyone's again.
  func testABoardRenamingTheUserOnEveryEchoLeavesFewLearnedNames() throws {
    let server = try HostileChatServer(rooms: [.init("lobby")])
    addTeardownBlock { server.stop() }
    server.echoAuthor = { "nick\($0)" }
    server.release()
    let mount = try mountHostileChat(server)
    waitForUnread(mount, "lobby 0\n")
    let events = try startReader("events", of: mount, server: server, marker: "ready")
    waitForUnread(mount, "lobby 0\n")
    let posts = 20
    for index in 0..<posts { try post("mine \(index)", to: "lobby", in: mount) }
    XCTAssertTrue(waitUntil(timeout: 15) { server.posts.count == posts })
    // Every echo is one of hers when it comes: nothing unread.
    settle(server, events)
    waitForUnread(mount, "lobby 1\n")
    // The oldest names were forgotten; the newest are still hers.
    server.say("as an old name", by: "nick0", in: "lobby")
    server.say("as the newest name", by: "nick\(posts - 1)", in: "lobby")
    settle(server, events)
    waitForUnread(mount, "lobby 3\n")
  }

  // MARK: Rooms coming and going

  /// Rooms added and removed on the board: `room-added`/`room-removed` events with escaped
  /// names, watch=all watches the new rooms, chat/unread follows.
  func testRoomsAddedAndRemovedShowAsEventsAndInUnread() throws {
    let server = try HostileChatServer(rooms: [.init("lobby")])
    addTeardownBlock { server.stop() }
    server.release()
    // The chat listing is read again every second (10 s by default): within a few seconds,
    // well before a default listing would come.
    let mount = try mountHostileChat(server, options: ["watch=all", "watch-interval=1"])
    waitForUnread(mount, "lobby 0\n")
    let events = try startReader("events", of: mount, server: server, marker: "ready")
    server.addRooms([.init("plain"), .init("new\troom\nhere")])
    XCTAssertTrue(
      waitUntil(timeout: 8) {
        events.text.contains("\troom-added\tplain\n")
          && events.text.contains("\troom-added\tnew\\troom\\nhere\n")
      }, events.text)
    waitForUnread(mount, "lobby 0\nnew\\troom\\nhere 0\nplain 0\n")
    // Watched: a line in a new room counts without anyone opening it.
    server.say("in plain", by: "bob", in: "plain")
    waitForUnread(mount, "lobby 0\nnew\\troom\\nhere 0\nplain 1\n")
    server.removeRooms(["plain"])
    XCTAssertTrue(
      waitUntil(timeout: 8) { events.text.contains("\troom-removed\tplain\n") }, events.text)
    waitForUnread(mount, "lobby 0\nnew\\troom\\nhere 0\n")
    XCTAssertEqual(
      events.text.split(separator: "\n").filter { $0.contains("\troom-") }.count, 3, events.text)
    for line in events.text.split(separator: "\n") {
      XCTAssertGreaterThanOrEqual(line.split(separator: "\t").count, 3, String(line))
    }
  }

  /// A board adding then removing 3000 rooms at once: a hundred events each way and one line
  /// counting the rest, at most ``RoomWatcher/maximumWatched`` rooms watched, and the mount
  /// answers meanwhile.
  func testThousandsOfRoomsComingAndGoingAreCoalesced() throws {
    let server = try HostileChatServer(rooms: [.init("lobby")])
    addTeardownBlock { server.stop() }
    server.release()
    let mount = try mountHostileChat(server, options: ["watch=all", "watch-interval=1"])
    waitForUnread(mount, "lobby 0\n")
    let events = try startReader("events", of: mount, server: server, marker: "ready")
    let many = (0..<3000).map { String(format: "zz%04d\t", $0) }
    server.addRooms(many.map { .init($0) })
    XCTAssertTrue(
      waitUntil(timeout: 30) { events.text.contains("\trooms-added\t2900\n") },
      String(events.text.suffix(2000)))
    let added = events.text.split(separator: "\n").filter { $0.contains("\troom-added\t") }
    XCTAssertEqual(added.count, Awareness.maximumRoomEvents)
    XCTAssertTrue(added.allSatisfy { $0.hasSuffix("\\t") }, String(added.first ?? ""))
    let started = Date()
    let unread = text(mount.mountpoint + "/chat/unread")
    XCTAssertLessThan(Date().timeIntervalSince(started), 2)
    XCTAssertEqual(unread.split(separator: "\n").count, RoomWatcher.maximumWatched, unread)
    let listing = Date()
    _ = try shell("ls '\(mount.mountpoint)/chat' > /dev/null", timeout: 10)
    XCTAssertLessThan(Date().timeIntervalSince(listing), 2)
    server.removeRooms(Set(many))
    XCTAssertTrue(
      waitUntil(timeout: 30) { events.text.contains("\trooms-removed\t2900\n") },
      String(events.text.suffix(2000)))
    XCTAssertEqual(
      events.text.split(separator: "\n").filter { $0.contains("\troom-removed\t") }.count,
      Awareness.maximumRoomEvents)
    waitForUnread(mount, "lobby 0\n")
  }
}
