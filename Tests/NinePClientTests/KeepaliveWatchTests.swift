import XCTest

@testable import NinePClient

/// The keepalive rule (``KeepaliveWatch``) fed silences by hand: no session, no thread.
final class KeepaliveWatchTests: XCTestCase {
  private func verdict(_ verdict: KeepaliveWatch<FakeSession>.Verdict) -> String {
    switch verdict {
    case .wait: "wait"
    case .probe: "probe"
    case .dead(let silence): "dead after \(Int((silence / .milliseconds(1)).rounded())) ms"
    }
  }

  func testAProbeAfterOnePeriodAndDeadAfterTheMissesUnanswered() {
    var watch = KeepaliveWatch<FakeSession>(interval: .seconds(1), misses: 2)
    let session = FakeSession("a")
    let silences: [Duration] = [
      .milliseconds(500), .seconds(1), .milliseconds(1500), .milliseconds(2100),
    ]
    XCTAssertEqual(
      silences.map { verdict(watch.check(session, silence: $0)) },
      ["wait", "probe", "wait", "dead after 2100 ms"])
  }

  func testAnAnsweredProbeKeepsTheSessionAndTheNextSilenceProbesAgain() {
    var watch = KeepaliveWatch<FakeSession>(interval: .seconds(1), misses: 2)
    let session = FakeSession("a")
    guard case .probe(let answered) = watch.check(session, silence: .seconds(1)) else {
      return XCTFail("no probe after a period of silence")
    }
    answered.set()
    XCTAssertEqual(verdict(watch.check(session, silence: .seconds(3))), "probe")
  }

  func testANewPrimaryOrALostLinkStartsAfresh() {
    var watch = KeepaliveWatch<FakeSession>(interval: .seconds(1), misses: 2)
    let (a, b) = (FakeSession("a"), FakeSession("b"))
    XCTAssertEqual(verdict(watch.check(a, silence: .seconds(1))), "probe")
    XCTAssertEqual(verdict(watch.check(b, silence: .seconds(5))), "probe", "b was never probed")
    XCTAssertEqual(verdict(watch.check(nil, silence: .zero)), "wait")
    XCTAssertEqual(verdict(watch.check(b, silence: .seconds(5))), "probe", "the link was down")
    XCTAssertEqual(verdict(watch.check(b, silence: .seconds(5))), "dead after 5000 ms")
  }

  func testMissesAreTwoAtLeastAndTheTickIsAnEighthOfAPeriod() {
    XCTAssertEqual(
      KeepaliveWatch<FakeSession>(interval: .seconds(1), misses: 1).deadAfter, .seconds(2))
    XCTAssertEqual(
      KeepaliveWatch<FakeSession>(interval: .seconds(1), misses: 3).deadAfter, .seconds(3))
    XCTAssertEqual(
      KeepaliveWatch<FakeSession>(interval: .seconds(1), misses: 2).tick, .milliseconds(125))
    XCTAssertEqual(
      KeepaliveWatch<FakeSession>(interval: .milliseconds(100), misses: 2).tick, .milliseconds(20))
  }
}
