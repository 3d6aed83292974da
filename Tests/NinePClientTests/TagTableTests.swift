import NinePProtocol
import XCTest

@testable import NinePClient

/// The tag table's transitions without a socket or a thread: each test drives the table as the
/// session would (submit, dispatch, replies, flushes, deadlines, close) and checks the actions
/// it returns. Callbacks are names, so the actions compare as values.
final class TagTableTests: XCTestCase {
  private typealias Table = TagTable<String>
  private let start = ContinuousClock.now

  private func table(
    profile: ServerProfile = .multiplex, tags: Int = 8, timeout: Duration? = .seconds(5)
  ) -> Table {
    var configuration = SessionConfiguration(
      profile: profile, uname: "glenda", requestTimeout: timeout)
    configuration.maxTags = tags
    return Table(configuration)
  }

  private func at(_ milliseconds: Int) -> ContinuousClock.Instant {
    start + .milliseconds(milliseconds)
  }

  private let stat = Stat(qid: Qid(path: 2), mode: FileMode(permissions: 0o644), name: "motd")

  /// Submits `message` for `caller` and puts it on the wire; returns its id and tag.
  private func send(
    _ message: Message, as caller: String, in table: inout Table, deadline: Int? = nil,
    mayPark: Bool = false
  ) throws -> (id: UInt64, tag: Tag) {
    let (id, refused) = table.submit(
      message, mayPark: mayPark, deadline: deadline.map(at), callback: caller)
    XCTAssertEqual(refused, [])
    let dispatch = try XCTUnwrap(table.dispatchNext(now: at(0)), "\(message) did not go")
    XCTAssertEqual(dispatch.id, id)
    XCTAssertEqual(dispatch.message, message)
    return (id, dispatch.tag)
  }

  /// Puts the queued Tflush for `tag` on the wire; returns its tag.
  private func sendFlush(of tag: Tag, in table: inout Table) throws -> Tag {
    let flush = try XCTUnwrap(table.dispatchNext(now: at(0)), "no Tflush queued")
    XCTAssertEqual(flush.message, .tflush(oldtag: tag))
    return flush.tag
  }

  /// The fast path: a request with nothing queued ahead takes its tag at once; one behind
  /// queued work waits its turn in the queue.
  func testSubmitAndDispatchSkipsTheQueueOnlyWhenNothingWaits() throws {
    var table = table(tags: 1)
    let a = table.submitAndDispatch(.tstat(fid: 0), deadline: nil, callback: "A", now: at(0))
    let sent = try XCTUnwrap(a.dispatch, "nothing waited, yet A did not go at once")
    XCTAssertEqual(sent.id, a.id)
    XCTAssertEqual(table.queuedCount, 0)
    let b = table.submitAndDispatch(.tstat(fid: 0), deadline: nil, callback: "B", now: at(0))
    XCTAssertNil(b.dispatch, "no tag is free")
    XCTAssertTrue(table.isQueued(b.id))
    _ = table.receive(tag: sent.tag, message: .rstat(stat: stat), now: at(1))
    let c = table.submitAndDispatch(.tclunk(fid: 4), deadline: nil, callback: "C", now: at(1))
    XCTAssertNil(c.dispatch, "C went ahead of B, queued before it")
    XCTAssertEqual(table.dispatchNext(now: at(1))?.id, b.id)
    _ = table.close(reason: "gone")
    let d = table.submitAndDispatch(.tstat(fid: 0), deadline: nil, callback: "D", now: at(2))
    XCTAssertNil(d.dispatch)
    XCTAssertEqual(
      d.actions,
      [.complete(id: d.id, callback: "D", result: .failure(.sessionClosed(reason: "gone")))])
  }

  // MARK: Replies

  func testAReplyAnswersItsCallerAndFreesItsTag() throws {
    var table = table()
    let a = try send(.tstat(fid: 0), as: "A", in: &table)
    XCTAssertEqual(table.inFlightCount, 1)
    let actions = table.receive(tag: a.tag, message: .rstat(stat: stat), now: at(3))
    XCTAssertEqual(
      actions, [.complete(id: a.id, callback: "A", result: .success(.message(.rstat(stat: stat))))])
    XCTAssertEqual(table.inFlightCount, 0)
    XCTAssertEqual(table.roundTrip, .milliseconds(3))
    // An Rerror is the caller's failure, with the errno the text maps to.
    let b = try send(.tclunk(fid: 4), as: "B", in: &table)
    XCTAssertEqual(
      table.receive(tag: b.tag, message: .rerror(ename: "file does not exist"), now: at(4)),
      [
        .complete(
          id: b.id, callback: "B",
          result: .failure(
            .server(
              ename: "file does not exist", errno: ErrorStrings.errno(for: "file does not exist"))))
      ])
  }

