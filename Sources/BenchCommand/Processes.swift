import Foundation
import Glibc
import Synchronization

/// Children and mounts of the benchmark: spawned with posix_spawn (empty signal mask, default
/// SIGINT/SIGTERM/SIGPIPE, stdin from /dev/null, output to a log file), always reaped, and every
/// mount unmounted on the way out — also after an error or Ctrl-C.
final class Supervisor: Sendable {
  static let shared = Supervisor()

  private struct Owned {
    var children: Set<pid_t> = []
    var mounts: [String] = []
  }

  private let owned = Mutex(Owned())

  /// Starts `path` with `arguments`; output goes to `log` (or /dev/null), or with `stdout`
  /// given, stdout to that descriptor and stderr to `log`.
  func spawn(
    _ path: String, _ arguments: [String], log: String? = nil, stdout: Int32? = nil,
    stdin: Int32? = nil
  ) throws -> pid_t {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    if let stdin {
      posix_spawn_file_actions_adddup2(&actions, stdin, 0)
    } else {
      posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    }
    let out = log ?? "/dev/null"
    if let stdout {
      posix_spawn_file_actions_adddup2(&actions, stdout, 1)
      posix_spawn_file_actions_addopen(&actions, 2, out, O_WRONLY | O_CREAT | O_APPEND, 0o644)
    } else {
      posix_spawn_file_actions_addopen(&actions, 1, out, O_WRONLY | O_CREAT | O_APPEND, 0o644)
      posix_spawn_file_actions_adddup2(&actions, 1, 2)
    }

    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var empty = sigset_t()
    sigemptyset(&empty)
    posix_spawnattr_setsigmask(&attributes, &empty)
    var defaults = sigset_t()
    sigemptyset(&defaults)
    for signal in [SIGINT, SIGTERM, SIGPIPE, SIGHUP] { sigaddset(&defaults, signal) }
    posix_spawnattr_setsigdefault(&attributes, &defaults)
    posix_spawnattr_setflags(
      &attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

    let argv: [UnsafeMutablePointer<CChar>?] = ([path] + arguments).map { strdup($0) } + [nil]
    defer { for pointer in argv { free(pointer) } }
    var pid: pid_t = 0
    let status = posix_spawn(&pid, path, &actions, &attributes, argv, environ)
    guard status == 0 else {
      throw BenchError("cannot start \(path): \(String(cString: strerror(status)))")
    }
    owned.withLock { _ = $0.children.insert(pid) }
    return pid
  }

  /// Waits for `pid`; after `timeout` seconds it is killed. Returns the exit status (or -signal).
  @discardableResult
  func wait(_ pid: pid_t, timeout: Double? = nil) -> Int32 {
    var timer: DispatchWorkItem?
    if let timeout {
      let item = DispatchWorkItem { kill(pid, SIGKILL) }
      DispatchQueue.global().asyncAfter(deadline: .now() + timeout, execute: item)
      timer = item
    }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    timer?.cancel()
    owned.withLock { _ = $0.children.remove(pid) }
    if status & 0x7f == 0 { return (status >> 8) & 0xff }
    return -(status & 0x7f)
  }

  /// Waits up to `seconds` for `pid` to exit (without killing it); true once reaped.
  func reap(_ pid: pid_t, seconds: Double) -> Bool {
    let deadline = Clock.now + Int64(seconds * 1e9)
    repeat {
      var status: Int32 = 0
      let result = waitpid(pid, &status, WNOHANG)
      if result == pid || (result < 0 && errno == ECHILD) {
        owned.withLock { _ = $0.children.remove(pid) }
        return true
      }
      usleep(10_000)
    } while Clock.now < deadline
    return false
  }

  /// Runs a command to completion: (exit status, elapsed seconds). Its output goes to `log`
  /// (or nowhere), or with `discardingOutput` only its errors do.
  func run(
    _ path: String, _ arguments: [String], timeout: Double = 120, log: String? = nil,
    discardingOutput: Bool = false
  ) throws -> (status: Int32, seconds: Double) {
    let null = discardingOutput ? open("/dev/null", O_WRONLY | O_CLOEXEC) : -1
    defer { if null >= 0 { close(null) } }
    let start = Clock.now
    let pid = try spawn(path, arguments, log: log, stdout: null >= 0 ? null : nil)
    let status = wait(pid, timeout: timeout)
    return (status, Clock.seconds(since: start))
  }

  /// SIGTERM, then SIGKILL after `grace` seconds; reaps.
  func stop(_ pid: pid_t, grace: Double = 3) {
    kill(pid, SIGTERM)
    wait(pid, timeout: grace)
  }

  func registerMount(_ path: String) { owned.withLock { $0.mounts.append(path) } }
  func unregisterMount(_ path: String) {
    owned.withLock { $0.mounts.removeAll { $0 == path } }
  }

  /// Lazy-unmounts every mount still registered and kills every child. Safe from any thread.
  func cleanUp() {
    let (openMounts, pids) = owned.withLock { ($0.mounts, $0.children) }
    for mount in openMounts {
      _ = try? run("/usr/bin/fusermount3", ["-uz", mount], timeout: 5)
    }
    for pid in pids { kill(pid, SIGKILL) }
    for pid in pids { var status: Int32 = 0; waitpid(pid, &status, 0) }
    owned.withLock { $0 = Owned() }
  }
}

/// A foreground FUSE daemon and its mount point.
struct MountedFS {
  let pid: pid_t
  let mountpoint: String
  let kind: String

