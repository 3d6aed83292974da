import XCTest

@testable import BBSMount

/// The mount's pure pieces: post composition, transcripts, path classification.
final class MountLogicTests: XCTestCase {
  func testPostsAreOneLineEachAlwaysWithRoom() {
    var composer = PostComposer(fixedRoom: nil)
    let rooms: Set = ["lobby", "tech"]
    let posts = composer.append(
      Array("hello\r\ntech:to tech\nhello: there\npartial".utf8), knownRooms: rooms)
    XCTAssertEqual(
      posts.map { String(decoding: $0.payload, as: UTF8.self) },
      ["lobby:hello", "tech:to tech", "lobby:hello: there"])
    XCTAssertTrue(composer.hasPartialLine)
    XCTAssertEqual(
      composer.finish(knownRooms: rooms).map { String(decoding: $0.payload, as: UTF8.self) },
      ["lobby:partial"])
  }

  /// `offtopic: pizza` posts `pizza` to offtopic, not ` pizza` (one space goes with the
  /// colon; more are the text's own).
  func testTheSpaceAfterARoomsColonIsNotPosted() {
    var composer = PostComposer(fixedRoom: nil)
    let posts = composer.append(
      Array("offtopic: pizza\ntech:  indented\n".utf8), knownRooms: ["offtopic", "tech"])
    XCTAssertEqual(
      posts.map { String(decoding: $0.payload, as: UTF8.self) },
      ["offtopic:pizza", "tech: indented"])
  }

  func testRoomWriterPrefixesItsRoomAndSkipsEmptyLines() {
    var composer = PostComposer(fixedRoom: "tech")
    let posts = composer.append(
      Array("\nlobby:not a route\n\r\n".utf8), knownRooms: ["lobby", "tech"])
    XCTAssertEqual(
      posts.map { String(decoding: $0.payload, as: UTF8.self) }, ["tech:lobby:not a route"])
  }

  func testLongLinesSplitAtCharacterBoundariesLosingNothing() {
    let text = String(repeating: "é€😀 word ", count: 60)
    var composer = PostComposer(fixedRoom: "lobby", textLimit: 255)
    let posts = composer.append(Array((text + "\n").utf8), knownRooms: [])
    XCTAssertGreaterThan(posts.count, 1)
    for post in posts {
      XCTAssertLessThanOrEqual(post.text.count, 255)
      XCTAssertNotNil(String(validating: post.text, as: UTF8.self), "split inside a character")
    }
    XCTAssertEqual(String(decoding: posts.flatMap(\.text), as: UTF8.self), text)
  }

  /// Whether a write needs the room list: only `/chat/post` lines with a colon early on.
  func testOnlyLinesThatMayNameARoomNeedTheRoomList() {
    var composer = PostComposer(fixedRoom: nil)
    XCTAssertFalse(composer.mayNameRoom(adding: Array("hello\n".utf8), finishing: false))
    XCTAssertTrue(composer.mayNameRoom(adding: Array("hi\ntech:hi\n".utf8), finishing: false))
    XCTAssertFalse(composer.mayNameRoom(adding: Array("tech:unfinished".utf8), finishing: false))
    XCTAssertTrue(composer.mayNameRoom(adding: Array("tech:unfinished".utf8), finishing: true))
    let late = String(repeating: "x", count: 40) + ":not a room\n"
    XCTAssertFalse(composer.mayNameRoom(adding: Array(late.utf8), finishing: false))
    _ = composer.append(Array("tech".utf8), knownRooms: [])
    XCTAssertTrue(composer.mayNameRoom(adding: Array(":hi\n".utf8), finishing: false))
    XCTAssertFalse(
      PostComposer(fixedRoom: "tech").mayNameRoom(adding: Array("a:b\n".utf8), finishing: true))
  }

