import Foundation
import Logging
import NinePClient
import NinePProtocol
import Synchronization
import TestSupport
import XCTest

@testable import BBSMount

/// The Awareness wing's pieces on their own, without a mount or a server: unread counts and
/// what a remount restores, mentions, the events' format, lines out of a feed's pieces, the
/// stream files' readers, and who arrived or left.
final class AwarenessUnitTests: XCTestCase {
  private let logger = Logger(label: "test.awareness")

  private func directory() throws -> String {
    let path = try makeTemporaryDirectory("awareness-unit")
    addTeardownBlock { try? FileManager.default.removeItem(atPath: path) }
    return path
  }

  private func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

  // MARK: UnreadLedger

  /// Lines count per room until the room is read to its end; a room gone from the board loses
  /// its count; `chat/unread` lists the rooms asked for and every room with a count, sorted.
  func testUnreadCountsUntilReadAndRendersEachRoomOnce() {
    let ledger = UnreadLedger(directory: nil, logger: logger)
    ledger.add(2, to: "lobby")
    ledger.add(3, to: "lobby")
    ledger.add(1, to: "tech")
    XCTAssertEqual(ledger.count("lobby"), 5)
    XCTAssertEqual(
      text(ledger.render(rooms: ["quiet", "lobby"])), "lobby 5\nquiet 0\ntech 1\n")
    ledger.read("lobby")
    XCTAssertEqual(ledger.count("lobby"), 0)
    ledger.forget("tech")
    XCTAssertEqual(ledger.all, ["lobby": 0])
    XCTAssertEqual(text(ledger.render(rooms: [])), "", "a read room with no one watching: gone")
  }

  /// A room's new lines reach its transcript, and so its readers, before they are counted: a
  /// reader may read them to the end first. Counted then, they stayed unread for ever
  /// (`chat/unread` said `lobby 4` with the reader at the end). Lines ending where the room
  /// was read to are not unread; later ones, or another feed's, are.
  func testLinesAReaderReadBeforeTheyWereCountedAreNotUnread() {
    let ledger = UnreadLedger(directory: nil, logger: logger)
    let feeds = (NSObject(), NSObject())  // alive for the test: their identities differ
    let feed = ObjectIdentifier(feeds.0)
    let other = ObjectIdentifier(feeds.1)
    ledger.add(1, to: "lobby", endingAt: .init(feed: feed, offset: 40))
    ledger.read("lobby", through: .init(feed: feed, offset: 200))
    XCTAssertEqual(ledger.count("lobby"), 0)
    ledger.add(4, to: "lobby", endingAt: .init(feed: feed, offset: 200))
    XCTAssertEqual(ledger.count("lobby"), 0, "read before they were counted")
    ledger.add(1, to: "lobby", endingAt: .init(feed: feed, offset: 250))
    XCTAssertEqual(ledger.count("lobby"), 1, "said after the read")
    ledger.add(1, to: "lobby", endingAt: .init(feed: other, offset: 10))
    XCTAssertEqual(ledger.count("lobby"), 2, "another feed's place says nothing of these")
    // An older place never moves the mark back.
    ledger.read("lobby", through: .init(feed: feed, offset: 100))
    ledger.add(1, to: "lobby", endingAt: .init(feed: feed, offset: 150))
    XCTAssertEqual(ledger.count("lobby"), 0)
    ledger.forget("lobby")
    ledger.add(1, to: "lobby", endingAt: .init(feed: feed, offset: 150))
    XCTAssertEqual(ledger.count("lobby"), 1, "a room gone and back starts afresh")
    withExtendedLifetime(feeds) {}
  }

  /// A room's name is the server's text: a space, a newline or a "-" in it cannot make a
  /// second record or pass for the mentions file's own line.
  func testHostileRoomNamesAreOneFieldEach() {
    let ledger = UnreadLedger(directory: nil, logger: logger)
    ledger.add(1, to: "a b")
    ledger.add(1, to: "x\ny 9")
    ledger.add(1, to: "-")
    XCTAssertEqual(text(ledger.render(rooms: [])), "\\x2d 1\na\\x20b 1\nx\\ny\\x209 1\n")
  }

