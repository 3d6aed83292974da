import Synchronization
import XCTest

@testable import NinePClient

/// Where the pool puts streams (``StreamPlacement``, ``StreamLedger`` and the placement on
/// the pool's state), without sockets: sessions are plain objects, their loads given.
final class StreamPlacementTests: XCTestCase {
  private let rule = StreamPlacement(slots: 4, maxSessions: 3)

  private func choose(
    primary: Int = 0, streams: [Int], mayDial: Bool = true, refused: Bool = false,
    quiet: Bool = false, rule: StreamPlacement? = nil
  ) -> StreamPlacement.Choice {
    (rule ?? self.rule).choose(
      primaryLoad: primary, streamLoads: streams, mayDial: mayDial, extraSessionsRefused: refused,
      quiet: quiet)
  }

  /// A watched room nobody reads takes the primary's free slot before a new session, and a
  /// stream session's free slot before that; with the primary full it may have one dialled.
  func testAQuietStreamTakesThePrimarysFreeSlotBeforeANewSession() {
    XCTAssertEqual(choose(primary: 3, streams: [], quiet: true), .primary)
    XCTAssertEqual(choose(primary: 0, streams: [2], quiet: true), .stream(0))
    XCTAssertEqual(choose(primary: 4, streams: [], quiet: true), .dial)
    XCTAssertEqual(choose(primary: 3, streams: []), .dial, "a read room still dials")
  }

  func testAFreeSlotOnAStreamSessionComesFirstTheLeastLoadedFirstOfEquals() {
    XCTAssertEqual(choose(streams: [3, 1, 1]), .stream(1))
    XCTAssertEqual(choose(streams: [0]), .stream(0))
  }

  func testANewStreamSessionIsDialledWhileOneMayBe() {
    XCTAssertEqual(choose(streams: []), .dial)
    XCTAssertEqual(choose(streams: [4]), .dial)
    XCTAssertEqual(choose(streams: [4, 4]), .primary, "three sessions are the most")
    XCTAssertEqual(choose(streams: []), .dial)
    XCTAssertEqual(choose(streams: [], refused: true), .primary, "the server gave none")
    XCTAssertEqual(choose(streams: [], mayDial: false), .primary, "the stream waited its time")
    XCTAssertEqual(
      choose(streams: [], rule: StreamPlacement(slots: 4, maxSessions: 1)), .primary)
  }

  func testWithEverySlotTakenTheLeastLoadedSessionTakesIt() {
    XCTAssertEqual(choose(primary: 3, streams: [4, 4]), .primary, "the primary has a slot")
    XCTAssertEqual(choose(primary: 4, streams: [6, 5]), .stream(1))
    XCTAssertEqual(choose(primary: 9, streams: [], refused: true), .primary)
  }

  func testTheLedgerCountsReservationsAndTheParkedReadsIfMore() {
    var ledger = StreamLedger<FakeSession>()
    let (a, b) = (FakeSession("a"), FakeSession("b"))
    ledger.reserve(a)
    ledger.reserve(a)
    ledger.reserve(b)
    XCTAssertEqual(ledger.reservations(on: a), 2)
    XCTAssertEqual(ledger.load(of: a, parked: 1), 2)
    XCTAssertEqual(ledger.load(of: a, parked: 3), 3)
    ledger.release(a)
    ledger.release(a)
    ledger.release(a)
    XCTAssertEqual(ledger.reservations(on: a), 0, "never below nothing")
    // Quiet streams count for placement, not as streams someone reads.
    ledger.reserve(a, quiet: true)
    ledger.reserve(a)
    XCTAssertEqual(ledger.reservations(on: a), 2)
    XCTAssertEqual(ledger.readStreams(on: a), 1)
    ledger.release(a)
    XCTAssertEqual(ledger.readStreams(on: a), 0)
    ledger.release(a, quiet: true)
    XCTAssertEqual(ledger.reservations(on: a), 0)
    ledger.reserve(a)
    ledger.keepOnly([a])
    XCTAssertEqual(ledger.reservations(on: b), 0, "b left the pool")
    XCTAssertEqual(ledger.reservations(on: a), 1)
    let first = ledger.wait { _ in }
    let second = ledger.wait { _ in }
    XCTAssertNotEqual(first, second)
    XCTAssertNotNil(ledger.removeWaiter(first))
    XCTAssertNil(ledger.removeWaiter(first))
    XCTAssertEqual(ledger.takeWaiters().count, 1)
    XCTAssertTrue(ledger.waiters.isEmpty)
  }

