import Foundation

/// What a test that kills, freezes and restarts its server works in: a private directory, a
/// real `9bbsd` (rooms `lobby` and `tech`, data in `DIRECTORY/data`) that can be started again
/// on the same listeners and data, the `mount9bbs` processes and background commands of the
/// test. A test case holds one, calls ``setUp()`` from its `setUp` and ``tearDown()`` from its
/// `tearDown`, which ends them all, the server last, then removes the directory.
///
/// Used from the test's own thread only.
public final class BoardFixture {
  private let prefix: String
  /// The private directory: sockets, data, mount points, mounts' state (from ``setUp()``).
  public private(set) var directory = ""
  /// `DIRECTORY/9bbs.sock`: a Unix socket for the server to listen on.
  public var serverSocket: String { directory + "/9bbs.sock" }
  /// The running (or frozen, or killed) server, once started.
  public private(set) var server: ChildProcess?
  public private(set) var mounts: [MountProcess] = []
  private var background: [ChildProcess] = []

  /// A fixture whose directory will be named after `prefix`.
  public init(_ prefix: String) {
    self.prefix = prefix
  }

  /// Makes the private directory.
  public func setUp() throws {
    directory = try makeTemporaryDirectory(prefix)
  }

  /// Starts (or restarts) 9bbsd with one `--listen` per address and `extra` arguments, all on
  /// one board, once it says it listens on each.
  @discardableResult
  public func startServer(listening addresses: [String], extra: [String] = []) throws
    -> ChildProcess
  {
    let child = ChildProcess(
      BuiltProducts.path(of: "9bbsd"),
      addresses.flatMap { ["--listen", $0] } + [
        "--rooms", "lobby,tech", "--data", directory + "/data",
      ] + extra)
    try child.start()
    server = child
    let listening = waitUntil(timeout: 15) {
      child.text.components(separatedBy: "listening on").count > addresses.count
        || !child.isRunning
    }
    guard listening, child.isRunning else {
      child.stop()
      throw HarnessError("9bbsd did not start: \(child.text)")
    }
    return child
  }

  /// SIGKILL to the server, reaped.
  public func killServer() {
    server?.signal(SIGKILL)
    server?.wait(timeout: 5)
  }

  /// `mount9bbs -f -o OPTIONS ADDRESS DIRECTORY/NAME`, its outbox and room history in
  /// `stateDirectory` (default: `DIRECTORY/state-NAME`, its own); the mount point.
  public func mount(
    _ address: String, options: [String], name: String = "mnt", stateDirectory: String? = nil
  ) throws -> String {
    let mountpoint = directory + "/" + name
    try FileManager.default.createDirectory(atPath: mountpoint, withIntermediateDirectories: true)
    mounts.append(
      try MountProcess(
        address: address, mountpoint: mountpoint, options: options,
        environment: ["XDG_STATE_HOME": stateDirectory ?? directory + "/state-" + name]))
    return mountpoint
  }

  /// Kills every mount's daemon (SIGKILL, as a crash), reaped and unmounted; the mounts are
  /// forgotten.
  public func crashMounts() {
    for mount in mounts {
      mount.child.signal(SIGKILL)
      mount.child.wait(timeout: 5)
      mount.stop()
    }
    mounts.removeAll()
  }

  /// `/bin/sh -c command` in the background, stopped at tear-down.
  public func startBackground(_ command: String) throws -> ChildProcess {
    let child = ChildProcess("/bin/sh", ["-c", command])
    try child.start()
    background.append(child)
    return child
  }

  /// Background commands, then mounts, then the server (woken first: a stopped server must
  /// run again to hear SIGTERM); then the directory.
  public func tearDown() {
    server?.signal(SIGCONT)
    for child in background { child.stop(grace: 1) }
    for mount in mounts { mount.stop() }
    server?.stop()
    if !directory.isEmpty { try? FileManager.default.removeItem(atPath: directory) }
  }
}
