import NinePProtocol
import XCTest

@testable import NinePClient

/// The wire discipline alone, driven by a fake clock: no session, no threads.
final class WireDisciplineTests: XCTestCase {
  private let start = ContinuousClock.now
  private func at(_ milliseconds: Int) -> ContinuousClock.Instant {
    start + .milliseconds(milliseconds)
  }

  private let stat = WireDiscipline.Request(mayPark: false)
  private func read(_ fid: Fid, mayPark: Bool = true) -> WireDiscipline.Request {
    WireDiscipline.Request(mayPark: mayPark, readFid: fid)
  }

  private func device(
    slots: Int = 4, grace: Duration = .milliseconds(250), turn: Duration = .seconds(1)
  ) -> WireDiscipline {
    WireDiscipline(profile: .device, maxParkedReads: slots, parkGrace: grace, parkingTurn: turn)
  }

  private func multiplex(slots: Int = 64, turn: Duration = .seconds(1)) -> WireDiscipline {
    WireDiscipline(profile: .multiplex, maxParkedReads: slots, parkGrace: .zero, parkingTurn: turn)
  }

  // MARK: - Requests

  func testRequestTraitsComeFromTheMessage() {
    XCTAssertEqual(
      WireDiscipline.Request(.tread(fid: 7, offset: 0, count: 10), mayPark: true),
      read(7))
    XCTAssertEqual(WireDiscipline.Request(.tstat(fid: 7), mayPark: false), stat)
    XCTAssertNil(
      WireDiscipline.Request(.twrite(fid: 7, offset: 0, data: []), mayPark: false).readFid)
  }

  func testConfigurationGivesTheProfilesRules() {
    var configuration = SessionConfiguration(profile: .device, uname: "u")
    configuration.parkingTurn = .milliseconds(300)
    let discipline = WireDiscipline(configuration)
    XCTAssertEqual(discipline.profile, .device)
    XCTAssertEqual(discipline.maxParkedReads, 4)
    XCTAssertEqual(discipline.parkGrace, .milliseconds(250))
    XCTAssertEqual(discipline.parkingTurn, .milliseconds(300))
  }

  // MARK: - Busy

  func testDeviceSendsOneNonParkedRequestAtATime() {
    var wire = device()
    XCTAssertTrue(wire.canSend(stat, now: at(0)))
    wire.didSend(stat, tag: 0, now: at(0), roundTrip: .zero)
    XCTAssertFalse(wire.canSend(stat, now: at(1)))
    XCTAssertFalse(wire.canSend(read(3), now: at(1)), "a parking read waits for the busy one too")
    XCTAssertFalse(wire.canSend(stat, now: at(60_000)), "busy has no time limit of its own")
    wire.didReceiveReply(tag: 0, now: start)
    XCTAssertTrue(wire.canSend(stat, now: at(2)))
  }

  func testTimeoutFreesTheBusyChannelButNotTheSlots() {
    var wire = device()
    wire.didSend(read(3, mayPark: false), tag: 0, now: at(0), roundTrip: .zero)
    wire.didTimeOut(tag: 0, now: start)
    XCTAssertTrue(wire.canSend(stat, now: at(1)), "the Tflush may go")
    XCTAssertFalse(wire.canSend(read(3), now: at(1)), "the fid still has a read on the wire")
    wire.didReceiveReply(tag: 0, now: start)
    XCTAssertTrue(wire.canSend(read(3), now: at(2)))
  }

  func testAReplyToAnotherTagDoesNotFreeTheBusyChannel() {
    var wire = device()
    wire.didSend(read(3), tag: 0, now: at(0), roundTrip: .zero)
    wire.didSend(stat, tag: 1, now: at(300), roundTrip: .zero)
    wire.didReceiveReply(tag: 0, now: start)
    XCTAssertFalse(wire.canSend(stat, now: at(301)))
    wire.didReceiveReply(tag: 1, now: start)
    XCTAssertTrue(wire.canSend(stat, now: at(302)))
  }

  // MARK: - Grace

  func testParkingReadHoldsTheChannelForTheGrace() {
    var wire = device(grace: .milliseconds(250))
    wire.didSend(read(3), tag: 0, now: at(0), roundTrip: .zero)
    XCTAssertFalse(wire.canSend(stat, now: at(0)))
    XCTAssertFalse(wire.canSend(stat, now: at(249)))
    XCTAssertTrue(wire.canSend(stat, now: at(250)), "the grace ends at its instant")
    XCTAssertEqual(wire.parkedReads, 1, "the read stays parked after its grace")
  }

