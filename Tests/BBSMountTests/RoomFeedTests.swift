import Foundation
import Logging
import NinePClient
import NinePProtocol
import Synchronization
import TestSupport
import XCTest

@testable import BBSMount

/// A room feed on a scripted room (``ScriptedRoom``), sessions placed by a scripted provider:
/// the backlog read and caught up, lines said later, readers coming and going, a failed read
/// and its reconnect, history from an earlier mount. No mount, no sockets.
final class RoomFeedTests: XCTestCase {
  private let logger = Logger(label: "test.roomfeed")

  private func feed(
    _ streams: ScriptedStreams, history: RoomHistory? = nil
  ) -> RoomFeed {
    let feed = RoomFeed(
      room: "lobby", path: ["chat", "lobby"], sessions: streams, history: history,
      logger: logger)
    addTeardownBlock { feed.shutdown() }
    return feed
  }

  private func text(_ feed: RoomFeed) -> String {
    String(decoding: feed.read(at: 0, count: 1 << 20), as: UTF8.self)
  }

  private func lines(_ range: Range<Int>) -> [String] {
    range.map { "[12:00:00] bob: line \($0)\n" }
  }

  /// Whether `feed` calls back from `wait` within `timeout`.
  private func calledBack(
    timeout: TimeInterval = 5, _ wait: (@escaping @Sendable () -> Void) -> UInt64?
  ) -> Bool {
    let done = DeliveredValue<Bool>()
    _ = wait { done.set(true) }
    return done.wait(timeout: timeout) == true
  }

  /// The first reader's open reads the backlog and, the next read parked, the feed is caught
  /// up; a line said later wakes a reader waiting at the end, and nothing is read twice.
  /// A growth tells only the readers of that room that asked (poll(2)), until they stop.
  func testGrowthNotifiesOnlyThatRoomsPollers() {
    let streams = ScriptedStreams()
    let lobby = RoomFeed(
      room: "lobby", path: ["lobby"], pool: streams, localCapacity: 1 << 16, logger: logger)
    let tech = RoomFeed(
      room: "tech", path: ["tech"], pool: streams, localCapacity: 1 << 16, logger: logger)
    let reader = NSObject()
    let other = NSObject()
    let told = Mutex([String]())
    lobby.notifyOnGrowth(reader) { told.withLock { $0.append("lobby reader") } }
    tech.notifyOnGrowth(other) { told.withLock { $0.append("tech reader") } }
    lobby.appendLocal(Array("one\n".utf8))
    XCTAssertEqual(told.withLock { $0 }, ["lobby reader"])
    lobby.stopNotifying(reader)
    lobby.appendLocal(Array("two\n".utf8))
    XCTAssertEqual(told.withLock { $0 }, ["lobby reader"])
  }

  func testTheBacklogThenALineSaidLater() throws {
    let room = ScriptedRoom(waiting: lines(0..<3))
    let streams = ScriptedStreams()
    streams.offer(try connect(to: room))
    let feed = feed(streams)
    XCTAssertFalse(feed.isCaughtUp)
    feed.retain()
    XCTAssertTrue(calledBack { feed.whenCaughtUp(within: .seconds(5), $0) })
    XCTAssertTrue(feed.isCaughtUp)
    XCTAssertEqual(text(feed), lines(0..<3).joined())
    XCTAssertTrue(waitUntil(timeout: 5) { room.parkedReads == 1 }, "the next read parks")
    let length = feed.length
    room.say(lines(3..<4).joined())
    XCTAssertTrue(calledBack { feed.wait(beyond: length, $0) }, "woken by the new line")
    XCTAssertEqual(text(feed), lines(0..<4).joined())
    XCTAssertEqual(streams.placements.count, 1)
  }

  /// A room with nothing for the user on a board that parks reads: caught up once the read
  /// stays unanswered for the parking wait.
  func testAParkedReadCatchesUp() throws {
    let room = ScriptedRoom()
    let streams = ScriptedStreams()
    streams.offer(try connect(to: room))
    let feed = feed(streams)
    feed.retain()
    XCTAssertTrue(waitUntil(timeout: 5) { room.parkedReads == 1 })
    XCTAssertTrue(calledBack { feed.whenCaughtUp(within: .seconds(5), $0) })
    // Caught up, not merely called back at the limit.
    XCTAssertTrue(feed.isCaughtUp)
    XCTAssertFalse(feed.answersAtOnce)
    XCTAssertEqual(feed.length, 0)
  }