  /// One dial at a time, and whoever waits for it to settle (a tidy close) is told once
  /// when it is over, and not told of a dial that is not under way.
  func testADialSettlesItsWaitersOnce() {
    var ledger = StreamLedger<FakeSession>()
    let told = Tally()
    XCTAssertFalse(ledger.whenDialSettled { told.add() }, "no dial under way")
    XCTAssertTrue(ledger.startDial())
    XCTAssertFalse(ledger.startDial(), "one dial at a time")
    XCTAssertTrue(ledger.whenDialSettled { told.add() })
    XCTAssertTrue(ledger.whenDialSettled { told.add() })
    let settled = ledger.finishDial()
    XCTAssertFalse(ledger.dialing)
    XCTAssertEqual(told.count, 0, "called by the pool after its lock, not by the ledger")
    for done in settled { done() }
    XCTAssertEqual(told.count, 2)
    XCTAssertTrue(ledger.finishDial().isEmpty, "told once")
    XCTAssertFalse(ledger.whenDialSettled { told.add() })
  }

  /// Feeds that start together: the first dials, the rest wait for that one dial; once it is
  /// there they fill it, then the primary, then double up where it is least loaded.
  func testStreamsWaitForOneDialThenFillTheSessions() {
    var state = PoolState<FakeSession>(
      link: PoolLink(endpoints: ["t0"], policy: ReconnectPolicy()))
    let rule = StreamPlacement(slots: 2, maxSessions: 2)
    let (primary, stream) = (FakeSession("p"), FakeSession("s"))
    XCTAssertEqual(place(&state, rule), "link down")
    _ = state.link.started(primary, on: 0)
    XCTAssertEqual(place(&state, rule), "wait 1, dial")
    XCTAssertEqual(place(&state, rule), "wait 2")
    XCTAssertTrue(state.link.adopt(stream: stream, dialledOn: 0))
    XCTAssertEqual(state.ledger.takeWaiters().count, 2)
    XCTAssertEqual(state.ledger.finishDial().count, 0)
    XCTAssertEqual(
      (0..<5).map { _ in place(&state, rule) }, ["s", "s", "p", "p", "s"])
    XCTAssertEqual(state.ledger.reservations(on: stream), 3)
    XCTAssertEqual(state.ledger.reservations(on: primary), 2)
    // Given back, the stream session comes first again; unless reads parked there (a feed
    // that has not given its reservation back yet, or one the session rotated) fill it.
    for _ in 0..<3 { state.ledger.release(stream) }
    for _ in 0..<2 { state.ledger.release(primary) }
    XCTAssertEqual(place(&state, rule, parked: ["s": 2]), "p")
    XCTAssertEqual(place(&state, rule), "s")
  }

  func testAClosedStreamSessionIsDroppedAndItsReservationsForgotten() {
    var state = PoolState<FakeSession>(
      link: PoolLink(endpoints: ["t0"], policy: ReconnectPolicy()))
    let rule = StreamPlacement(slots: 2, maxSessions: 2)
    let (primary, stream) = (FakeSession("p"), FakeSession("s"))
    _ = state.link.started(primary, on: 0)
    XCTAssertTrue(state.link.adopt(stream: stream, dialledOn: 0))
    XCTAssertEqual(place(&state, rule), "s")
    XCTAssertEqual(place(&state, rule, closed: ["s"]), "wait 1, dial")
    XCTAssertTrue(state.link.streams.isEmpty)
    XCTAssertEqual(state.ledger.reservations(on: stream), 0)
    // Waited its time: the stream takes a place on the primary rather than dial again.
    XCTAssertEqual(place(&state, rule, waiting: false), "p")
  }

  /// Places one stream on `state` as the pool does, the sessions named in `closed` and
  /// `parked` measured so.
  private func place(
    _ state: inout PoolState<FakeSession>, _ rule: StreamPlacement, closed: Set<String> = [],
    parked: [String: Int] = [:], waiting: Bool = true
  ) -> String {
    var measured: [ObjectIdentifier: SessionLoad] = [:]
    for session in state.link.sessions {
      measured[ObjectIdentifier(session)] = SessionLoad(
        closed: closed.contains(session.description), parked: parked[session.description] ?? 0)
    }
    let ignore: PoolLink<FakeSession>.Waiter = { _ in }
    let placing = state.placeStream(by: rule, measured: measured, waiter: waiting ? ignore : nil)
    switch placing {
    case .linkDown: return "link down"
    case .placed(let session): return session.description
    case .waiting(let id, let dial): return "wait \(id)\(dial ? ", dial" : "")"
    }
  }
}

/// Counts calls from `@Sendable` closures.
private final class Tally: Sendable {
  private let calls = Mutex(0)
  var count: Int { calls.withLock { $0 } }
  func add() { calls.withLock { $0 += 1 } }
}
