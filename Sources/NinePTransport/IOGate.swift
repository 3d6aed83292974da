import CBlueZ
import Glibc
import Synchronization

/// Lets `close()` on one thread wake every thread blocked on a set of descriptors, and closes
/// those descriptors only after the last such thread has left.
///
/// Closing a descriptor under a blocked reader is racy (the number can be reused at once and the
/// reader may never wake), so every blocking operation enters the gate, waits with `poll()` on its
/// descriptor plus the gate's wake-up pipe, and leaves. `close()` writes to the wake-up pipe (which
/// stays readable, so every waiter sees it) and the last thread out runs `release`.
final class IOGate: Sendable {
  private struct State {
    var closed = false
    var users = 0
    var released = false
  }

  private let state = Mutex(State())
  private let wakeRead: Int32
  private let wakeWrite: Int32
  private let release: @Sendable () -> Void

  /// - Parameter release: closes the guarded descriptors; runs exactly once, after `close()`,
  ///   when no operation is inside the gate.
  init(release: @escaping @Sendable () -> Void) throws(TransportError) {
    var fds: [Int32] = [-1, -1]
    guard pipe2(&fds, O_CLOEXEC | O_NONBLOCK) == 0 else {
      throw .io(operation: "wake-up pipe creation", errno: errno)
    }
    wakeRead = fds[0]
    wakeWrite = fds[1]
    self.release = release
  }

  deinit {
    close()
  }

  var isClosed: Bool { state.withLock { $0.closed } }

  /// Runs `body` inside the gate; throws `.closed` once `close()` has been called.
  func withAccess<Result>(_ body: () throws(TransportError) -> Result) throws(TransportError)
    -> Result
  {
    try state.withLock { (state) throws(TransportError) in
      if state.closed { throw .closed }
      state.users += 1
    }
    defer { leave() }
    return try body()
  }

  private func leave() {
    let last = state.withLock { state in
      state.users -= 1
      guard state.closed, state.users == 0, !state.released else { return false }
      state.released = true
      return true
    }
    if last { finish() }
  }

  /// Marks the gate closed, wakes every waiter and, if none is inside, releases at once.
  /// Idempotent.
  func close() {
    let releaseNow = state.withLock { state in
      guard !state.closed else { return false }
      state.closed = true
      var byte: UInt8 = 1
      // house: one byte into the gate's own non-blocking pipe; under the lock, so the last
      // thread out cannot have closed it yet.
      _ = Glibc.write(wakeWrite, &byte, 1)
      guard state.users == 0 else { return false }
      state.released = true
      return true
    }
    if releaseNow { finish() }
  }

  private func finish() {
    release()
    _ = Glibc.close(wakeRead)
    _ = Glibc.close(wakeWrite)
  }

  /// Waits until `fd` reports one of `events` (or an error/hang-up), the timeout passes, or the
  /// gate is closed. Call only inside `withAccess`.
  /// - Returns: the descriptor's `revents`, or `nil` on timeout.
  /// - Throws: `.closed` when woken by `close()`.
  func wait(for fd: Int32, events: Int16, timeoutMilliseconds: Int32 = -1) throws(TransportError)
    -> Int16?
  {
    var fds = [
      pollfd(fd: fd, events: events, revents: 0),
      pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0),
    ]
    while true {
      let count = poll(&fds, 2, timeoutMilliseconds)
      if count < 0 {
        if errno == EINTR { continue }
        throw .io(operation: "poll", errno: errno)
      }
      if fds[1].revents != 0 { throw .closed }
      if count == 0 { return nil }
      if fds[0].revents & Int16(POLLNVAL) != 0 { throw .io(operation: "poll", errno: EBADF) }
      return fds[0].revents
    }
  }
}
