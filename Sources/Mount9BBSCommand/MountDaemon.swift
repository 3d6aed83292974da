import BBSIdentity
import BBSMount
import BBSServer
import Foundation
import FuseKit
import Glibc
import Logging
import NinePClient
import NinePTransport
import Synchronization

/// Connects, mounts and serves until unmounted; reports readiness or the first error.
struct MountDaemon {
  let address: TransportAddress?
  let mountpoint: String
  let options: ParsedOptions
  let debug: Bool
  let readyFD: Int32?
  /// The board's other transports, in order of preference after `address` (`ADDR1,ADDR2`,
  /// or a named board's other PSMs): tried in turn at start, failed over to when the link in
  /// use dies; the pool goes back to a more preferred one when it answers again.
  var fallbacks: [TransportAddress] = []

  /// Whether the mount was reported ready (or failed) to the front process: exactly one
  /// report goes through the readiness pipe.
  private let verdict = Once()

  /// Runs the mount; returns the process exit code.
  func run() -> Int32 {
    // Informational lines reach logs, not terminals (see DaemonLogHandler).
    DaemonLog.bootstrap(level: debug ? .trace : .info)
    let logger = Logger(label: "mount9bbs")
    // Large reads and writes pass through buffers of 256 KiB to 1 MiB. Above glibc's default
    // threshold each one is a fresh mmap whose pages fault in and are zeroed, a fifth of the
    // daemon's time in a `cp`; from the heap they are reused.
    keepLargeBuffersOnTheHeap()
    do {
      try serve(logger: logger)
      return 0
    } catch {
      // Before the mount was ready this goes to the user's terminal (the front process's
      // pipe, or stderr with -f); after, to wherever the log went.
      if !report("mount9bbs: \(error)") { logger.error("\(error)") }
      return 1
    }
  }

  /// Checks, connects, mounts and serves until unmounted, in that order: what fails first is
  /// what the user hears about.
  private func serve(logger: Logger) throws(MountError) {
    let logFD = try checkLocally()
    let (target, local) = try mountTarget(logger: logger)
    defer { local?.stop() }

    let candidates = [target] + (address == nil ? [] : fallbacks)
    let configuration = try sessionConfiguration(for: candidates, logger: logger)
    let pool = try connect(candidates, configuration, logger)
    // Fids go back to the server: a board that does not clunk on disconnect would keep them.
    defer { pool.close(tidyingWithin: .seconds(1)) }
    let primary = pool.primary
    let user = primary.authenticatedIdentity.map { "identity \($0)" } ?? "uname \(options.uname)"
    logger.info(
      "connected to \(pool.address) (\(configuration.profile) profile, msize \(primary.msize), \(user))"
    )
    let fileSystem = try makeFileSystem(on: pool, target: target, logger: logger)

    // Checked before mounting: a mount that `-u` and `status` could not find is worse than
    // none.
    let runtimeDirectory: String
    do {
      runtimeDirectory = try RuntimeRecord.directory()
    } catch {
      throw .runtime(error)
    }

    fileSystem.prefetchRoot(timeout: .seconds(5))
    let fuse = FuseMount(
      fileSystem: fileSystem, mountpoint: mountpoint, options: fuseMountOptions(), logger: logger)
    do throws(FuseMountError) {
      try fuse.mount()
    } catch {
      throw .fuse(error)
    }
    // The server going away ends nothing here: readers wait and requests time out with a
    // clear errno (reconnecting is the pool's business).
    RuntimeRecord.sweepStale(in: runtimeDirectory)
    let record = RuntimeRecord(mountpoint: mountpoint, in: runtimeDirectory)
    record.write(pid: getpid())
    defer { record.remove() }
    let shownMountpoint = MountTable.absolutePath(mountpoint)
    let control = try? ControlSocket(path: record.controlPath, logger: logger) {
      fileSystem.statusReport(mountpoint: shownMountpoint)
    }
    if control == nil {
      logger.warning("no control socket at \(record.controlPath); status will not work")
    }
    defer { control?.close() }
    reportReadyOnceMounted(pool: pool, logFD: logFD, logger: logger)
    try serveUntilUnmounted(fuse, fileSystem)
  }

  /// Local problems first: they are quick to find and need no server. Returns the detached
  /// daemon's log file, opened now so that a bad path fails the mount.
  private func checkLocally() throws(MountError) -> Int32? {
    let logFD = try options.logFile.map { path throws(MountError) in try DaemonLog.openLogFile(path)
    }
    let absoluteMountpoint = MountTable.absolutePath(mountpoint)
    if let type = MountTable.type(at: absoluteMountpoint) {
      let kind =
        MountTable.isMount9BBS(at: absoluteMountpoint) ? "a mount9bbs mount" : "mounted (\(type))"
      throw .refused(
        "\(absoluteMountpoint) is already \(kind); unmount it first (mount9bbs -u) or mount elsewhere"
      )
    }
    do throws(FuseMountError) {
      try FuseMount.checkDevice()
      try FuseMount.checkMountpoint(mountpoint, allowNonEmpty: options.allowNonEmpty)
    } catch {
      throw .fuse(error)
    }
    return logFD
  }

