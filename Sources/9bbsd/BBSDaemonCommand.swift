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
      --listen or --stdio it listens on \(BBSServerConfiguration.defaultListen).

      With --auth optional or required, clients prove who they are with Tauth, as on a \
      current board: an Ed25519 or P-256 key whose identity is the hex of SHA-256(public \
      key)[:20] (mount9bbs keygen prints it). Chat lines show an identity by its nickname \
      (--nickname) or its first 8 characters, read cursors follow the identity, and an attach \
      without authentication is a guest (refused with --auth required). The board proves \
      its own Ed25519 key (--board-key) to every client that authenticates, and accepts only \
      signatures that name that key (docs/authentication.md); --auth-sign raw imitates a \
      deployed board instead: no board key, signatures over the raw challenge.
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
      until one disconnects (default: unlimited; device: a 5th session is refused).
      """, valueName: "N"))
  var maxConnections: Int?

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
      user to attach is the sysop, as on a device.
      """, valueName: "IDENTITY"))
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
    // Threads inherit the signal mask; start from an empty one so SIGINT/SIGTERM arrive.
    var empty = sigset_t()
    sigemptyset(&empty)
    pthread_sigmask(SIG_SETMASK, &empty, nil)

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
      connectionLimit: maxConnections.map { .backlog($0) })
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
    configuration.sysops = Set(sysop.map { $0.lowercased() })
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

  /// Publishes the TCP listeners over mDNS; without avahi-daemon it warns and keeps serving.
  private func startAdvertising(
    _ name: String, listeners bound: [String], boardKey: BoardKey?, server: BBSServer,
    logger: Logger
  ) throws -> LANAdvertiser {
    let listeners = bound.compactMap { dial -> LANAdvertiser.Listener? in
      guard case .tcp(let host, let port)? = try? TransportAddress(parsing: dial) else {
        return nil
      }
      let loopback = host.hasPrefix("127.") || host == "::1" || host == "localhost"
      if loopback {
        logger.warning(
          "9bbsd: \(dial) accepts local connections only, so it is advertised on the loopback interface only; use --listen tcp!0.0.0.0!\(port) to serve the LAN"
        )
      }
      return LANAdvertiser.Listener(port: port, loopbackOnly: loopback)
    }
    guard !listeners.isEmpty else {
      logger.critical(
        "9bbsd: --advertise publishes TCP listeners and there is none; add e.g. --listen tcp!0.0.0.0!5640"
      )
      server.stop()
      throw ExitCode.failure
    }
    var features = ["chat", "messaging"]
    if files != nil { features.append("file-sharing") }
    let advertiser = LANAdvertiser(
      name: name, listeners: listeners,
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
