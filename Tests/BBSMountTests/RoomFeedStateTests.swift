import Foundation
import NinePProtocol
import XCTest

@testable import BBSMount
// For request handles made up by the test (a handle is only an address here).
@testable import NinePClient

/// The room feed's transitions, one event at a time, without a server: what each event
/// changes and which actions it returns, with stand-in sessions. (``RoomFeedTests`` runs the
/// feed on a scripted server.)
final class RoomFeedStateTests: XCTestCase {
  /// A session as the state sees one: only an address the actions name.
  private final class StandInSession: Sendable {}
  private typealias RoomFeedState = BBSMount.RoomFeedState<StandInSession>

  /// A read's count (as the feed asks on an 8192-byte msize).
  private let count = 8168
  private let session = StandInSession()
  private let other = StandInSession()

  /// Actions as text: `read`, `readLater(25 ms)`, `wake(1)`…; logs left out.
  private func names(_ actions: [RoomFeedState.Action]) -> [String] {
    actions.compactMap { action in
      switch action {
      case .place(_, let quiet): quiet ? "place(quiet)" : "place"
      case .leaveIfShared(let on): on === session ? "leaveIfShared" : "leaveIfShared(other)"
      case .open(let on, _): on === session ? "open" : "open(other)"
      case .read: "read"
      case .readLater(_, _, let delay, _): "readLater(\(delay.milliseconds) ms)"
      case .retry(let delay, _): "retry(\(delay.milliseconds) ms)"
      case .cancel: "cancel"
      case .clunk: "clunk"
      case .clunkUnlessClosed: "clunkUnlessClosed"
      case .releaseStream(let on, let quiet):
        (on === session ? "release" : "release(other)") + (quiet ? "(quiet)" : "")
      case .wake(let ready, _): "wake(\(ready.count))"
      case .observe(let data, _): "observe(\(data.count))"
      case .grew(let data): "grew(\(data.count))"
      case .log, .learnedParking: nil
      }
    }
  }

  private func lines(_ count: Int, from first: Int = 0) -> [UInt8] {
    Array((first..<first + count).map { "[12:00:00] bob: line \($0)\n" }.joined().utf8)
  }

  /// A state reading on `session` (fid 1), as after a reader's open: its generation and the
  /// first read's token.
  private func reading(_ state: inout RoomFeedState) -> (generation: UInt64, token: UInt64) {
    XCTAssertEqual(names(state.retain()), ["place"])
    let generation = state.generation
    XCTAssertEqual(names(state.placed(session, generation: generation)), ["open"])
    XCTAssertEqual(names(state.opened(session, fid: 1, generation: generation)), ["read"])
    let read = state.beginRead(session, 1, generation: generation)
    return (generation, read?.token ?? 0)
  }

  private func text(_ state: RoomFeedState) -> String {
    String(decoding: state.transcript.read(at: 0, count: 1 << 20), as: UTF8.self)
  }

  // MARK: Catching up

  /// A reply with room for another line had every line the server kept: caught up, the
  /// waiters for that woken, the next read sent at once.
  func testAShortReplyCatchesUp() {
    var state = RoomFeedState(room: "lobby", rawText: false)
    let (generation, token) = reading(&state)
    XCTAssertNotNil(state.add(.init(beyond: nil, callback: {})))
    let data = lines(3)
    XCTAssertEqual(
      names(
        state.received(
          data, count: count, elapsed: .milliseconds(5), session, 1, token: token,
          generation: generation)),
      ["read", "observe(\(data.count))", "wake(1)", "grew(\(data.count))"])
    XCTAssertTrue(state.caughtUp)
    XCTAssertEqual(state.transcript.length, UInt64(data.count))
  }

  /// A reply filled to its count may leave lines at the server: not caught up, read on.
  func testAFullReplyDoesNotCatchUp() {
    var state = RoomFeedState(room: "lobby", rawText: false)
    let (generation, token) = reading(&state)
    let full = Array(lines(400).prefix(count - 100))
    let actions = state.received(
      full, count: count, elapsed: .milliseconds(5), session, 1, token: token,
      generation: generation)
    XCTAssertFalse(state.caughtUp)
    XCTAssertEqual(names(actions).first, "read")
  }

