import Foundation

/// The slots of ``ConnectionLimit/backlog(_:)``: how many accepted connections are live.
// @unchecked Sendable: `inUse` and `closed` are touched only with `condition` locked.
final class ConnectionSlots: @unchecked Sendable {
  // A condition variable, not a Mutex: acquire() and waitForRoom() wait until release() or
  // close() signals.
  private let condition = NSCondition()
  private let limit: Int
  private var inUse = 0
  private var closed = false

  init(limit: Int) {
    self.limit = limit
  }

  /// Waits until a slot is free without taking it; `onWait` runs once if it has to wait.
  /// Returns false once closed.
  func waitForRoom(onWait: (Int) -> Void) -> Bool {
    let full = condition.withLock { inUse >= limit && !closed }
    if full { onWait(limit) }
    return condition.withLock {
      while inUse >= limit && !closed { condition.wait() }
      return !closed
    }
  }

  /// Takes a slot, waiting for one if needed. Returns false once closed.
  func acquire() -> Bool {
    condition.withLock {
      while inUse >= limit && !closed { condition.wait() }
      guard !closed else { return false }
      inUse += 1
      return true
    }
  }

  /// Gives a slot back.
  func release() {
    condition.withLock {
      inUse = max(0, inUse - 1)
      condition.broadcast()
    }
  }

  /// Wakes every waiter for good (the server is stopping).
  func close() {
    condition.withLock {
      closed = true
      condition.broadcast()
    }
  }
}