  func testGraceIsThreeRoundTripsWhenThatIsLonger() {
    var wire = device(grace: .milliseconds(250))
    wire.didSend(read(3), tag: 0, now: at(0), roundTrip: .milliseconds(100))
    XCTAssertFalse(wire.canSend(stat, now: at(299)))
    XCTAssertTrue(wire.canSend(stat, now: at(301)))
    wire.didSend(read(4), tag: 1, now: at(1000), roundTrip: .milliseconds(50))
    XCTAssertFalse(wire.canSend(stat, now: at(1249)), "the grace is never below parkGrace")
    XCTAssertTrue(wire.canSend(stat, now: at(1251)))
  }

  func testOwnReplyEndsTheGraceEarly() {
    var wire = device()
    wire.didSend(read(3), tag: 5, now: at(0), roundTrip: .zero)
    wire.didReceiveReply(tag: 5, now: start)
    XCTAssertTrue(wire.canSend(stat, now: at(10)))
    XCTAssertEqual(wire.parkedReads, 0)
  }

  /// Commit 4c042da: an older parked read's reply no longer ends a newer read's grace.
  func testAnOlderParkedReadsReplyDoesNotEndANewerGrace() {
    var wire = device()
    wire.didSend(read(3), tag: 0, now: at(0), roundTrip: .zero)
    wire.didSend(read(4), tag: 1, now: at(300), roundTrip: .zero)
    wire.didReceiveReply(tag: 0, now: start)
    XCTAssertFalse(wire.canSend(stat, now: at(310)), "the newer read is still in its grace")
    XCTAssertTrue(wire.canSend(stat, now: at(551)))
    wire.didSend(read(5), tag: 2, now: at(600), roundTrip: .zero)
    wire.didReceiveReply(tag: 1, now: start)
    XCTAssertFalse(wire.canSend(stat, now: at(610)))
    wire.didReceiveReply(tag: 2, now: start)
    XCTAssertTrue(wire.canSend(stat, now: at(611)))
  }

  func testAReplyIsCountedOnce() {
    var wire = device()
    wire.didSend(read(3), tag: 0, now: at(0), roundTrip: .zero)
    wire.didSend(read(4), tag: 1, now: at(300), roundTrip: .zero)
    wire.didReceiveReply(tag: 0, now: start)
    wire.didReceiveReply(tag: 0, now: start)  // the Rflush after a reply that crossed the flush
    wire.didReceiveReply(tag: 9, now: start)  // never sent
    XCTAssertEqual(wire.parkedReads, 1)
  }

  // MARK: - Slots and fids

  func testParkedReadSlots() {
    var wire = device(slots: 2)
    wire.didSend(read(1), tag: 0, now: at(0), roundTrip: .zero)
    wire.didSend(read(2), tag: 1, now: at(300), roundTrip: .zero)
    XCTAssertEqual(wire.parkedReads, 2)
    XCTAssertFalse(wire.canSend(read(3), now: at(600)), "no slot left")
    XCTAssertTrue(wire.canSend(stat, now: at(600)), "ordinary requests need no slot")
    XCTAssertTrue(wire.canSend(read(3, mayPark: false), now: at(600)), "nor plain reads")
    wire.didReceiveReply(tag: 0, now: start)
    XCTAssertTrue(wire.canSend(read(3), now: at(600)))
  }

  func testDeviceSendsOneReadPerFid() {
    var wire = device()
    wire.didSend(read(3), tag: 0, now: at(0), roundTrip: .zero)
    XCTAssertFalse(wire.canSend(read(3), now: at(300)))
    XCTAssertFalse(wire.canSend(read(3, mayPark: false), now: at(300)))
    XCTAssertTrue(wire.canSend(read(4), now: at(300)))
    wire.didReceiveReply(tag: 0, now: start)
    XCTAssertTrue(wire.canSend(read(3), now: at(300)))
  }

  // MARK: - Multiplex