  /// A board that answers a caught-up read at once with nothing (Gen-1): caught up, polled
  /// with a pause that doubles from 25 ms to 300 ms while the room is idle, and at once again
  /// after a reply with lines.
  func testAnInstantEmptyReplyCatchesUpAndBacksOff() {
    var state = RoomFeedState(room: "lobby", rawText: false)
    let (generation, first) = reading(&state)
    var token = first
    var pauses: [String] = []
    for _ in 0..<6 {
      let actions = state.received(
        [], count: count, elapsed: .milliseconds(1), session, 1, token: token,
        generation: generation)
      pauses += names(actions).filter { $0.hasPrefix("read") }
      token = state.beginRead(session, 1, generation: generation)?.token ?? 0
    }
    XCTAssertTrue(state.caughtUp)
    XCTAssertTrue(state.answersAtOnce)
    XCTAssertEqual(
      pauses,
      [
        "readLater(25 ms)", "readLater(50 ms)", "readLater(100 ms)", "readLater(200 ms)",
        "readLater(300 ms)", "readLater(300 ms)",
      ])
    let said = state.received(
      lines(1), count: count, elapsed: .milliseconds(1), session, 1, token: token,
      generation: generation)
    XCTAssertEqual(names(said).first, "read")
    XCTAssertEqual(state.backoff, .zero)
    // An empty reply that took its time (a parked read given up) is no reason to back off.
    token = state.beginRead(session, 1, generation: generation)?.token ?? 0
    let slow = state.received(
      [], count: count, elapsed: .milliseconds(500), session, 1, token: token,
      generation: generation)
    XCTAssertEqual(names(slow), ["read", "wake(0)"])
  }

  /// On a Gen-1 board a new author replays the ring: lines the room has are dropped, and a
  /// reply with nothing new counts as empty for the backoff.
  func testABoardThatAnswersAtOnceHasItsReplaysDropped() {
    var state = RoomFeedState(room: "lobby", rawText: false)
    let (generation, first) = reading(&state)
    _ = state.received(
      lines(3), count: count, elapsed: .milliseconds(1), session, 1, token: first,
      generation: generation)
    var token = state.beginRead(session, 1, generation: generation)?.token ?? 0
    _ = state.received(
      [], count: count, elapsed: .milliseconds(1), session, 1, token: token,
      generation: generation)
    token = state.beginRead(session, 1, generation: generation)?.token ?? 0
    let replay = state.received(
      lines(3), count: count, elapsed: .milliseconds(1), session, 1, token: token,
      generation: generation)
    XCTAssertEqual(names(replay), ["readLater(50 ms)", "wake(0)"])
    XCTAssertEqual(state.transcript.length, UInt64(lines(3).count))
  }

  /// A feed on the primary moves once a stream session opens after a reconnect: its read
  /// there is cancelled and its slot given back, it is placed again (still caught up), and a
  /// line its cancelled read brought still counts. A feed elsewhere stays.
  func testAFeedOnTheCrowdedSessionMovesAndKeepsWhatItsOldReadBrings() {
    var state = RoomFeedState(room: "lobby", rawText: false)
    let (generation, token) = reading(&state)
    XCTAssertTrue(state.sent(RequestHandle(id: 1), token: token))
    _ = state.parked(token: token, after: .milliseconds(150))
    XCTAssertEqual(names(state.move(off: other)), [], "not on that session")
    XCTAssertEqual(names(state.move(off: session)), ["cancel", "clunk", "release", "place"])
    XCTAssertTrue(state.caughtUp, "moving loses nothing the board still keeps for us")
    XCTAssertEqual(names(state.move(off: session)), [], "already placing")
    // The cancelled read's reply was on its way with a line: it is kept.
    let late = state.received(
      lines(1), count: count, elapsed: .milliseconds(5), session, 1, token: token,
      generation: generation)
    XCTAssertTrue(names(late).contains("grew(\(lines(1).count))"), "\(names(late))")
    XCTAssertEqual(
      names(state.placed(other, generation: state.generation)), ["open(other)"])
  }

