import BBSMount
import BBSServer
import Foundation
import FuseKit
import Logging
import NinePClient
import NinePTransport

/// Connects, mounts and serves until unmounted; reports readiness or the first error.
struct MountDaemon {
  let address: TransportAddress?
  let mountpoint: String
  let options: ParsedOptions
  let debug: Bool
  let readyFD: Int32?
  /// Addresses tried in turn when `address` refuses the connection (a named board's other
  /// PSMs).
  var fallbacks: [TransportAddress] = []

  /// Runs the mount; returns the process exit code.
  func run() -> Int32 {
    LoggingSystem.bootstrap { label in
      var handler = StreamLogHandler.standardError(label: label)
      handler.logLevel = debug ? .trace : .notice
      return handler
    }
    let logger = Logger(label: "mount9bbs")
    do {
      try serve(logger: logger)
      return 0
    } catch {
      report("mount9bbs: \(error)")
      return 1
    }
  }

  private func serve(logger: Logger) throws(MountError) {
    // Local problems first: they are quick to find and need no server.
    do throws(FuseSessionError) {
      try FuseSession.checkDevice()
      try FuseSession.checkMountpoint(mountpoint, allowNonEmpty: options.allowNonEmpty)
    } catch {
      throw .fuse(error)
    }

    var local: LocalBBS?
    let target: TransportAddress
    if let address {
      target = address
    } else {
      do {
        let started = try LocalBBS.start(logger: logger)
        local = started
        target = started.address
      } catch {
        throw .local("\(error)")
      }
    }
    defer { local?.stop() }

    let profile = options.profile ?? ServerProfile.default(for: target)
    var configuration = SessionConfiguration(
      profile: profile, uname: options.uname, aname: options.aname, requestedMsize: options.msize,
      requestTimeout: options.timeout)
    // Not for the built-in BBS, which does not authenticate.
    if address != nil { configuration.authentication = try options.authentication() }
    let pool = try connect([target] + (address == nil ? [] : fallbacks), configuration, logger)
    // Fids go back to the server: a board that does not clunk on disconnect would keep them.
    defer { pool.close(tidyingWithin: .seconds(1)) }
    let primary = pool.primary
    let user = primary.authenticatedIdentity.map { "identity \($0)" } ?? "uname \(options.uname)"
    logger.info(
      "connected to \(pool.address) (\(profile) profile, msize \(primary.msize), \(user))")

    var mountOptions = MountOptions(uid: getuid(), gid: getgid())
    mountOptions.readOnly = options.readOnly
    mountOptions.streamGlobs = options.streamGlobs
    // As /proc shows it in a process's open files: symbolic links resolved.
    mountOptions.mountpoint = realpath(mountpoint, nil).map { resolved in
      defer { free(resolved) }
      return String(cString: resolved)
    }
    let fileSystem: BBSFileSystem
    do {
      // The built-in BBS lives and dies with the mount: no outbox or history for it.
      let key = "\(primary.authenticatedIdentity ?? options.uname)@\(target)\(options.aname)"
      let outbox = options.outbox && address != nil ? Outbox.directory(forKey: key) : nil
      let history = options.history && address != nil ? RoomHistory.directory(forKey: key) : nil
      fileSystem = try BBSFileSystem(
        pool: pool, options: mountOptions, outboxDirectory: outbox, historyDirectory: history,
        logger: logger)
    } catch {
      throw .local("\(error)")
    }

    var fuseOptions = FuseMountOptions()
    fuseOptions.fsName = "9bbs:" + (address?.description ?? "local")
    fuseOptions.subtype = "mount9bbs"
    fuseOptions.allowOther = options.allowOther
    fuseOptions.defaultPermissions = options.defaultPermissions
    fuseOptions.readOnly = options.readOnly
    fuseOptions.allowNonEmptyMountpoint = options.allowNonEmpty
    fuseOptions.extraOptions = options.passthrough
    fuseOptions.handleSignals = true
    fuseOptions.trace = debug
    fileSystem.prefetchRoot(timeout: .seconds(5))
    let session = FuseSession(
      fileSystem: fileSystem, mountpoint: mountpoint, options: fuseOptions, logger: logger)
    do throws(FuseSessionError) {
      try session.mount()
    } catch {
      throw .fuse(error)
    }
    // The server going away ends nothing here: readers wait and requests time out with a
    // clear errno (reconnecting is the pool's business).
    RuntimeRecord.sweepStale()
    let record = RuntimeRecord(mountpoint: mountpoint)
    record.write(pid: getpid())
    defer { record.remove() }
    let shownMountpoint = RuntimeRecord.absolute(mountpoint)
    let control = try? ControlSocket(path: record.controlPath, logger: logger) {
      fileSystem.statusReport(mountpoint: shownMountpoint)
    }
    if control == nil {
      logger.warning("no control socket at \(record.controlPath); status will not work")
    }
    defer { control?.close() }
    signalReady()
    do {
      try session.run()
    } catch {
      logger.error("\(error)")
    }
    // Stopping is under way and bounded (feeds, then clunking every fid for at most 1 s): a
    // second SIGTERM or Ctrl-C (systemd, `kill` after `umount`) must not cut it short and leave
    // a board holding our fids.
    for stop in [SIGINT, SIGTERM, SIGHUP] { signal(stop, SIG_IGN) }
    fileSystem.shutdown()
    logger.info("unmounted \(mountpoint)")
  }

  /// Starts a pool on the first candidate that accepts the connection.
  private func connect(
    _ candidates: [TransportAddress], _ configuration: SessionConfiguration, _ logger: Logger
  ) throws(MountError) -> Pool {
    var index = 0
    while true {
      let candidate = candidates[index]
      var policy = ReconnectPolicy()
      policy.enabled = options.reconnect
      policy.keepaliveInterval = options.keepalive
      // A board parks 4 reads per session: following more than 4 rooms takes a second stream
      // session (dialled only then) rather than parking on the primary, where each read
      // would hold `ls` and posts back for the park grace.
      let sessions = options.sessions ?? (configuration.profile == .device ? 3 : 2)
      let pool = Pool(
        address: candidate, configuration: configuration, maxSessions: sessions,
        policy: policy, logger: logger)
      do {
        try pool.start()
        return pool
      } catch .transport(.connectFailed(_, let reason)) where index + 1 < candidates.count {
        logger.notice("\(candidate): \(reason); trying \(candidates[index + 1])")
        index += 1
      } catch {
        throw .connect(
          address: candidate.description, error, identity: configuration.authentication?.identity)
      }
    }
  }

  private func signalReady() {
    guard let readyFD else { return }
    let text = "ready\n"
    _ = text.utf8CString.withUnsafeBufferPointer { write(readyFD, $0.baseAddress, $0.count - 1) }
    close(readyFD)
  }

  /// Reports an error where the user will see it: the front process's pipe, or stderr.
  private func report(_ message: String) {
    if let readyFD {
      let text = message + "\n"
      _ = text.utf8CString.withUnsafeBufferPointer { write(readyFD, $0.baseAddress, $0.count - 1) }
      close(readyFD)
    } else {
      Diagnostics.fail(message)
    }
  }
}

/// Why the mount could not start; each says what to do about it.
enum MountError: Error, CustomStringConvertible {
  case fuse(FuseSessionError)
  case connect(address: String, NinePError, identity: String? = nil)
  case local(String)
  /// The key could not be loaded (or none was given where one is required).
  case identity(String)

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
    case .identity(let text):
      return text
    }
  }
}
