import Dispatch
import Glibc
import Synchronization

/// A request parked until one of several parties answers it: new data, an interrupt
/// (`EINTR`), a deadline, or the mount's shutdown (`EIO`). Exactly one of them gets the
/// request through ``take()`` and replies; the others get nil.
///
/// Typical use in a read that waits at the end of a stream, on the libfuse thread that got the
/// request and with no lock held:
///
/// ```swift
/// let pending = PendingReply(request) { [weak self] in self?.forget($0) }  // interrupt → EINTR
/// lock.withLock {
///   if let bytes = available() { pending.take()?.replyData(bytes) }
///   else if !pending.isAnswered { waiters.append(pending) }  // an interrupt may have come first
/// }
/// ```
/// and, when data arrives, `for w in waiters { w.take()?.replyData(…) }`.
public final class PendingReply: Sendable, Hashable {
  private let slot: Mutex<FuseRequest?>
  /// The parked request (for logs and lookups; reply only through ``take()``).
  public let request: FuseRequest

  /// Parks `request`. Unless `interruptible` is false, an interrupt answers it (with `EINTR`,
  /// or through `answerInterrupt`, which runs off libfuse's thread) and then calls `onCancel`
  /// with this object (to drop it from the caller's wait list).
  ///
  /// Create it while the request is still private and without holding any lock that
  /// `onCancel` takes: an interrupt that already arrived is handled before `init` returns.
  public init(
    _ request: FuseRequest, interruptible: Bool = true,
    onCancel: (@Sendable (PendingReply) -> Void)? = nil,
    answerInterrupt: (@Sendable (FuseRequest) -> Void)? = nil
  ) {
    self.request = request
    slot = Mutex(request)
    guard interruptible else { return }
    request.onInterrupt { [weak self] _ in
      guard let self, let r = self.take() else { return }
      if let answerInterrupt {
        // libfuse holds its request lock while calling us; an answer that takes our own
        // locks must not run under it.
        DispatchQueue.global().async {
          answerInterrupt(r)
          onCancel?(self)
        }
      } else {
        r.replyError(EINTR)
        onCancel?(self)
      }
    }
  }

  /// Takes the request: the caller that gets it must reply to it. Nil if it was taken already.
  public func take() -> FuseRequest? {
    slot.withLock { r in
      defer { r = nil }
      return r
    }
  }

  /// Whether someone took the request already (and so answered it or will).
  public var isAnswered: Bool { slot.withLock { $0 == nil } }

  public static func == (a: PendingReply, b: PendingReply) -> Bool { a === b }
  public func hash(into h: inout Hasher) { h.combine(ObjectIdentifier(self)) }
}
