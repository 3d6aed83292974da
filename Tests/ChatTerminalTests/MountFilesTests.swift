import Foundation
import TestSupport
import XCTest

@testable import ChatTerminal

/// The client's file side against a fake chat directory with the awareness branch's files in
/// their agreed formats: FIFOs stand in for the stream files (`chat/events`,
/// `chat/mentions`: a read waits at the end, as on a mount), regular files for the ones read
/// whole (`chat/unread`, `chat/outbox`).
final class MountFilesTests: XCTestCase {
  private var directory = ""

  override func setUpWithError() throws {
    directory = try makeTemporaryDirectory("chat-files")
    try FileManager.default.createDirectory(
      atPath: directory + "/chat", withIntermediateDirectories: false)
    addTeardownBlock { [directory] in try? FileManager.default.removeItem(atPath: directory) }
  }

  private func write(_ name: String, _ text: String) throws {
    try Data(text.utf8).write(to: URL(fileURLWithPath: directory + "/chat/" + name))
  }

  /// Waits for the first queued item `match` accepts.
  private func next<T>(
    _ inbox: Inbox, timeout: TimeInterval = 5, _ match: (Incoming) -> T?
  ) -> T? {
    var found: T?
    _ = waitUntil(timeout: timeout) {
      for item in inbox.take() where found == nil { found = match(item) }
      return found != nil
    }
    return found
  }

  func testReadsTheAgreedFormatsAndSkipsWhatIsAbsent() throws {
    let inbox = try Inbox()
    let files = MountFiles(chat: directory + "/chat", inbox: inbox)
    XCTAssertNil(files.unread())
    XCTAssertNil(files.outboxCount())
    try write("unread", "lobby 2\ntech 0\n")
    try write("outbox", "ROOM\tAGE\tATTEMPTS\tLAST-ERROR\nlobby\t4\t2\ttimed out\n")
    try write("users", "alice (idle: 1s)\nbob (idle: 30s)\n")
    try write("post", "")
    try write("lobby", "[10:00:00] bob: one\n[10:00:01] bob: two\n[10:00:02] bob: three\n")
    try FileManager.default.createDirectory(
      atPath: directory + "/chat/log", withIntermediateDirectories: false)
    XCTAssertEqual(files.unread(), ["lobby": 2, "tech": 0])
    XCTAssertEqual(files.outboxCount(), 1)
    XCTAssertEqual(files.users(), ["alice", "bob"])
    // Rooms are the chat directory's files less the mount's own and directories.
    XCTAssertEqual(try files.roomNames(), ["lobby"])
    // A room's history comes with its unread count, read before the room (which resets it).
    files.follow("lobby")
    let history = next(inbox) { item -> ([String], Int?)? in
      if case .history(let room, let lines, let unread) = item, room == "lobby" {
        return (lines, unread)
      }
      return nil
    }
    XCTAssertEqual(
      history?.0, ["[10:00:00] bob: one", "[10:00:01] bob: two", "[10:00:02] bob: three"])
    XCTAssertEqual(history?.1, 2)
  }

  func testFollowsEventsAndMentionsAsTheyArrive() throws {
    for name in ["events", "mentions"] {
      XCTAssertEqual(mkfifo(directory + "/chat/" + name, 0o600), 0)
    }
    let inbox = try Inbox()
    let files = MountFiles(chat: directory + "/chat", inbox: inbox)
    files.followAwareness()
    let events = try XCTUnwrap(FileHandle(forWritingAtPath: directory + "/chat/events"))
    let mentions = try XCTUnwrap(FileHandle(forWritingAtPath: directory + "/chat/mentions"))
    defer {
      try? events.close()
      try? mentions.close()
    }
    try events.write(
      contentsOf: Data("2026-11-25T18:20:01.123Z\tlink\tdown\tconnection reset\n".utf8))
    let link = next(inbox) { item -> ChatEvent? in
      if case .event(let event) = item { return event }
      return nil
    }
    XCTAssertEqual(link, .link(.down, reason: "connection reset"))
    try mentions.write(contentsOf: Data("news [10:00:00] bob: alice, see this\n".utf8))
    let room = next(inbox) { item -> String? in
      if case .mention(let room) = item { return room }
      return nil
    }
    XCTAssertEqual(room, "news")
    // And the model shows them: the link in the status line, the mention as news @1.
    var model = ChatModel(ownNames: ["alice"])
    model.join("lobby")
    if case .link(let state, _) = link { model.link = state }
    model.receiveMention(room: "news")
    XCTAssertTrue(model.statusLine().contains("news @1"), model.statusLine())
    XCTAssertTrue(model.statusLine().contains("link down"), model.statusLine())
  }
}
