import XCTest

@testable import NinePClient

/// The pool's link behaviour alone (``PoolLink``): no sockets, no threads, a fixed jitter and a
/// clock the tests move.
final class PoolLinkTests: XCTestCase {
  private let start = ContinuousClock.now
  private let refused = NinePError.sessionClosed(reason: "refused")

  private func makeLink(
    endpoints: Int = 3, initialBackoff: Duration = .milliseconds(100),
    maximumBackoff: Duration = .seconds(1), reconnecting: Bool = true,
    jitter: @escaping @Sendable () -> Double = { 1 }
  ) -> PoolLink<FakeSession> {
    var policy = ReconnectPolicy()
    policy.enabled = reconnecting
    policy.initialBackoff = initialBackoff
    policy.maximumBackoff = maximumBackoff
    policy.keepaliveInterval = .seconds(1)
    return PoolLink(
      endpoints: (0..<endpoints).map { "t\($0)" }, policy: policy, now: start, jitter: jitter)
  }

  /// On a board a club shares, every member's primary comes back before anyone's extra
  /// sessions: they wait as long as another member's backoff can be after such an outage.
  func testAfterAReconnectExtraSessionsWaitForTheOthersToComeBack() {
    var link = makeLink(endpoints: 1, maximumBackoff: .seconds(30))
    let a = FakeSession("a")
    _ = link.started(a, on: 0)
    XCTAssertTrue(link.mayDialExtraSessions(now: start), "a first mount dials at once")
    _ = link.sessionLost(a, reason: "EOF", silentSince: nil, now: start)
    // The board answers but is full: that is why we are still down, and it is said once.
    let full = NinePError.boardFull(serverSaid: "board full: all 4 sessions in use")
    XCTAssertEqual(
      describe(link.redialFailed(on: 0, error: full)),
      [#"notify down(reason: "board full (all 4 sessions in use)")"#, "redial 0 after 200 ms"])
    XCTAssertEqual(link.state, .down(reason: "board full (all 4 sessions in use)"))
    XCTAssertEqual(describe(link.redialFailed(on: 0, error: full)), ["redial 0 after 400 ms"])
    let b = FakeSession("b")
    let back = start + .seconds(10)
    XCTAssertEqual(
      describe(link.redialled(b, on: 0, now: back)),
      [
        "notify up", "wake 0 with b", "watch b",
        "allow extra sessions after 13500 ms (generation 2)",
      ])
    XCTAssertFalse(link.mayDialExtraSessions(now: back + .seconds(13)))
    XCTAssertTrue(link.mayDialExtraSessions(now: back + .milliseconds(13_500)))
    // A long outage waits the longest backoff, not the outage.
    _ = link.sessionLost(b, reason: "EOF", silentSince: nil, now: back)
    _ = link.redialled(FakeSession("c"), on: 0, now: back + .seconds(300))
    XCTAssertFalse(link.mayDialExtraSessions(now: back + .seconds(300 + 38)))
    XCTAssertTrue(link.mayDialExtraSessions(now: back + .milliseconds(300_000 + 38_500)))
  }

  func testLosingThePrimaryTriesTheOtherTransportsFirstThenAllInOrder() {
    var link = makeLink(endpoints: 3)
    let a = FakeSession("a")
    let stream = FakeSession("s")
    XCTAssertEqual(describe(link.started(a, on: 0)), ["notify up", "watch a"])
    XCTAssertTrue(link.adopt(stream: stream, dialledOn: 0))
    XCTAssertEqual(
      describe(link.sessionLost(a, reason: "EOF", silentSince: nil, now: start)),
      ["close s: link lost: EOF", #"notify down(reason: "EOF")"#, "redial 1 after 100 ms"])
    XCTAssertEqual(link.state, .down(reason: "EOF"))
    XCTAssertNil(link.primary)
    XCTAssertTrue(link.streams.isEmpty)
    // The round goes on at once; the transport that died comes last.
    XCTAssertEqual(describe(link.redialFailed(on: 1, error: refused)), ["redial 2 after 0 ms"])
    XCTAssertEqual(describe(link.redialFailed(on: 2, error: refused)), ["redial 0 after 0 ms"])
    // The next round tries all of them in order of preference, after a longer wait.
    XCTAssertEqual(describe(link.redialFailed(on: 0, error: refused)), ["redial 0 after 200 ms"])
    XCTAssertEqual(describe(link.redialFailed(on: 0, error: refused)), ["redial 1 after 0 ms"])
    let b = FakeSession("b")
    XCTAssertEqual(
      describe(link.redialled(b, on: 1, now: start + .milliseconds(400))),
      [
        "notify up", "wake 0 with b", "watch b",
        "allow extra sessions after 1500 ms (generation 2)", "retry preferred after 1000 ms",
      ])
    XCTAssertTrue(link.primary === b)
    XCTAssertEqual(link.endpoint, 1)
    XCTAssertEqual(link.reconnects, 1)
    XCTAssertEqual(link.switches, 1)
    XCTAssertEqual(link.generation, 2)
  }

  func testBackoffDoublesFromTheInitialWaitUpToTheCap() {
    let even = makeLink(initialBackoff: .milliseconds(100), maximumBackoff: .seconds(1))
    XCTAssertEqual(
      (0...6).map { milliseconds(even.backoff(attempt: $0)) },
      [100, 200, 400, 800, 1000, 1000, 1000])
    XCTAssertEqual(milliseconds(even.backoff(attempt: 500)), 1000)
    // The jitter applies to the capped wait.
    XCTAssertEqual(milliseconds(makeLink(jitter: { 0.75 }).backoff(attempt: 0)), 75)
    XCTAssertEqual(milliseconds(makeLink(jitter: { 1.25 }).backoff(attempt: 9)), 1250)
    // The waits the transitions ask for, one transport: each failed round doubles it.
    var link = makeLink(endpoints: 1)
    let a = FakeSession("a")
    _ = link.started(a, on: 0)
    var waits = [delays(link.sessionLost(a, reason: "gone", silentSince: nil))]
    for _ in 0..<5 { waits.append(delays(link.redialFailed(on: 0, error: refused))) }
    XCTAssertEqual(waits, [[100], [200], [400], [800], [1000], [1000]])
    XCTAssertEqual(link.phaseAttempt, 5)
  }

  func testGoingBackToThePreferredTransportReplacesTheSessionsWithoutGoingDown() {
    var link = makeLink(endpoints: 2)
    let (a, b, stream) = (FakeSession("a"), FakeSession("b"), FakeSession("s"))
    XCTAssertEqual(
      describe(link.started(b, on: 1)), ["notify up", "watch b", "retry preferred after 1000 ms"])
    XCTAssertTrue(link.adopt(stream: stream, dialledOn: 1))
    XCTAssertEqual(describe(link.preferredRetryDue()), ["dial preferred 0 below 1"])
    XCTAssertEqual(
      describe(link.preferredAnswered(a, on: 0)),
      [
        "retire s within 2000 ms: moved to t0",
        "retire b within 2000 ms: moved to another transport", "notify up", "watch a",
      ])
    XCTAssertEqual(link.state, .up)
    XCTAssertTrue(link.primary === a)
    XCTAssertEqual(link.endpoint, 0)
    XCTAssertEqual(link.switches, 1)
    XCTAssertEqual(link.reconnects, 0)
    XCTAssertEqual(link.generation, 2)
    XCTAssertTrue(link.streams.isEmpty)
    // The old primary closing as it retires is no loss.
    XCTAssertEqual(describe(link.sessionLost(b, reason: "retired", silentSince: nil)), [])
    XCTAssertEqual(link.state, .up)
    // On the preferred transport nothing more is tried.
    XCTAssertEqual(describe(link.preferredRetryWanted()), [])
  }

  func testFailedTriesOfThePreferredTransportsComeLessOften() {
    var link = makeLink(endpoints: 3)
    _ = link.started(FakeSession("c"), on: 2)
    XCTAssertEqual(describe(link.preferredRetryWanted()), [], "one try is scheduled already")
    var periods: [[String]] = []
    for _ in 0..<3 {
      XCTAssertEqual(describe(link.preferredRetryDue()), ["dial preferred 0 below 2"])
      XCTAssertEqual(
        describe(link.preferredDialFailed(on: 0, below: 2)), ["dial preferred 1 below 2"])
      periods.append(describe(link.preferredDialFailed(on: 1, below: 2)))
    }
    XCTAssertEqual(
      periods,
      [
        ["retry preferred after 2000 ms"], ["retry preferred after 4000 ms"],
        ["retry preferred after 4000 ms"],
      ])
  }

  /// The preferred transport answers just after the link it was to replace was lost: the
  /// reconnect rounds own the link then, and the new session is given back.
  func testPreferredTransportAnsweringAfterALossIsNotUsed() {
    var link = makeLink(endpoints: 2)
    let (a, b) = (FakeSession("a"), FakeSession("b"))
    _ = link.started(b, on: 1)
    XCTAssertEqual(describe(link.preferredRetryDue()), ["dial preferred 0 below 1"])
    XCTAssertEqual(
      describe(link.sessionLost(b, reason: "EOF", silentSince: nil)),
      ["close nothing: link lost: EOF", #"notify down(reason: "EOF")"#, "redial 0 after 100 ms"])
    XCTAssertEqual(
      describe(link.preferredAnswered(a, on: 0)),
      ["retire a within 1000 ms: not needed", "retry preferred after 1000 ms"])
    XCTAssertEqual(link.state, .down(reason: "EOF"))
    XCTAssertEqual(link.switches, 0)
    XCTAssertEqual(link.generation, 1)
    // The reconnect brought the preferred one back meanwhile: a late answer is not needed.
    let c = FakeSession("c")
    _ = link.redialled(c, on: 0)
    XCTAssertEqual(
      describe(link.preferredAnswered(FakeSession("d"), on: 0)),
      ["retire d within 1000 ms: not needed"])
    XCTAssertTrue(link.primary === c)
  }

  func testClosingDuringADialDropsWhatTheDialBrings() {
    var link = makeLink(endpoints: 2)
    let a = FakeSession("a")
    _ = link.started(a, on: 0)
    _ = link.sessionLost(a, reason: "EOF", silentSince: nil)
    let outcomes = Outcomes<FakeSession>()
    guard case .waiting = link.awaitUp({ outcomes.add($0) }, timeout: nil) else {
      return XCTFail("a waiter while the link is down must wait")
    }
    let closing = link.close(tidyingWithin: nil, failing: [{ outcomes.add($0) }])
    XCTAssertEqual(describe(closing), ["close nothing: unmounting", "fail 2", "notify closed"])
    handOver(closing)
    XCTAssertEqual(names(outcomes), ["failed", "failed"])
    XCTAssertFalse(link.isDown, "the dial in flight must not be followed by another")
    // The dial that was under way answers: its session is closed, the link stays closed.
    XCTAssertEqual(describe(link.redialled(FakeSession("b"), on: 1)), ["close b: pool closed"])
    XCTAssertEqual(describe(link.redialFailed(on: 1, error: refused)), [])
    XCTAssertFalse(link.adopt(stream: FakeSession("s"), dialledOn: 0))
    XCTAssertEqual(link.state, .closed)
    XCTAssertNil(link.primary)
    guard case .closed = link.awaitUp({ outcomes.add($0) }, timeout: nil) else {
      return XCTFail("a closed link takes no waiters")
    }
  }

  func testClosingTidilyRetiresEverySessionAndWaitsForAStreamDial() {
    var link = makeLink(endpoints: 1)
    let (a, stream) = (FakeSession("a"), FakeSession("s"))
    _ = link.started(a, on: 0)
    XCTAssertTrue(link.adopt(stream: stream, dialledOn: 0))
    XCTAssertEqual(
      describe(link.close(tidyingWithin: .seconds(3))),
      [
        "retire a, s within 3000 ms awaited: unmounting", "settle stream dial within 3000 ms",
        "fail 0", "notify closed",
      ])
  }

  func testWaitersAreWokenWhenTheLinkComesBackOrWaitWhatIsLeftOfTheOutage() {
    var link = makeLink(endpoints: 1)
    let a = FakeSession("a")
    _ = link.started(a, on: 0)
    // The server was last heard at `start`; the loss is noticed 10 s later.
    _ = link.sessionLost(a, reason: "silent", silentSince: start, now: start + .seconds(10))
    let outcomes = Outcomes<FakeSession>()
    let now = start + .seconds(10)
    guard
      case .waiting(let long, .some(let left), "silent") =
        link.awaitUp({ outcomes.add($0) }, timeout: .seconds(30), now: now)
    else { return XCTFail("not waiting") }
    XCTAssertEqual(left, .seconds(20), "the outage's 10 s count against the timeout")
    guard
      case .waiting(let short, .some(let grace), _) =
        link.awaitUp({ outcomes.add($0) }, timeout: .seconds(5), now: now)
    else { return XCTFail("not waiting") }
    XCTAssertEqual(grace, .seconds(1), "an outage longer than the timeout leaves the grace")
    guard case .waiting(_, nil, _) = link.awaitUp({ outcomes.add($0) }, timeout: nil, now: now)
    else {
      return XCTFail("a waiter without a timeout has no deadline")
    }
    XCTAssertNotNil(link.waiterTimedOut(short))
    XCTAssertNil(link.waiterTimedOut(short))
    let b = FakeSession("b")
    let back = link.redialled(b, on: 0, now: now)
    XCTAssertEqual(
      describe(back),
      [
        "notify up", "wake 2 with b", "watch b",
        "allow extra sessions after 2250 ms (generation 2)",
      ])
    handOver(back)
    XCTAssertEqual(names(outcomes), ["b", "b"])
    XCTAssertNil(link.waiterTimedOut(long), "woken already")
    guard case .up(let primary) = link.awaitUp({ outcomes.add($0) }, timeout: nil) else {
      return XCTFail("the link is up")
    }
    XCTAssertTrue(primary === b)
  }

  func testWithReconnectingOffALostLinkStaysDown() {
    var link = makeLink(endpoints: 2, reconnecting: false)
    let b = FakeSession("b")
    XCTAssertEqual(describe(link.started(b, on: 1)), ["notify up", "watch b"])
    XCTAssertEqual(
      describe(link.sessionLost(b, reason: "EOF", silentSince: nil)),
      ["close nothing: link lost: EOF", #"notify down(reason: "EOF")"#])
    XCTAssertEqual(link.state, .down(reason: "EOF"))
  }

  func testOnlyThePrimarysLossCounts() {
    var link = makeLink(endpoints: 1)
    let (a, stream) = (FakeSession("a"), FakeSession("s"))
    _ = link.started(a, on: 0)
    XCTAssertTrue(link.adopt(stream: stream, dialledOn: 0))
    XCTAssertEqual(describe(link.sessionLost(stream, reason: "EOF", silentSince: nil)), [])
    XCTAssertEqual(link.state, .up)
    XCTAssertFalse(describe(link.sessionLost(a, reason: "EOF", silentSince: nil)).isEmpty)
    XCTAssertEqual(describe(link.sessionLost(a, reason: "again", silentSince: nil)), [])
    XCTAssertEqual(link.state, .down(reason: "EOF"))
  }

  /// A stream session dialled on the transport the pool has just left must not join.
  func testAStreamSessionFromAnotherTransportIsNotAdopted() {
    var link = makeLink(endpoints: 2)
    _ = link.started(FakeSession("b"), on: 1)
    _ = link.preferredAnswered(FakeSession("a"), on: 0)
    XCTAssertFalse(link.adopt(stream: FakeSession("s"), dialledOn: 1))
    XCTAssertTrue(link.adopt(stream: FakeSession("t"), dialledOn: 0))
    XCTAssertEqual(link.streams.map(\.description), ["t"])
  }
}

/// A stand-in for a session: an object with a name.
final class FakeSession: Sendable, CustomStringConvertible {
  let description: String
  init(_ name: String) { description = name }
}

extension PoolLink where Connection == FakeSession {
  /// The failed reconnect rounds so far, while down.
  var phaseAttempt: Int? {
    if case .down(_, let attempt, _) = phase { attempt } else { nil }
  }
}

private func milliseconds(_ duration: Duration) -> Int {
  Int((duration / .milliseconds(1)).rounded())
}

private func delays(_ actions: [PoolLink<FakeSession>.Action]) -> [Int] {
  actions.compactMap { if case .redial(_, let delay) = $0 { milliseconds(delay) } else { nil } }
}

/// Who each waiter was handed: the session's name, or "failed".
private func names(_ outcomes: Outcomes<FakeSession>) -> [String] {
  outcomes.all.map { (try? $0.get())?.description ?? "failed" }
}

/// Runs the waiter actions as the pool would.
private func handOver(_ actions: [PoolLink<FakeSession>.Action]) {
  for action in actions {
    switch action {
    case .wake(let waiters, let session): for waiter in waiters { waiter(.success(session)) }
    case .fail(let waiters, let error): for waiter in waiters { waiter(.failure(error)) }
    default: break
    }
  }
}

/// The actions as short sentences (log lines left out), so a test reads like the story.
private func describe(_ actions: [PoolLink<FakeSession>.Action]) -> [String] {
  func names(_ sessions: [FakeSession]) -> String {
    sessions.isEmpty ? "nothing" : sessions.map(\.description).joined(separator: ", ")
  }
  return actions.compactMap { action in
    switch action {
    case .watch(let session): "watch \(session)"
    case .notify(let state): "notify \(state)"
    case .redial(let endpoint, let delay): "redial \(endpoint) after \(milliseconds(delay)) ms"
    case .dialPreferred(let endpoint, let below): "dial preferred \(endpoint) below \(below)"
    case .schedulePreferredRetry(let delay): "retry preferred after \(milliseconds(delay)) ms"
    case .close(let sessions, let reason): "close \(names(sessions)): \(reason)"
    case .retire(let sessions, let reason, let grace, let awaited):
      "retire \(names(sessions)) within \(milliseconds(grace)) ms\(awaited ? " awaited" : ""): \(reason)"
    case .settleStreamDial(let grace): "settle stream dial within \(milliseconds(grace)) ms"
    case .allowExtraSessions(let delay, let generation):
      "allow extra sessions after \(milliseconds(delay)) ms (generation \(generation))"
    case .wake(let waiters, let session): "wake \(waiters.count) with \(session)"
    case .fail(let waiters, _): "fail \(waiters.count)"
    case .log: nil
    }
  }
}
