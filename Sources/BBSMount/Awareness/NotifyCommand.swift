import Foundation
import Glibc
import Logging
import Synchronization

/// `-o notify-command=CMD`: runs CMD once per mention with `ROOM`, `AUTHOR`, `TEXT` and `BOARD`
/// (the board as the user mounted it) in its environment.
///
/// CMD is split at spaces into a program and its arguments and started with posix_spawnp: no
/// shell ever sees the message, so nothing in it (`$(…)`, quotes, newlines) can run. At most
/// ``maximumRunning`` run at once and ``maximumWaiting`` wait; a flood beyond that is
/// dropped (logged once per burst). Every child is waited for, so none is left a zombie.
final class NotifyCommand: Sendable {
  private struct State {
    /// Children started and not yet ended.
    var running = 0
    /// Each waiting mention's variables, oldest first.
    var waiting: [[String: String]] = []
    /// Mentions dropped since the log last said so.
    var dropped = 0
  }

  let arguments: [String]
  private let logger: Logger
  private let state = Mutex(State())
  static let maximumRunning = 4
  static let maximumWaiting = 64
  /// The longest TEXT passed: Linux refuses an environment string over 128 KiB.
  static let longestText = 100 << 10

  /// The board as the user named it (`BOARD` in the command's environment).
  private let board: String

  init?(command: String, board: String = "", logger: Logger) {
    let words = command.split(separator: " ").map(String.init)
    guard !words.isEmpty else { return nil }
    arguments = words
    self.board = TerminalText.oneLine(board)
    self.logger = logger
  }

  func run(room: String, author: String, text: String) {
    let variables = [
      // The room's name is the server's bytes (author and text come from the room line,
      // already as its file shows them): written the same way.
      "ROOM": TerminalText.oneLine(room), "AUTHOR": Self.clean(author), "BOARD": board,
      "TEXT": String(
        decoding: Array(Self.clean(text).utf8.prefix(Self.longestText)), as: UTF8.self),
    ]
    let start: Bool = state.withLock { state in
      if state.running < Self.maximumRunning {
        state.running += 1
        return true
      }
      if state.waiting.count < Self.maximumWaiting {
        state.waiting.append(variables)
      } else {
        state.dropped += 1
      }
      return false
    }
    // Off the room feed's thread: starting a process takes a while.
    if start { DispatchQueue.global().async { [self] in spawn(variables) } }
  }

  /// No NUL can pass through an environment string.
  private static func clean(_ text: String) -> String {
    text.contains("\0") ? text.replacing("\0", with: "\\x00") : text
  }

  private func spawn(_ variables: [String: String]) {
    var environment = ProcessInfo.processInfo.environment
    for (key, value) in variables { environment[key] = value }
    let argv = arguments.map { strdup($0) } + [nil]
    let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer {
      for pointer in argv { free(pointer) }
      for pointer in envp { free(pointer) }
    }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    // The daemon's blocked signals are not the child's business.
    var signals = sigset_t()
    sigemptyset(&signals)
    posix_spawnattr_setsigmask(&attributes, &signals)
    var defaults = sigset_t()
    sigemptyset(&defaults)
    for signal in [SIGPIPE, SIGINT, SIGTERM, SIGHUP] { sigaddset(&defaults, signal) }
    posix_spawnattr_setsigdefault(&attributes, &defaults)
    // Its own session (glibc's POSIX_SPAWN_SETSID, 0x80): a Ctrl-C at a foreground mount's
    // terminal is not the command's.
    let newSession: Int32 = 0x80
    posix_spawnattr_setflags(
      &attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | newSession))
    var pid: pid_t = 0
    guard let program = argv[0] else { return finished() }
    let rc = posix_spawnp(&pid, program, &actions, &attributes, argv, envp)
    guard rc == 0 else {
      logger.warning(
        "notify-command \(arguments[0]): cannot start: \(String(cString: strerror(rc)))")
      return finished()
    }
    let child = pid
    Thread.detachNewThread { [self] in
      var status: Int32 = 0
      while waitpid(child, &status, 0) < 0 && errno == EINTR {}
      finished()
    }
  }

  /// A child ended (or never started): start the next waiting one.
  private func finished() {
    let (next, lost): ([String: String]?, Int) = state.withLock { state in
      let lost = state.dropped
      state.dropped = 0
      if state.waiting.isEmpty {
        state.running -= 1
        return (nil, lost)
      }
      return (state.waiting.removeFirst(), lost)
    }
    if lost > 0 { logger.warning("notify-command: \(lost) mention(s) dropped (too many at once)") }
    if let next { spawn(next) }
  }
}
