import Foundation
import Synchronization

/// The keepalive rule for one link, fed the primary session's silence at each tick.
///
/// After one keepalive period without a frame from the server a probe goes out (whether or
/// not other requests wait for replies: a frozen server answers none of them); when the
/// silence reaches ``ReconnectPolicy/keepaliveMisses`` periods with the probe unanswered, the
/// session counts as dead. A new primary starts afresh.
struct KeepaliveWatch<Connection: AnyObject> {
  /// Silence after which a probe goes out.
  let interval: Duration
  /// Silence, with the probe unanswered, after which the session counts as dead.
  let deadAfter: Duration

  enum Verdict {
    case wait
    /// Send a probe on the session; set the flag when it is answered (in any way).
    case probe(ProbeFlag)
    /// Close the session: the server has not been heard for `silence`.
    case dead(silence: Duration)
  }

  private var probing: (session: Connection, answered: ProbeFlag)?

  init(interval: Duration, misses: Int) {
    self.interval = interval
    deadAfter = interval * max(2, misses)
  }

  /// How often to look: often enough that "two periods" means two periods, not three, and
  /// that a stall (``Pool/stallAfter``) is seen within half a second (the watch also wakes
  /// when a waiting request becomes overdue).
  var tick: Duration { min(max(interval / 8, .milliseconds(20)), .milliseconds(500)) }

  /// One look at `session` (nil while the link is down), last heard `silence` ago.
  mutating func check(_ session: Connection?, silence: Duration) -> Verdict {
    guard let session else {
      probing = nil
      return .wait
    }
    if let probe = probing, probe.session === session, !probe.answered.isSet {
      guard silence >= deadAfter else { return .wait }
      probing = nil
      return .dead(silence: silence)
    }
    guard silence >= interval else { return .wait }
    let answered = ProbeFlag()
    probing = (session, answered)
    return .probe(answered)
  }
}

/// Set once a keepalive probe has its answer (any answer: the server is alive).
final class ProbeFlag: Sendable {
  private let value = Atomic(false)

  var isSet: Bool { value.load(ordering: .acquiring) }

  func set() { value.store(true, ordering: .releasing) }
}

extension Pool {
  /// Watches the primary session's silence on a thread of its own (see ``KeepaliveWatch``);
  /// a dead session is closed, silently, and the link counts as down.
  func startKeepalive() {
    guard let interval = policy.keepaliveInterval else { return }
    let first = state.withLock { state in
      defer { state.keepaliveStarted = true }
      return !state.keepaliveStarted
    }
    guard first else { return }
    let misses = policy.keepaliveMisses
    let thread = Thread { [weak self] in
      var watch = KeepaliveWatch<Session>(interval: interval, misses: misses)
      var nap = watch.tick
      while true {
        Thread.sleep(forTimeInterval: nap.timeInterval)
        nap = watch.tick
        guard let self else { return }
        if case .closed = self.linkState { return }
        let current = self.current
        let silence = current.map { $0.lastReceived.duration(to: .now) } ?? .zero
        let verdict = watch.check(current, silence: silence)
        let waited = current?.waitingSince.map { $0.duration(to: .now) }
        self.noteStall(waited.map { $0 >= Self.stallAfter } ?? false)
        // A request waiting: look again the moment it becomes overdue, not up to a tick late.
        if let waited, waited < Self.stallAfter {
          nap = min(nap, Self.stallAfter - waited + .milliseconds(5))
        }
        guard let session = current else { continue }
        switch verdict {
        case .wait:
          continue
        case .dead(let silence):
          let seconds = Int(silence.timeInterval.rounded())
          self.logger.warning(
            "keepalive: nothing from \(self.address) for \(seconds) s; the link counts as down")
          session.close(reason: "no answer to keepalives for \(seconds) s", silent: true)
        case .probe(let answered):
          // No timeout of its own: the silence decides, and a flush would only add traffic.
          session.send(.tstat(fid: session.rootFid), options: RequestOptions(timeout: .some(nil))) {
            _ in answered.set()
          }
        }
      }
    }
    thread.name = "9p-keepalive"
    thread.start()
  }
}
