import Dispatch
import NinePTransport
import Synchronization

/// Runs an action once after a delay unless cancelled first: the handshake closes a transport
/// whose server does not answer Tversion in time.
final class Watchdog: Sendable {
  private struct State {
    var done = false
    var fired = false
  }
  private let state = Mutex(State())

  init(after delay: Duration, action: @escaping @Sendable () -> Void) {
    DispatchQueue.global().asyncAfter(deadline: .now() + delay.timeInterval) { [self] in
      let run = state.withLock { state -> Bool in
        guard !state.done else { return false }
        state.done = true
        state.fired = true
        return true
      }
      if run { action() }
    }
  }

  /// Whether the action ran.
  var fired: Bool { state.withLock { $0.fired } }

  func cancel() {
    state.withLock { $0.done = true }
  }
}