  /// Starts `command` (which mounts `mountpoint` in the foreground) and waits for the mount.
  static func start(
    _ command: String, _ arguments: [String], mountpoint: String, kind: String, log: String
  ) throws -> MountedFS {
    try? FileManager.default.createDirectory(atPath: mountpoint, withIntermediateDirectories: true)
    let pid = try Supervisor.shared.spawn(command, arguments, log: log)
    Supervisor.shared.registerMount(mountpoint)
    let deadline = Date(timeIntervalSinceNow: 30)
    while !isMounted(mountpoint) {
      var status: Int32 = 0
      if waitpid(pid, &status, WNOHANG) == pid || Date() > deadline {
        Supervisor.shared.unregisterMount(mountpoint)
        kill(pid, SIGKILL)
        let tail = (try? String(contentsOfFile: log, encoding: .utf8))?.suffix(600) ?? ""
        throw BenchError("\(kind) did not mount \(mountpoint): \(tail)")
      }
      usleep(5_000)
    }
    return MountedFS(pid: pid, mountpoint: mountpoint, kind: kind)
  }

  /// Unmounts (mount9bbs -u for ours, fusermount3 -u for others) and reaps the daemon.
  func stop(mount9bbs: String? = nil) {
    if let mount9bbs {
      _ = try? Supervisor.shared.run(mount9bbs, ["-u", mountpoint], timeout: 10)
    } else {
      _ = try? Supervisor.shared.run("/usr/bin/fusermount3", ["-u", mountpoint], timeout: 10)
    }
    if Supervisor.shared.wait(pid, timeout: 5) < 0 || Self.isMounted(mountpoint) {
      _ = try? Supervisor.shared.run("/usr/bin/fusermount3", ["-uz", mountpoint], timeout: 5)
    }
    Supervisor.shared.unregisterMount(mountpoint)
  }

  static func isMounted(_ path: String) -> Bool {
    guard let text = try? String(contentsOfFile: "/proc/self/mounts", encoding: .utf8) else {
      return false
    }
    return text.split(separator: "\n").contains { line in
      let fields = line.split(separator: " ")
      return fields.count > 2 && fields[1] == path && fields[2].hasPrefix("fuse")
    }
  }
}

/// CPU time and resident memory of a process, from /proc.
struct ProcessSample {
  var cpuSeconds: Double
  var rssKiB: Int

  init?(pid: pid_t) {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
      let close = stat.lastIndex(of: ")")
    else { return nil }
    let fields = stat[stat.index(after: close)...].split(separator: " ")
    // fields[0] is the state (field 3); utime and stime are fields 14 and 15.
    guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else {
      return nil
    }
    cpuSeconds = (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    rssKiB = 0
    if let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
      let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") })
    {
      rssKiB = Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
    }
  }
}

/// Monotonic time.
enum Clock {
  static var now: Int64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
  }

  static func seconds(since start: Int64) -> Double { Double(now - start) / 1e9 }
}

struct BenchError: Error, CustomStringConvertible {
  let description: String
  init(_ description: String) { self.description = description }
}

/// Drops the page cache, so reads through a FUSE mount reach its daemon.
func dropCaches() {
  sync()
  if let handle = FileHandle(forWritingAtPath: "/proc/sys/vm/drop_caches") {
    handle.write(Data("3\n".utf8))
    try? handle.close()
  }
}

/// A free loopback TCP port (bound and released; the race is harmless here).
func freePort() -> UInt16 {
  let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
  defer { Glibc.close(fd) }
  var address = sockaddr_in()
  address.sin_family = sa_family_t(AF_INET)
  address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
  address.sin_port = 0
  var length = socklen_t(MemoryLayout<sockaddr_in>.size)
  _ = withUnsafeMutablePointer(to: &address) {
    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
      bind(fd, $0, length)
      return getsockname(fd, $0, &length)
    }
  }
  return UInt16(bigEndian: address.sin_port)
}

/// True once something accepts connections at 127.0.0.1:`port` or the socket `path`.
func waitForListener(port: UInt16? = nil, path: String? = nil, seconds: Double = 15) -> Bool {
  let deadline = Date(timeIntervalSinceNow: seconds)
  while Date() < deadline {
    if let port {
      let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
      var address = sockaddr_in()
      address.sin_family = sa_family_t(AF_INET)
      address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
      address.sin_port = port.bigEndian
      let status = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
          connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
      }
      Glibc.close(fd)
      if status == 0 { return true }
    } else if let path, FileManager.default.fileExists(atPath: path) {
      return true
    }
    usleep(20_000)
  }
  return false
}