  /// What a remount restores: the counts the last mount flushed, hostile names intact, and
  /// the first format (`ROOM COUNT` lines) still read.
  func testARemountRestoresTheCounts() throws {
    let state = try directory()
    let first = UnreadLedger(directory: state, logger: logger)
    first.add(4, to: "lobby")
    first.add(2, to: "x\ny 9")
    first.flush()
    let second = UnreadLedger(directory: state, logger: logger)
    XCTAssertEqual(second.all, ["lobby": 4, "x\ny 9": 2])

    let old = try directory()
    try Data("lobby 3\ntech -1\nmy room 7\n".utf8).write(
      to: URL(fileURLWithPath: old + "/unread.counts"))
    XCTAssertEqual(
      UnreadLedger(directory: old, logger: logger).all, ["lobby": 3, "my room": 7],
      "a negative count is not restored")
  }

  /// A change is written on its own shortly after, without waiting for the unmount's flush.
  func testCountsAreWrittenSoonAfterAChange() throws {
    let state = try directory()
    let ledger = UnreadLedger(directory: state, logger: logger)
    ledger.add(1, to: "lobby")
    XCTAssertTrue(
      waitUntil(timeout: 5) {
        UnreadLedger(directory: state, logger: self.logger).count("lobby") == 1
      })
  }

  /// A server's thousands of rooms cannot grow the counts without bound; rooms kept still count.
  func testRoomsAreBounded() {
    let ledger = UnreadLedger(directory: nil, logger: logger)
    for index in 0..<UnreadLedger.maximumRooms { ledger.add(1, to: "room\(index)") }
    ledger.add(1, to: "one too many")
    ledger.add(1, to: "room0")
    XCTAssertEqual(ledger.all.count, UnreadLedger.maximumRooms)
    XCTAssertEqual(ledger.count("one too many"), 0)
    XCTAssertEqual(ledger.count("room0"), 2)
  }

  // MARK: MentionMatcher and RoomLine

  /// Whole words, any case: "bob" is not in "bobby", "kebob" or "bob_2"; punctuation,
  /// controls and escape bytes around a name do not hide it.
  func testMentionsAreWholeWordsInAnyCase() {
    let matcher = MentionMatcher(names: ["Bob", "Zoë"])
    for text in [
      "bob", "hi bob", "BOB!", "@bob,", "(bob)", "\u{1B}bob\u{7}", "\tbob\0", "hey ZOË.",
    ] {
      XCTAssertTrue(matcher.matches(text[...]), text)
    }
    for text in ["bobby", "kebob", "bob_2", "2bob", "zoëy", "b o b", ""] {
      XCTAssertFalse(matcher.matches(text[...]), text)
    }
  }

  /// A name with punctuation matches as written, not as a pattern; empty names match nothing.
  func testNamesAreLiteral() {
    let matcher = MentionMatcher(names: ["c++", "a.b", ""])
    XCTAssertTrue(matcher.matches("i like c++ a lot"[...]))
    XCTAssertFalse(matcher.matches("abc++"[...]))
    XCTAssertTrue(matcher.matches("see a.b"[...]))
    XCTAssertFalse(matcher.matches("see axb"[...]))
    XCTAssertFalse(MentionMatcher(names: ["", ""]).matches("anything at all"[...]))
  }

  /// A hostile 64 KiB line of near misses is answered, and a name at its very end is found.
  func testALongLineOfNearMisses() {
    let matcher = MentionMatcher(names: ["bob"])
    let misses = String(repeating: "bobby ", count: (64 << 10) / 6)
    XCTAssertFalse(matcher.matches(misses[...]))
    XCTAssertTrue(matcher.matches((misses + "bob")[...]))
  }

  /// A room line's author and text, with and without its time, and a line with no author.
  func testRoomLinesSplitIntoAuthorAndText() {
    let line = RoomLine("[12:00:01] bob: hi: there")
    XCTAssertEqual(line.author, "bob")
    XCTAssertEqual(line.text, "hi: there")
    XCTAssertEqual(RoomLine("bob: hi").author, "bob")
    let bare = RoomLine("[12:00:01] the board restarts")
    XCTAssertEqual(bare.author, "")
    XCTAssertEqual(bare.text, "the board restarts")
  }

  // MARK: EventLog