  /// The address to mount: the one given, or that of the built-in BBS, started now.
  private func mountTarget(logger: Logger) throws(MountError) -> (TransportAddress, LocalBBS?) {
    if let address { return (address, nil) }
    do {
      let started = try LocalBBS.start(logger: logger)
      return (started.address, started)
    } catch {
      throw .local("\(error)")
    }
  }

  /// The sessions' configuration: one profile for every transport (a device's rules are safe
  /// over a gateway too, the reverse is not), and the key to authenticate with.
  private func sessionConfiguration(
    for candidates: [TransportAddress], logger: Logger
  ) throws(MountError) -> SessionConfiguration {
    let profile =
      options.profile
      ?? (candidates.contains { ServerProfile.default(for: $0) == .device } ? .device : .multiplex)
    var configuration = SessionConfiguration(
      profile: profile, uname: options.uname, aname: options.aname, requestedMsize: options.msize,
      requestTimeout: options.timeout)
    // Not for the built-in BBS, which does not authenticate.
    if address != nil {
      configuration.authentication = try options.authentication(
        board: candidates.map(\.description), logger: logger)
      if options.secure != .off {
        configuration.openChannel =
          ChannelOpener(
            mode: options.secure, pins: BoardPins(path: BoardPins.defaultPath()),
            board: candidates.map(\.description), logger: logger
          ).open
      }
    }
    return configuration
  }

  /// What the file system is told by the command line.
  private var fileSystemOptions: MountOptions {
    var mountOptions = MountOptions(uid: options.uid ?? getuid(), gid: options.gid ?? getgid())
    mountOptions.umask = options.umask ?? 0
    if options.allowOther && !options.allowOtherWrite {
      // Everything written through the mount is said by the mounting user's proven identity:
      // other users read, and only the owner writes (the kernel checks the modes, as
      // allow_other turns default_permissions on).
      mountOptions.umask |= 0o022
    }
    mountOptions.readOnly = options.readOnly
    mountOptions.rawText = options.rawText
    mountOptions.streamGlobs = options.streamGlobs
    mountOptions.awareness = options.awareness
    // As /proc shows it in a process's open files: symbolic links resolved.
    mountOptions.mountpoint = realpath(mountpoint, nil).map { resolved in
      defer { free(resolved) }
      return String(cString: resolved)
    }
    return mountOptions
  }

  /// The file system over `pool`, with the outbox and room history kept for this board and
  /// user (none for the built-in BBS, which lives and dies with the mount).
  private func makeFileSystem(
    on pool: Pool, target: TransportAddress, logger: Logger
  ) throws(MountError) -> BBSFileSystem {
    do {
      let key = "\(pool.primary.authenticatedIdentity ?? options.uname)@\(target)\(options.aname)"
      let outbox = options.outbox && address != nil ? Outbox.directory(forKey: key) : nil
      let history = options.history && address != nil ? RoomHistory.directory(forKey: key) : nil
      return try BBSFileSystem(
        pool: pool, options: fileSystemOptions, outboxDirectory: outbox, historyDirectory: history,
        logger: logger)
    } catch {
      throw .local("\(error)")
    }
  }

  /// The options libfuse mounts with.
  private func fuseMountOptions() -> FuseMountOptions {
    var fuseOptions = FuseMountOptions()
    fuseOptions.fsName = MountTable.sourcePrefix + (address?.description ?? "local")
    fuseOptions.subtype = options.subtype
    fuseOptions.allowOther = options.allowOther
    fuseOptions.defaultPermissions = options.defaultPermissions
    fuseOptions.readOnly = options.readOnly
    fuseOptions.allowNonEmptyMountpoint = options.allowNonEmpty
    fuseOptions.extraOptions = options.passthrough
    fuseOptions.accessTimes = options.accessTimes
    fuseOptions.maxRead = options.maxRead ?? splicedRequestLimit
    fuseOptions.handleSignals = true
    // Stopping (feeds, histories, clunking every fid) must not be cut short by a second
    // SIGTERM or Ctrl-C (systemd, `kill` right after `umount`).
    fuseOptions.ignoresSignalsAfterStop = true
    if options.readaheadKiB > 0 { fuseOptions.readaheadKiB = options.readaheadKiB }
    fuseOptions.trace = debug
    return fuseOptions
  }

  /// Reports the mount ready (to the front process and systemd) once the kernel's INIT went
  /// through: a refused INIT (libfuse said why on stderr) must fail the command, not leave it
  /// reporting success over nothing.
  private func reportReadyOnceMounted(pool: Pool, logFD: Int32?, logger: Logger) {
    let absoluteMountpoint = MountTable.absolutePath(mountpoint)
    Thread.detachNewThread { [self] in
      var info = stat()
      guard stat(absoluteMountpoint, &info) == 0, FuseMount.isFuseMount(path: absoluteMountpoint)
      else { return }
      // stderr leaves the front process's pipe before `ready` closes it: a line logged in
      // between would otherwise hit a pipe nobody reads.
      let detaching = readyFD != nil || logFD != nil
      if signalReady(before: { if detaching { DaemonLog.detach(logFD: logFD) } }), detaching {
        // The log starts here: say what was mounted from where (the connection's line went
        // to the terminal, which shows notices only).
        logger.info("mounted \(absoluteMountpoint) from \(pool.address)")
      }
      SystemdNotifier.ready(mountpoint: absoluteMountpoint, link: pool.linkState)
      pool.observe { state in SystemdNotifier.linkChanged(state, mountpoint: absoluteMountpoint) }
    }
  }

