import ChatTerminal
import Foundation
import XCTest

/// The model as the keys and the files drive it.
final class ChatModelTests: XCTestCase {
  private let now = Date(timeIntervalSince1970: 1_795_000_000)

  private func model() -> ChatModel {
    var model = ChatModel(ownNames: ["alice"])
    model.paneWidth = 60
    model.paneHeight = 10
    model.knownRooms = ["lobby", "tech", "news"]
    model.join("lobby")
    return model
  }

  private func screen(_ model: ChatModel) -> [String] {
    model.currentRoom?.scrollback.visibleRows(height: 50, width: 60).map(\.plainText) ?? []
  }

  private func type(_ text: String, into model: inout ChatModel) -> [Effect] {
    var effects: [Effect] = []
    for character in text { effects += model.handle(.character(character)) }
    return effects + model.handle(.enter)
  }

  func testHistoryWithUnreadMarkerAndDate() {
    var model = model()
    model.showHistory(
      "lobby", lines: ["[23:59:00] bob: late", "[00:01:00] bob: early", "[00:02:00] carol: hi"],
      unread: 2, now: now)
    let rows = screen(model)
    // A date line, another when the stamps pass midnight, the marker before the 2 unread.
    XCTAssertEqual(rows.count, 6, "\(rows)")
    XCTAssertTrue(rows[0].hasPrefix("── ") && rows[3].hasPrefix("── "), "\(rows)")
    XCTAssertNotEqual(rows[0], rows[3])
    XCTAssertEqual(rows[1], "23:59:00 bob: late")
    XCTAssertEqual(rows[2], "── new ──")
    XCTAssertEqual(rows[4], "00:01:00 bob: early")
  }

  func testEnterPostsExactlyWhatWasTyped() {
    var model = model()
    let line = #"it's $HOME & `rm -rf` "quoted" !! \n"#
    XCTAssertEqual(type(line, into: &model), [.post(room: "lobby", text: line)])
    XCTAssertEqual(
      type("//etc/passwd is a path", into: &model),
      [.post(room: "lobby", text: "/etc/passwd is a path")])
    XCTAssertEqual(type("/me waves", into: &model), [.post(room: "lobby", text: "/me waves")])
    XCTAssertEqual(type("/j ../../etc", into: &model), [])
    XCTAssertEqual(type("/bogus", into: &model), [])
    let note = model.currentRoom?.scrollback.lines.last?.plainText ?? ""
    XCTAssertTrue(note.contains("unknown command /bogus"), note)
  }

  func testCommandsAndRoomSwitching() {
    var model = model()
    XCTAssertEqual(type("/j tech", into: &model), [.join("tech")])
    model.join("tech")
    XCTAssertEqual(model.currentRoom?.name, "tech")
    XCTAssertEqual(model.handle(.alt("1")), [])
    XCTAssertEqual(model.currentRoom?.name, "lobby")
    XCTAssertEqual(model.handle(.alt("5")), [.bell])
    _ = type("/next", into: &model)
    XCTAssertEqual(model.currentRoom?.name, "tech")
    _ = type("/prev", into: &model)
    XCTAssertEqual(model.currentRoom?.name, "lobby")
    XCTAssertEqual(type("/rooms", into: &model), [.listRooms])
    XCTAssertEqual(type("/users", into: &model), [.listUsers])
    XCTAssertEqual(type("/quit", into: &model), [.quit])
  }

  func testLinesInAnotherRoomCountAsUnreadWithMentions() throws {
    var model = model()
    model.join("tech")
    model.showHistory("tech", lines: [], unread: nil, now: now)
    model.switchTo(0)
    XCTAssertFalse(model.receive("tech", line: "[10:00:00] bob: anyone?", now: now))
    XCTAssertTrue(model.receive("tech", line: "[10:00:01] bob: alice, you there?", now: now))
    XCTAssertFalse(model.receive("tech", line: "[10:00:02] alice: alice here", now: now))
    XCTAssertTrue(model.statusLine().contains("2:tech 3 @1"), model.statusLine())
    model.unreadElsewhere = ["news": 4]
    model.link = .reconnecting
    model.outbox = 2
    let status = model.statusLine()
    XCTAssertTrue(status.hasPrefix(" [1:lobby]"), status)
    XCTAssertTrue(status.contains("news 4"), status)
    XCTAssertTrue(status.contains("link reconnecting"), status)
    XCTAssertTrue(status.contains("outbox 2"), status)
    _ = model.handle(.alt("2"))
    XCTAssertFalse(model.statusLine().contains("2:tech 3"))
    let rows = screen(model)
    // The marker, then (after a date line: the room had no lines yet) the first unread line.
    let marker = try XCTUnwrap(rows.firstIndex(of: "── new ──"), "\(rows)")
    XCTAssertEqual(rows[(marker + 1)...].first { !$0.hasPrefix("── ") }, "10:00:00 bob: anyone?")
    XCTAssertTrue(rows.contains("10:00:01 » bob: alice, you there?"), "\(rows)")
  }

  func testRenderingStylesOwnNameMentionsActionsAndHostileText() {
    let model = model()
    let own = model.render(RoomLine(parsing: "[10:00:00] alice: hi"))
    XCTAssertTrue(own.spans.contains(Span("alice", .ownName)))
    let mention = model.render(RoomLine(parsing: "[10:00:00] bob: hi ALICE"))
    XCTAssertEqual(mention.spans.last, Span("hi ALICE", .mention))
    let action = model.render(RoomLine(parsing: "[10:00:00] bob: /me waves"))
    XCTAssertEqual(action.plainText, "10:00:00 * bob waves")
    let hostile = model.render(
      RoomLine(parsing: "[10:00:00] b\u{1B}[2Job: \u{1B}]0;x\u{07}\rgotcha"))
    XCTAssertFalse(hostile.plainText.unicodeScalars.contains { $0.value < 0x20 }, hostile.plainText)
    let huge = model.render(
      RoomLine(parsing: "[10:00:00] bob: " + String(repeating: "x", count: 65536)))
    XCTAssertTrue(
      huge.plainText.hasSuffix("x … [61440 more characters]"), String(huge.plainText.suffix(40)))
    let colour = model.render(RoomLine(parsing: "[10:00:00] bob: x")).spans[1].style
    XCTAssertEqual(colour, model.render(RoomLine(parsing: "[11:00:00] bob: y")).spans[1].style)
  }

  func testCtrlCClearsAndCtrlDLeavesOnlyWhenEmpty() {
    var model = model()
    for character in "half typed" { _ = model.handle(.character(character)) }
    XCTAssertEqual(model.handle(.endOfInput), [])
    XCTAssertEqual(model.handle(.interrupt), [])
    XCTAssertEqual(model.editor.text, "")
    XCTAssertEqual(model.handle(.endOfInput), [.quit])
  }

  func testTabCompletesAuthorsAndUsers() {
    var model = model()
    model.showHistory("lobby", lines: ["[10:00:00] bobby: x"], unread: nil, now: now)
    model.users = ["carol"]
    _ = model.handle(.character("b"))
    _ = model.handle(.tab)
    XCTAssertEqual(model.editor.text, "bobby: ")
    _ = model.handle(.interrupt)
    _ = model.handle(.character("c"))
    _ = model.handle(.tab)
    XCTAssertEqual(model.editor.text, "carol: ")
  }
}