  /// Fields safe for `read` and `awk`: tab, newline, backslash and controls escaped, a
  /// bidirectional override shown as its code point.
  func testEventFieldsAreEscaped() {
    XCTAssertEqual(EventLog.escaped("a\tb\nc\\d"), "a\\tb\\nc\\\\d")
    XCTAssertEqual(EventLog.escaped("\u{1B}[2J\u{7F}\u{85}"), "\\x1b[2J\\x7f\\x85")
    XCTAssertEqual(EventLog.escaped("evil\u{202E}txt"), "evil\\u{202e}txt")
    XCTAssertEqual(EventLog.escaped("Zoë 日本"), "Zoë 日本")
  }

  /// `TIME\tKIND\tFIELDS…\n`, the time UTC with milliseconds; an empty reason is `-`.
  func testAnEventIsOneTabSeparatedLine() {
    let at = Date(timeIntervalSince1970: 1_795_630_801.125)
    XCTAssertEqual(EventLog.timestamp(at), "2026-11-25T18:20:01.125Z")
    XCTAssertEqual(
      EventLog.line(.mention(room: "lob\tby", author: "bo\nb"), at: at),
      "2026-11-25T18:20:01.125Z\tmention\tlob\\tby\tbo\\nb\n")
    XCTAssertEqual(
      EventLog.line(.link(state: "down", reason: ""), at: at),
      "2026-11-25T18:20:01.125Z\tlink\tdown\t-\n")
    XCTAssertEqual(
      EventLog.line(.post(state: "sent", room: "lobby", reason: ""), at: at),
      "2026-11-25T18:20:01.125Z\tpost\tsent\tlobby\t-\n")
  }

  /// An event reaches every reader of `chat/events` open at the time, and none is kept for
  /// readers to come.
  func testEventsGoToTheReadersOpenNow() throws {
    let streams = ScriptedStreams()
    let fanOut = StreamFanOut(name: "events", sessions: streams, logger: logger) {
      Array("opened\n".utf8)
    }
    let log = EventLog(streams: fanOut)
    log.record(.roomAdded("nobody hears this"))
    XCTAssertFalse(fanOut.hasReaders)
    let reader = try XCTUnwrap(fanOut.subscribe())
    addTeardownBlock { reader.shutdown() }
    let at = Date(timeIntervalSince1970: 0)
    log.record(.userArrived("carol"), at: at)
    XCTAssertEqual(
      text(reader.read(at: 0, count: 1 << 20)),
      "opened\n1970-01-01T00:00:00.000Z\tuser-arrived\tcarol\n")
  }

  // MARK: FeedLines

  /// Lines come whole however the data is cut, and two feeds' halves never mix.
  func testLinesAreWholeAndPerFeed() {
    var lines = FeedLines(longestLine: 100)
    let feeds = (NSObject(), NSObject())
    let a = ObjectIdentifier(feeds.0)
    let b = ObjectIdentifier(feeds.1)
    let strings = { (slices: [ArraySlice<UInt8>]) in
      slices.map { String(decoding: $0, as: UTF8.self) }
    }
    XCTAssertEqual(strings(lines.lines(in: Array("one\ntw".utf8), from: a)), ["one"])
    XCTAssertEqual(strings(lines.lines(in: Array("uno\ndo".utf8), from: b)), ["uno"])
    XCTAssertEqual(lines.feedsWithPartialLines, 2)
    XCTAssertEqual(strings(lines.lines(in: Array("o\nthree\n".utf8), from: a)), ["two", "three"])
    XCTAssertEqual(strings(lines.lines(in: Array("s\n".utf8), from: b)), ["dos"])
    XCTAssertEqual(lines.feedsWithPartialLines, 0)
    withExtendedLifetime(feeds) {}
  }

  /// An endless line is cut at the limit and counted once: its rest, however long, is not
  /// another line, and the line after it is.
  func testAnOverlongLineIsOneLine() {
    var lines = FeedLines(longestLine: 10)
    let feed = ObjectIdentifier(NSObject())
    XCTAssertEqual(
      lines.lines(in: Array(repeating: UInt8(ascii: "x"), count: 25), from: feed).count, 1)
    XCTAssertEqual(lines.lines(in: Array(repeating: UInt8(ascii: "y"), count: 25), from: feed), [])
    let after = lines.lines(in: Array("yyy\nnext\n".utf8), from: feed)
    XCTAssertEqual(after.map { String(decoding: $0, as: UTF8.self) }, ["next"])
  }

  // MARK: StreamFanOut

