// BBSServer: the reference 9BBS server as a library (`9bbsd` and `mount9bbs --local` run it).
//
// Moving parts and who talks to whom:
// - `Board` (Board/) is the content: chat rooms with per-user cursors and waiters, board rooms,
//   /etc and users, persisted through a `BoardStore` (memory or SQLite). Every part has its own
//   Mutex; nothing in it knows 9P.
// - `Namespace` maps the 9BBS namespace (docs/board-facts.md §1.2) onto the board and the optional files area:
//   walks, qids, stats (with the device's QTDIR quirks), listings, reads, writes, creates.
// - `ConnectionHandler` serves one 9P session: msize, fids, parked reads, and (with `auth`) its
//   Tauth table (`AuthTable`: challenges, verified identities); each fid belongs to a `BoardUser`.
//   `process(frame)` runs one request under the session's lock and returns the reply frames; a
//   parked chat read registers a waiter with the chat hub, and a later post wakes it on
//   `wakeQueue`, which re-reads under the same lock and sends the Rread itself.
// - `BBSServer` owns the listeners and connections. Threads: one accept thread per listener,
//   one reader thread per connection (blocking sockets, no event loop). Default profile: the
//   reader thread calls `process` and sends the replies, so a parked read never blocks the
//   session. Device profile: the reader thread runs the RX state machine of a board
//   (WAIT_SIZE → WAIT_DATA → PROCESSING) over raw SDUs and hands complete messages to one
//   serial worker queue shared by all sessions (the device's `9p_proc`), which may hold each
//   request for `processingDelay`; a client that breaks the wire rules is disconnected with an
//   error log line that says what it did wrong. Gen1 profile: the reader thread hands each
//   whole message to the same worker and waits for it (the old core answered one request at a
//   time, in order); chat reads never park.
// - `ConnectionLimit.backlog(n)`: the accept loop stops calling accept(2) while n clients are
//   connected, so later clients sit in the kernel's listen backlog (9p4z's TCP transport).
// - Posting threads never block on a slow client: wake-ups run on `wakeQueue`.
// - Against hostile clients (issue 21): the connection cap (`ConnectionLimit.refuse`, 256 by
//   default) and the per-network cap bound the threads; the watchdog (a timer on
//   `watchdogQueue`) closes connections past the handshake, idle or stall timeout (see
//   `Connection.overdue`) and gives freed memory back; `PostingLimiter` holds each TCP
//   poster's allowance of posts and bytes. Thread per connection stays: bounded by the caps
//   and ended by the timeouts, it needs no event loop.

import BBSIdentity
import Dispatch
import Foundation
import Logging
import NinePProtocol
import NinePTransport
import Synchronization

/// The reference 9BBS server.
///
/// ```swift
/// let server = try BBSServer(configuration: BBSServerConfiguration(listen: ["tcp!127.0.0.1!0"]))
/// let addresses = try server.start()   // e.g. ["tcp!127.0.0.1!40123"]
/// …
/// server.stop()
/// ```
public final class BBSServer: Sendable {
  /// The configuration the server was built with.
  public let configuration: BBSServerConfiguration
  /// The content served; tests and the mount's `--local` mode may use it directly.
  public let board: Board

  let namespace: Namespace
  let logger: Logger
  let worker = DispatchQueue(label: "9bbs.proc")
  /// Posting allowances, per poster across all sessions.
  let limiter: PostingLimiter
  let watchdogQueue = DispatchQueue(label: "9bbs.watchdog")
  let wakeQueue = DispatchQueue(label: "9bbs.wake", attributes: .concurrent)
  let state = Mutex(RunState())
  private let threads = DispatchGroup()
  /// The connection slots of ``ConnectionLimit/backlog(_:)``; nil for other limits.
  let slots: ConnectionSlots?