  func testMultiplexPassesEverythingButTheSlots() {
    var wire = multiplex(slots: 2)
    wire.didSend(stat, tag: 0, now: at(0), roundTrip: .seconds(1))
    wire.didSend(read(3), tag: 1, now: at(0), roundTrip: .seconds(1))
    XCTAssertTrue(wire.canSend(stat, now: at(0)), "no busy rule, no grace")
    XCTAssertTrue(wire.canSend(read(3), now: at(0)), "no one-read-per-fid rule")
    wire.didSend(read(3), tag: 2, now: at(0), roundTrip: .zero)
    XCTAssertFalse(wire.canSend(read(4), now: at(0)), "parked-read slots still count")
    XCTAssertTrue(wire.canSend(read(4, mayPark: false), now: at(0)))
    XCTAssertNil(wire.nextWake(now: at(0), queued: 5, queuedStreams: 0))
  }

  // MARK: - Waking and rotation

  func testWakesAtTheEndOfAGraceOnlyWhenSomethingWaits() {
    var wire = device()
    wire.didSend(read(3), tag: 0, now: at(0), roundTrip: .zero)
    XCTAssertNil(wire.nextWake(now: at(10), queued: 0, queuedStreams: 0))
    XCTAssertEqual(wire.nextWake(now: at(10), queued: 1, queuedStreams: 0), at(250))
    XCTAssertNil(wire.nextWake(now: at(251), queued: 1, queuedStreams: 0), "the grace is over")
  }

  func testNoRotationWithoutContention() {
    var wire = device(slots: 1, turn: .milliseconds(500))
    wire.didSend(read(1), tag: 0, now: at(0), roundTrip: .zero)
    XCTAssertNil(wire.readToRotate(now: at(10_000), queuedStreams: 0), "nobody waits")
    XCTAssertNil(wire.nextWake(now: at(10_000), queued: 0, queuedStreams: 0))

    var roomy = device(slots: 2, turn: .milliseconds(500))
    roomy.didSend(read(1), tag: 0, now: at(0), roundTrip: .zero)
    XCTAssertNil(roomy.readToRotate(now: at(10_000), queuedStreams: 3), "a slot is free")
  }

  func testOldestParkedReadRotatesAfterItsTurn() {
    var wire = device(slots: 2, turn: .milliseconds(1000))
    wire.didSend(read(1), tag: 0, now: at(0), roundTrip: .zero)
    wire.didSend(read(2), tag: 1, now: at(300), roundTrip: .zero)
    XCTAssertNil(wire.readToRotate(now: at(999), queuedStreams: 1))
    XCTAssertEqual(wire.nextWake(now: at(999), queued: 1, queuedStreams: 1), at(1000))
    XCTAssertEqual(wire.readToRotate(now: at(1000), queuedStreams: 1), 0)

    // Its flush is on the way: the next oldest is next, a turn after it parked.
    wire.willFlush(tag: 0)
    XCTAssertNil(wire.readToRotate(now: at(1000), queuedStreams: 1))
    XCTAssertEqual(wire.nextWake(now: at(1000), queued: 1, queuedStreams: 1), at(1300))
    XCTAssertEqual(wire.readToRotate(now: at(1300), queuedStreams: 1), 1)

    // The Rflush frees the slot: no contention left.
    wire.didReceiveReply(tag: 0, now: start)
    XCTAssertEqual(wire.parkedReads, 1)
    XCTAssertNil(wire.readToRotate(now: at(5000), queuedStreams: 1))
  }

  func testWakeIsTheEarlierOfGraceAndTurn() {
    var wire = device(slots: 1, grace: .milliseconds(250), turn: .milliseconds(100))
    wire.didSend(read(1), tag: 0, now: at(0), roundTrip: .zero)
    XCTAssertEqual(wire.nextWake(now: at(10), queued: 1, queuedStreams: 1), at(100))
  }

  func testMultiplexRotatesToo() {
    var wire = multiplex(slots: 1, turn: .milliseconds(100))
    wire.didSend(read(1), tag: 0, now: at(0), roundTrip: .zero)
    XCTAssertEqual(wire.nextWake(now: at(0), queued: 1, queuedStreams: 1), at(100))
    XCTAssertEqual(wire.readToRotate(now: at(100), queuedStreams: 1), 0)
  }

  func testFlushingReadIsNeverChosen() {
    var wire = multiplex(slots: 1, turn: .milliseconds(100))
    wire.didSend(read(1), tag: 0, now: at(0), roundTrip: .zero)
    wire.willFlush(tag: 0)  // cancelled by its owner
    XCTAssertNil(wire.readToRotate(now: at(1000), queuedStreams: 1))
    XCTAssertNil(wire.nextWake(now: at(1000), queued: 1, queuedStreams: 1))
  }
}
