import Foundation

/// A program running in a private tmux server's window, driven as a person would: keys in
/// (`send-keys`), the screen out (`capture-pane`). The window stays after the program exits
/// (`remain-on-exit`), so a test can read what it left on the screen.
public final class TmuxWindow: @unchecked Sendable {
  public let socket: String
  private let directory: String

  /// Starts `command` (run by `/bin/sh -c`) in a `width`×`height` window.
  public init(_ command: String, width: Int = 100, height: Int = 30) throws {
    directory = try makeTemporaryDirectory("tmux-test")
    socket = directory + "/tmux.sock"
    do {
      try tmux([
        "-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", "\(width)", "-y", "\(height)",
        "sh",
      ])
      try tmux(["set-option", "-g", "remain-on-exit", "on"])
      try tmux(["set-option", "-g", "escape-time", "10"])
      try tmux(["set-option", "-g", "monitor-bell", "on"])
      try tmux(["respawn-pane", "-k", "-t", "t", command])
    } catch {
      stop()  // a server that started must not outlive a failed set-up
      throw error
    }
  }

  @discardableResult
  public func tmux(_ arguments: [String]) throws -> String {
    // posix_spawn and waitpid, not Process and a pipe: the server `new-session` forks keeps
    // the descriptors it was given (Foundation's watch on its child among them), so neither
    // an end of the pipe nor the client's exit would ever be seen.
    let outputPath = directory + "/out.\(UUID().uuidString)"
    defer { try? FileManager.default.removeItem(atPath: outputPath) }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    posix_spawn_file_actions_adddup2(&actions, 1, 2)
    let argv = (["tmux", "-S", socket] + arguments).map { strdup($0) } + [nil]
    defer { for pointer in argv { free(pointer) } }
    var pid: pid_t = 0
    let spawned = posix_spawn(&pid, "/usr/bin/tmux", &actions, nil, argv, environ)
    guard spawned == 0 else {
      throw HarnessError("cannot run tmux: \(String(cString: strerror(spawned)))")
    }
    var status: Int32 = 0
    var exited = false
    let finished = waitUntil(timeout: 10) {
      exited = exited || waitpid(pid, &status, WNOHANG) == pid
      return exited
    }
    guard finished else {
      kill(pid, SIGKILL)
      waitpid(pid, &status, 0)
      throw HarnessError("tmux \(arguments.joined(separator: " ")) did not finish")
    }
    let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
    // WIFEXITED && WEXITSTATUS == 0, spelled out (the macros are not visible from Swift).
    guard status & 0x7F == 0 && (status >> 8) & 0xFF == 0 else {
      throw HarnessError("tmux \(arguments.joined(separator: " ")): \(text)")
    }
    return text
  }

  /// Types `text` literally (no key names).
  public func type(_ text: String) throws { try tmux(["send-keys", "-t", "t", "-l", text]) }

  /// Pastes `text` as a terminal does: wrapped in bracketed-paste markers when the program
  /// asked for them (tmux's `paste-buffer -p`), else as typed keys.
  public func paste(_ text: String) throws {
    try tmux(["set-buffer", "-b", "pasted", "--", text])
    try tmux(["paste-buffer", "-p", "-r", "-b", "pasted", "-t", "t"])
  }

  /// Presses keys by tmux name (`Enter`, `C-c`, `PPage`, `M-2`).
  public func press(_ keys: String...) throws { try tmux(["send-keys", "-t", "t"] + keys) }

  /// The screen as text, one line a row.
  public func screen() -> String {
    (try? tmux(["capture-pane", "-p", "-t", "t"])) ?? ""
  }

  /// The screen with up to 100 rows that scrolled off above it, wrapped rows joined.
  public func screenWithHistory() -> String {
    (try? tmux(["capture-pane", "-p", "-J", "-S", "-100", "-t", "t"])) ?? ""
  }

  /// The screen with its colours and attributes as escape sequences (`capture-pane -e`).
  public func screenWithAttributes() -> String {
    (try? tmux(["capture-pane", "-p", "-e", "-t", "t"])) ?? ""
  }

  /// Whether the program rang the bell (tmux's window bell flag, set by BEL).
  public var bellRang: Bool {
    (try? tmux(["display-message", "-p", "-t", "t", "#{window_bell_flag}"]))?.hasPrefix("1")
      ?? false
  }

  /// Waits until the screen satisfies `condition`; the last screen and whether it did.
  @discardableResult
  public func waitForScreen(
    timeout: TimeInterval = 10, _ condition: (String) -> Bool
  ) -> (screen: String, matched: Bool) {
    var last = ""
    let matched = waitUntil(timeout: timeout, interval: 0.02) {
      last = screen()
      return condition(last)
    }
    return (last, matched)
  }

  /// Waits for `needle` on the screen.
  @discardableResult
  public func waitFor(_ needle: String, timeout: TimeInterval = 10) -> (
    screen: String, matched: Bool
  ) {
    waitForScreen(timeout: timeout) { $0.contains(needle) }
  }

  /// Waits until the program in the window has exited (tmux's `pane_dead`); whether it did.
  ///
  /// Not the "Pane is dead" text: tmux 3.3 leaves it out when the terminal's end reaches it
  /// before the exit status, which a loaded machine makes common.
  @discardableResult
  public func waitForExit(timeout: TimeInterval = 10) -> Bool {
    waitUntil(timeout: timeout, interval: 0.05) {
      (try? tmux(["display-message", "-p", "-t", "t", "#{pane_dead}"]))?.hasPrefix("1") ?? false
    }
  }

  public func resize(width: Int, height: Int) throws {
    try tmux(["resize-window", "-t", "t", "-x", "\(width)", "-y", "\(height)"])
  }

  /// The pid of the program in the window (0 once it exited).
  public var pid: pid_t {
    let text = (try? tmux(["display-message", "-p", "-t", "t", "#{pane_dead} #{pane_pid}"])) ?? ""
    let parts = text.split(separator: " ")
    guard parts.count == 2, parts[0] == "0" else { return 0 }
    return pid_t(parts[1].trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
  }

  /// Ends the tmux server and everything in it.
  public func stop() {
    _ = try? tmux(["kill-server"])
    try? FileManager.default.removeItem(atPath: directory)
  }
}