  struct RunState {
    var listeners: [Listener] = []
    var connections: [Int: Connection] = [:]
    /// Connections holding one of `slots`.
    var slotted: Set<Int> = []
    var fidsLeftOpen = 0
    var nextID = 1
    var running = false
    var stopped = false
    var watchdog: (any DispatchSourceTimer)?
    /// Connections ended since the watchdog last looked.
    var endedSinceTrim = 0
    /// Watchdog rounds that still give memory back: a connection's thread frees its buffers
    /// after the connection is forgotten, so one trim right after the end comes too early.
    var trimRoundsLeft = 0
    /// Refusals not logged yet (at most one line a second), and when the last was logged.
    var refusalsUnlogged = 0
    var lastRefusalLog: ContinuousClock.Instant?
    /// Newcomers being told the board is full (``tellFull``).
    var fullAnswers = 0
    /// The user each connection first attached as.
    var users: [Int: String] = [:]
    /// The share each attached connection counts against: `id …` (a member), `net …` (a
    /// guest network); local connections have none (BBSServer+Reclaim.swift).
    var shares: [Int: String] = [:]
    /// Newcomers let in while the board is full, until their Tattach (``settleAttach``).
    var probation: Set<Int> = []
    /// Connections being closed to make room for a newcomer: no longer counted.
    var reclaimed: Set<Int> = []
  }

  /// Builds the server: opens the store (`dataDirectory`) and the files area, loads the board.
  /// Nothing listens until ``start()``.
  public init(
    configuration: BBSServerConfiguration, clock: any BoardClock = SystemBoardClock(),
    logger: Logger = Logger(label: "9bbsd")
  ) throws(ServerError) {
    self.configuration = configuration
    self.logger = logger
    limiter = PostingLimiter(limits: configuration.postingLimits)
    slots = try Self.connectionSlots(for: configuration.connectionLimit)
    let store = try Self.openStore(configuration)
    try Self.checkConfiguration(configuration)
    board = try Self.loadBoard(configuration, store: store, clock: clock, logger: logger)
    let files = try configuration.filesDirectory.map { (directory) throws(ServerError) in
      try FilesArea(directory: directory, writable: configuration.filesWritable)
    }
    namespace = Namespace(board: board, files: files, device: configuration.profile.imitatesBoard)
  }

  /// The slots of a ``ConnectionLimit/backlog(_:)`` limit; nil for the other limits.
  private static func connectionSlots(for limit: ConnectionLimit) throws(ServerError)
    -> ConnectionSlots?
  {
    switch limit {
    case .backlog(let limit), .refuse(let limit):
      guard limit >= 1 else {
        throw ServerError.badConfiguration("the connection limit must be at least 1")
      }
    case .unlimited: break
    }
    if case .backlog(let limit) = limit { return ConnectionSlots(limit: limit) }
    return nil
  }

  /// The SQLite store in `dataDirectory`, or a store in memory without one.
  private static func openStore(_ configuration: BBSServerConfiguration) throws(ServerError)
    -> any BoardStore
  {
    guard let directory = configuration.dataDirectory else { return InMemoryBoardStore() }
    do {
      return try SQLiteBoardStore(directory: directory)
    } catch {
      throw ServerError.storeFailed("\(error)")
    }
  }

  /// Refuses settings that cannot work (the connection limit: ``connectionSlots(for:)``).
  private static func checkConfiguration(_ configuration: BBSServerConfiguration)
    throws(ServerError)
  {
    guard !configuration.rooms.isEmpty else {
      throw ServerError.badConfiguration("at least one chat room is needed")
    }
    try checkAuthentication(configuration)
    if let perNetwork = configuration.maxConnectionsPerNetwork, perNetwork < 1 {
      throw ServerError.badConfiguration("the per-network connection limit must be at least 1")
    }
    guard configuration.sessionsReservedForMembers >= 0 else {
      throw ServerError.badConfiguration("the sessions reserved for members cannot be negative")
    }
    guard configuration.maxBoardMessageSize >= 1 else {
      throw ServerError.badConfiguration("the board message size limit must be at least 1")
    }
  }

  /// The board on `store`, with the profile's limits and the configured /etc defaults.
  private static func loadBoard(
    _ configuration: BBSServerConfiguration, store: any BoardStore, clock: any BoardClock,
    logger: Logger
  ) throws(ServerError) -> Board {
    var limits = BoardLimits.forProfile(configuration.profile)
    if configuration.profile == .standard {
      limits.maxMessageBytes = configuration.maxBoardMessageSize
    }
    var defaults: [EtcField: String] = [:]
    defaults[.boardname] = configuration.boardName
    defaults[.motd] = configuration.motd
    do {
      return try Board(
        configuration: BoardConfiguration(
          chatRooms: configuration.rooms, limits: limits, etcDefaults: defaults,
          sysops: configuration.sysops, firstUserIsSysop: configuration.firstUserIsSysop),
        store: store, clock: clock, logger: logger)
    } catch {
      throw ServerError.storeFailed("\(error)")
    }
  }

