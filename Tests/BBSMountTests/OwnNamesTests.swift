import Foundation
import Logging
import TestSupport
import XCTest

@testable import BBSMount

/// The user's names without a mount: the given ones, the one learned from the echo of a post,
/// its bounds, what a remount knows, and a stranger saying the same words just before the echo.
final class OwnNamesTests: XCTestCase {
  private func directory() throws -> String {
    let path = try makeTemporaryDirectory("own-names")
    addTeardownBlock { try? FileManager.default.removeItem(atPath: path) }
    return path
  }

  private func sent(_ names: OwnNames, _ payload: String) { names.sent(Array(payload.utf8)) }

  /// Given names are the user's in any case; an empty one is no name; highlight words make
  /// mentions without being the user.
  func testGivenNamesAndHighlights() {
    let names = OwnNames(names: ["Alice", ""], highlights: ["deploy"])
    XCTAssertTrue(names.isOwn("alice"))
    XCTAssertTrue(names.isOwn("ALICE"))
    XCTAssertFalse(names.isOwn(""))
    XCTAssertFalse(names.isOwn("deploy"))
    XCTAssertTrue(names.mentions("ping alice"[...]))
    XCTAssertTrue(names.mentions("Deploy now"[...]))
    XCTAssertFalse(names.mentions("alicex"[...]))
    XCTAssertEqual(names.words, ["Alice", "deploy"])
  }

  /// The echo of a post, trailing spaces dropped by the board, teaches the name the board
  /// shows for the user: lines by it are the user's, lines naming it are mentions.
  func testTheEchoOfAPostTeachesTheName() {
    let names = OwnNames(names: ["alice"], highlights: [])
    sent(names, "lobby:hello there  \n")
    XCTAssertFalse(names.received(room: "tech", author: "Nick", text: "hello there"))
    XCTAssertFalse(names.received(room: "lobby", author: "Nick", text: "hello"))
    XCTAssertTrue(names.received(room: "lobby", author: "Nick", text: "hello there"))
    XCTAssertEqual(names.learnedNames, ["nick"])
    XCTAssertTrue(names.isOwn("NICK"))
    XCTAssertTrue(names.mentions("thanks nick!"[...]))
    XCTAssertEqual(names.words, ["alice", "nick"])
  }

  /// Posts that come back changed (a control character, no room) are not awaited.
  func testPostsThatComeBackChangedAreNotAwaited() {
    let names = OwnNames(names: ["alice"], highlights: [])
    sent(names, "lobby:bell\u{7}")
    sent(names, ":no room")
    sent(names, "no colon")
    XCTAssertFalse(names.received(room: "lobby", author: "nick", text: "bell\u{7}"))
    XCTAssertFalse(names.received(room: "", author: "nick", text: "no room"))
    XCTAssertEqual(names.learnedNames, [])
  }

  /// What a remount knows: the names learned before, bounded and cleaned as when learned.
  func testARemountKnowsTheLearnedNames() throws {
    let state = try directory()
    let first = OwnNames(names: ["alice"], highlights: [], directory: state)
    sent(first, "lobby:hi all")
    first.received(room: "lobby", author: "Nick", text: "hi all")
    first.flush()
    XCTAssertEqual(
      OwnNames(names: ["alice"], highlights: [], directory: state).learnedNames, ["nick"])

    let hostile = try directory()
    let kept = ["ALICE", "", String(repeating: "x", count: 100), "a", "b", "A", "c", "d", "e"]
    try JSONEncoder().encode(kept).write(to: URL(fileURLWithPath: hostile + "/names.learned"))
    XCTAssertEqual(
      OwnNames(names: ["alice"], highlights: [], directory: hostile).learnedNames,
      ["b", "c", "d", "e"], "given, empty, overlong and repeated names dropped, the newest kept")
  }

