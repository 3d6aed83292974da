import Foundation

/// Errors of the test harness, with enough context to debug a failed run.
public struct HarnessError: Error, CustomStringConvertible {
  public let description: String
  public init(_ description: String) { self.description = description }
}

/// Where `swift build` put the executables: next to the test bundle.
public enum BuiltProducts {
  public static var directory: URL {
    let exe =
      (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
      ?? CommandLine.arguments[0]
    return URL(fileURLWithPath: exe).deletingLastPathComponent()
  }

  public static func path(of name: String) -> String {
    directory.appendingPathComponent(name).path
  }
}

/// Waits (polling every `interval`) until `condition` holds or `timeout` passes, and says
/// whether it held: the tests' one waiter, for conditions no event announces (a mount appearing
/// in /proc/mounts, a server's waiter count). Callers assert on the result
/// (`XCTAssertTrue(waitUntil(timeout: 5) { … })`); a test that waits for a reply or a callback
/// waits on that instead, and a test whose point is an idle period sleeps, saying so.
public func waitUntil(
  timeout: TimeInterval, interval: TimeInterval = 0.01, _ condition: () -> Bool
) -> Bool {
  let deadline = Date(timeIntervalSinceNow: timeout)
  while Date() < deadline {
    if condition() { return true }
    Thread.sleep(forTimeInterval: interval)
  }
  return condition()
}

/// A child process with captured output, stopped on `stop()` (SIGTERM, then SIGKILL).
public final class ChildProcess: @unchecked Sendable {
  public let process = Process()
  private let output = Pipe()
  private let lock = NSLock()
  private var captured = Data()
  private var ended = false

  public init(_ executable: String, _ arguments: [String], environment: [String: String]? = nil) {
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    if let environment {
      process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
    }
    process.standardOutput = output
    process.standardError = output
    process.standardInput = FileHandle.nullDevice
  }

  public func start() throws {
    try process.run()
    // A thread reading the pipe to its end with plain read(2): FileHandle's readabilityHandler
    // has been seen to report an empty read before the end on Linux, losing the rest.
    let descriptor = output.fileHandleForReading.fileDescriptor
    let reader = Thread { [self] in
      var buffer = [UInt8](repeating: 0, count: 65536)
      while true {
        let count = read(descriptor, &buffer, buffer.count)
        if count < 0 && errno == EINTR { continue }
        lock.lock()
        if count > 0 {
          captured.append(contentsOf: buffer[..<count])
        } else {
          ended = true
        }
        lock.unlock()
        if count <= 0 { break }
      }
      // Closed here, not when the ChildProcess goes: Foundation keeps Process objects (and so
      // their pipes) alive long after exit, and a run of the suite leaked a descriptor per child
      // until Process.run itself crashed (its /proc/self/fd scan over-reads past 1,300 entries).
      try? output.fileHandleForReading.close()
    }
    reader.start()
  }

  /// Everything the process wrote to stdout and stderr so far.
  public var text: String {
    lock.lock()
    defer { lock.unlock() }
    return String(decoding: captured, as: UTF8.self)
  }

  /// Whether the output pipe reached end of file (everyone holding it has exited).
  public var outputEnded: Bool {
    lock.lock()
    defer { lock.unlock() }
    return ended
  }

  public var isRunning: Bool { process.isRunning }

  /// Waits for exit, then (at most a second: a grandchild may hold the pipe) for the output
  /// to be read to its end, so `text` has everything; false if it did not exit in time.
  @discardableResult
  public func wait(timeout: TimeInterval) -> Bool {
    guard waitUntil(timeout: timeout, { !process.isRunning }) else { return false }
    _ = waitUntil(timeout: 1) { outputEnded }
    return true
  }

  public func signal(_ signal: Int32) {
    if process.isRunning { kill(process.processIdentifier, signal) }
  }

