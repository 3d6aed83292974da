import CFuse3
import Foundation
import Glibc
import Synchronization

/// SIGINT/SIGTERM/SIGHUP for the mount that handles signals.
///
/// libfuse's handlers only set the session's exit flag; the loop sees it when its semaphore
/// wait is interrupted, which happens only if the signal lands on the loop's thread. This
/// relay calls libfuse's handler, then writes the signal number to a pipe; a relay thread
/// reads it and calls `FuseMount.exit()`, which wakes the loop wherever the signal landed.
enum SignalRelay {
  static let signals = [SIGINT, SIGTERM, SIGHUP]

  // Read by the signal handler, so plain C storage: written before the handler is installed.
  nonisolated(unsafe) static var libfuseHandlers: [sigaction] = Array(
    repeating: sigaction(), count: 65)
  // The relay pipe's write end, for the handler: likewise written before it is installed.
  nonisolated(unsafe) static var writeFD: Int32 = -1
  static let target = Mutex<FuseMount?>(nil)
  static let started = Mutex(false)

  /// Clears the signal mask inherited from the parent and restores default dispositions, so
  /// that `fuse_set_signal_handlers` (which only replaces default handlers) takes effect.
  static func prepare() {
    var empty = sigset_t()
    sigemptyset(&empty)
    pthread_sigmask(SIG_SETMASK, &empty, nil)
    for s in signals { signal(s, SIG_DFL) }
  }

  /// After `fuse_set_signal_handlers`: wraps libfuse's handlers with the relay.
  static func install(_ mount: FuseMount) {
    startRelayThread()
    target.withLock { $0 = mount }
    for s in signals {
      var current = sigaction()
      sigaction(s, nil, &current)
      libfuseHandlers[Int(s)] = current
      var relay = current
      relay.__sigaction_handler.sa_handler = relaySignal
      sigaction(s, &relay, nil)
    }
  }

  /// Before `fuse_remove_signal_handlers`: puts libfuse's handlers back, then removes them
  /// (restoring the defaults). `ignoringSignals`: the relay is replaced by SIG_IGN in one step
  /// instead, which libfuse then leaves alone (it restores only where its own handler is), so
  /// no signal finds the default action in between.
  static func uninstall(_ se: OpaquePointer, ignoringSignals: Bool = false) {
    for s in signals {
      if ignoringSignals {
        signal(s, SIG_IGN)
      } else {
        var saved = libfuseHandlers[Int(s)]
        sigaction(s, &saved, nil)
      }
    }
    fuse_remove_signal_handlers(se)
    target.withLock { $0 = nil }
  }

  private static func startRelayThread() {
    let first = started.withLock { s -> Bool in
      defer { s = true }
      return !s
    }
    guard first else { return }
    var fds: [Int32] = [-1, -1]
    guard pipe(&fds) == 0 else { return }
    for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
    writeFD = fds[1]
    let readFD = fds[0]
    let thread = Thread {
      var b: UInt8 = 0
      while true {
        let n = read(readFD, &b, 1)
        if n < 0 && errno == EINTR { continue }
        guard n == 1 else { return }
        SignalRelay.target.withLock { $0 }?.exit()
      }
    }
    thread.name = "fuse-signals"
    thread.start()
  }
}

private func relaySignal(_ sig: Int32) {
  let saved = SignalRelay.libfuseHandlers[Int(sig)].__sigaction_handler.sa_handler
  if let handler = saved, unsafeBitCast(handler, to: Int.self) > 1 { handler(sig) }
  var b = UInt8(truncatingIfNeeded: sig)
  _ = write(SignalRelay.writeFD, &b, 1)
}