  func testAReplyWithAnUnknownTagIsAViolation() throws {
    var table = table()
    let a = try send(.tstat(fid: 0), as: "A", in: &table)
    let actions = table.receive(tag: a.tag &+ 1, message: .rstat(stat: stat), now: at(1))
    XCTAssertEqual(actions, [.violation("reply Rstat with unknown tag \(a.tag &+ 1)")])
    XCTAssertTrue(actions.allSatisfy(\.isViolation))
    // The request is still waiting for its own reply.
    XCTAssertEqual(table.inFlightCount, 1)
    // A reply to a tag already answered is just as unknown.
    _ = table.receive(tag: a.tag, message: .rstat(stat: stat), now: at(2))
    XCTAssertEqual(
      table.receive(tag: a.tag, message: .rstat(stat: stat), now: at(3)),
      [.violation("reply Rstat with unknown tag \(a.tag)")])
  }

  func testAReplyThatDoesNotFitItsRequestIsAViolation() throws {
    var table = table()
    let read = try send(.tread(fid: 3, offset: 0, count: 4), as: "R", in: &table)
    XCTAssertEqual(
      table.receive(tag: read.tag, message: .rread(data: [1, 2, 3, 4, 5]), now: at(1)),
      [.violation(ProtocolError.readReplyTooLong(asked: 4, got: 5).description)])
    let walk = try send(.twalk(fid: 0, newfid: 5, names: ["a"]), as: "W", in: &table)
    XCTAssertEqual(
      table.receive(tag: walk.tag, message: .rstat(stat: stat), now: at(1)),
      [.violation("Twalk answered with Rstat")])
    XCTAssertNil(ReplyValidation.validate(reply: .rerror(ename: "no"), for: .tclunk(fid: 1)))
    XCTAssertEqual(
      ReplyValidation.validate(reply: .rerror(ename: "no"), for: .tflush(oldtag: 1)),
      "Tflush answered with Rerror")
  }

  // MARK: Flushes

  /// The reply crosses the Tflush: it answers the caller, the tag stays reserved until the
  /// Rflush, and the Rflush answers nobody again.
  func testAReplyThatCrossesTheFlushAnswersOnceAndTheTagWaitsForRflush() throws {
    var table = table(tags: 2)
    let a = try send(.tread(fid: 3, offset: 0, count: 64), as: "A", in: &table)
    XCTAssertEqual(table.cancel(a.id, now: at(1)), [])
    let flushTag = try sendFlush(of: a.tag, in: &table)
    let (b, _) = table.submit(.tstat(fid: 0), deadline: nil, callback: "B")
    XCTAssertNil(table.dispatchNext(now: at(1)), "both tags are taken")

    XCTAssertEqual(
      table.receive(tag: a.tag, message: .rread(data: [0x41]), now: at(2)),
      [.complete(id: a.id, callback: "A", result: .success(.message(.rread(data: [0x41]))))])
    XCTAssertNil(table.dispatchNext(now: at(2)), "the crossed reply freed the tag before Rflush")

    XCTAssertEqual(table.receive(tag: flushTag, message: .rflush, now: at(3)), [])
    let next = try XCTUnwrap(table.dispatchNext(now: at(3)), "Rflush freed no tag")
    XCTAssertEqual(next.id, b)
    XCTAssertEqual(table.inFlightCount, 1)
  }

