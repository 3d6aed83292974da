// The libfuse3 low-level layer: a FuseFileSystem served on a mount point by a FuseMount.
//
// Threads. `FuseMount.run()` blocks its caller in libfuse's multi-threaded loop
// (`fuse_session_loop_mt`). libfuse worker threads read requests from /dev/fuse and call the
// FuseFileSystem methods (FuseOperations.swift is the op table), several at once. A method
// either replies at once or keeps its FuseRequest and replies later from any thread: a 9P
// reply callback, a timer, a data arrival. Interrupts arrive on a worker thread too and run
// the handler registered with `FuseRequest.onInterrupt` (PendingReply does this). Signals
// (SIGINT/SIGTERM/SIGHUP, when the mount handles them) go through libfuse's handler and a
// relay thread that calls `exit()`, which any thread may call.
//
// Exactly once. Every request gets one reply. FuseUserdata records each request from the
// moment libfuse hands it over until its reply; the first reply wins, later ones are dropped
// and logged. So a parked read may race data, interrupt, timeout and shutdown safely, and the
// winner is the one whose `PendingReply.take()` returned the request. When the loop ends, the
// mount answers everything still outstanding with EIO, then unmounts, then destroys the
// libfuse session; replies after that are no-ops.
//
// Locks. libfuse holds a request's lock while it runs its interrupt handler, so never register
// an interrupt handler (`onInterrupt`, `PendingReply.init`) while holding a lock the handler
// takes. Notifications (FuseNotifier) must not be sent from inside an op on the same inode.

import CFuse3
import Foundation
import Glibc
import Logging
import Synchronization

/// Mount options for ``FuseMount``.
public struct FuseMountOptions: Sendable {
  /// The "device" column of the mount table (`-o fsname=`).
  public var fsName: String?
  /// The type suffix: `fuse.<subtype>` (`-o subtype=`).
  public var subtype: String?
  /// Let other users use the mount (`-o allow_other`; non-root needs `user_allow_other`).
  public var allowOther = false
  /// Let the kernel check permissions from the mode bits (`-o default_permissions`).
  public var defaultPermissions = false
  /// Mount read-only (`-o ro`).
  public var readOnly = false
  /// Largest read request in bytes (`-o max_read=`, also forced at init).
  public var maxRead: UInt32?
  /// Readahead of the mount's page cache in KiB, set on the connection's backing device
  /// (`/sys/class/bdi/MAJ:MIN/read_ahead_kb`) once the kernel has taken the init reply, which
  /// caps it at the kernel's 128 KiB. Needs root; nil leaves the kernel's value.
  public var readaheadKiB: Int?
  /// Allow mounting over a directory that has entries.
  public var allowNonEmptyMountpoint = false
  /// More `-o` options passed to libfuse as they are (`"noatime"`, `"max_read=…"`).
  public var extraOptions: [String] = []
  /// Access-time options libfuse does not take, applied once mounted (``AccessTimes``).
  public var accessTimes = AccessTimes()
  /// Most worker threads (libfuse default: 10).
  public var maxThreads: Int?
  /// Most idle worker threads kept around (libfuse default: 10).
  public var maxIdleThreads: Int?
  /// Stop cleanly on SIGINT, SIGTERM and SIGHUP (for a daemon's main mount; leave off for
  /// library use and tests). Also clears the calling thread's signal mask.
  public var handleSignals = false
  /// With ``handleSignals``: once the loop has stopped, SIGINT, SIGTERM and SIGHUP are ignored
  /// instead of given back their default (deadly) action, with no moment in between, so a
  /// program's shutdown after ``FuseMount/run()`` returns is not cut short by a second signal.
  public var ignoresSignalsAfterStop = false
  /// Log every FUSE operation and reply at debug level (lowers the mount's logger to debug).
  public var trace = false

  /// Default options.
  public init() {}

  /// The `-o` option list for libfuse.
  var optionList: [String] {
    var o: [String] = []
    func escaped(_ s: String) -> String {
      s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: ",", with: "\\,")
    }
    if let fsName { o.append("fsname=\(escaped(fsName))") }
    if let subtype { o.append("subtype=\(escaped(subtype))") }
    if allowOther { o.append("allow_other") }
    if defaultPermissions { o.append("default_permissions") }
    if readOnly { o.append("ro") }
    if let maxRead { o.append("max_read=\(maxRead)") }
    return o + extraOptions
  }
}

