import Foundation

/// Runs the mount as a detached daemon and waits for its readiness report.
///
/// The daemon is this same executable with `--ready-fd N`: it writes `ready` once mounted, or
/// an error line, to the pipe. Spawning a fresh process (rather than fork) keeps the daemon free
/// of the threads and locks of the front process.
enum Detacher {
  /// glibc's POSIX_SPAWN_SETSID (2.26+), which Swift does not import.
  static let spawnSetSID: Int32 = 0x80

  /// Spawns the daemon with this process's arguments plus `extraArguments` and waits for it.
  static func spawnAndWait(extraArguments: [String] = []) -> Int32 {
    var fds: [Int32] = [0, 0]
    guard pipe(&fds) == 0 else {
      Diagnostics.fail("mount9bbs: cannot create a pipe: \(String(cString: strerror(errno)))")
      return 1
    }
    let (readEnd, writeEnd) = (fds[0], fds[1])
    _ = fcntl(readEnd, F_SETFD, FD_CLOEXEC)

    var arguments = Array(CommandLine.arguments.dropFirst())
    arguments += extraArguments + ["--ready-fd", String(writeEnd)]
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
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
    for descriptor in inheritedDescriptors(keeping: writeEnd) {
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
    guard rc == 0 else {
      Diagnostics.fail("mount9bbs: cannot start the daemon: \(String(cString: strerror(rc)))")
      return 1
    }
    var report: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    // One line: "ready", or the error. Don't wait for EOF: the daemon's own children
    // (none today, but libfuse may start fusermount3) could keep the pipe open.
    while !report.contains(UInt8(ascii: "\n")) {
      let count = read(readEnd, &buffer, buffer.count)
      if count > 0 {
        report += buffer[..<count]
      } else if count < 0 && errno == EINTR {
        continue
      } else {
        break
      }
    }
    close(readEnd)
    let text = String(decoding: report, as: UTF8.self)
    if text.hasPrefix("ready") { return 0 }
    var status: Int32 = 0
    waitpid(pid, &status, 0)
    let message = text.isEmpty ? "mount9bbs: the daemon exited before the mount was ready" : text
    Diagnostics.fail(message)
    return 1
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
