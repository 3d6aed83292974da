import Foundation
import NinePProtocol

/// Blocks a thread until a result arrives: ``Session/sendAndWait(_:timeout:)`` during the
/// handshake and in tests, never on a FUSE or reader thread.
///
/// `@unchecked Sendable`: `result` is only touched with `condition` held. A condition variable
/// rather than a `Mutex`: the waiting thread sleeps until `set` signals it.
final class ResultBox: @unchecked Sendable {
  private let condition = NSCondition()
  private var result: Result<Message, NinePError>?

  func set(_ value: Result<Message, NinePError>) {
    condition.lock()
    result = value
    condition.signal()
    condition.unlock()
  }

  func wait() -> Result<Message, NinePError> {
    condition.lock()
    defer { condition.unlock() }
    while true {
      if let result { return result }
      condition.wait()
    }
  }
}