  /// A board that answers every read at once (Gen-1): the feed polls it, backing off, and a
  /// line said meanwhile arrives by the next poll.
  func testABoardThatAnswersAtOnceIsPolled() throws {
    let room = ScriptedRoom(parks: false)
    let streams = ScriptedStreams()
    streams.offer(try connect(to: room))
    let feed = feed(streams)
    feed.retain()
    XCTAssertTrue(calledBack { feed.whenCaughtUp(within: .seconds(5), $0) })
    XCTAssertTrue(waitUntil(timeout: 5) { feed.answersAtOnce })
    // Backing off: far fewer reads than one per millisecond.
    let before = room.reads
    Thread.sleep(forTimeInterval: 0.5)
    let polls = room.reads - before
    XCTAssertGreaterThan(polls, 0, "still polling")
    XCTAssertLessThan(polls, 15, "backed off: \(polls) reads in 0.5 s")
    room.say(lines(0..<1).joined())
    XCTAssertTrue(calledBack { feed.wait(beyond: 0, $0) })
    XCTAssertEqual(text(feed), lines(0..<1).joined())
  }

  /// The last reader's close flushes the parked read, clunks the fid and gives the slot back;
  /// the next open places the feed again and reads on from the server's place.
  func testReleaseThenRetain() throws {
    let room = ScriptedRoom(waiting: lines(0..<2))
    let streams = ScriptedStreams()
    let session = try connect(to: room)
    streams.offer(session)
    let feed = feed(streams)
    feed.retain()
    XCTAssertTrue(calledBack { feed.whenCaughtUp(within: .seconds(5), $0) })
    XCTAssertTrue(waitUntil(timeout: 5) { room.parkedReads == 1 })
    feed.release()
    XCTAssertTrue(waitUntil(timeout: 5) { room.flushes == 1 && room.clunks == 1 })
    XCTAssertEqual(streams.releases.count, 1)
    XCTAssertFalse(feed.isCaughtUp, "stopped, the server keeps lines for us")
    room.say(lines(2..<3).joined())
    feed.retain()
    XCTAssertTrue(calledBack { feed.wait(beyond: UInt64(lines(0..<2).joined().utf8.count), $0) })
    XCTAssertTrue(calledBack { feed.whenCaughtUp(within: .seconds(5), $0) })
    XCTAssertEqual(text(feed), lines(0..<3).joined())
    XCTAssertEqual(streams.placements.count, 2)
  }

  /// A read that fails: the feed dials again (a new session, the server restarted) and the
  /// backlog the new server sends again shows once.
  func testAFailedReadReconnectsAndTheReplayShowsOnce() throws {
    let room = ScriptedRoom(waiting: lines(0..<3))
    let streams = ScriptedStreams()
    streams.offer(try connect(to: room))
    let feed = feed(streams)
    feed.retain()
    XCTAssertTrue(calledBack { feed.whenCaughtUp(within: .seconds(5), $0) })
    XCTAssertTrue(waitUntil(timeout: 5) { room.parkedReads == 1 })
    // The server restarts: a new session whose room has the old backlog and a new line; the
    // old session's parked read fails.
    let restarted = ScriptedRoom(waiting: lines(0..<4))
    streams.offer(try connect(to: restarted))
    room.failNextRead(with: "room gone")
    let length = feed.length
    room.say(lines(3..<4).joined())
    XCTAssertTrue(calledBack { feed.wait(beyond: length, $0) })
    XCTAssertTrue(waitUntil(timeout: 5) { restarted.reads >= 1 && streams.placements.count == 2 })
    XCTAssertTrue(waitUntil(timeout: 5) { restarted.parkedReads == 1 })
    XCTAssertEqual(text(feed), lines(0..<4).joined())
  }

  /// A feed made with the history an earlier mount kept opens with it at once, and the
  /// lines the server sends again of it show once.
  func testHistoryIsLoadedAtStart() throws {
    let directory = NSTemporaryDirectory() + "roomfeed-\(UUID().uuidString)"
    addTeardownBlock { try? FileManager.default.removeItem(atPath: directory) }
    let earlier = try XCTUnwrap(RoomHistory(directory: directory, room: "lobby", logger: logger))
    earlier.append(Array(lines(0..<2).joined().utf8))
    earlier.flush()
    let history = try XCTUnwrap(RoomHistory(directory: directory, room: "lobby", logger: logger))
    let room = ScriptedRoom(waiting: lines(0..<3))
    let streams = ScriptedStreams()
    streams.offer(try connect(to: room))
    let feed = feed(streams, history: history)
    XCTAssertEqual(text(feed), lines(0..<2).joined(), "there before any read")
    feed.retain()
    XCTAssertTrue(calledBack { feed.whenCaughtUp(within: .seconds(5), $0) })
    XCTAssertEqual(text(feed), lines(0..<3).joined())
  }
}
