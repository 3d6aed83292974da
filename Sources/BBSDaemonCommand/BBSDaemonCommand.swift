// 9bbsd: the reference 9BBS server. A thin shell around BBSServer: parses options, sets up
// logging, handles SIGINT/SIGTERM on a dispatch queue and waits for the server's threads.
// This file holds the options and `run`; the steps are in BBSDaemonCommand+Validation
// (option checks), +ServerConfiguration (options to configuration, the board key), +Process
// (malloc, signals, descriptor limit, logging) and +LAN (exposure warnings, mDNS).

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
      Serves /etc, /rooms and /chat like a 9BBS board, over TCP, Unix or seqpacket sockets or Bluetooth LE L2CAP channels. \
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
      deployed board instead: no board key, signatures over the raw challenge. TCP clients \
      that ask get a secure channel (--secure): encrypted, its handshake signed by the board \
      key, and every signature bound to it.

      Against hostile clients: connections are capped (--connection-cap, \
      --max-connections-per-network, --member-reserve) and timed out (--handshake-timeout, --idle-timeout, \
      --stall-timeout); each TCP poster (a verified identity, else a guest's /24 or /64 network) \
      has an allowance of posts and bytes (--post-burst, --posts-per-minute, --byte-burst, \
      --bytes-per-second), and all guests together share a budget of a few networks' \
      allowances (--guest-budget) that members are never charged to; board messages are capped (--max-board-message). One post is one \
      line: a post of several lines is several posts, and other control characters than tab \
      are refused. To serve a LAN, listen on it with --auth required and name the sysop \
      (--sysop IDENTITY, or --sysop none): without them anyone who connects can post \
      unverified, and the first to attach becomes the sysop.
      """,
    version: ProductVersion.current)

  @Option(
    name: .customLong("listen"),
    help:
      "Listen address: tcp:host:port, unix:/path, seqpacket:/path[:sdu], or l2cap:PSM (Bluetooth LE channels on every adapter; l2cap:BDADDR:PSM on one) (repeatable)."
  )
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
      Serve at most N clients at once and refuse (and log) the next, answering its \
      Tversion "board full: all N sessions in use" (default: \
      \(BBSServerConfiguration.defaultConnectionCap); device: 4; gen1: no cap).
      """, valueName: "N"))
  var connectionCap: Int?

  @Option(
    name: [.customLong("max-connections-per-network"), .customLong("max-connections-per-address")],
    help: ArgumentHelp(
      """
      Refuse (and log) a TCP client whose network (its /24, or /64 for IPv6) already has N \
      connections, members' attached sessions not counted; 0: no cap \
      (--max-connections-per-address is the old name).
      """, valueName: "N"))
  var maxConnectionsPerNetwork = 32

  @Option(
    help: ArgumentHelp(
      """
      With --auth optional and a connection cap: guests never hold the last N sessions, \
      so members get in however many guests come (at most the cap minus one).
      """, valueName: "N"))
  var memberReserve = 16

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
      guests and unverified unames count per network, a /24 or an IPv6 /64; TCP clients \
      only, local ones are not limited).
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
    help: ArgumentHelp(
      """
      All guests together (every network) may post and write N networks' allowances, at \
      once and per minute or second; members are never charged to it (0: no shared budget).
      """, valueName: "N"))
  var guestBudget = PostingLimits.defaultGuestNetworks

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
      The secure channel (Noise_XX_25519_ChaChaPoly_SHA256, docs/authentication.md §6) for \
      stream clients that ask for it. offered (default): a TCP client may use it, and Tauth \
      is refused on a plain TCP connection, so no signature is ever made on one; required: \
      TCP clients must use it; off: never (as a deployed board; the default with --auth-sign \
      raw). Unix-socket clients may always come plain.
      """, valueName: "offered|required|off"))
  var secure: String?

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
      Advertise the board under this name: TCP listeners on the LAN (mDNS: _9p._tcp and \
      _9pfs._tcp, TXT version, features, board) through avahi-daemon; l2cap listeners over \
      Bluetooth LE (an advertisement with the 9PIS service UUID and the name, and the 9PIS \
      GATT service) through bluetoothd.
      """)
  var advertise: String?

  func run() throws {
    prepareProcess()
    let logger = bootstrapLogging()
    let configuration = try serverConfiguration(logger: logger)

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
    let advertisers = try advertise.map { name in
      try startAdvertising(
        name, listeners: bound, boardKey: configuration.boardKey.flatMap(BoardKey.init(of:)),
        server: server, logger: logger)
    }
    let signalSources = stopOnSignals(server, logger: logger)

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
    advertisers?.lan?.stop()
    advertisers?.bluetooth?.stop()
    server.stop()
    withExtendedLifetime(signalSources) {}
    logger.notice("9bbsd: stopped")
  }
}
