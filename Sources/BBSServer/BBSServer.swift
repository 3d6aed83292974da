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
//   default) and the per-address cap bound the threads; the watchdog (a timer on
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
  private let watchdogQueue = DispatchQueue(label: "9bbs.watchdog")
  let wakeQueue = DispatchQueue(label: "9bbs.wake", attributes: .concurrent)
  private let state = Mutex(RunState())
  private let threads = DispatchGroup()
  /// The connection slots of ``ConnectionLimit/backlog(_:)``; nil for other limits.
  private let slots: ConnectionSlots?

  private struct RunState {
    var listeners: [Listener] = []
    var bound: [String] = []
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
    switch configuration.connectionLimit {
    case .backlog(let limit), .refuse(let limit):
      guard limit >= 1 else {
        throw ServerError.badConfiguration("the connection limit must be at least 1")
      }
    case .unlimited: break
    }
    if case .backlog(let limit) = configuration.connectionLimit {
      slots = ConnectionSlots(limit: limit)
    } else {
      slots = nil
    }
    let store: any BoardStore
    if let directory = configuration.dataDirectory {
      do {
        store = try SQLiteBoardStore(directory: directory)
      } catch {
        throw ServerError.storeFailed("\(error)")
      }
    } else {
      store = InMemoryBoardStore()
    }
    guard !configuration.rooms.isEmpty else {
      throw ServerError.badConfiguration("at least one chat room is needed")
    }
    try Self.checkAuthentication(configuration)
    if let perAddress = configuration.maxConnectionsPerAddress, perAddress < 1 {
      throw ServerError.badConfiguration("the per-address connection limit must be at least 1")
    }
    guard configuration.maxBoardMessageSize >= 1 else {
      throw ServerError.badConfiguration("the board message size limit must be at least 1")
    }
    var limits = BoardLimits.forProfile(configuration.profile)
    if configuration.profile == .standard {
      limits.maxMessageBytes = configuration.maxBoardMessageSize
    }
    var defaults: [EtcField: String] = [:]
    defaults[.boardname] = configuration.boardName
    defaults[.motd] = configuration.motd
    do {
      board = try Board(
        configuration: BoardConfiguration(
          chatRooms: configuration.rooms, limits: limits, etcDefaults: defaults,
          sysops: configuration.sysops, firstUserIsSysop: configuration.firstUserIsSysop),
        store: store, clock: clock, logger: logger)
    } catch {
      throw ServerError.storeFailed("\(error)")
    }
    let files = try configuration.filesDirectory.map { (directory) throws(ServerError) in
      try FilesArea(directory: directory, writable: configuration.filesWritable)
    }
    namespace = Namespace(board: board, files: files, device: configuration.profile.imitatesBoard)
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
      $0.bound += bound
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

  /// The addresses the server listens on.
  public var boundAddresses: [String] { state.withLock { $0.bound } }

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

  private func spawn(name: String, _ body: @escaping @Sendable () -> Void) {
    threads.enter()
    let thread = Thread { [threads] in
      body()
      threads.leave()
    }
    thread.name = name
    thread.start()
  }

  private func acceptLoop(_ listener: Listener) {
    while true {
      // At the limit, leave newcomers in the listen backlog until a client leaves.
      if let slots,
        !slots.waitForRoom(onWait: { [logger, listener] limit in
          logger.info(
            "9bbsd: \(limit) of \(limit) connections in use; not accepting on \(listener.boundAddress) until one ends"
          )
        })
      {
        return
      }
      let transport: SocketTransport?
      do {
        transport = try listener.accept()
      } catch {
        logger.error("9bbsd: accept on \(listener.boundAddress) failed: \(error)")
        if !state.withLock({ $0.running }) { return }
        Thread.sleep(forTimeInterval: 0.05)
        continue
      }
      guard let transport else { return }
      // Another listener may have taken the last slot meanwhile: hold this one unserved.
      if let slots, !slots.acquire() {
        transport.close()
        return
      }
      // A refused client is closed; the loop goes on unless the server is stopping (a
      // refusal once ended the loop, and with it 9bbsd).
      guard let connection = admit(transport, slotted: slots != nil) else {
        if state.withLock({ $0.stopped }) { return }
        continue
      }
      spawn(name: "9bbs.conn") { connection.run() }
    }
  }

  private func admit(_ transport: any MessageTransport, slotted: Bool) -> Connection? {
    var refusal = ""
    let admitted = state.withLock { state -> Connection? in
      guard !state.stopped else {
        refusal = "the server is stopping"
        return nil
      }
      if case .refuse(let max) = configuration.connectionLimit, state.connections.count >= max {
        refusal = "all \(max) sessions in use"
        return nil
      }
      if let perAddress = configuration.maxConnectionsPerAddress,
        case .tcp(let host, _) = transport.address,
        state.connections.values.lazy.filter({ $0.host == host }).count >= perAddress
      {
        refusal = "\(host) already has \(perAddress) connections"
        return nil
      }
      let id = state.nextID
      state.nextID += 1
      let connection = Connection(id: id, transport: transport, server: self)
      state.connections[id] = connection
      if slotted { state.slotted.insert(id) }
      return connection
    }
    if admitted == nil {
      logRefusal("9bbsd: refusing a connection from \(transport.address): \(refusal)")
      transport.close()
      if slotted { slots?.release() }
    }
    return admitted
  }

  /// Forgets a connection; `fidsLeftOpen` are the fids its client never clunked (gen1).
  func connectionEnded(_ id: Int, fidsLeftOpen: Int) {
    let slotted = state.withLock { state in
      state.connections.removeValue(forKey: id)
      state.fidsLeftOpen += fidsLeftOpen
      state.endedSinceTrim += 1
      return state.slotted.remove(id) != nil
    }
    if slotted { slots?.release() }
  }
}

