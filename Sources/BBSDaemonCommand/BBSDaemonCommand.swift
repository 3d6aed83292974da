// 9bbsd: the reference 9BBS server. A thin shell around BBSServer: parses options, sets up
// logging, handles SIGINT/SIGTERM on a dispatch queue and waits for the server's threads.

import ArgumentParser
import BBSDiscovery
import BBSIdentity
import BBSServer
import Dispatch
import Foundation
import Glibc
import Logging
import NinePTransport

@main
struct BBSDaemonCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "9bbsd",
    abstract: "Serve a 9BBS bulletin board over 9P2000.",
    discussion: """
      Serves /etc, /rooms and /chat like a 9BBS board, over TCP, Unix or seqpacket sockets. \
      With --profile device it reproduces a real board's limits and quirks and disconnects a \
      client that breaks the board's wire rules. With --profile gen1 it reproduces the \
      "Gen-1" board (9p4z's 9BBS at 9aa8a00): the device's limits, chat reads that never \
      wait (a caught-up reader gets 0 bytes at once), a 49-line ring per room, one chat \
      cursor for everyone keyed by the last writer on any connection, one generic error \
      string per operation ("read failed", …), Rversion tagged NOTAG, requests served one \
      at a time in order, and fids left open at disconnect counted and logged. Without \
      --listen or --stdio it listens on \(BBSServerConfiguration.defaultListen). \
      /chat/users lists the users with a connection attached now; the device and gen1 \
      profiles list, as a board does, everyone who has read a room since the start.

      With --auth optional or required, clients prove who they are with Tauth, as on a \
      current board: an Ed25519 or P-256 key whose identity is the hex of SHA-256(public \
      key)[:20] (mount9bbs keygen prints it). Chat lines show an identity by its nickname \
      (--nickname) or its first 8 characters, read cursors follow the identity, and an attach \
      without authentication is a guest (refused with --auth required). The board proves \
      its own Ed25519 key (--board-key) to every client that authenticates, and accepts only \
      signatures that name that key (docs/authentication.md); --auth-sign raw imitates a \
      deployed board instead: no board key, signatures over the raw challenge.

      Against hostile clients: connections are capped (--connection-cap, \
      --max-connections-per-address) and timed out (--handshake-timeout, --idle-timeout, \
      --stall-timeout); each TCP poster (a verified identity, else an address) has an allowance \
      of posts and bytes (--post-burst, --posts-per-minute, --byte-burst, \
      --bytes-per-second); board messages are capped (--max-board-message). One post is one \
      line: a post of several lines is several posts, and other control characters than tab \
      are refused. To serve a LAN, listen on it with --auth required and name the sysop \
      (--sysop IDENTITY, or --sysop none): without them anyone who connects can post \
      unverified, and the first to attach becomes the sysop.
      """,
    version: ProductVersion.current)

  @Option(
    name: .customLong("listen"),
    help: "Listen address: tcp:host:port, unix:/path or seqpacket:/path[:sdu] (repeatable).")
  var listen: [String] = []

  @Flag(help: "Serve one session on standard input and output.")
  var stdio = false

  @Option(help: "Comma-separated chat rooms (the board rooms created on first start).")
  var rooms = "lobby"

  @Option(help: "Initial /etc/boardname.")
  var boardName: String?

  @Option(help: "Initial /etc/motd.")
  var motd: String?

  @Option(help: "Serve this directory under /files (read-only unless --files-rw).")
  var files: String?

  @Flag(help: "Allow writing, creating and removing under /files.")
  var filesRw = false

  @Option(help: "Keep the board in DIR/9bbs.sqlite across restarts.")
  var data: String?

  @Option(help: "default, device or gen1.")
  var profile = "default"

  @Option(help: "Device profile: the largest SDU accepted from a client.")
  var sdu = 245

  @Option(help: "Device and gen1 profiles: hold each request this many milliseconds.")
  var processingDelay = 0

  @Option(
    help: ArgumentHelp(
      """
      Serve at most N clients at once; later ones wait in the listen backlog, unserved, \
      until one disconnects (instead of --connection-cap).
      """, valueName: "N"))
  var maxConnections: Int?

  @Option(
    help: ArgumentHelp(
      """
      Serve at most N clients at once and refuse (and log) the next (default: \
      \(BBSServerConfiguration.defaultConnectionCap); device: 4; gen1: no cap).
      """, valueName: "N"))
  var connectionCap: Int?

  @Option(
    help: ArgumentHelp(
      """
      Refuse (and log) a TCP client whose address already has N connections; 0: no cap.
      """, valueName: "N"))
  var maxConnectionsPerAddress = 32

  @Option(
    help: ArgumentHelp(
      "Files of /files one client may hold open at once (each is a descriptor).",
      valueName: "N"))
  var maxOpenFiles = 1024

  @Option(
    help: ArgumentHelp(
      "Close a connection that has not finished Tversion and Tattach within this time.",
      valueName: "SECONDS"))
  var handshakeTimeout = 10.0

  @Option(
    help: ArgumentHelp(
      """
      Close a connection that sent no request for this long; one waiting for chat (a parked \
      read) is never idle.
      """, valueName: "SECONDS"))
  var idleTimeout = 1800.0

  @Option(
    help: ArgumentHelp(
      """
      Close a connection whose request stays half-sent, or that reads no reply, for this \
      long.
      """, valueName: "SECONDS"))
  var stallTimeout = 30.0

  @Option(
    help: ArgumentHelp(
      """
      Largest board message a client may write; a larger write fails \
      with "no space left on device". The device and gen1 profiles keep 1 MiB.
      """, valueName: "BYTES"))
  var maxBoardMessage = BoardLimits.defaultMaxMessageBytes

  @Option(
    help: ArgumentHelp(
      """
      Chat lines and new board messages one poster may post at once (a verified identity; \
      guests and unverified unames count per address; TCP clients only, local ones are not \
      limited).
      """, valueName: "N"))
  var postBurst = PostingLimits.standard.postBurst

  @Option(
    help: ArgumentHelp(
      """
      Posts a minute a poster's allowance refills; beyond it posting fails with "resource \
      temporarily unavailable" (0: no limit).
      """, valueName: "N"))
  var postsPerMinute = PostingLimits.standard.postsPerMinute

  @Option(
    help: ArgumentHelp(
      "Bytes (chat text, board-message writes) one poster may write at once.",
      valueName: "BYTES"))
  var byteBurst = PostingLimits.standard.byteBurst

  @Option(
    help: ArgumentHelp(
      "Bytes a second a poster's allowance refills (0: no limit).",
      valueName: "BYTES"))
  var bytesPerSecond = PostingLimits.standard.bytesPerSecond

  @Option(
    help:
      "Largest msize granted (default: 1 MiB + 24; the device and gen1 profiles cap it at 8192).")
  var maxMsize: Int?

  @Option(
    help: ArgumentHelp(
      """
      off (the attach's uname is the user, unverified), optional (a verified identity, else \
      a guest) or required (no guests).
      """, valueName: "off|optional|required"))
  var auth = "off"

  @Option(
    help: ArgumentHelp(
      """
      The board's Ed25519 key when --auth is on, created there on first start (mode 0600), \
      or 'none' for a board without a key. Default: DATA/board_key with --data, else a key \
      made for this run only.
      """, valueName: "FILE|none"))
  var boardKey: String?

  @Option(
    help: ArgumentHelp(
      """
      What a client's key must sign when --auth is on. bound (default): \
      docs/authentication.md; \
      raw: the raw 32-byte challenge, as a deployed board probably verifies it (for testing \
      mount9bbs -o auth-sign=raw; implies --board-key none).
      """, valueName: "bound|raw"))
  var authSign = "bound"

  @Option(
    help: ArgumentHelp(
      """
      An identity allowed to write /etc (repeatable; needs --auth). Without any, the first \
      user to attach is the sysop, as on a device; `--sysop none`: nobody is (set \
      --board-name and --motd instead).
      """, valueName: "IDENTITY|none"))
  var sysop: [String] = []

  @Option(
    help: ArgumentHelp(
      "The name chat shows for an identity (repeatable).", valueName: "IDENTITY=NAME"))
  var nickname: [String] = []

  @Option(help: "trace, debug, info, notice, warning, error or critical.")
  var logLevel = "info"

  @Option(
    help: """
      Advertise the TCP listeners on the LAN under this name (mDNS: _9p._tcp and _9pfs._tcp, \
      TXT version, features, board) through avahi-daemon.
      """)
  var advertise: String?

  func validate() throws {
    guard BBSProfile(rawValue: profile) != nil else {
      throw ValidationError("--profile must be 'default', 'device' or 'gen1'")
    }
    guard Logger.Level(rawValue: logLevel) != nil else {
      throw ValidationError(
        "--log-level must be one of trace, debug, info, notice, warning, error, critical")
    }
    guard sdu >= 8 else { throw ValidationError("--sdu must be at least 8") }
    guard processingDelay >= 0 else { throw ValidationError("--processing-delay must be ≥ 0") }
    if let maxConnections, maxConnections < 1 {
      throw ValidationError("--max-connections must be at least 1")
    }
    if let connectionCap, connectionCap < 1 {
      throw ValidationError("--connection-cap must be at least 1")
    }
    if maxConnections != nil && connectionCap != nil {
      throw ValidationError("--max-connections and --connection-cap exclude each other")
    }
    guard maxConnectionsPerAddress >= 0 else {
      throw ValidationError("--max-connections-per-address must be ≥ 0")
    }
    for (name, value) in [
      ("--handshake-timeout", handshakeTimeout), ("--idle-timeout", idleTimeout),
      ("--stall-timeout", stallTimeout),
    ] where !(value > 0 && value <= 1e6) {
      throw ValidationError("\(name) must be more than 0 seconds")
    }
    guard maxBoardMessage >= 1 else { throw ValidationError("--max-board-message must be ≥ 1") }
    guard maxOpenFiles >= 1 else { throw ValidationError("--max-open-files must be ≥ 1") }
    for (name, value) in [
      ("--post-burst", postBurst), ("--posts-per-minute", postsPerMinute),
      ("--byte-burst", byteBurst), ("--bytes-per-second", bytesPerSecond),
    ] where value < 0 {
      throw ValidationError("\(name) must be ≥ 0")
    }
    if sysop.contains("none") && sysop.count > 1 {
      throw ValidationError("--sysop none names no sysop; it goes alone")
    }
    if files == nil && filesRw { throw ValidationError("--files-rw needs --files DIR") }
    guard AuthPolicy(rawValue: auth) != nil else {
      throw ValidationError("--auth must be 'off', 'optional' or 'required'")
    }
    guard ChallengeResponse.Form(rawValue: authSign) != nil else {
      throw ValidationError("--auth-sign must be 'bound' or 'raw'")
    }
    if authSign == "raw", let boardKey, boardKey != "none" {
      throw ValidationError("--auth-sign raw imitates a deployed board, which has no board key")
    }
    for entry in nickname {
      let parts = entry.split(separator: "=", maxSplits: 1)
      guard parts.count == 2, !parts[1].isEmpty else {
        throw ValidationError("--nickname needs IDENTITY=NAME, not '\(entry)'")
      }
    }
    if let advertise, advertise.isEmpty || advertise.utf8.count > 63 {
      throw ValidationError("--advertise needs a name of 1 to 63 bytes")
    }
  }

  func run() throws {
    keepLargeBuffersOnTheHeap()
    // A thread per connection: without one arena, memory of ended connections stays in their
    // threads' arenas (measured in MemoryTuning.swift).
    limitMallocArenas(to: 1)
    // Threads inherit the signal mask; start from an empty one so SIGINT/SIGTERM arrive.
    var empty = sigset_t()
    sigemptyset(&empty)
    pthread_sigmask(SIG_SETMASK, &empty, nil)
    // A client that vanishes mid-reply is a failed send (EPIPE) and a logged disconnect,
    // never the end of the server: every send also says MSG_NOSIGNAL or blocks SIGPIPE.
    signal(SIGPIPE, SIG_IGN)
    raiseDescriptorLimit()

    let level = Logger.Level(rawValue: logLevel) ?? .info
    LoggingSystem.bootstrap { label in
      var handler = StreamLogHandler.standardError(label: label)
      handler.logLevel = level
      return handler
    }
    let logger = Logger(label: "9bbsd")

    let roomList = rooms.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
      .filter { !$0.isEmpty }
    let listenAddresses =
      listen.isEmpty && !stdio ? [BBSServerConfiguration.defaultListen] : listen
    var configuration = BBSServerConfiguration(
      listen: listenAddresses, profile: BBSProfile(rawValue: profile) ?? .standard,
      rooms: roomList, boardName: boardName, motd: motd, filesDirectory: files,
      filesWritable: filesRw, dataDirectory: data, maxMessageSize: maxMsize, sduLimit: sdu,
      processingDelay: .milliseconds(processingDelay),
      connectionLimit: maxConnections.map { .backlog($0) } ?? connectionCap.map { .refuse($0) })
    configuration.auth = AuthPolicy(rawValue: auth) ?? .off
    configuration.authSign = ChallengeResponse.Form(rawValue: authSign) ?? .bound
    if configuration.auth != .off {
      do {
        configuration.boardKey = try loadBoardKey(logger: logger)
      } catch {
        logger.critical("9bbsd: \(error)")
        throw ExitCode.failure
      }
    }
    if sysop == ["none"] {
      configuration.firstUserIsSysop = false
    } else {
      configuration.sysops = Set(sysop.map { $0.lowercased() })
    }
    configuration.maxConnectionsPerAddress =
      maxConnectionsPerAddress == 0 ? nil : maxConnectionsPerAddress
    configuration.handshakeTimeout = .seconds(handshakeTimeout)
    configuration.idleTimeout = .seconds(idleTimeout)
    configuration.stallTimeout = .seconds(stallTimeout)
    configuration.maxBoardMessageSize = maxBoardMessage
    configuration.maxOpenFilesPerSession = maxOpenFiles
    configuration.postingLimits = PostingLimits(
      postBurst: postBurst, postsPerMinute: postsPerMinute, byteBurst: byteBurst,
      bytesPerSecond: bytesPerSecond)
    for entry in nickname {
      let parts = entry.split(separator: "=", maxSplits: 1).map(String.init)
      configuration.nicknames[parts[0].lowercased()] = parts[1]
    }

    let server: BBSServer
    let bound: [String]
    do {
      server = try BBSServer(configuration: configuration, logger: logger)
      bound = try server.start()
    } catch {
      logger.critical("9bbsd: \(error)")
      throw ExitCode.failure
    }
    warnIfExposed(bound, configuration: configuration, logger: logger)
    let advertiser = try advertise.map { name in
      try startAdvertising(
        name, listeners: bound, boardKey: configuration.boardKey.flatMap(BoardKey.init(of:)),
        server: server, logger: logger)
    }

    let signals = DispatchQueue(label: "9bbsd.signals")
    var sources: [any DispatchSourceSignal] = []
    for number in [SIGINT, SIGTERM] {
      signal(number, SIG_IGN)
      let source = DispatchSource.makeSignalSource(signal: number, queue: signals)
      source.setEventHandler {
        logger.notice("9bbsd: signal \(number), shutting down")
        server.stop()
      }
      source.resume()
      sources.append(source)
    }

    if stdio {
      do {
        server.serve(try dial(.fd(read: 0, write: 1)))
      } catch {
        logger.critical("9bbsd: cannot serve standard input/output: \(error)")
        server.stop()
        throw ExitCode.failure
      }
    }
    // Returns once every server thread has finished: after a signal, or when the --stdio
    // session ends and nothing else listens.
    server.waitUntilStopped()
    advertiser?.stop()
    server.stop()
    withExtendedLifetime(sources) {}
    logger.notice("9bbsd: stopped")
  }

  /// The board key (see --board-key), its fingerprint logged as sshd logs a host key's.
  private func loadBoardKey(logger: Logger) throws(IdentityError) -> PrivateKey? {
    if boardKey == "none" || authSign == "raw" {
      logger.notice("9bbsd: no board key: clients cannot tell this board from another")
      return nil
    }
    let key: PrivateKey
    if let path = boardKey ?? data.map({ $0 + "/board_key" }) {
      let loaded = try KeyFile.boardKey(at: path)
      key = loaded.key
      if loaded.created { logger.notice("9bbsd: created the board key \(path)") }
    } else {
      key = PrivateKey.generate(.ed25519)
      logger.notice("9bbsd: the board key lives for this run only (no --data or --board-key)")
    }
    if let fingerprint = BoardKey(of: key)?.fingerprint {
      logger.notice("9bbsd: board key \(fingerprint)")
    }
    return key
  }

  /// Raises the soft limit on open descriptors to the hard one (systemd gives services 1024
  /// soft, 524288 hard): 256 connections holding files of /files would run out of 1024.
  private func raiseDescriptorLimit() {
    var limit = rlimit()
    guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < limit.rlim_max
    else { return }
    limit.rlim_cur = limit.rlim_max
    _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
  }

  /// Warns when a TCP listener reaches beyond this machine while anyone may attach or the
  /// first to attach becomes the sysop.
  private func warnIfExposed(
    _ bound: [String], configuration: BBSServerConfiguration, logger: Logger
  ) {
    let exposed = bound.filter { dial in
      guard case .tcp(let host, _)? = try? TransportAddress(parsing: dial) else { return false }
      return !(host.hasPrefix("127.") || host == "::1" || host == "localhost")
    }
    guard !exposed.isEmpty else { return }
    if configuration.auth != .required {
      logger.warning(
        "9bbsd: \(exposed.joined(separator: ", ")) is reachable from the network and --auth is \(configuration.auth.rawValue): anyone there can attach and post; use --auth required"
      )
    }
    if configuration.sysops.isEmpty && configuration.firstUserIsSysop {
      logger.warning(
        "9bbsd: no --sysop: the first user to attach over the network becomes the sysop; name one with --sysop IDENTITY or --sysop none"
      )
    }
  }

  /// Publishes the TCP listeners over mDNS; without avahi-daemon it warns and keeps serving.
  private func startAdvertising(
    _ name: String, listeners bound: [String], boardKey: BoardKey?, server: BBSServer,
    logger: Logger
  ) throws -> LANAdvertiser {
    let endpoints = bound.compactMap { dial -> LANAdvertiser.Endpoint? in
      guard case .tcp(let host, let port)? = try? TransportAddress(parsing: dial) else {
        return nil
      }
      let loopback = host.hasPrefix("127.") || host == "::1" || host == "localhost"
      if loopback {
        logger.warning(
          "9bbsd: \(dial) accepts local connections only, so it is advertised on the loopback interface only; use --listen tcp!0.0.0.0!\(port) to serve the LAN"
        )
      }
      return LANAdvertiser.Endpoint(port: port, loopbackOnly: loopback)
    }
    guard !endpoints.isEmpty else {
      logger.critical(
        "9bbsd: --advertise publishes TCP listeners and there is none; add e.g. --listen tcp!0.0.0.0!5640"
      )
      server.stop()
      throw ExitCode.failure
    }
    var features = ["chat", "messaging"]
    if files != nil { features.append("file-sharing") }
    let advertiser = LANAdvertiser(
      name: name, endpoints: endpoints,
      txt: [
        ("version", "9P2000"), ("features", features.joined(separator: ",")),
        ("board", boardName ?? name),
      ] + (boardKey.map { [("boardkey", $0.fingerprint)] } ?? []), logger: logger)
    do {
      try advertiser.start()
    } catch {
      logger.error("9bbsd: not advertising '\(name)': \(error)")
    }
    return advertiser
  }
}
