import Foundation
import Synchronization

/// Where the board gets its time from. Tests substitute ``ManualBoardClock``.
public protocol BoardClock: Sendable {
  /// Milliseconds since the Unix epoch.
  var wallMillis: UInt64 { get }
  /// Milliseconds since the server started (a device's `k_uptime_get()`).
  var uptimeMillis: UInt64 { get }
}

/// The real clock: wall time from the system, uptime from a monotonic clock.
public struct SystemBoardClock: BoardClock {
  private let start: ContinuousClock.Instant

  /// Starts counting uptime now.
  public init() { start = ContinuousClock.now }

  public var wallMillis: UInt64 {
    UInt64(max(0, Date().timeIntervalSince1970 * 1000))
  }

  public var uptimeMillis: UInt64 {
    let elapsed = ContinuousClock.now - start
    let (seconds, attoseconds) = elapsed.components
    return UInt64(max(0, seconds)) * 1000 + UInt64(max(0, attoseconds)) / 1_000_000_000_000_000
  }
}

/// A clock that only moves when told to; for tests.
public final class ManualBoardClock: BoardClock {
  private let state: Mutex<(wall: UInt64, uptime: UInt64)>

  /// Creates a clock reading the given times.
  public init(wallMillis: UInt64 = 1_738_005_432_123, uptimeMillis: UInt64 = 0) {
    state = Mutex((wallMillis, uptimeMillis))
  }

  public var wallMillis: UInt64 { state.withLock { $0.wall } }
  public var uptimeMillis: UInt64 { state.withLock { $0.uptime } }

  /// Moves both clocks forward.
  public func advance(millis: UInt64) {
    state.withLock {
      $0.wall += millis
      $0.uptime += millis
    }
  }
}