  /// SIGTERM, then SIGKILL if it has not gone within `grace`.
  public func stop(grace: TimeInterval = 5) {
    guard process.isRunning else { return }
    signal(SIGTERM)
    if !wait(timeout: grace) {
      signal(SIGKILL)
      wait(timeout: 5)
    }
  }
}

/// Runs a shell command to completion with a timeout; returns exit status and output.
@discardableResult
public func shell(_ command: String, timeout: TimeInterval = 30) throws -> (
  status: Int32, output: String
) {
  let child = ChildProcess("/bin/sh", ["-c", command])
  try child.start()
  guard child.wait(timeout: timeout) else {
    child.signal(SIGKILL)
    child.wait(timeout: 5)
    throw HarnessError("command timed out after \(timeout) s: \(command)\noutput: \(child.text)")
  }
  return (child.process.terminationStatus, child.text)
}

/// A private temporary directory removed on `remove()`.
public func makeTemporaryDirectory(_ prefix: String = "mount9bbs-test") throws -> String {
  var template = Array((NSTemporaryDirectory() + prefix + ".XXXXXX").utf8CString)
  guard let made = mkdtemp(&template) else { throw HarnessError("mkdtemp failed") }
  return String(cString: made)
}

/// Whether a FUSE file system is mounted at `path` (per /proc/mounts).
public func isMounted(_ path: String) -> Bool {
  // realpath(3) without stat-ing the mount itself: a mount whose daemon is not serving
  // would block a stat forever.
  let parent = (path as NSString).deletingLastPathComponent
  var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
  let resolvedParent =
    realpath(parent.isEmpty ? "." : parent, &buffer).map { String(cString: $0) } ?? parent
  let resolved = resolvedParent + "/" + (path as NSString).lastPathComponent
  guard let mounts = try? String(contentsOfFile: "/proc/mounts", encoding: .utf8) else {
    return false
  }
  return mounts.split(separator: "\n").contains { line in
    let fields = line.split(separator: " ")
    return fields.count > 2 && fields[1] == resolved && fields[2].hasPrefix("fuse")
  }
}

/// A real `9bbsd` process listening on a private socket (and optionally TCP).
public final class ServerProcess: @unchecked Sendable {
  public let child: ChildProcess
  public let directory: String
  /// The dial string clients use.
  public let address: String

  /// Starts `9bbsd`. `transport` is "tcp", "unix" or "seqpacket"; `rooms` are its chat rooms.
  /// `listen` picks the address (to start a server again where an earlier one was).
  public init(
    transport: String = "tcp", profile: String = "default", rooms: [String] = ["lobby", "tech"],
    extra: [String] = [], listen fixed: String? = nil
  ) throws {
    directory = try makeTemporaryDirectory("9bbsd-test")
    let listen: String
    switch fixed == nil ? transport : "fixed" {
    case "fixed":
      listen = fixed ?? ""
    case "tcp":
      // Pick a free port by binding port 0 briefly.
      listen = "tcp!127.0.0.1!\(try Self.freePort())"
    case "seqpacket":
      listen = "seqpacket!\(directory)/9bbs.sock"
    default:
      listen = "unix!\(directory)/9bbs.sock"
    }
    address = listen
    child = ChildProcess(
      BuiltProducts.path(of: "9bbsd"),
      ["--listen", listen, "--profile", profile, "--rooms", rooms.joined(separator: ",")]
        + extra)
    try child.start()
    let ready = waitUntil(timeout: 10) { child.text.contains("listening on") || !child.isRunning }
    guard ready, child.isRunning else {
      child.stop()
      throw HarnessError("9bbsd did not start: \(child.text)")
    }
  }

  /// Everything 9bbsd logged so far.
  public var log: String { child.text }

  /// The device-profile violations 9bbsd logged ("… — disconnecting"): lines that mean the
  /// client broke a board's wire rules, or a session died under it.
  public var violations: [String] {
    log.split(separator: "\n").map(String.init).filter { $0.contains("disconnecting") }
  }

  public func stop() {
    child.stop()
    try? FileManager.default.removeItem(atPath: directory)
  }

  /// A TCP port on 127.0.0.1 that nothing listens on (bound briefly, then released).
  public static func freePort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw HarnessError("socket failed") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    let bound = withUnsafePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
      }
    }
    guard bound == 0 else { throw HarnessError("bind failed") }
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    return Int(UInt16(bigEndian: address.sin_port))
  }
}