  /// A read the server keeps unanswered past the parking wait: caught up, the waiters woken;
  /// once answered, the watch for it finds nothing to do.
  /// A watched room nobody reads is placed quietly (the provider reserves nothing, so nothing
  /// is given back); its first reader has it leave a session ordinary requests use, and the
  /// move places it as a stream someone reads.
  func testAWatchedRoomIsPlacedQuietlyAndItsFirstReaderMovesIt() {
    var state = RoomFeedState(room: "lobby", rawText: false)
    XCTAssertEqual(names(state.retain(watching: true)), ["place(quiet)"])
    let generation = state.generation
    XCTAssertEqual(names(state.placed(session, quiet: true, generation: generation)), ["open"])
    XCTAssertEqual(names(state.opened(session, fid: 1, generation: generation)), ["read"])
    _ = state.beginRead(session, 1, generation: generation)
    XCTAssertEqual(state.readers, 0)
    XCTAssertEqual(names(state.retain()), ["leaveIfShared"])
    XCTAssertEqual(state.readers, 1)
    // A second reader changes nothing.
    XCTAssertEqual(names(state.retain()), [])
    // The move gives the quiet placement back and asks for one someone reads.
    XCTAssertEqual(names(state.move(off: session)), ["clunk", "release(quiet)", "place"])
    XCTAssertEqual(names(state.placed(other, generation: state.generation)), ["open(other)"])
    // The readers go; the watcher keeps the run (and its slot).
    XCTAssertEqual(names(state.release()), [])
    XCTAssertEqual(names(state.release()), [])
    XCTAssertEqual(state.users, 1)
    XCTAssertEqual(names(state.release(watching: true)), ["release(other)"])
  }

  /// A reader who comes while the watched room is still being placed quietly has it move
  /// once it is open.
  func testAReaderDuringAQuietPlacementMovesTheRoomOnceOpen() {
    var state = RoomFeedState(room: "lobby", rawText: false)
    XCTAssertEqual(names(state.retain(watching: true)), ["place(quiet)"])
    XCTAssertEqual(names(state.retain()), [])
    let generation = state.generation
    XCTAssertEqual(names(state.placed(session, quiet: true, generation: generation)), ["open"])
    XCTAssertEqual(
      names(state.opened(session, fid: 1, generation: generation)), ["read", "leaveIfShared"])
    // Stopped for good: the quiet placement's slot goes back as quiet.
    XCTAssertEqual(names(state.shutdown()), ["clunk", "release(quiet)", "wake(0)"])
  }

  func testAParkedReadCatchesUp() {
    var state = RoomFeedState(room: "lobby", rawText: false)
    let (_, token) = reading(&state)
    XCTAssertNotNil(state.add(.init(beyond: nil, callback: {})))
    XCTAssertTrue(state.sent(RequestHandle(id: 1), token: token), "watched for parking")
    XCTAssertTrue(state.isWatching(token: token))
    XCTAssertEqual(names(state.parked(token: token, after: .milliseconds(150))), ["wake(1)"])
    XCTAssertTrue(state.caughtUp)
    XCTAssertFalse(state.isWatching(token: token))
    XCTAssertEqual(names(state.parked(token: token, after: .milliseconds(150))), [])

    // A read answered before its watch fires was not parked.
    var answered = RoomFeedState(room: "lobby", rawText: false)
    let first = reading(&answered)
    XCTAssertTrue(answered.sent(RequestHandle(id: 2), token: first.token))
    _ = answered.received(
      Array(lines(400).prefix(count - 100)), count: count, elapsed: .milliseconds(5), session, 1,
      token: first.token, generation: first.generation)
    XCTAssertEqual(names(answered.parked(token: first.token, after: .milliseconds(150))), [])
    XCTAssertFalse(answered.caughtUp)
  }

  /// A reply that beats `send`'s return: the handle that comes after is not kept as the
  /// read on the wire, and nothing watches it.
  func testAReplyBeforeSendReturnsLeavesNoReadOnTheWire() {
    var state = RoomFeedState(room: "lobby", rawText: false)
    let (generation, token) = reading(&state)
    _ = state.received(
      Array(lines(400).prefix(count - 100)), count: count, elapsed: .milliseconds(5), session, 1,
      token: token, generation: generation)
    XCTAssertFalse(state.sent(RequestHandle(id: 1), token: token))
    // Stopping now clunks the fid and cancels nothing.
    XCTAssertEqual(names(state.release()), ["clunk", "release"])
  }

  // MARK: Failures and reconnecting

