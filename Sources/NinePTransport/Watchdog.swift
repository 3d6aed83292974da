import Dispatch
import Synchronization

/// Runs an action once after a delay unless cancelled first: a handshake (Tversion, the secure
/// channel's) closes a transport whose peer does not answer in time.
public final class Watchdog: Sendable {
  private struct State {
    var done = false
    var fired = false
  }
  private let state = Mutex(State())

  public init(after delay: Duration, action: @escaping @Sendable () -> Void) {
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
  public var fired: Bool { state.withLock { $0.fired } }

  public func cancel() {
    state.withLock { $0.done = true }
  }
}