/// Why a FUSE mount could not mount, run or unmount.
public enum FuseMountError: Error, Equatable, CustomStringConvertible {
  /// `/dev/fuse` does not exist (no FUSE in this kernel or container).
  case deviceMissing
  /// `/dev/fuse` exists but cannot be opened (errno).
  case deviceUnavailable(errno: Int32)
  /// The mount point does not exist.
  case mountpointMissing(String)
  /// The mount point is not a directory.
  case mountpointNotDirectory(String)
  /// The mount point has entries and ``FuseMountOptions/allowNonEmptyMountpoint`` is off.
  case mountpointNotEmpty(String)
  /// The mount point cannot be examined (errno; `ENOTCONN`: a FUSE mount whose daemon died).
  case mountpointUnusable(String, errno: Int32)
  /// libfuse rejected the options.
  case invalidOptions([String])
  /// `fuse_session_mount` failed (libfuse logged why).
  case mountFailed(String)
  /// The mount is not in the state the call needs (e.g. `run()` before `mount()`).
  case wrongState(String)
  /// The loop ended with an error (errno).
  case loopFailed(errno: Int32)
  /// Nothing is mounted at the path.
  case notMounted(String)
  /// Something other than FUSE is mounted at the path (its file system type).
  case notFuseMount(String, type: String)
  /// Unmounting failed.
  case unmountFailed(String, reason: String)
  /// The access-time options could not be set on the mount (the options, errno).
  case accessTimesRefused([String], errno: Int32)

  public var description: String {
    switch self {
    case .deviceMissing:
      return "/dev/fuse is missing: this kernel or container has no FUSE"
    case .deviceUnavailable(let e):
      return "cannot open /dev/fuse: \(String(cString: strerror(e)))"
    case .mountpointMissing(let p): return "mount point \(p) does not exist"
    case .mountpointNotDirectory(let p): return "mount point \(p) is not a directory"
    case .mountpointNotEmpty(let p): return "mount point \(p) is not empty"
    case .mountpointUnusable(let p, let e) where e == ENOTCONN:
      return "mount point \(p) is a dead FUSE mount; unmount it first"
    case .mountpointUnusable(let p, let e):
      return "mount point \(p): \(String(cString: strerror(e)))"
    case .invalidOptions(let o): return "libfuse rejected the options \(o.joined(separator: ","))"
    case .mountFailed(let p): return "mounting on \(p) failed"
    case .wrongState(let s): return s
    case .loopFailed(let e): return "FUSE loop failed: \(String(cString: strerror(e)))"
    case .notMounted(let p): return "nothing is mounted at \(p)"
    case .notFuseMount(let p, let t): return "\(p) is a \(t) mount, not FUSE"
    case .unmountFailed(let p, let r): return "unmounting \(p) failed: \(r)"
    case .accessTimesRefused(let o, let e) where e == EPERM:
      return
        "option \(o.joined(separator: ",")) changes the mount's flags, which only root may do (fusermount3 cannot)"
    case .accessTimesRefused(let o, let e):
      return "cannot set \(o.joined(separator: ",")) on the mount: \(String(cString: strerror(e)))"
    }
  }
}

/// A FUSE mount served by a ``FuseFileSystem``: `mount()`, then `run()` (blocking) or
/// `start()` (on its own thread); `exit()` from anywhere ends it, answers outstanding requests
/// with `EIO` and unmounts.
public final class FuseMount: Sendable {
  /// The mount point path as given.
  public let mountpoint: String
  /// The options the mount was created with.
  public let options: FuseMountOptions
  /// Cache invalidation and poll wake-ups for this mount.
  public let notifier: FuseNotifier

  let core: FuseUserdata
  private let logger: Logger
  private let state = Mutex(State.created)
  private let stopped = DispatchSemaphore(value: 0)
  /// Our mount's id in /proc/self/mountinfo, to clean up only our own mount.
  private let mountID = Mutex<Int?>(nil)

  private enum State {
    case created
    case mounted(LibfuseSession)
    case running(LibfuseSession)
    case stopped
  }

  /// `struct fuse_session *`, movable between threads (only used under `state`'s rules).
  struct LibfuseSession: @unchecked Sendable {
    // @unchecked: only a pointer; `state` says which thread may use it (the loop while
    // running, then the one teardown).
    let raw: OpaquePointer
  }

