import Glibc

// State the signal handlers read: set up before any handler is installed, never freed.
// Written by saveModes() before install(), then only read (the handlers, uninstall()).
nonisolated(unsafe) private var savedModes = termios()
// Written with savedModes, then only read.
nonisolated(unsafe) private var haveSavedModes = false
// Written by install() before it installs the handlers that read it, then only read.
nonisolated(unsafe) private var leaveSequence: UnsafeMutablePointer<UInt8>?
// Written with leaveSequence, then only read.
nonisolated(unsafe) private var leaveSequenceLength = 0
// What a crash says before the signal's number: written with leaveSequence, then only read.
nonisolated(unsafe) private var crashPrefix: UnsafeMutablePointer<UInt8>?
// Written with crashPrefix, then only read.
nonisolated(unsafe) private var crashPrefixLength = 0
// Written by install() before it installs the handlers that write to it, then only read.
nonisolated(unsafe) private var wakeDescriptor: Int32 = -1
// Set by a handler, read by the loop: one aligned Int32 store (C's `sig_atomic_t` idiom).
nonisolated(unsafe) private var caughtSignal: Int32 = 0
// Set by the SIGWINCH handler, read and cleared by the loop: as `caughtSignal`.
nonisolated(unsafe) private var resized: Int32 = 0

/// Leaves the terminal as it was found, whatever ends the client: a quit (curses' `endwin`),
/// a kill (SIGTERM, SIGHUP, SIGINT, SIGQUIT end the loop, which then quits normally), or a
/// crash (SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGABRT, SIGFPE: the handler writes the
/// terminal's own "leave" strings, read from terminfo at start, restores the saved modes, says
/// it crashed, and dies of the same signal).
enum TerminalGuard {
  static let terminating = [SIGTERM, SIGHUP, SIGINT, SIGQUIT]
  static let fatal = [SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGABRT, SIGFPE]

  /// Saves the terminal's modes; call before curses starts.
  static func saveModes() {
    haveSavedModes = tcgetattr(STDIN_FILENO, &savedModes) == 0
  }

  /// Installs the handlers; `leave` is what undoes curses' screen (from terminfo), `wake` the
  /// inbox pipe a handled signal wakes the loop with.
  static func install(leave: [UInt8], wake: Int32) {
    let buffer = UnsafeMutablePointer<UInt8>.allocate(capacity: max(leave.count, 1))
    buffer.initialize(from: leave, count: leave.count)
    leaveSequence = buffer
    leaveSequenceLength = leave.count
    let crash = Array("mount9bbs chat: crashed on signal ".utf8)
    let prefix = UnsafeMutablePointer<UInt8>.allocate(capacity: crash.count)
    prefix.initialize(from: crash, count: crash.count)
    crashPrefix = prefix
    crashPrefixLength = crash.count
    wakeDescriptor = wake
    for number in terminating {
      signal(number) { number in
        caughtSignal = number
        var byte: UInt8 = 1
        _ = write(wakeDescriptor, &byte, 1)
      }
    }
    signal(SIGWINCH) { _ in
      resized = 1
      var byte: UInt8 = 1
      _ = write(wakeDescriptor, &byte, 1)
    }
    signal(SIGPIPE, SIG_IGN)
    for number in fatal {
      signal(number) { number in
        if let sequence = leaveSequence { _ = write(STDOUT_FILENO, sequence, leaveSequenceLength) }
        if haveSavedModes { tcsetattr(STDIN_FILENO, TCSANOW, &savedModes) }
        // Only write(2) here: the number's two digits and a newline from the stack.
        if let prefix = crashPrefix { _ = write(STDERR_FILENO, prefix, crashPrefixLength) }
        var digits: (UInt8, UInt8, UInt8) = (
          UInt8(ascii: "0") + UInt8(number / 10 % 10), UInt8(ascii: "0") + UInt8(number % 10),
          UInt8(ascii: "\n")
        )
        withUnsafeBytes(of: &digits) { bytes in
          let skip = number < 10 ? 1 : 0
          _ = write(STDERR_FILENO, bytes.baseAddress.map { $0 + skip }, 3 - skip)
        }
        signal(number, SIG_DFL)
        raise(number)
      }
    }
  }

  /// The terminating signal caught, if any.
  static var signalCaught: Int32 { caughtSignal }

  /// Whether the window changed size since the last call.
  static func takeResize() -> Bool {
    defer { resized = 0 }
    return resized != 0
  }

  /// Puts back the default handlers and the saved modes (after `endwin`, which restores them
  /// too: this covers a terminal curses never fully took).
  static func uninstall() {
    for number in terminating + fatal + [SIGWINCH] { signal(number, SIG_DFL) }
    if haveSavedModes { tcsetattr(STDIN_FILENO, TCSANOW, &savedModes) }
  }
}