  /// Runs the FUSE loop until the unmount, then stops the file system.
  private func serveUntilUnmounted(_ fuse: FuseMount, _ fileSystem: BBSFileSystem)
    throws(MountError)
  {
    var loopError: FuseMountError?
    do {
      try fuse.run()
    } catch {
      loopError = error
    }
    // Stopping is under way and bounded (feeds, then clunking every fid for at most 1 s): a
    // second SIGTERM or Ctrl-C (systemd, `kill` after `umount`) must not cut it short and leave
    // a board holding our fids. FuseMount already ignores them from the loop's end; this
    // covers a loop that failed.
    for stop in [SIGINT, SIGTERM, SIGHUP] { signal(stop, SIG_IGN) }
    SystemdNotifier.stopping()
    fileSystem.shutdown()
    if let loopError { throw .fuse(loopError) }
  }

  /// Starts a pool on the first candidate that answers (the pool tries them in order).
  private func connect(
    _ candidates: [TransportAddress], _ configuration: SessionConfiguration, _ logger: Logger
  ) throws(MountError) -> Pool {
    var policy = ReconnectPolicy()
    policy.enabled = options.reconnect
    policy.keepaliveInterval = options.keepalive
    policy.keepaliveMisses = options.keepaliveMisses
    // A board parks 4 reads per session: following more than 4 rooms takes a second stream
    // session (dialled only then) rather than parking on the primary, where each read
    // would hold `ls` and posts back for the park grace.
    let sessions = options.sessions ?? (configuration.profile == .device ? 3 : 2)
    let pool = Pool(
      addresses: candidates, configuration: configuration, maxSessions: sessions,
      policy: policy, logger: logger)
    do {
      try pool.start()
      return pool
    } catch {
      // The preferred transport's error: the one the user most likely wants to hear about.
      throw .connect(
        address: candidates[0].description, error, identity: configuration.authentication?.identity)
    }
  }

  /// Tells the front process the mount is ready; false if a verdict went already.
  private func signalReady(before: () -> Void = {}) -> Bool {
    guard verdict.claim() else { return false }
    before()
    guard let readyFD else { return true }
    let text = "ready\n"
    _ = text.utf8CString.withUnsafeBufferPointer { write(readyFD, $0.baseAddress, $0.count - 1) }
    close(readyFD)
    return true
  }

  /// Reports an error where the user will see it (stderr: the front process's pipe when
  /// detached, else the terminal); false once the mount was reported ready.
  private func report(_ message: String) -> Bool {
    guard verdict.claim() else { return false }
    Diagnostics.fail(message)
    if let readyFD { close(readyFD) }
    return true
  }
}

/// True for the first caller of ``claim()`` only.
final class Once: Sendable {
  private let taken = Mutex(false)

  func claim() -> Bool {
    taken.withLock { taken in
      defer { taken = true }
      return !taken
    }
  }
}

/// Why the mount could not start; each says what to do about it.
enum MountError: Error, CustomStringConvertible {
  case fuse(FuseMountError)
  case connect(address: String, NinePError, identity: String? = nil)
  case local(String)
  /// A mount the command will not make (the reason says why and what to do): also a key that
  /// cannot be used, or none where one is required.
  case refused(String)
  case runtime(RuntimeDirectoryError)

  var description: String {
    switch self {
    case .fuse(let error):
      return "\(error)"
    case .connect(let address, .transport(let error), _):
      return "cannot reach \(address): \(error)"
    case .connect(let address, .versionNotSupported(let said), _):
      return
        "\(address) does not speak 9P2000 (it answered Tversion with \"\(said)\"); mount9bbs needs a 9P2000 server"
    case .connect(let address, .timedOut, _):
      return "\(address) did not answer the 9P handshake in time; is it a 9P server?"
    case .connect(let address, .authentication(let error), let identity?):
      return "cannot mount \(address) as \(identity): \(error)"
    case .connect(let address, let error, _):
      return "cannot mount \(address): \(error)"
    case .local(let text):
      return "cannot start the built-in BBS: \(text)"
    case .refused(let text):
      return text
    case .runtime(let error):
      return "\(error)"
    }
  }
}

/// The largest read request to ask the kernel for when none is given: where pipes may not hold
/// a megabyte (`fs.pipe-max-size`, without CAP_SYS_RESOURCE), half-megabyte requests whose data
/// is spliced (NinePTransport's Splice.swift) cost a third less CPU than megabyte ones copied,
/// and read faster. Elsewhere the kernel's default (a megabyte) stands.
private var splicedRequestLimit: UInt32? {
  let largest = SplicedBytes.largestSpliced
  return largest > 0 && largest < 1 << 20 ? UInt32(largest) : nil
}