  /// Each reader starts with its opening line and then what was published after it opened:
  /// two readers opened at different times hold different text, and a local stream never asks
  /// for a server session.
  func testReadersStartFromTheirOwnOpen() throws {
    let streams = ScriptedStreams()
    let opened = OpenCount()
    let fanOut = StreamFanOut(name: "mentions", sessions: streams, logger: logger) {
      Array("open \(opened.next())\n".utf8)
    }
    let early = try XCTUnwrap(fanOut.subscribe())
    fanOut.publish(Array("one\n".utf8))
    let late = try XCTUnwrap(fanOut.subscribe())
    fanOut.publish(Array("two\n".utf8))
    addTeardownBlock {
      early.shutdown()
      late.shutdown()
    }
    XCTAssertEqual(text(early.read(at: 0, count: 1 << 20)), "open 1\none\ntwo\n")
    XCTAssertEqual(text(late.read(at: 0, count: 1 << 20)), "open 2\ntwo\n")
    XCTAssertEqual(streams.placements.count, 0)
  }

  /// A reader that stops reading loses the oldest lines, not the daemon's memory; a reader
  /// keeping up is not held back by it.
  func testASlowReaderIsBounded() throws {
    let fanOut = StreamFanOut(name: "events", sessions: ScriptedStreams(), logger: logger) {
      Array("open\n".utf8)
    }
    let slow = try XCTUnwrap(fanOut.subscribe())
    addTeardownBlock { slow.shutdown() }
    let line = Array((String(repeating: "z", count: 1023) + "\n").utf8)
    for _ in 0..<(2 * StreamFanOut.readerCapacity / line.count) { fanOut.publish(line) }
    XCTAssertEqual(slow.length, UInt64(5 + 2 * StreamFanOut.readerCapacity))
    let kept = slow.extent
    XCTAssertLessThanOrEqual(kept.upperBound - kept.lowerBound, UInt64(StreamFanOut.readerCapacity))
    XCTAssertNil(slow.read(at: 0, count: 10, before: slow.length), "the oldest bytes are gone")
    XCTAssertEqual(
      slow.read(at: kept.upperBound - UInt64(line.count), count: line.count, before: slow.length),
      line)
  }

  /// Readers beyond the limit are refused (the open fails) rather than grown without bound.
  func testReadersAreBounded() {
    let fanOut = StreamFanOut(name: "events", sessions: ScriptedStreams(), logger: logger) {
      Array("open\n".utf8)
    }
    var readers: [RoomFeed] = []
    for _ in 0..<StreamFanOut.maximumReaders {
      guard let reader = fanOut.subscribe() else { break }
      readers.append(reader)
    }
    addTeardownBlock { for reader in readers { reader.shutdown() } }
    XCTAssertEqual(readers.count, StreamFanOut.maximumReaders)
    XCTAssertNil(fanOut.subscribe())
  }

  // MARK: UserPresence

  /// The names of a users list, idle times left out, bounded.
  func testUsersListNames() {
    XCTAssertEqual(
      UserPresence.names(Array("alice (idle: 3s)\nbob\n\nzoë (idle: 0s)\n".utf8)),
      ["alice", "bob", "zoë"])
    let many = (0..<(UserPresence.maximumUsers + 10)).map { "u\($0)\n" }.joined()
    XCTAssertEqual(UserPresence.names(Array(many.utf8)).count, UserPresence.maximumUsers)
  }

  /// Nothing is read while nobody reads `chat/events`; with a reader, the first list is what
  /// later ones are compared with, and a change becomes `user-arrived` and `user-left`.
  func testArrivalsAndDeparturesWhileSomeoneReadsEvents() throws {
    let fanOut = StreamFanOut(name: "events", sessions: ScriptedStreams(), logger: logger) {
      Array("open\n".utf8)
    }
    let lists = UsersLists(["alice\nbob\n", "bob\ncarol (idle: 1s)\n"])
    let presence = UserPresence(events: EventLog(streams: fanOut), interval: .milliseconds(50)) {
      lists.read($0)
    }
    presence.start()
    addTeardownBlock { presence.stop() }
    // Past the first check for readers: none, so nothing was read.
    XCTAssertFalse(
      waitUntil(timeout: UserPresence.readerCheck.timeInterval * 1.5) { lists.reads > 0 })
    let reader = try XCTUnwrap(fanOut.subscribe())
    reader.retain()
    addTeardownBlock { reader.shutdown() }
    let expected = "user-arrived\tcarol\n"
    XCTAssertTrue(
      waitUntil(timeout: 10) { self.text(reader.read(at: 0, count: 1 << 20)).contains(expected) })
    let events = text(reader.read(at: 0, count: 1 << 20)).split(separator: "\n").dropFirst()
      .map { $0.split(separator: "\t").dropFirst().joined(separator: "\t") }
    XCTAssertEqual(Array(events.prefix(2)), ["user-arrived\tcarol", "user-left\talice"])
  }
}

