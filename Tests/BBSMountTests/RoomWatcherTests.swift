import Foundation
import Logging
import NinePClient
import NinePProtocol
import NinePTransport
import Synchronization
import TestSupport
import XCTest

@testable import BBSMount

/// Watching rooms and waiting for the unread counts to settle against a real `9bbsd` (rooms
/// lobby and tech) over its Unix socket, through the mount's own pool, listing cache and room
/// feeds, without FUSE: which rooms are watched, a room coming, what was said while the mount
/// was away counted by the time ``Awareness/whenUnreadSettled(within:_:)`` calls back.
final class RoomWatcherTests: XCTestCase {
  private let fixture = BoardFixture("room-watcher")
  private let logger = Logger(label: "test.watcher")

  override func setUpWithError() throws {
    try fixture.setUp()
    try fixture.startServer(listening: ["unix!" + fixture.serverSocket])
  }

  override func tearDown() {
    fixture.tearDown()
  }

  /// What the mount builds on a pool: its listings, room feeds and remote files.
  private struct Parts {
    let pool: Pool
    let listings: ListingCache
    let feeds: RoomFeeds
    let remote: Remote
  }

  /// A started pool for `uname`, with the parts the mount builds on it; all closed at teardown.
  private func parts(_ uname: String, address: TransportAddress? = nil) throws -> Parts {
    let pool = Pool(
      address: address ?? .unix(path: fixture.serverSocket),
      configuration: SessionConfiguration(
        profile: .multiplex, uname: uname, requestTimeout: .seconds(5)),
      maxSessions: 2, logger: logger)
    try pool.start()
    let sessions: SessionProvider = { [pool] in pool.session(for: .ordinary, completion: $0) }
    let feeds = RoomFeeds(pool: pool, historyDirectory: nil, logger: logger)
    addTeardownBlock {
      feeds.shutdown()
      pool.close()
    }
    return Parts(
      pool: pool, listings: ListingCache(lifetime: .seconds(1), sessions: sessions, logger: logger),
      feeds: feeds, remote: Remote(sessions: sessions))
  }

  /// Posts `text` to `room` as `uname` over a session of its own.
  private func post(_ text: String, to room: String, as uname: String = "bob") throws {
    let session = try Session.connect(
      transport: try dial(.unix(path: fixture.serverSocket)),
      configuration: SessionConfiguration(profile: .multiplex, uname: uname))
    defer { session.close() }
    let walked = try XCTUnwrap(result { session.walk(["chat", "post"], completion: $0) }).get()
    _ = try XCTUnwrap(result { session.open(walked.fid, mode: .write, completion: $0) }).get()
    let payload = Array("\(room):\(text)".utf8)
    _ = try XCTUnwrap(
      result { session.write(walked.fid, offset: 0, data: payload, completion: $0) }
    ).get()
  }

  private func watcher(
    _ parts: Parts, watch: AwarenessOptions.Watch?, changes: Changes = Changes()
  ) -> RoomWatcher {
    let watcher = RoomWatcher(
      feeds: parts.feeds, listings: parts.listings, watch: watch, interval: .milliseconds(200),
      logger: logger
    ) { changes.record($0, $1) }
    addTeardownBlock { watcher.stop() }
    return watcher
  }

  private func unreadSettled(_ awareness: Awareness) -> Bool {
    result { done in awareness.whenUnreadSettled(within: .seconds(10)) { done(()) } } != nil
  }

  private func settled(_ watcher: RoomWatcher) -> Bool {
    result { done in watcher.whenSettled(within: .seconds(10)) { done(()) } } != nil
  }

  /// `watch=all`: every room of the board's chat listing, none of its other files; each
  /// watched room's feed runs (parked on the server) without a reader.
  func testAllRoomsOfTheListingAreWatched() throws {
    let parts = try parts("alice")
    let watcher = watcher(parts, watch: .all)
    watcher.start()
    XCTAssertTrue(settled(watcher))
    XCTAssertEqual(watcher.chatDirectoryFound, ["chat"])
    XCTAssertEqual(watcher.watchedRooms, ["lobby", "tech"])
    XCTAssertEqual(watcher.knownRooms, ["lobby", "tech"])
    XCTAssertTrue(
      watcher.watchedFeeds.allSatisfy { feed in
        result { done in _ = feed.whenCaughtUp(within: .seconds(10)) { done(feed.isCaughtUp) } }
          == true
      }, "each watched room caught up with no reader open")
  }

  /// `watch=ROOM`: only the rooms named; `watch=none` sends nothing and is settled at once.
  func testOnlyTheRoomsAskedForAreWatched() throws {
    let parts = try parts("alice")
    let some = watcher(parts, watch: .rooms(["tech", "nowhere"]))
    some.start()
    XCTAssertTrue(settled(some))
    XCTAssertEqual(some.watchedRooms, ["tech"])
    let none = watcher(parts, watch: AwarenessOptions.Watch.none)
    none.start()
    XCTAssertTrue(settled(none))
    XCTAssertNil(none.chatDirectoryFound, "no listing was taken")
    XCTAssertEqual(none.watchedRooms, [])
  }