  /// `chat/outbox`: the agreed header, one escaped tab-separated line per post, oldest first.
  func testOutboxFileFormat() {
    let now = Date(timeIntervalSince1970: 1000)
    XCTAssertEqual(OutboxFile.render([], now: now), Array("ROOM\tAGE\tATTEMPTS\tLAST-ERROR\n".utf8))
    let posts = [
      QueuedPost(room: "lobby", queued: now - 12.7, attempts: 0, lastError: "link down"),
      QueuedPost(room: "te\tch", queued: now - 3, attempts: 2, lastError: nil),
      QueuedPost(room: "x", queued: now + 5, attempts: 1, lastError: "a\nb\\c\u{1B}[31m"),
    ]
    XCTAssertEqual(
      String(decoding: OutboxFile.render(posts, now: now), as: UTF8.self),
      "ROOM\tAGE\tATTEMPTS\tLAST-ERROR\nlobby\t12\t0\tlink down\nte\\tch\t3\t2\t-\n"
        + "x\t0\t1\ta\\nb\\\\c\\x1B[31m\n")
  }

  func testTranscriptIsOffsetAddressed() {
    var transcript = Transcript(capacity: 64)
    transcript.append(Array("one\n".utf8))
    transcript.append(Array("two\n".utf8))
    XCTAssertEqual(transcript.length, 8)
    XCTAssertEqual(transcript.read(at: 4, count: 100), Array("two\n".utf8))
    XCTAssertEqual(transcript.read(at: 8, count: 100), [])
    for index in 0..<40 { transcript.append(Array("line \(index)\n".utf8)) }
    // Old bytes go, offsets stay: what is kept is still at its original offset.
    let length = transcript.length
    XCTAssertEqual(transcript.read(at: length - 8, count: 8), Array("line 39\n".utf8))
    XCTAssertEqual(transcript.lineCount, 42)
    XCTAssertEqual(
      transcript.lastLines(2).map { String(decoding: $0, as: UTF8.self) },
      ["line 38\n", "line 39\n"])
  }

  func testPathClassification() {
    let classifier = PathClassifier(streamGlobs: ["/feeds/*.log"])
    XCTAssertEqual(classifier.kind(of: ["chat", "lobby"]), .room(name: "lobby"))
    XCTAssertEqual(classifier.kind(of: ["srv", "bbs", "chat", "post"]), .post)
    XCTAssertEqual(classifier.kind(of: ["chat", "users"]), .users)
    XCTAssertEqual(classifier.kind(of: ["srv", "bbs", "chat", "outbox"]), .outbox)
    XCTAssertEqual(classifier.kind(of: ["feeds", "a.log"]), .room(name: "a.log"))
    XCTAssertNil(classifier.kind(of: ["feeds", "sub", "a.log"]))
    XCTAssertNil(classifier.kind(of: ["etc", "motd"]))
    XCTAssertNil(classifier.kind(of: ["chat"]))
    XCTAssertTrue(classifier.isBoardRoom(["rooms", "lobby"]))
    XCTAssertTrue(classifier.isBoardRoom(["srv", "bbs", "rooms", "lobby"]))
    XCTAssertFalse(classifier.isBoardRoom(["files", "lobby"]))
    XCTAssertTrue(Glob.matches("/a/**", "/a/b/c"))
    XCTAssertTrue(Glob.matches("/a/?", "/a/b"))
    XCTAssertFalse(Glob.matches("/a/?", "/a/bc"))
  }

  func testListingNamesThatWouldEscapeAreRefused() {
    for name in ["", ".", "..", "a/b", "a\0b"] {
      XCTAssertFalse(ListingCache.isAcceptable(name), name)
    }
    XCTAssertTrue(ListingCache.isAcceptable("lobby"))
  }
}

final class ReplayFilterTests: XCTestCase {
  /// A backlog sent again drops the lines the transcript had, stamp and all; the same words at
  /// another time are someone saying them again and stay.
  func testDropsExactCopiesAndKeepsTheSameWordsAtAnotherTime() {
    let before = ["[00:00:01] alice: one\n", "[00:00:02] bob: ok\n"].map { Array($0.utf8)[...] }
    var filter = ReplayFilter(lines: before)
    let replay =
      "[00:00:01] alice: one\n[00:00:02] bob: ok\n[00:00:09] bob: ok\n[00:00:10] carol: new\n"
    XCTAssertEqual(
      String(decoding: filter.filter(Array(replay.utf8)), as: UTF8.self),
      "[00:00:09] bob: ok\n[00:00:10] carol: new\n")
  }

