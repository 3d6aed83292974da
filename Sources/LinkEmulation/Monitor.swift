import Glibc

/// A mutex with one condition variable on CLOCK_MONOTONIC, for threads that wait until a
/// deadline or a signal (Synchronization's `Mutex` has no condition).
///
/// `@unchecked Sendable`: the pthread mutex and condition sit at fixed heap addresses for
/// the monitor's whole life and are used only through pthread calls, which are thread-safe.
final class Monitor: @unchecked Sendable {
  private let mutex: UnsafeMutablePointer<pthread_mutex_t>
  private let condition: UnsafeMutablePointer<pthread_cond_t>

  init() {
    mutex = .allocate(capacity: 1)
    condition = .allocate(capacity: 1)
    pthread_mutex_init(mutex, nil)
    var attributes = pthread_condattr_t()
    pthread_condattr_init(&attributes)
    pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
    pthread_cond_init(condition, &attributes)
    pthread_condattr_destroy(&attributes)
  }

  deinit {
    pthread_cond_destroy(condition)
    pthread_mutex_destroy(mutex)
    condition.deallocate()
    mutex.deallocate()
  }

  func withLock<T>(_ body: () throws -> T) rethrows -> T {
    pthread_mutex_lock(mutex)
    defer { pthread_mutex_unlock(mutex) }
    return try body()
  }

  /// Waits (lock held) for a broadcast or until `deadline` (monotonic ns); nil waits forever.
  func wait(until deadline: Int64?) {
    guard let deadline else {
      pthread_cond_wait(condition, mutex)
      return
    }
    var time = timespec(
      tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
    pthread_cond_timedwait(condition, mutex, &time)
  }

  func broadcast() {
    pthread_cond_broadcast(condition)
  }
}

/// CLOCK_MONOTONIC in nanoseconds.
func monotonicNanoseconds() -> Int64 {
  var time = timespec()
  clock_gettime(CLOCK_MONOTONIC, &time)
  return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
}