  /// Rooms made and removed on the board after the first listing are reported, and watched
  /// or no longer, by the next listings (a board of the test's own, ``HostileChatServer``).
  func testRoomsComingAndGoingAreReportedAndWatched() throws {
    let board = try HostileChatServer(rooms: [.init("lobby"), .init("tech")])
    board.release()
    addTeardownBlock { board.stop() }
    let parts = try parts("alice", address: try TransportAddress(parsing: board.address))
    let changes = Changes()
    let watcher = watcher(parts, watch: .all, changes: changes)
    watcher.start()
    XCTAssertTrue(settled(watcher))
    XCTAssertEqual(watcher.watchedRooms, ["lobby", "tech"])
    XCTAssertEqual(changes.all, [], "the first listing is what is there, not a change")
    board.addRooms([.init("garden")])
    XCTAssertTrue(waitUntil(timeout: 10) { watcher.watchedRooms.contains("garden") })
    board.removeRooms(["tech"])
    XCTAssertTrue(waitUntil(timeout: 10) { !watcher.watchedRooms.contains("tech") })
    XCTAssertEqual(
      changes.all, [Changes.Change((["garden"], [])), Changes.Change(([], ["tech"]))])
  }

  /// What was said while the mount was away is counted by the time
  /// ``Awareness/whenUnreadSettled(within:_:)`` calls back, and the counts the mount left are
  /// restored: the wait that the first read of `chat/unread` after a remount makes.
  func testUnreadSettlesWithWhatWasSaidWhileAway() throws {
    let state = try makeTemporaryDirectory("room-watcher-state")
    addTeardownBlock { try? FileManager.default.removeItem(atPath: state) }
    let (first, firstParts) = try awareness("alice", state: state)
    XCTAssertTrue(unreadSettled(first))
    try post("one", to: "lobby")
    XCTAssertTrue(waitUntil(timeout: 10) { first.ledger.count("lobby") == 1 })
    first.shutdown()
    firstParts.feeds.shutdown()
    firstParts.pool.close()

    for text in ["two", "three alice", "four"] { try post(text, to: "lobby") }
    try post("elsewhere", to: "tech")
    let (again, _) = try awareness("alice", state: state)
    XCTAssertTrue(unreadSettled(again))
    XCTAssertEqual(
      String(decoding: again.renderUnread(), as: UTF8.self), "lobby 4\ntech 1\n",
      "counted when the wait ends, not later")
  }

  /// A watched room's lines, as the feed delivers them: another user's count as unread, one
  /// naming the user goes to every reader of `chat/mentions` (after its opening line), the
  /// user's own do neither, and each is a `message` event.
  func testLinesBecomeUnreadCountsMentionsAndEvents() throws {
    let state = try makeTemporaryDirectory("room-watcher-state")
    addTeardownBlock { try? FileManager.default.removeItem(atPath: state) }
    let (awareness, _) = try awareness("alice", state: state)
    XCTAssertTrue(unreadSettled(awareness))
    let mentions = try XCTUnwrap(awareness.mentionStreams.subscribe())
    let events = try XCTUnwrap(awareness.eventStreams.subscribe())
    mentions.retain()
    events.retain()
    addTeardownBlock {
      mentions.shutdown()
      events.shutdown()
    }
    try post("plain words", to: "lobby")
    try post("mine", to: "lobby", as: "alice")
    try post("hey ALICE, look", to: "tech")
    let text = { (feed: RoomFeed) in
      String(decoding: feed.read(at: 0, count: 1 << 20), as: UTF8.self)
    }
    // A line's event is recorded first, its mention and count after it: wait for all three.
    XCTAssertTrue(
      waitUntil(timeout: 10) {
        text(events).components(separatedBy: "\tmessage\t").count == 4
          && text(mentions).split(separator: "\n").count == 2
          && awareness.ledger.all == ["lobby": 1, "tech": 1]
      }, text(events) + text(mentions))
    XCTAssertEqual(awareness.ledger.all, ["lobby": 1, "tech": 1])
    let mentioned = text(mentions).split(separator: "\n")
    guard mentioned.count == 2 else { return XCTFail(text(mentions)) }
    XCTAssertTrue(mentioned[0].hasPrefix("- ["), "the opening line")
    XCTAssertTrue(mentioned[0].hasSuffix("mount9bbs: mentions of alice"), String(mentioned[0]))
    XCTAssertTrue(mentioned[1].hasPrefix("tech ["), String(mentioned[1]))
    XCTAssertTrue(mentioned[1].hasSuffix("] bob: hey ALICE, look"), String(mentioned[1]))
    for line in ["\tmessage\tlobby\tbob\n", "\tmessage\tlobby\talice\n", "\tmention\ttech\tbob\n"] {
      XCTAssertTrue(text(events).contains(line), line)
    }
  }

  /// A started ``Awareness`` for `uname` keeping its state in `state`, watching every room,
  /// and the parts it runs on; shut down at teardown.
  private func awareness(_ uname: String, state: String) throws -> (Awareness, Parts) {
    let parts = try parts(uname)
    var options = AwarenessOptions()
    options.watch = .all
    options.notify = .off
    let remote = parts.remote
    let awareness = Awareness(
      options: options, pool: parts.pool, feeds: parts.feeds, listings: parts.listings,
      names: [uname], stateDirectory: state, logger: logger,
      readOnce: { remote.readOnce($0, $1) }, stat: { remote.stat($0, $1) })
    awareness.start()
    addTeardownBlock { awareness.shutdown() }
    return (awareness, parts)
  }
}

/// Room listing changes a watcher reported, in order.
private final class Changes: Sendable {
  struct Change: Equatable, Sendable {
    let added: [String]
    let removed: [String]
    init(_ change: ([String], [String])) {
      added = change.0
      removed = change.1
    }
  }

  private let changes = Mutex<[Change]>([])
  func record(_ added: [String], _ removed: [String]) {
    changes.withLock { $0.append(Change((added, removed))) }
  }
  var all: [Change] { changes.withLock { $0 } }
}