  /// A backlog that repeats a line it just sent shows it once.
  func testALineFirstSeenInTheBacklogIsShownOnce() {
    var filter = ReplayFilter(lines: [Array("[00:00:01] alice: w1 76\n".utf8)[...]])
    XCTAssertEqual(
      String(decoding: filter.filter(Array("[00:00:02] alice: w1 77\n".utf8)), as: UTF8.self),
      "[00:00:02] alice: w1 77\n")
    XCTAssertEqual(
      String(
        decoding: filter.filter(Array("[00:00:02] alice: w1 77\n[00:00:03] alice: w1 78\n".utf8)),
        as: UTF8.self),
      "[00:00:03] alice: w1 78\n")
  }
}

final class RepeatFilterTests: XCTestCase {
  private func lines(_ text: String) -> [ArraySlice<UInt8>] {
    text.split(separator: "\n").map { Array(($0 + "\n").utf8)[...] }
  }

  /// The first send landed before the link died: the copy the resend makes goes; the same
  /// words from someone else, and from us again later, stay.
  func testDropsTheSecondCopyOfAResentPost() {
    var filter = RepeatFilter()
    filter.expect(Array("p 76".utf8), recent: lines("[00:00:01] ada: p 75\n[00:00:01] ada: p 76"))
    XCTAssertEqual(
      String(
        decoding: filter.filter(Array("[00:00:02] bob: p 76\n[00:00:03] ada: p 76\n".utf8)),
        as: UTF8.self),
      "[00:00:02] bob: p 76\n")
    XCTAssertTrue(filter.isEmpty)
    XCTAssertEqual(filter.filter(Array("[00:00:09] ada: p 76\n".utf8)).count, 21)
  }

  /// The first send never landed: the resend's copy is the only one and shows; a copy after
  /// it (the first send, late) goes.
  func testShowsTheOnlyCopyAndDropsALateFirst() {
    var filter = RepeatFilter()
    filter.expect(Array("hello".utf8), recent: lines("[00:00:01] ada: other"))
    XCTAssertEqual(filter.filter(Array("[00:00:05] ada: hello\n".utf8)).count, 22)
    XCTAssertEqual(filter.filter(Array("[00:00:05] ada: hello\n".utf8)), [])
  }
}

final class EchoFilterTests: XCTestCase {
  /// A Gen-1 board sends its ring again when someone new posts: exact copies go, a line with
  /// the same text at another time stays, and a line seen in the replay is not shown twice.
  func testDropsExactCopiesOnly() {
    var filter = EchoFilter(
      lines: ["[00:00:01] alice: hi\n", "[00:00:02] bob: yo\n"].map {
        Array($0.utf8)[...]
      })
    let replay =
      "[00:00:01] alice: hi\n[00:00:02] bob: yo\n[00:00:09] alice: hi\n[00:00:10] eve: new"
    XCTAssertEqual(
      String(decoding: filter.filter(Array(replay.utf8)), as: UTF8.self),
      "[00:00:09] alice: hi\n[00:00:10] eve: new")
    XCTAssertEqual(filter.filter(Array("[00:00:10] eve: new\n".utf8)), [])
  }

  /// It remembers a bounded window: very old lines may come again.
  func testForgetsBeyondItsWindow() {
    var filter = EchoFilter(lines: [])
    let lines = (0..<(EchoFilter.window * 2 + 1)).map { "[00:00:00] a: \($0)\n" }
    _ = filter.filter(Array(lines.joined().utf8))
    XCTAssertEqual(filter.filter(Array(lines[0].utf8)), Array(lines[0].utf8))
    XCTAssertEqual(filter.filter(Array(lines.last!.utf8)), [])
  }
}

final class HeldFstatsTests: XCTestCase {
  /// A hold not answered by its deadline is woken by the shared sweep; one answered (forgotten)
  /// first is not, and nothing of it is kept.
  func testExpiresOnlyWhatIsStillHeld() {
    let held = HeldFstats()
    let expired = expectation(description: "the unanswered hold expires")
    let answered = held.reserve()
    held.arm(answered, after: .milliseconds(10)) { XCTFail("an answered hold was woken") }
    held.forget(answered)
    let waiting = held.reserve()
    held.arm(waiting, after: .milliseconds(10)) { expired.fulfill() }
    XCTAssertEqual(held.count, 1)
    wait(for: [expired], timeout: 5)
    XCTAssertEqual(held.count, 0)
  }
}