  /// Someone else saying the user's exact words just before the echo is not taken for the
  /// user: once the text comes back under the user's own name, the stranger is a stranger
  /// again (their lines count and their mentions reach the user), and no remount learns them.
  func testAStrangerSayingTheSameWordsFirstIsNotTheUser() throws {
    let state = try directory()
    let names = OwnNames(names: ["alice"], highlights: [], directory: state)
    sent(names, "lobby:hi")
    names.received(room: "lobby", author: "carol", text: "hi")
    XCTAssertTrue(names.received(room: "lobby", author: "alice", text: "hi"))
    XCTAssertFalse(names.isOwn("carol"))
    XCTAssertFalse(names.received(room: "lobby", author: "carol", text: "alice, hi"))
    XCTAssertEqual(names.learnedNames, [])
    names.flush()
    XCTAssertEqual(OwnNames(names: ["alice"], highlights: [], directory: state).learnedNames, [])
  }

  /// Before the board's name for the user is known, the first of two authors of the posted
  /// words is learned (which is the user cannot be told); a later line by someone else with
  /// the same words is theirs and teaches nothing.
  func testWordsRepeatedByAnotherAuthorAfterTheEchoAreTheirs() {
    let names = OwnNames(names: ["alice"], highlights: [])
    sent(names, "lobby:hi")
    XCTAssertTrue(names.received(room: "lobby", author: "nick", text: "hi"))
    XCTAssertFalse(names.received(room: "lobby", author: "carol", text: "hi"))
    XCTAssertEqual(names.learnedNames, ["nick"])
    XCTAssertFalse(names.isOwn("carol"))
  }

  /// The user saying the same words twice: both echoes by the learned name keep it.
  func testTheSameWordsPostedTwiceKeepTheName() {
    let names = OwnNames(names: ["alice"], highlights: [])
    sent(names, "lobby:ok")
    sent(names, "lobby:ok")
    XCTAssertTrue(names.received(room: "lobby", author: "nick", text: "ok"))
    XCTAssertTrue(names.received(room: "lobby", author: "nick", text: "ok"))
    XCTAssertEqual(names.learnedNames, ["nick"])
  }

  func testAnEchoOfAPostTeachesItsAuthorAndNothingElseDoes() {
    let names = OwnNames(names: ["alice"], highlights: ["deploy"])
    XCTAssertTrue(names.isOwn("ALICE"))
    XCTAssertFalse(names.received(room: "lobby", author: "Alicia", text: "hello"))
    names.sent(Array("lobby:hello\n".utf8))
    // Another room's line with the same text is not the echo.
    XCTAssertFalse(names.received(room: "tech", author: "bob", text: "hello"))
    XCTAssertTrue(names.received(room: "lobby", author: "Alicia", text: "hello"))
    XCTAssertTrue(names.isOwn("alicia"))
    XCTAssertTrue(names.mentions("hi Alicia"))
    XCTAssertTrue(names.mentions("the deploy"))
    // Awaited once: the same text again is someone else's.
    XCTAssertFalse(names.received(room: "lobby", author: "bob", text: "hello"))
    XCTAssertEqual(names.learnedNames, ["alicia"])
    // A "name" no one has is not learned.
    let long = String(repeating: "n", count: OwnNames.longestName + 1)
    names.sent(Array("lobby:again".utf8))
    XCTAssertFalse(names.received(room: "lobby", author: long, text: "again"))
    XCTAssertEqual(names.learnedNames, ["alicia"])
  }

  func testLearnedNamesAreBounded() {
    let names = OwnNames(names: ["alice"], highlights: [])
    for index in 0..<1000 {
      names.sent(Array("lobby:post \(index)".utf8))
      XCTAssertTrue(names.received(room: "lobby", author: "nick\(index)", text: "post \(index)"))
    }
    XCTAssertEqual(names.learnedNames, (996..<1000).map { "nick\($0)" })
    XCTAssertFalse(names.isOwn("nick0"))
    XCTAssertTrue(names.isOwn("alice"))
    // Posts awaited are bounded too.
    for index in 0..<10_000 { names.sent(Array("lobby:x\(index)".utf8)) }
    XCTAssertFalse(names.received(room: "lobby", author: "eve", text: "x0"))
    XCTAssertTrue(names.received(room: "lobby", author: "eve", text: "x9999"))
  }
}