  /// Creates a mount; nothing happens until ``mount()``.
  public init(
    fileSystem: any FuseFileSystem, mountpoint: String, options: FuseMountOptions = .init(),
    logger: Logger = Logger(label: "mount9bbs.fuse")
  ) {
    var logger = logger
    if options.trace && logger.logLevel > .debug { logger.logLevel = .debug }
    self.logger = logger
    self.mountpoint = mountpoint
    self.options = options
    core = FuseUserdata(
      fileSystem: fileSystem, logger: logger, trace: options.trace, maxRead: options.maxRead)
    notifier = FuseNotifier(core: core)
    LibfuseLog.install()
  }

  deinit {
    if case .mounted(let se) = state.withLock({ $0 }) { teardown(se) }
  }

  // MARK: Mount

  /// Checks `/dev/fuse` and the mount point, creates the libfuse session and mounts it.
  public func mount() throws(FuseMountError) {
    guard case .created = state.withLock({ $0 }) else {
      throw .wrongState("mount() called twice")
    }
    try Self.checkDevice()
    try Self.checkMountpoint(mountpoint, allowNonEmpty: options.allowNonEmptyMountpoint)
    if options.handleSignals { SignalRelay.prepare() }

    let optionList = options.optionList
    var argv =
      ["mount9bbs"] + (optionList.isEmpty ? [] : ["-o", optionList.joined(separator: ",")])
    let cStrings = argv.map { strdup($0) }
    defer { cStrings.forEach { free($0) } }
    argv.removeAll()
    var cArgv = cStrings
    var ops = FuseUserdata.operations()
    let created = cArgv.withUnsafeMutableBufferPointer { buf -> OpaquePointer? in
      var args = fuse_args(argc: Int32(buf.count), argv: buf.baseAddress, allocated: 0)
      defer { fuse_opt_free_args(&args) }
      return fuse_session_new(&args, &ops, MemoryLayout<fuse_lowlevel_ops>.size, core.userdata)
    }
    guard let raw = created else { throw .invalidOptions(optionList) }
    let se = LibfuseSession(raw: raw)
    if options.handleSignals {
      fuse_set_signal_handlers(raw)
      SignalRelay.install(self)
    }
    guard fuse_session_mount(raw, mountpoint) == 0 else {
      if options.handleSignals { SignalRelay.uninstall(raw) }
      fuse_session_destroy(raw)
      throw .mountFailed(mountpoint)
    }
    do {
      try options.accessTimes.apply(to: MountTable.absolutePath(mountpoint))
    } catch {
      fuse_session_unmount(raw)
      if options.handleSignals { SignalRelay.uninstall(raw) }
      fuse_session_destroy(raw)
      throw .accessTimesRefused(options.accessTimes.options, errno: error.errno)
    }
    core.attach(raw)
    let entry = MountTable.entry(at: MountTable.absolutePath(mountpoint))
    mountID.withLock { $0 = entry?.id }
    if let kib = options.readaheadKiB, let device = entry?.device {
      core.setReadahead(kib, device: device)
    }
    state.withLock { $0 = .mounted(se) }
    logger.info("mounted on \(mountpoint)", metadata: ["options": "\(optionList)"])
  }

  // MARK: Run and stop

  /// Serves requests until the file system is unmounted or ``exit()`` is called, then answers
  /// every outstanding request with `EIO`, unmounts and destroys the libfuse session.
  public func run() throws(FuseMountError) {
    let se = try state.withLock { s throws(FuseMountError) -> LibfuseSession in
      guard case .mounted(let se) = s else { throw .wrongState("run() needs a mounted session") }
      s = .running(se)
      return se
    }
    let cfg = fuse_loop_cfg_create()
    fuse_loop_cfg_set_clone_fd(cfg, 0)
    if let n = options.maxThreads { fuse_loop_cfg_set_max_threads(cfg, UInt32(n)) }
    if let n = options.maxIdleThreads { fuse_loop_cfg_set_idle_threads(cfg, UInt32(n)) }
    let rc = fuse_session_loop_mt(se.raw, cfg)
    fuse_loop_cfg_destroy(cfg)
    if rc > 0 { logger.info("stopping on signal \(rc)") }
    teardown(se)
    if rc < 0 { throw .loopFailed(errno: -rc) }
  }