  /// No reply crosses: the Rflush ends the request with `.flushed` and frees both tags.
  func testRflushAloneAnswersFlushed() throws {
    var table = table()
    let a = try send(.tread(fid: 3, offset: 0, count: 64), as: "A", in: &table, mayPark: true)
    XCTAssertEqual(table.parkedReads, 1)
    _ = table.cancel(a.id, now: at(1))
    let flushTag = try sendFlush(of: a.tag, in: &table)
    XCTAssertEqual(
      table.receive(tag: flushTag, message: .rflush, now: at(2)),
      [.complete(id: a.id, callback: "A", result: .failure(.flushed))])
    XCTAssertEqual(table.inFlightCount, 0)
    XCTAssertEqual(table.parkedReads, 0)
    // The request is gone: a late reply to its tag is a violation.
    XCTAssertTrue(
      table.receive(tag: a.tag, message: .rread(data: []), now: at(3)).allSatisfy(\.isViolation))
  }

  /// A tag is used again only once the server is done with it: after the Rflush, not after
  /// the Tflush was sent.
  func testAFlushedTagIsReusedOnlyAfterRflush() throws {
    var table = table(tags: 2)
    let a = try send(.tread(fid: 3, offset: 0, count: 64), as: "A", in: &table)
    _ = table.cancel(a.id, now: at(1))
    let flushTag = try sendFlush(of: a.tag, in: &table)
    let (b, _) = table.submit(.tstat(fid: 0), deadline: nil, callback: "B")
    XCTAssertNil(table.dispatchNext(now: at(1)))
    XCTAssertTrue(table.isQueued(b))
    _ = table.receive(tag: flushTag, message: .rflush, now: at(2))
    let next = try XCTUnwrap(table.dispatchNext(now: at(2)))
    XCTAssertEqual(next.id, b)
    XCTAssertEqual(next.tag, a.tag, "the flushed tag is the one freed last")
    XCTAssertFalse(table.isQueued(b))
  }

  /// A device answers a flushed read with an empty Rread and then Rflush; a second reply to
  /// the tag before the Rflush is not the caller's business (nor a violation).
  func testASecondReplyToAFlushedTagIsIgnored() throws {
    var table = table()
    let a = try send(.tread(fid: 3, offset: 0, count: 64), as: "A", in: &table)
    _ = table.cancel(a.id, now: at(1))
    let flushTag = try sendFlush(of: a.tag, in: &table)
    XCTAssertEqual(
      table.receive(tag: a.tag, message: .rread(data: []), now: at(2)),
      [.complete(id: a.id, callback: "A", result: .success(.message(.rread(data: []))))])
    XCTAssertEqual(table.receive(tag: a.tag, message: .rread(data: [1]), now: at(3)), [])
    XCTAssertEqual(table.receive(tag: flushTag, message: .rflush, now: at(4)), [])
    XCTAssertEqual(table.inFlightCount, 0)
  }

  func testFlushesGoAheadOfQueuedWorkAndOnlyOncePerRequest() throws {
    var table = table(tags: 2)
    let a = try send(.tread(fid: 3, offset: 0, count: 64), as: "A", in: &table)
    let b = try send(.tread(fid: 4, offset: 0, count: 64), as: "B", in: &table)
    let (c, _) = table.submit(.tstat(fid: 0), deadline: nil, callback: "C")
    _ = table.cancel(a.id, now: at(1))
    _ = table.cancel(a.id, now: at(1))
    XCTAssertEqual(table.queuedCount, 2, "one Tflush for A, and C")
    _ = table.receive(tag: b.tag, message: .rread(data: []), now: at(2))
    let flush = try XCTUnwrap(table.dispatchNext(now: at(2)))
    XCTAssertEqual(flush.message, .tflush(oldtag: a.tag))
    XCTAssertTrue(table.isQueued(c))
  }

  // MARK: Withdrawing

  func testCancellingAQueuedRequestAnswersCancelled() throws {
    var table = table(tags: 1)
    _ = try send(.tstat(fid: 0), as: "A", in: &table)
    let (b, _) = table.submit(.tclunk(fid: 4), deadline: nil, callback: "B")
    XCTAssertEqual(
      table.cancel(b, now: at(1)), [.complete(id: b, callback: "B", result: .failure(.cancelled))])
    XCTAssertFalse(table.isQueued(b))
    XCTAssertEqual(table.cancel(b, now: at(1)), [], "answered once")
  }