  /// Refuses authentication settings that cannot work.
  private static func checkAuthentication(_ configuration: BBSServerConfiguration)
    throws(ServerError)
  {
    if configuration.auth != .off && configuration.profile == .gen1 {
      throw .badConfiguration(
        "the gen1 profile has no authentication (its core predates Tauth); use --auth off")
    }
    for identity in configuration.sysops.union(configuration.nicknames.keys)
    where Identity(parsing: identity)?.hex != identity {
      throw .badConfiguration(
        "'\(identity)' is not an identity (40 lowercase hex characters, as `mount9bbs keygen` prints)"
      )
    }
    if !configuration.sysops.isEmpty && configuration.auth == .off {
      throw .badConfiguration("sysops are identities: they need --auth optional or required")
    }
    if let key = configuration.boardKey, BoardKey(of: key) == nil {
      throw .badConfiguration(
        "the board key \(key.origin) is \(key.algorithm); a board key is Ed25519")
    }
  }

  /// Opens every configured listener and starts accepting. Returns the bound addresses as dial
  /// strings (a `tcp` port 0 shows the port the kernel chose).
  /// - Throws: ``ServerError/listenFailed(address:reason:)``; listeners opened so far are closed.
  @discardableResult
  public func start() throws(ServerError) -> [String] {
    var opened: [Listener] = []
    for dial in configuration.listen {
      do {
        let address = try TransportAddress(parsing: dial)
        opened.append(try Listener(address: address))
      } catch {
        for listener in opened { listener.close() }
        throw ServerError.listenFailed(address: dial, reason: "\(error)")
      }
    }
    let bound = opened.map { $0.boundAddress.description }
    state.withLock {
      $0.listeners += opened
      $0.running = true
    }
    startWatchdog()
    for listener in opened {
      let auth = configuration.auth == .off ? "" : ", auth \(configuration.auth.rawValue)"
      logger.notice(
        "9bbsd (\(configuration.profile.rawValue) profile\(auth)) listening on \(listener.boundAddress)"
      )
      spawn(name: "9bbs.accept") { [self] in acceptLoop(listener) }
    }
    return bound
  }

  /// Number of connected sessions.
  public var sessionCount: Int { state.withLock { $0.connections.count } }

  /// Gen1 profile: fids that clients had not clunked when their connections ended, summed over
  /// every connection so far (a Gen-1 board never releases them). A well-behaved client leaves
  /// this at 0. Always 0 in the other profiles, which clunk leftover fids themselves.
  public var fidsLeftOpen: Int { state.withLock { $0.fidsLeftOpen } }

  /// Connections with a request in progress on the worker (device profile; for tests).
  var busyConnections: Int {
    state.withLock { Array($0.connections.values) }.filter(\.isProcessing).count
  }

  /// Serves one already-connected transport (e.g. stdin/stdout for `9bbsd --stdio`) on its own
  /// reader thread, like an accepted connection.
  public func serve(_ transport: any MessageTransport) {
    startWatchdog()
    guard let connection = admit(transport, slotted: false) else { return }
    spawn(name: "9bbs.conn") { connection.run() }
  }

  /// Stops listening, disconnects every client and waits (a bounded time) for the server's
  /// threads to finish. Unix socket files are removed. Idempotent.
  public func stop() {
    let (listeners, connections) = state.withLock { state in
      state.running = false
      state.stopped = true
      state.watchdog?.cancel()
      state.watchdog = nil
      let result = (state.listeners, Array(state.connections.values))
      state.listeners.removeAll()
      return result
    }
    slots?.close()
    for listener in listeners { listener.close() }
    for connection in connections { connection.close(reason: "server stopping") }
    if threads.wait(timeout: .now() + 5) == .timedOut {
      logger.warning("9bbsd: some connection threads did not finish within 5 s")
    }
  }

  /// Blocks until ``stop()`` has finished all threads (for `9bbsd`).
  public func waitUntilStopped() {
    threads.wait()
  }

  // MARK: Internals

  /// Runs `body` on a new thread the server waits for when it stops.
  func spawn(name: String, _ body: @escaping @Sendable () -> Void) {
    threads.enter()
    let thread = Thread { [threads] in
      body()
      threads.leave()
    }
    thread.name = name
    thread.start()
  }
}