  /// Mounts if needed and runs the loop on a new thread. Errors of the loop itself are
  /// logged; ``waitUntilStopped(timeout:)`` waits for the end.
  public func start() throws(FuseMountError) {
    if case .created = state.withLock({ $0 }) { try mount() }
    let thread = Thread { [self] in
      do { try run() } catch { logger.error("\(error)") }
    }
    thread.name = "fuse-loop"
    thread.start()
  }

  /// Ends the mount from any thread (idempotent): the loop stops, outstanding requests get
  /// `EIO`, the mount goes away. Returns at once; see ``waitUntilStopped(timeout:)``.
  public func exit() {
    core.exiting.store(true, ordering: .relaxed)
    enum Next { case nothing, teardown(LibfuseSession), wake(LibfuseSession) }
    let next = state.withLock { s -> Next in
      switch s {
      case .created:
        s = .stopped
        stopped.signal()
        return .nothing
      case .mounted(let se):
        return .teardown(se)
      case .running(let se):
        return .wake(se)
      case .stopped:
        return .nothing
      }
    }
    switch next {
    case .nothing: break
    case .teardown(let se): teardown(se)
    case .wake(let se):
      fuse_session_exit(se.raw)
      // The loop notices the exit flag only after its next request: make one. statfs is never
      // cached by the kernel; the op table answers it at once while exiting.
      let path = mountpoint
      Thread.detachNewThread {
        var s = statvfs()
        _ = statvfs(path, &s)
      }
    }
  }

  /// Waits until the mount has ended (unmounted and destroyed). False on timeout.
  @discardableResult
  public func waitUntilStopped(timeout: Duration) -> Bool {
    let (s, a) = timeout.components
    let ok = stopped.wait(timeout: .now() + Double(s) + Double(a) / 1e18) == .success
    if ok { stopped.signal() }  // let other waiters through too
    return ok
  }

  /// Whether the mount has ended.
  public var isStopped: Bool {
    if case .stopped = state.withLock({ $0 }) { return true }
    return false
  }

  private func teardown(_ se: LibfuseSession) {
    let first = state.withLock { s -> Bool in
      if case .stopped = s { return false }
      s = .stopped
      return true
    }
    guard first else { return }
    core.exiting.store(true, ordering: .relaxed)
    core.sweep()
    core.detach()
    if options.handleSignals {
      SignalRelay.uninstall(se.raw, ignoringSignals: options.ignoresSignalsAfterStop)
    }
    fuse_session_unmount(se.raw)
    fuse_session_destroy(se.raw)
    // After an aborted connection libfuse leaves the (dead) mount in place: detach it, if
    // it is still ours and on top.
    let path = MountTable.absolutePath(mountpoint)
    if let id = mountID.withLock({ $0 }), MountTable.entry(at: path)?.id == id {
      logger.warning("connection to the kernel was cut; detaching \(mountpoint)")
      do { try Self.unmount(path: path) } catch { logger.error("\(error)") }
    }
    logger.info("unmounted \(mountpoint)")
    stopped.signal()
  }

  // MARK: Checks

  public static func checkDevice() throws(FuseMountError) {
    var st = stat()
    guard stat("/dev/fuse", &st) == 0 else {
      throw errno == ENOENT ? .deviceMissing : .deviceUnavailable(errno: errno)
    }
    let fd = Glibc.open("/dev/fuse", O_RDWR | O_CLOEXEC)
    guard fd >= 0 else { throw .deviceUnavailable(errno: errno) }
    close(fd)
  }

  public static func checkMountpoint(_ path: String, allowNonEmpty: Bool) throws(FuseMountError) {
    var st = stat()
    guard stat(path, &st) == 0 else {
      let e = errno
      throw e == ENOENT ? .mountpointMissing(path) : .mountpointUnusable(path, errno: e)
    }
    guard st.st_mode & S_IFMT == S_IFDIR else { throw .mountpointNotDirectory(path) }
    guard !allowNonEmpty else { return }
    guard let dir = opendir(path) else { throw .mountpointUnusable(path, errno: errno) }
    defer { closedir(dir) }
    while let e = readdir(dir) {
      let name = withUnsafeBytes(of: e.pointee.d_name) { b in
        String(decoding: b.prefix { $0 != 0 }, as: UTF8.self)
      }
      if name != "." && name != ".." { throw .mountpointNotEmpty(path) }
    }
  }
}
