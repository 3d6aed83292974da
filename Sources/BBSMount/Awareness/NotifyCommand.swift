import Foundation
import Glibc
import Logging
import Synchronization
import TerminalText

/// `-o notify-command=CMD`: runs CMD once per mention with `ROOM`, `AUTHOR`, `TEXT` and `BOARD`
/// (the board as the user mounted it) in its environment.
///
/// CMD is split at spaces into a program and its arguments and started with posix_spawnp: no
/// shell ever sees the message, so nothing in it (`$(…)`, quotes, newlines) can run. Runs go
/// one at a time, so they come in the order of the mentions. A flood is coalesced, as desktop
/// notifications are: at most `burstLimit` runs start within ``burstWindow``; the mentions
/// beyond that become one run when the window ends, with `COUNT` set, `TEXT` saying how many
/// more there were, `ROOM` and `AUTHOR` listing where and who. At most `maximumWaiting` runs
/// wait (a command slower than the mentions); beyond that they are dropped (logged once per
/// burst). Every child is waited for, so none is left a zombie.
final class NotifyCommand: Sendable {
  private struct State {
    /// Children started and not yet ended.
    var running = 0
    /// Each waiting mention's variables, oldest first.
    var waiting: [[String: String]] = []
    /// Mentions dropped since the log last said so.
    var dropped = 0
    /// The burst window: when it began, runs taken in it, mentions held for its summary.
    var windowStart = ContinuousClock.now
    var takenInWindow = 0
    var held: [(room: String, author: String)] = []
    var flushScheduled = false
  }

  let arguments: [String]
  private let logger: Logger
  private let state = Mutex(State())
  static let maximumRunning = 1
  static let burstWindow: Duration = .seconds(1)
  /// Runs that may wait behind the running one (64).
  let maximumWaiting: Int
  /// Runs started per ``burstWindow`` before the rest are summed up (3).
  let burstLimit: Int
  /// The longest TEXT passed: Linux refuses an environment string over 128 KiB.
  static let longestText = 100 << 10

  /// The board as the user named it (`BOARD` in the command's environment).
  private let board: String

  init?(
    command: String, board: String = "", logger: Logger, maximumWaiting: Int = 64,
    burstLimit: Int = 3
  ) {
    let words = command.split(separator: " ").map(String.init)
    guard !words.isEmpty else { return nil }
    arguments = words
    self.maximumWaiting = maximumWaiting
    self.burstLimit = burstLimit
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
    let (start, flushIn): (Bool, Duration?) = state.withLock { state in
      let now = ContinuousClock.now
      if state.windowStart.duration(to: now) >= Self.burstWindow {
        state.windowStart = now
        state.takenInWindow = 0
      }
      guard state.takenInWindow < burstLimit else {
        state.held.append((variables["ROOM"] ?? "", variables["AUTHOR"] ?? ""))
        if state.held.count > 10_000 { state.held.removeFirst(state.held.count - 10_000) }
        guard !state.flushScheduled else { return (false, nil) }
        state.flushScheduled = true
        return (false, Self.burstWindow - state.windowStart.duration(to: now))
      }
      state.takenInWindow += 1
      return (take(variables, &state), nil)
    }
    // Off the room feed's thread: starting a process takes a while.
    if start { DispatchQueue.global().async { [self] in spawn(variables) } }
    if let flushIn {
      DispatchQueue.global().asyncAfter(
        deadline: .now() + max(flushIn, .milliseconds(10)).timeInterval
      ) { [self] in flush() }
    }
  }

  /// Queues a run; true if it may start now (nothing else running).
  private func take(_ variables: [String: String], _ state: inout State) -> Bool {
    if state.running < Self.maximumRunning {
      state.running += 1
      return true
    }
    if state.waiting.count < maximumWaiting {
      state.waiting.append(variables)
    } else {
      state.dropped += 1
    }
    return false
  }

  /// The burst window ended: one run for the mentions it held.
  private func flush() {
    let summary: [String: String]? = state.withLock { state in
      state.flushScheduled = false
      guard !state.held.isEmpty else { return nil }
      let rooms = Array(Set(state.held.map(\.room))).sorted()
      let authors = Array(Set(state.held.map(\.author))).sorted()
      let count = state.held.count
      state.held.removeAll()
      state.windowStart = .now
      state.takenInWindow = 1
      return [
        "ROOM": rooms.prefix(10).joined(separator: ", "),
        "AUTHOR": authors.prefix(5).joined(separator: ", "), "BOARD": board,
        "TEXT": "\(count) more mention\(count == 1 ? "" : "s")", "COUNT": "\(count)",
      ]
    }
    guard let summary else { return }
    let start = state.withLock { take(summary, &$0) }
    if start { spawn(summary) }
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