  /// A failed read gives up its fid and dials again after a pause that doubles up to 2 s;
  /// the next open remembers the transcript, and the lines the server replays are dropped
  /// until the feed catches up.
  func testAFailedReadReconnectsAndDropsTheReplay() {
    var state = RoomFeedState(room: "lobby", rawText: false)
    let (generation, first) = reading(&state)
    _ = state.received(
      lines(3), count: count, elapsed: .milliseconds(5), session, 1, token: first,
      generation: generation)
    var token = state.beginRead(session, 1, generation: generation)?.token ?? 0
    XCTAssertEqual(
      names(
        state.readFailed(
          .sessionClosed(reason: "gone"), session, 1, token: token, generation: generation)),
      ["clunkUnlessClosed", "retry(100 ms)"])
    var retries: [String] = []
    for _ in 0..<6 {
      retries += names(state.failed(.timedOut, generation: generation))
    }
    XCTAssertEqual(
      retries,
      [
        "retry(200 ms)", "retry(400 ms)", "retry(800 ms)", "retry(1600 ms)", "retry(2000 ms)",
        "retry(2000 ms)",
      ])
    XCTAssertEqual(names(state.retryDue(generation: generation)), ["place"])
    XCTAssertEqual(names(state.placed(other, generation: generation)), ["release", "open(other)"])
    _ = state.opened(other, fid: 2, generation: generation)
    token = state.beginRead(other, 2, generation: generation)?.token ?? 0
    // The restarted server sends the backlog again, then a new line.
    let replay = state.received(
      lines(4), count: count, elapsed: .milliseconds(5), other, 2, token: token,
      generation: generation)
    let new = Array(lines(1, from: 3))
    XCTAssertEqual(
      names(replay), ["read", "observe(\(new.count))", "wake(0)", "grew(\(new.count))"])
    XCTAssertEqual(text(state), String(decoding: lines(4), as: UTF8.self))
  }

  /// Stopping and starting as readers come and go replays nothing: no lines are dropped.
  func testARestartAfterAReleaseDropsNothing() {
    var state = RoomFeedState(room: "lobby", rawText: false)
    var (generation, token) = reading(&state)
    _ = state.received(
      lines(3), count: count, elapsed: .milliseconds(5), session, 1, token: token,
      generation: generation)
    _ = state.release()
    (generation, token) = reading(&state)
    let same = state.received(
      lines(1), count: count, elapsed: .milliseconds(5), session, 1, token: token,
      generation: generation)
    XCTAssertEqual(names(same).filter { $0.hasPrefix("grew") }, ["grew(\(lines(1).count))"])
  }

  // MARK: Stopping, starting, late replies

  /// The last reader's close flushes the read, clunks its fid and gives the slot back; the
  /// next open starts a new run. A reply crossing the flush still counts (the server moved
  /// the user's place past it) but sends no read; an empty one does nothing.
  func testAReleaseFlushesAndALateReplyCountsButStartsNothing() {
    var state = RoomFeedState(room: "lobby", rawText: false)
    let (old, token) = reading(&state)
    _ = state.sent(RequestHandle(id: 7), token: token)
    XCTAssertEqual(names(state.retain()), [], "a second reader starts nothing")
    XCTAssertEqual(names(state.release()), [])
    XCTAssertEqual(names(state.release()), ["cancel", "clunk", "release"])
    XCTAssertFalse(state.caughtUp)
    XCTAssertEqual(names(state.retain()), ["place"])
    XCTAssertNotEqual(state.generation, old)
    let late = state.received(
      lines(2), count: count, elapsed: .milliseconds(5), session, 1, token: token,
      generation: old)
    XCTAssertEqual(
      names(late), ["observe(\(lines(2).count))", "wake(0)", "grew(\(lines(2).count))"])
    XCTAssertFalse(state.caughtUp, "a late reply does not catch the new run up")
    XCTAssertEqual(
      names(
        state.received(
          [], count: count, elapsed: .milliseconds(1), session, 1, token: token, generation: old)),
      [])
    // The flushed read's completion queues no read for the old run.
    XCTAssertEqual(names(state.readFlushed(session, 1, token: token, generation: old)), ["read"])
    XCTAssertNil(state.beginRead(session, 1, generation: old))
  }