/// Counts opens of a stream, from any thread.
private final class OpenCount: Sendable {
  private let count = Mutex(0)
  func next() -> Int {
    count.withLock {
      $0 += 1; return $0
    }
  }
}

/// A board's users list read by ``UserPresence``: each read answers the next list, the last
/// one again once they run out.
private final class UsersLists: Sendable {
  private let lists: [String]
  private let readCount = Mutex(0)
  init(_ lists: [String]) { self.lists = lists }

  var reads: Int { readCount.withLock { $0 } }

  func read(_ done: @escaping @Sendable (Result<[UInt8], NinePError>) -> Void) {
    let index = readCount.withLock { count in
      defer { count += 1 }
      return min(count, lists.count - 1)
    }
    done(.success(Array(lists[index].utf8)))
  }
}

/// The formats of the awareness files, with what a hostile server or user can put in them.
final class AwarenessFormatTests: XCTestCase {
  func testEventFieldsEscapeTabsNewlinesBackslashesAndControls() {
    let time = Date(timeIntervalSince1970: 1_795_630_801.123_9)
    let line = EventLog.line(
      .message(room: "lob\tby\n", author: "a\\b\u{1B}[31m\u{7F}\u{85}"), at: time)
    XCTAssertEqual(
      line, "2026-11-25T18:20:01.123Z\tmessage\tlob\\tby\\n\ta\\\\b\\x1b[31m\\x7f\\x85\n")
    XCTAssertEqual(line.split(separator: "\t").count, 4)
    XCTAssertEqual(
      EventLog.line(.post(state: "sent", room: "lobby", reason: ""), at: time),
      "2026-11-25T18:20:01.123Z\tpost\tsent\tlobby\t-\n")
    XCTAssertEqual(
      EventLog.line(.link(state: "down", reason: "connection reset"), at: time),
      "2026-11-25T18:20:01.123Z\tlink\tdown\tconnection reset\n")
  }

  /// A notification's text is plain: no control character and no bidirectional mark (the
  /// right-to-left mark and the Arabic letter mark reorder text as overrides do).
  func testNotificationTextHasNoControlsOrBidiMarks() {
    XCTAssertEqual(
      DesktopNotifier.visible("a\u{1B}[31mb\u{200F}c\u{061C}d\u{200E}e\u{202E}f\u{2067}g\u{85}h"),
      "a [31mb c d e f g h")
    XCTAssertLessThanOrEqual(
      DesktopNotifier.visible(String(repeating: "x", count: 64 << 10)).utf8.count,
      DesktopNotifier.longestBody + 3)
  }

  func testMentionsAreWholeWordsInAnyCase() {
    let matcher = MentionMatcher(names: ["alice", "Deploy", "c0ffee42", ""])
    for text in ["ALICE?", "hi alice", "(alice)", "alice's", "re: deploy now", "id C0FFEE42."] {
      XCTAssertTrue(matcher.matches(Substring(text)), text)
    }
    for text in ["malice", "alicex", "redeployed", "alice_b", "c0ffee420", "", "ali ce"] {
      XCTAssertFalse(matcher.matches(Substring(text)), text)
    }
    XCTAssertFalse(MentionMatcher(names: []).matches("alice"))
  }

  func testRoomLinesSplitIntoAuthorAndText() {
    let line = RoomLine("[12:00:01] bob: alice: see: this")
    XCTAssertEqual(line.author, "bob")
    XCTAssertEqual(line.text, "alice: see: this")
    XCTAssertEqual(RoomLine("no stamp or author").text, "no stamp or author")
  }

  func testUnreadRoomNamesStayOneField() throws {
    let ledger = UnreadLedger(directory: nil, logger: .init(label: "test"))
    ledger.add(2, to: "a room\nwith\tcontrols")
    XCTAssertEqual(
      String(decoding: ledger.render(rooms: ["lobby"]), as: UTF8.self),
      "a\\x20room\\nwith\\tcontrols 2\nlobby 0\n")
  }
}