// MARK: Watchdog

extension BBSServer {
  /// How often the watchdog looks: a quarter of the shortest timeout, between 50 ms and 1 s.
  private var watchdogInterval: Duration {
    let shortest = min(
      configuration.handshakeTimeout, configuration.idleTimeout, configuration.stallTimeout)
    return min(max(shortest / 4, .milliseconds(50)), .seconds(1))
  }

  /// Starts the timer that closes connections past a timeout and gives memory back after
  /// connections end. Once.
  fileprivate func startWatchdog() {
    state.withLock { state in
      guard state.watchdog == nil, !state.stopped else { return }
      let timer = DispatchSource.makeTimerSource(queue: watchdogQueue)
      let interval = watchdogInterval
      timer.schedule(
        deadline: .now() + interval.timeInterval, repeating: interval.timeInterval,
        leeway: .milliseconds(10))
      timer.setEventHandler { [weak self] in self?.watch() }
      timer.resume()
      state.watchdog = timer
    }
  }

  /// One round: closes overdue connections, then trims the heap if connections ended since
  /// the last round (a thread's buffers are freed when its connection ends, and glibc keeps
  /// freed memory unless asked; 2000 connections left 162 MB behind).
  private func watch() {
    let now = ContinuousClock.now
    let connections = state.withLock { Array($0.connections.values) }
    for connection in connections {
      guard let reason = connection.overdue(at: now) else { continue }
      logger.notice("session \(connection.id): closing: \(reason)")
      connection.close(reason: reason)
    }
    let trim = state.withLock { state -> Bool in
      if state.endedSinceTrim > 0 { state.trimRoundsLeft = 3 }
      state.endedSinceTrim = 0
      guard state.trimRoundsLeft > 0 else { return false }
      state.trimRoundsLeft -= 1
      return true
    }
    if trim { returnFreeMemoryToTheSystem() }
  }

  /// Logs a refused connection, at most one line a second (a flood of connections must not
  /// become a flood of log lines); the next line counts those not logged.
  fileprivate func logRefusal(_ line: String) {
    let now = ContinuousClock.now
    let skipped = state.withLock { state -> Int? in
      if let last = state.lastRefusalLog, last.duration(to: now) < .seconds(1) {
        state.refusalsUnlogged += 1
        return nil
      }
      defer {
        state.refusalsUnlogged = 0
        state.lastRefusalLog = now
      }
      return state.refusalsUnlogged
    }
    guard let skipped else { return }
    logger.warning(
      "\(line)\(skipped > 0 ? " (and \(skipped) more refused in the last second)" : "")")
  }
}

/// The slots of ``ConnectionLimit/backlog(_:)``: how many accepted connections are live.
final class ConnectionSlots: @unchecked Sendable {
  // @unchecked: `inUse` and `closed` are touched only with `condition` locked. An NSCondition,
  // not a Mutex: acquire() and waitForRoom() wait until release() or close() signals.
  private let condition = NSCondition()
  private let limit: Int
  private var inUse = 0
  private var closed = false

  init(limit: Int) {
    self.limit = limit
  }

  /// Waits until a slot is free without taking it; `onWait` runs once if it has to wait.
  /// Returns false once closed.
  func waitForRoom(onWait: (Int) -> Void) -> Bool {
    condition.lock()
    let full = inUse >= limit && !closed
    condition.unlock()
    if full { onWait(limit) }
    condition.lock()
    defer { condition.unlock() }
    while inUse >= limit && !closed { condition.wait() }
    return !closed
  }

  /// Takes a slot, waiting for one if needed. Returns false once closed.
  func acquire() -> Bool {
    condition.lock()
    defer { condition.unlock() }
    while inUse >= limit && !closed { condition.wait() }
    guard !closed else { return false }
    inUse += 1
    return true
  }

  /// Gives a slot back.
  func release() {
    condition.lock()
    inUse = max(0, inUse - 1)
    condition.broadcast()
    condition.unlock()
  }

  /// Wakes every waiter for good (the server is stopping).
  func close() {
    condition.lock()
    closed = true
    condition.broadcast()
    condition.unlock()
  }
}
