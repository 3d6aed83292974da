import NinePProtocol
import XCTest

@testable import NinePClient

/// Two sessions of one board sharing its work queue: the park grace on one counts the other's
/// requests. Pure values and a fake clock, no sockets.
final class BoardQueueTests: XCTestCase {
  private let start = ContinuousClock.now
  private func at(_ milliseconds: Int) -> ContinuousClock.Instant {
    start + .milliseconds(milliseconds)
  }

  private let stat = WireDiscipline.Request(mayPark: false)
  private func read(_ fid: Fid) -> WireDiscipline.Request {
    WireDiscipline.Request(mayPark: true, readFid: fid)
  }

  private func sessions() -> (WireDiscipline, WireDiscipline) {
    let board = BoardQueue()
    func session() -> WireDiscipline {
      WireDiscipline(
        profile: .device, maxParkedReads: 4, parkGrace: .milliseconds(250),
        parkingTurn: .seconds(1), board: board)
    }
    return (session(), session())
  }

  /// The VM's breach: a read queued at the worker behind another channel's slow request was
  /// still being processed when its own grace ran out.
  func testTheGraceStartsWhenTheOtherSessionsEarlierRequestIsDone() {
    var (a, b) = sessions()
    a.didSend(stat, tag: 0, now: at(0), roundTrip: .zero)
    b.didSend(read(3), tag: 0, now: at(10), roundTrip: .zero)
    XCTAssertFalse(b.canSend(stat, now: at(260)), "the worker may not have reached the read")
    XCTAssertFalse(b.canSend(stat, now: at(5_000)), "not while A's request is unanswered")
    XCTAssertEqual(
      b.nextWake(now: at(5_000), queued: 1, queuedStreams: 0), at(5_000) + WireDiscipline.boardPoll,
      "nobody tells B of A's reply: it looks again soon")
    a.didReceiveReply(tag: 0, now: at(6_000))
    XCTAssertFalse(b.canSend(stat, now: at(6_249)))
    XCTAssertEqual(b.nextWake(now: at(6_100), queued: 1, queuedStreams: 0), at(6_250))
    XCTAssertTrue(b.canSend(stat, now: at(6_250)))
  }

  func testRequestsSentAfterTheReadDoNotHoldItsGrace() {
    var (a, b) = sessions()
    b.didSend(read(3), tag: 0, now: at(0), roundTrip: .zero)
    a.didSend(stat, tag: 0, now: at(10), roundTrip: .zero)
    XCTAssertFalse(b.canSend(stat, now: at(249)))
    XCTAssertTrue(b.canSend(stat, now: at(250)), "A's request is behind the read")
  }

  /// A read before it on another session takes the worker only a moment, which the grace
  /// covers: charging each read a whole grace made a pool's reads queue behind each other.
  func testAnotherSessionsReadDoesNotLengthenTheGrace() {
    var (a, b) = sessions()
    a.didSend(read(7), tag: 0, now: at(0), roundTrip: .zero)
    b.didSend(read(3), tag: 0, now: at(100), roundTrip: .zero)
    XCTAssertFalse(b.canSend(stat, now: at(349)))
    XCTAssertTrue(b.canSend(stat, now: at(350)))
    var (c, d) = sessions()
    c.didSend(stat, tag: 0, now: at(0), roundTrip: .zero)
    c.didReceiveReply(tag: 0, now: at(20))
    c.didSend(read(7), tag: 1, now: at(30), roundTrip: .zero)
    d.didSend(read(3), tag: 0, now: at(40), roundTrip: .zero)
    XCTAssertTrue(d.canSend(stat, now: at(290)), "nothing unanswered before it")
  }

  func testAClosedSessionHoldsNothing() {
    var (a, b) = sessions()
    a.didSend(stat, tag: 0, now: at(0), roundTrip: .zero)
    b.didSend(read(3), tag: 0, now: at(10), roundTrip: .zero)
    a.didClose(now: at(100))
    XCTAssertTrue(b.canSend(stat, now: at(350)))
  }

  func testATimedOutRequestNoLongerHoldsTheWorker() {
    var (a, b) = sessions()
    a.didSend(stat, tag: 0, now: at(0), roundTrip: .zero)
    b.didSend(read(3), tag: 0, now: at(10), roundTrip: .zero)
    a.didTimeOut(tag: 0, now: at(30_000))
    XCTAssertFalse(b.canSend(stat, now: at(30_249)))
    XCTAssertTrue(b.canSend(stat, now: at(30_250)))
  }

  func testTheQueueForgetsWhatTheWorkerIsThroughWith() {
    let board = BoardQueue()
    for i in 0..<1000 {
      let ticket = board.arrived(mayPark: i % 2 == 0, at: at(i))
      // Reads answered at once and requests answered: the worker is through with them.
      board.finished(ticket, at: at(i))
    }
    let parked = board.arrived(mayPark: true, at: at(1_000))  // parks, not answered yet
    XCTAssertEqual(board.trackedCount, 1)
    let last = board.arrived(mayPark: true, at: at(2_000))
    XCTAssertEqual(
      board.workerFree(before: last, sentAt: at(2_000), now: at(2_000)), at(2_000),
      "the read before it parked long ago")
    XCTAssertEqual(
      board.workerFree(before: parked, sentAt: at(1_000), now: at(2_000)), at(1_000),
      "a parked read folded away still knows when its own grace began")
    XCTAssertEqual(board.trackedCount, 2, "the last read, and the parked one until it ends")
    board.finished(parked, at: at(3_000))
    XCTAssertEqual(board.trackedCount, 1)
  }
}
