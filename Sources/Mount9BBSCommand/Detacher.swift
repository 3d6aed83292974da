import Foundation

/// Runs the mount as a detached daemon and waits for its readiness report.
///
/// The daemon is this same executable with `--ready-fd N`: it writes `ready` once mounted to
/// the pipe, or exits. Its stderr is the same pipe until then, so whatever it, libfuse or
/// fusermount3 says before the mount is ready reaches the user's terminal; afterwards the
/// daemon moves stderr to its log (see ``DaemonLog``). Spawning a fresh process (rather than
/// fork) keeps the daemon free of the threads and locks of the front process.
enum Detacher {
  /// glibc's POSIX_SPAWN_SETSID (2.26+), which Swift does not import.
  static let spawnSetSID: Int32 = 0x80

  /// Spawns the daemon with `arguments` plus the readiness pipe and waits for its verdict.
  static func spawnAndWait(arguments given: [String], keeping kept: [Int32] = []) -> Int32 {
    var fds: [Int32] = [0, 0]
    guard pipe(&fds) == 0 else {
      Diagnostics.fail("mount9bbs: cannot create a pipe: \(String(cString: strerror(errno)))")
      return 1
    }
    let (readEnd, writeEnd) = (fds[0], fds[1])
    _ = fcntl(readEnd, F_SETFD, FD_CLOEXEC)

    let arguments = given + ["--ready-fd", String(writeEnd)]
    let executable =
      (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
      ?? CommandLine.arguments[0]
    let argv = ([executable] + arguments).map { strdup($0) } + [nil]
    defer { argv.forEach { free($0) } }

    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
    posix_spawn_file_actions_adddup2(&actions, writeEnd, 2)
    for descriptor in inheritedDescriptors(keeping: writeEnd) where !kept.contains(descriptor) {
      posix_spawn_file_actions_addclose(&actions, descriptor)
    }
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    // A new session: the daemon outlives the shell and its Ctrl-C.
    posix_spawnattr_setflags(&attributes, Int16(Self.spawnSetSID | POSIX_SPAWN_SETSIGMASK))
    var empty = sigset_t()
    sigemptyset(&empty)
    posix_spawnattr_setsigmask(&attributes, &empty)

    var pid: pid_t = 0
    let rc = posix_spawn(&pid, executable, &actions, &attributes, argv, environ)
    close(writeEnd)
    kept.forEach { close($0) }
    guard rc == 0 else {
      Diagnostics.fail("mount9bbs: cannot start the daemon: \(String(cString: strerror(rc)))")
      return 1
    }
    let (text, ready) = readVerdict(readEnd, daemon: pid)
    close(readEnd)
    // What came before `ready` (a warning, a fallback address) is the user's to see too.
    if !text.isEmpty { Diagnostics.fail(text) }
    if ready { return 0 }
    var status: Int32 = 0
    waitpid(pid, &status, WNOHANG)
    if text.isEmpty { Diagnostics.fail("mount9bbs: the daemon exited before the mount was ready") }
    return 1
  }

  /// Reads the daemon's stderr until a `ready` line, end of file, or (because a child such as
  /// fusermount3 might keep the pipe open) the daemon's exit. Returns the other text and
  /// whether `ready` came.
  private static func readVerdict(_ readEnd: Int32, daemon pid: pid_t) -> (String, Bool) {
    var received: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    var exited = false
    while true {
      if let end = received.firstRange(of: Array("ready\n".utf8)),
        end.lowerBound == 0 || received[end.lowerBound - 1] == UInt8(ascii: "\n")
      {
        received.removeSubrange(end)
        return (String(decoding: received, as: UTF8.self), true)
      }
      var poller = pollfd(fd: readEnd, events: Int16(POLLIN), revents: 0)
      let polled = poll(&poller, 1, 200)
      if polled < 0 && errno == EINTR { continue }
      if polled > 0 {
        let count = read(readEnd, &buffer, buffer.count)
        if count > 0 {
          received += buffer[..<count]
          continue
        }
        if count < 0 && errno == EINTR { continue }
        break
      }
      // Nothing to read: once the daemon is gone, what it wrote is all there is.
      if exited { break }
      var status: Int32 = 0
      if waitpid(pid, &status, WNOHANG) == pid { exited = true }
    }
    return (String(decoding: received, as: UTF8.self), false)
  }

  /// The caller's descriptors that the daemon must not keep: all but stdio and the readiness
  /// pipe. A daemon lives as long as the mount, and an inherited pipe or socket it holds never
  /// reaches end-of-file for whoever waits on it (a `$(…)`, or a supervisor that watches a
  /// socket to learn when its child exits, as Foundation's Process does).
  static func inheritedDescriptors(keeping kept: Int32) -> [Int32] {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
    return names.compactMap { Int32($0) }.filter { $0 > 2 && $0 != kept }
  }
}