  /// Every event of an earlier run finds the generation moved on: a placement only gives its
  /// slot back, an open is clunked, a failure and its retry start nothing, a park watch
  /// catches nothing up.
  func testEventsOfAnEarlierRunStartNothing() {
    var state = RoomFeedState(room: "lobby", rawText: false)
    let (old, token) = reading(&state)
    _ = state.sent(RequestHandle(id: 7), token: token)
    _ = state.release()
    _ = state.retain()
    XCTAssertEqual(names(state.placed(other, generation: old)), ["release(other)"])
    XCTAssertEqual(names(state.opened(other, fid: 3, generation: old)), ["clunk"])
    XCTAssertEqual(names(state.failed(.timedOut, generation: old)), [])
    XCTAssertEqual(names(state.retryDue(generation: old)), [])
    XCTAssertEqual(names(state.parked(token: token, after: .milliseconds(150))), [])
    XCTAssertFalse(state.caughtUp)
    XCTAssertEqual(state.backoff, .zero)
    // The current run goes on as if nothing happened.
    XCTAssertEqual(names(state.placed(session, generation: state.generation)), ["open"])
  }

  /// A placement of an earlier run that arrives after the newer run's own gives back only
  /// its own slot: the newer run keeps its slot, and gives it back once when it stops.
  func testALatePlacementOfAnEarlierRunReleasesOnlyItsOwnSlot() {
    var state = RoomFeedState(room: "lobby", rawText: false)
    XCTAssertEqual(names(state.retain()), ["place"])
    let old = state.generation
    // The reader closes and another opens before the first placement comes back.
    XCTAssertEqual(names(state.release()), [])
    XCTAssertEqual(names(state.retain()), ["place"])
    let new = state.generation
    XCTAssertEqual(names(state.placed(session, generation: new)), ["open"])
    XCTAssertEqual(names(state.placed(other, generation: old)), ["release(other)"])
    XCTAssertTrue(state.placedOn === session)
    XCTAssertEqual(names(state.opened(session, fid: 1, generation: new)), ["read"])
    // The newer run's slot goes back when it stops, once.
    XCTAssertEqual(names(state.release()), ["clunk", "release"])
  }

  /// Unmount: everything stops and every waiter is woken, caught up or not.
  func testShutdownWakesEveryWaiter() {
    var state = RoomFeedState(room: "lobby", rawText: false)
    _ = reading(&state)
    XCTAssertNotNil(state.add(.init(beyond: 100, callback: {})))
    XCTAssertNotNil(state.add(.init(beyond: nil, callback: {})))
    XCTAssertEqual(names(state.shutdown()), ["clunk", "release", "wake(2)"])
    XCTAssertEqual(state.users, 0)
  }

  // MARK: History

  /// A room opens with the history the last mount kept: a reader waiting for a first line
  /// has it at once, and what the server sends again of it is dropped.
  func testHistoryIsThereAtStartAndNotRepeated() {
    let kept = lines(3)
    var state = RoomFeedState(room: "lobby", rawText: false, history: (kept, Date()))
    XCTAssertEqual(state.transcript.length, UInt64(kept.count))
    XCTAssertNil(state.add(.init(beyond: 0, callback: {})), "a first line there already")
    XCTAssertFalse(state.caughtUp)
    let (generation, token) = reading(&state)
    let replay = state.received(
      lines(4), count: count, elapsed: .milliseconds(5), session, 1, token: token,
      generation: generation)
    XCTAssertEqual(names(replay).filter { $0.hasPrefix("grew") }, ["grew(\(lines(1).count))"])
    XCTAssertEqual(text(state), String(decoding: lines(4), as: UTF8.self))
    // The observer is told where the new line ends in the transcript (after the history):
    // the unread ledger compares that with where readers got to.
    let observed = replay.compactMap { action -> UInt64? in
      if case .observe(_, let end) = action { end } else { nil }
    }
    XCTAssertEqual(observed, [UInt64(lines(4).count)])
  }

  /// A local stream never asks the server for anything and is always caught up.
  func testALocalStreamNeverReads() {
    var state = RoomFeedState(localStream: "events", capacity: 1 << 10)
    XCTAssertTrue(state.caughtUp)
    XCTAssertEqual(names(state.retain()), [])
    XCTAssertNotNil(state.add(.init(beyond: 0, callback: {})))
    XCTAssertEqual(state.appendLocal(lines(1)).count, 1)
    XCTAssertEqual(names(state.release()), [])
    XCTAssertTrue(state.caughtUp)
  }
}

extension Duration {
  /// Whole milliseconds, for messages.
  fileprivate var milliseconds: Int64 {
    components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000
  }
}