/// A real `mount9bbs -f` process serving a mount point.
public final class MountProcess: @unchecked Sendable {
  public let child: ChildProcess
  public let mountpoint: String

  public init(
    address: String?, mountpoint: String, options: [String] = [],
    environment: [String: String]? = nil
  ) throws {
    self.mountpoint = mountpoint
    var arguments = ["-f"]
    if !options.isEmpty { arguments += ["-o", options.joined(separator: ",")] }
    if let address { arguments.append(address) } else { arguments.append("--local") }
    arguments.append(mountpoint)
    // The outbox and room history live under XDG_STATE_HOME: a test's own unless it says.
    var environment = environment ?? [:]
    if environment["XDG_STATE_HOME"] == nil {
      environment["XDG_STATE_HOME"] = try makeTemporaryDirectory("mount9bbs-state")
    }
    child = ChildProcess(BuiltProducts.path(of: "mount9bbs"), arguments, environment: environment)
    try child.start()
    guard waitUntil(timeout: 15, { isMounted(mountpoint) || !child.isRunning }), child.isRunning
    else {
      child.stop()
      throw HarnessError("mount9bbs did not mount: \(child.text)")
    }
  }

  /// Unmounts (however the process is doing) and stops the process.
  public func stop() {
    forceUnmount(mountpoint)
    child.stop()
  }
}

/// Lazily unmounts whatever FUSE file system is at `path` (teardown: works with a dead or
/// hung daemon and with readers still inside).
public func forceUnmount(_ path: String) {
  guard isMounted(path) else { return }
  _ = try? shell(
    "fusermount3 -u -z '\(path)' 2>/dev/null || umount -l '\(path)'", timeout: 10)
}

/// Running `mount9bbs` processes serving `mountpoint` (e.g. a detached daemon), by their
/// command line.
public func mountDaemons(serving mountpoint: String) -> [pid_t] {
  let me = getpid()
  let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
  return entries.compactMap { entry -> pid_t? in
    guard let pid = pid_t(entry), pid != me,
      let data = FileManager.default.contents(atPath: "/proc/\(entry)/cmdline")
    else { return nil }
    let arguments = data.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
    guard let program = arguments.first, program.hasSuffix("/mount9bbs") else { return nil }
    return arguments.contains(mountpoint) ? pid : nil
  }
}

/// A real `ssh-agent` on a private socket (`ssh-agent -D -a`), stopped on `stop()`.
public final class SSHAgentProcess: @unchecked Sendable {
  public let child: ChildProcess
  /// What SSH_AUTH_SOCK should say.
  public let socketPath: String
  private let directory: String

  public init() throws {
    directory = try makeTemporaryDirectory("ssh-agent-test")
    socketPath = directory + "/agent.sock"
    child = ChildProcess("/usr/bin/ssh-agent", ["-D", "-a", socketPath])
    try child.start()
    // Listening, not only bound: `ssh-add -l` says 2 while it cannot connect.
    let socketPath = socketPath
    let ready = waitUntil(timeout: 10) {
      !child.isRunning
        || (FileManager.default.fileExists(atPath: socketPath)
          && (try? shell("SSH_AUTH_SOCK='\(socketPath)' ssh-add -l >/dev/null 2>&1"))?.status != 2)
    }
    guard ready, child.isRunning else {
      child.stop()
      throw HarnessError("ssh-agent did not start: \(child.text)")
    }
  }

  /// The environment that points ssh tools (and mount9bbs) at this agent.
  public var environment: [String: String] { ["SSH_AUTH_SOCK": socketPath] }

  /// `ssh-add ARGUMENTS` against this agent; fails unless it succeeds.
  public func add(_ arguments: String) throws {
    let result = try shell("SSH_AUTH_SOCK='\(socketPath)' ssh-add -q \(arguments) 2>&1")
    guard result.status == 0 else {
      throw HarnessError("ssh-add \(arguments) failed: \(result.output)")
    }
  }

  public func stop() {
    child.stop()
    try? FileManager.default.removeItem(atPath: directory)
  }
}