  /// A timed-out request is answered `.timedOut`: one still queued is forgotten, one on the
  /// wire is flushed and its late reply answers nobody.
  func testTimeouts() throws {
    var table = table(tags: 2, timeout: .seconds(1))
    let a = try send(.tstat(fid: 0), as: "A", in: &table, deadline: 100)
    let b = try send(.tstat(fid: 0), as: "B", in: &table, deadline: 5000)
    let (c, _) = table.submit(.tclunk(fid: 4), deadline: at(50), callback: "C")
    XCTAssertEqual(table.nextWake(now: at(0)), at(50))
    XCTAssertEqual(table.expire(now: at(49)), [])

    XCTAssertEqual(
      table.expire(now: at(60)), [.complete(id: c, callback: "C", result: .failure(.timedOut))])
    XCTAssertFalse(table.isQueued(c))
    XCTAssertEqual(table.nextWake(now: at(60)), at(100))

    XCTAssertEqual(
      table.expire(now: at(100)),
      [
        .flushingLateRequest(.tstat(fid: 0)),
        .complete(id: a.id, callback: "A", result: .failure(.timedOut)),
      ])
    XCTAssertEqual(table.expire(now: at(200)), [], "answered once")
    _ = table.receive(tag: b.tag, message: .rstat(stat: stat), now: at(150))
    let flushTag = try sendFlush(of: a.tag, in: &table)
    XCTAssertEqual(table.receive(tag: a.tag, message: .rstat(stat: stat), now: at(300)), [])
    XCTAssertEqual(table.receive(tag: flushTag, message: .rflush, now: at(310)), [])
    XCTAssertEqual(table.inFlightCount, 0)
  }

  /// A request that timed out, its Tflush unanswered: the server is silent until the Rflush
  /// (or a late reply) comes. A flush the caller asked for (Ctrl-C) says nothing of the kind.
  func testATimedOutRequestMarksTheServerSilentUntilItAnswers() throws {
    var table = table(tags: 4, timeout: .seconds(1))
    let cancelled = try send(.tread(fid: 3, offset: 0, count: 64), as: "R", in: &table)
    _ = table.cancel(cancelled.id, now: at(0))
    XCTAssertFalse(table.serverIsSilent(), "a cancel is not silence")
    _ = try sendFlush(of: cancelled.tag, in: &table)
    let a = try send(.tstat(fid: 0), as: "A", in: &table, deadline: 100)
    XCTAssertFalse(table.serverIsSilent())
    _ = table.expire(now: at(100))
    XCTAssertTrue(table.serverIsSilent())
    let flushTag = try sendFlush(of: a.tag, in: &table)
    _ = table.receive(tag: flushTag, message: .rflush, now: at(150))
    XCTAssertFalse(table.serverIsSilent(), "the Rflush shows it answers")
    let b = try send(.tstat(fid: 0), as: "B", in: &table, deadline: 200)
    _ = table.expire(now: at(200))
    XCTAssertTrue(table.serverIsSilent())
    _ = table.receive(tag: b.tag, message: .rstat(stat: stat), now: at(250))
    XCTAssertFalse(table.serverIsSilent(), "a late reply shows it answers")
  }

  func testAnUnansweredFlushMeansTheServerStoppedAnswering() throws {
    var table = table(timeout: .seconds(1))
    let a = try send(.tread(fid: 3, offset: 0, count: 64), as: "A", in: &table)
    _ = table.cancel(a.id, now: at(0))
    _ = try sendFlush(of: a.tag, in: &table)
    XCTAssertEqual(table.nextWake(now: at(0)), at(1000), "the flush's deadline")
    XCTAssertEqual(table.expire(now: at(999)), [])
    XCTAssertEqual(
      table.expire(now: at(1000)), [.serverStoppedAnswering(flush: .tflush(oldtag: a.tag))])
    XCTAssertEqual(table.expire(now: at(2000)), [])
  }

  /// A walk whose caller gave up (a timeout) that succeeds after all made a fid nobody
  /// owns: the table asks for it to be clunked. A walk that stopped short made none.
  func testAReplyToAnAbandonedWalkClunksTheNewFid() throws {
    var table = table()
    let full = try send(
      .twalk(fid: 0, newfid: 9, names: ["rooms", "tech"]), as: "W", in: &table, deadline: 10)
    let short = try send(
      .twalk(fid: 0, newfid: 10, names: ["rooms", "nope"]), as: "S", in: &table, deadline: 10)
    XCTAssertEqual(table.expire(now: at(10)).count, 4)
    let qids = [Qid(type: .directory, path: 5), Qid(path: 6)]
    XCTAssertEqual(
      table.receive(tag: full.tag, message: .rwalk(qids: qids), now: at(20)), [.clunk(9)])
    XCTAssertEqual(table.receive(tag: short.tag, message: .rwalk(qids: [qids[0]]), now: at(20)), [])
  }

  // MARK: Parking

  func testStopParkingWithdrawsParkedReadsAndRefusesNewOnes() throws {
    var table = table(tags: 3)
    let parked = try send(.tread(fid: 3, offset: 0, count: 64), as: "P", in: &table, mayPark: true)
    let other = try send(.tstat(fid: 0), as: "O", in: &table)
    let (queued, _) = table.submit(
      .tread(fid: 4, offset: 0, count: 64), mayPark: true, deadline: nil, callback: "Q")
    XCTAssertEqual(table.queuedStreams, 1)
    XCTAssertEqual(
      table.stopParking(reason: "retiring", now: at(1)),
      [.complete(id: queued, callback: "Q", result: .failure(.cancelled))])
    XCTAssertEqual(table.queuedStreams, 0)
    _ = try sendFlush(of: parked.tag, in: &table)
    let (late, refused) = table.submit(
      .tread(fid: 5, offset: 0, count: 64), mayPark: true, deadline: nil, callback: "L")
    XCTAssertEqual(
      refused,
      [.complete(id: late, callback: "L", result: .failure(.sessionClosed(reason: "retiring")))])
    XCTAssertEqual(table.submit(.tstat(fid: 0), deadline: nil, callback: "S").actions, [])
    XCTAssertEqual(table.stopParking(reason: "again", now: at(2)), [])
    XCTAssertEqual(
      table.receive(tag: other.tag, message: .rstat(stat: stat), now: at(3)),
      [.complete(id: other.id, callback: "O", result: .success(.message(.rstat(stat: stat))))])
  }

  /// The device profile's rules decide what goes: one non-parked request at a time.
  func testTheWireDisciplineHoldsRequestsBack() throws {
    var table = table(profile: .device)
    let a = try send(.tstat(fid: 0), as: "A", in: &table)
    let (b, _) = table.submit(.tstat(fid: 0), deadline: nil, callback: "B")
    XCTAssertNil(table.dispatchNext(now: at(1)), "the device is busy")
    _ = table.receive(tag: a.tag, message: .rstat(stat: stat), now: at(2))
    XCTAssertEqual(table.dispatchNext(now: at(2))?.id, b)
  }

  // MARK: Closing

  /// Close answers every caller still waiting, in submission order, exactly once; those
  /// answered already (a timeout, a reply that crossed its flush) are not answered again.
  func testCloseFailsEverythingOnce() throws {
    var table = table(tags: 8)
    let answered = try send(.tread(fid: 3, offset: 0, count: 64), as: "X", in: &table)
    _ = try send(.tstat(fid: 0), as: "T", in: &table, deadline: 10)
    let onWire = try send(.tstat(fid: 0), as: "W", in: &table)
    _ = table.cancel(answered.id, now: at(1))
    _ = table.receive(tag: answered.tag, message: .rread(data: []), now: at(2))
    _ = table.expire(now: at(10))
    let (queued, _) = table.submit(.tclunk(fid: 4), deadline: nil, callback: "Q")

    let closed = NinePError.sessionClosed(reason: "gone")
    XCTAssertEqual(
      table.close(reason: "gone"),
      [
        .complete(id: onWire.id, callback: "W", result: .failure(closed)),
        .complete(id: queued, callback: "Q", result: .failure(closed)),
      ])
    XCTAssertEqual(table.closedReason, "gone")
    XCTAssertEqual(table.close(reason: "again"), [])
    XCTAssertEqual(table.inFlightCount + table.queuedCount, 0)
    // Later requests are refused with the first reason; late replies are nobody's fault.
    let (late, refused) = table.submit(.tstat(fid: 0), deadline: nil, callback: "L")
    XCTAssertEqual(refused, [.complete(id: late, callback: "L", result: .failure(closed))])
    XCTAssertEqual(table.receive(tag: onWire.tag, message: .rstat(stat: stat), now: at(20)), [])
    XCTAssertEqual(table.expire(now: at(100_000)), [])
  }
}
