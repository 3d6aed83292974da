import Foundation
import Logging
import NinePProtocol
import NinePTransport

/// What a request is for, so the pool can keep long-parked stream reads away from the session
/// that ordinary requests use.
public enum Placement: Sendable {
  /// Walks, stats, reads of regular files, posts: the primary session.
  case ordinary
  /// A read that may park at the server for a long time (a chat room feed).
  case stream
}

/// Whether the pool can reach its server.
public enum LinkState: Sendable, Equatable {
  case up
  /// Lost, reconnecting with backoff; `reason` says what happened.
  case down(reason: String)
  /// Closed by the owner (unmounting).
  case closed
}

/// How the pool notices a dead link and how it comes back.
public struct ReconnectPolicy: Sendable {
  /// Re-dial after the link is lost.
  public var enabled = true
  /// First wait before re-dialling; doubles (with jitter) up to ``maximumBackoff``.
  public var initialBackoff: Duration = .milliseconds(100)
  public var maximumBackoff: Duration = .seconds(30)
  /// A cheap request (Tstat of the attach point, never Tversion) on an idle link this often;
  /// nil turns keepalives off.
  public var keepaliveInterval: Duration? = .seconds(15)
  /// Keepalives in a row that may go unanswered before the link counts as dead.
  public var keepaliveMisses = 2

  public init() {}
}

/// Several sessions to one server, each its own connection (or L2CAP channel) with its own
/// version and attach, re-established when the link drops.
///
/// A device serves one request at a time per channel and parks at most 4 reads per session,
/// so room feeds go to extra sessions and `ls`, `cat` and posting never wait behind them.
/// Against a multiplexing server one extra session is plenty, but the rule is the same.
///
/// When the primary session dies (transport error, EOF, protocol violation, missed
/// keepalives) the pool re-dials with backoff and jitter; callers asking for a session while
/// the link is down wait (up to their deadline) instead of failing at once. Fids belong to
/// sessions: owners re-walk what they need on the new session (``generation`` tells them it
/// changed).
public final class Pool: @unchecked Sendable {
  public let address: TransportAddress
  public let configuration: SessionConfiguration
  public let dialOptions: DialOptions
  public let policy: ReconnectPolicy
  /// Most sessions this pool opens, primary included.
  public let maxSessions: Int
  let logger: Logger

  private let lock = NSLock()
  private var primarySession: Session?
  private var streamSessions: [Session] = []
  private var dialingStream = false
  private typealias Completion = @Sendable (Result<Session, NinePError>) -> Void
  private var streamWaiters: [UInt64: Completion] = [:]
  /// The server did not give an extra session: streams share the open ones until reconnect.
  private var extraSessionsRefused = false
  private var upWaiters: [UInt64: Completion] = [:]
  private var nextWaiterID: UInt64 = 1
  private var link: LinkState = .down(reason: "not started")
  private var linkSince = Date()
  private var reconnects = 0
  private var sessionGeneration: UInt64 = 0
  private var observers: [@Sendable (LinkState) -> Void] = []
  private var keepaliveThread: Thread?

  public init(
    address: TransportAddress, configuration: SessionConfiguration, maxSessions: Int,
    dialOptions: DialOptions = DialOptions(), policy: ReconnectPolicy = ReconnectPolicy(),
    logger: Logger = Logger(label: "mount9bbs.client")
  ) {
    self.address = address
    self.configuration = configuration
    self.maxSessions = max(1, maxSessions)
    self.dialOptions = dialOptions
    self.policy = policy
    self.logger = logger
  }

  // MARK: - Life cycle

  /// Connects the primary session, blocking the calling thread. A failure here is reported,
  /// not retried: the user should hear at once that the address is wrong.
  public func start() throws(NinePError) {
    let session = try dialSession()
    lock.lock()
    install(primary: session)
    lock.unlock()
    notify(.up)
    startKeepalive()
  }

  /// Closes every session and stops reconnecting. With `tidy`, each session first clunks the
  /// fids it holds (all sessions at once, at most that long).
  public func close(tidyingWithin tidy: Duration? = nil) {
    lock.lock()
    link = .closed
    let all = (primarySession.map { [$0] } ?? []) + streamSessions
    primarySession = nil
    streamSessions.removeAll()
    let waiters = Array(upWaiters.values) + Array(streamWaiters.values)
    upWaiters.removeAll()
    streamWaiters.removeAll()
    lock.unlock()
    if let tidy {
      DispatchQueue.concurrentPerform(iterations: all.count) {
        all[$0].retire(within: tidy, reason: "unmounting")
      }
      // A stream session still being dialled retires itself when it is up: wait for that.
      let until = ContinuousClock.now + tidy
      while lock.withLock({ dialingStream }) && ContinuousClock.now < until {
        Thread.sleep(forTimeInterval: 0.005)
      }
    } else {
      for session in all { session.close(reason: "unmounting") }
    }
    for waiter in waiters { waiter(.failure(.sessionClosed(reason: "unmounting"))) }
    notify(.closed)
  }

  // MARK: - State

  /// The session for ordinary requests while the link is up; nil while it is down.
  public var current: Session? {
    lock.lock()
    defer { lock.unlock() }
    return primarySession
  }

  /// The session for ordinary requests. Valid after ``start()`` while the link is up.
  public var primary: Session {
    lock.lock()
    defer { lock.unlock() }
    guard let primarySession else {
      preconditionFailure("Pool.primary used while the link is down")
    }
    return primarySession
  }

  /// All open sessions, primary first (for status output).
  public var sessions: [Session] {
    lock.lock()
    defer { lock.unlock() }
    return (primarySession.map { [$0] } ?? []) + streamSessions
  }

  public var linkState: LinkState {
    lock.lock()
    defer { lock.unlock() }
    return link
  }

  /// When the link last changed state.
  public var linkStateSince: Date {
    lock.lock()
    defer { lock.unlock() }
    return linkSince
  }

  /// How many times the link came back after a loss.
  public var reconnectCount: Int {
    lock.lock()
    defer { lock.unlock() }
    return reconnects
  }

  /// Changes whenever the primary session is replaced: fids of an older generation are gone.
  public var generation: UInt64 {
    lock.lock()
    defer { lock.unlock() }
    return sessionGeneration
  }

  /// Calls `observer` on every link state change (on the thread that caused it).
  public func observe(_ observer: @escaping @Sendable (LinkState) -> Void) {
    lock.lock()
    observers.append(observer)
    lock.unlock()
  }

  // MARK: - Getting a session

  /// The primary session now, or as soon as the link is back; fails after `timeout`.
  public func primary(
    within timeout: Duration?,
    _ completion: @escaping @Sendable (Result<Session, NinePError>) -> Void
  ) {
    lock.lock()
    if let primarySession {
      lock.unlock()
      return completion(.success(primarySession))
    }
    if case .closed = link {
      lock.unlock()
      return completion(.failure(.sessionClosed(reason: "unmounting")))
    }
    let id = nextWaiterID
    nextWaiterID += 1
    upWaiters[id] = completion
    let reason: String = if case .down(let why) = link { why } else { "link down" }
    lock.unlock()
    guard let timeout else { return }
    DispatchQueue.global().asyncAfter(deadline: .now() + timeout.timeInterval) { [self] in
      lock.lock()
      let waiter = upWaiters.removeValue(forKey: id)
      lock.unlock()
      waiter?(.failure(.sessionClosed(reason: "link down (\(reason))")))
    }
  }

  /// Picks a session for a request of the given kind. While the link is down, waits for it
  /// to come back (streams wait without a deadline).
  ///
  /// A stream (a read that parks) is reserved on the session it is placed on until its owner
  /// calls ``Session/releaseStream()``. It goes, in order of preference, to a stream session
  /// with a free parking slot; to a new stream session (dialled off the caller's thread); to
  /// the primary while it has a free slot (on a device each read there holds ordinary
  /// requests back for the park grace); and last to the least loaded session, where the
  /// session rotates its slots (``SessionConfiguration/parkingTurn``). A server that does not
  /// give a second session (one that serves one connection at a time) is not asked again until
  /// the link is re-established, and a caller never waits more than ``dialPatience`` for one.
  public func session(
    for placement: Placement, completion: @escaping @Sendable (Result<Session, NinePError>) -> Void
  ) {
    switch lock.withLock({ placeLocked(placement, completion) }) {
    case .linkDown:
      primary(within: placement == .ordinary ? configuration.requestTimeout : nil) {
        [self] result in
        switch result {
        case .success: session(for: placement, completion: completion)
        case .failure(let error): completion(.failure(error))
        }
      }
    case .placed(let session):
      completion(.success(session))
    case .waiting(let id, let dial):
      if dial { Thread.detachNewThread { [self] in dialStreamSession() } }
      // Someone opening a room should not wait long for a session that may never come.
      DispatchQueue.global().asyncAfter(deadline: .now() + Self.dialPatience.timeInterval) {
        [self] in
        patienceRanOut(waiter: id)
      }
    }
  }

  /// What ``session(for:completion:)`` does, decided under the lock and done after it.
  private enum Placing {
    /// Wait for the link to come back, then place again.
    case linkDown
    /// Hand this session over (a stream is already reserved on it).
    case placed(Session)
    /// The completion waits in `streamWaiters` under `id` for a stream session; `dial` says
    /// whether this caller starts the dial.
    case waiting(id: UInt64, dial: Bool)
  }

  /// Called with the lock held.
  private func placeLocked(
    _ placement: Placement,
    _ completion: @escaping Completion
  ) -> Placing {
    guard let primarySession else { return .linkDown }
    guard placement == .stream else { return .placed(primarySession) }
    if let placed = placeStreamLocked(primary: primarySession, mayDial: true) {
      placed.reserveStream()
      return .placed(placed)
    }
    let id = nextWaiterID
    nextWaiterID += 1
    streamWaiters[id] = completion
    defer { dialingStream = true }
    return .waiting(id: id, dial: !dialingStream)
  }

  /// A stream waited ``dialPatience`` for a new session: if it still waits, it takes a place
  /// on an open session, or (the link being down) waits for the link like any stream.
  private func patienceRanOut(waiter id: UInt64) {
    let (waiter, fallback) = lock.withLock { () -> (Completion?, Session?) in
      guard let waiter = streamWaiters.removeValue(forKey: id) else { return (nil, nil) }
      let fallback = primarySession.map { placeStreamLocked(primary: $0, mayDial: false) }
      fallback??.reserveStream()
      return (waiter, fallback ?? nil)
    }
    guard let waiter else { return }
    if let fallback {
      waiter(.success(fallback))
    } else {
      session(for: .stream, completion: waiter)
    }
  }

  /// How long a stream waits for a new session before it takes a place on an open one.
  static let dialPatience: Duration = .seconds(2)

  /// The open session a new stream goes to, or nil to dial one. Called with the lock held.
  private func placeStreamLocked(primary: Session, mayDial: Bool) -> Session? {
    streamSessions.removeAll { $0.closedReason != nil }
    let slots = configuration.maxParkedReads
    let least = streamSessions.min { $0.streamLoad < $1.streamLoad }
    if let least, least.streamLoad < slots { return least }
    if mayDial && !extraSessionsRefused && streamSessions.count + 1 < maxSessions { return nil }
    if primary.streamLoad < slots { return primary }
    return least ?? primary
  }

  /// Opens a stream session and places everyone waiting for it.
  private func dialStreamSession() {
    let handshake = min(configuration.requestTimeout ?? Self.streamHandshake, Self.streamHandshake)
    let result = Result { () throws(NinePError) -> Session in try dialSession(handshake: handshake)
    }
    lock.lock()
    let callers = Array(streamWaiters.values)
    streamWaiters.removeAll()
    var late: Session?
    switch result {
    case .success(let session):
      if case .closed = link {
        late = session
      } else {
        streamSessions.append(session)
      }
    case .failure(let error):
      // A server that serves one connection at a time leaves the second one unanswered.
      extraSessionsRefused = true
      logger.warning(
        "could not open another session to \(address) (\(error)); room feeds share the open ones")
    }
    if late == nil { dialingStream = false }
    lock.unlock()
    if let late {
      // Dialled while the pool closed: give its attach fid back too, then let close() go on.
      late.retire(within: .seconds(1), reason: "pool closed")
      lock.withLock { dialingStream = false }
    }
    // Placed again: one new session may not hold them all, and a second dial then starts.
    for caller in callers { session(for: .stream, completion: caller) }
  }

  /// The longest wait for a stream session's version and attach.
  static let streamHandshake: Duration = .seconds(5)

  // MARK: - Losing and regaining the link

  /// Makes `session` the primary and watches it. Called with the lock held.
  private func install(primary session: Session) {
    primarySession = session
    extraSessionsRefused = false
    sessionGeneration += 1
    link = .up
    linkSince = Date()
    session.onClose { [weak self, weak session] reason in
      guard let self, let session else { return }
      self.lost(session, reason: reason)
    }
  }

  private func lost(_ session: Session, reason: String) {
    lock.lock()
    guard primarySession === session, case .up = link else {
      lock.unlock()
      return
    }
    primarySession = nil
    link = .down(reason: reason)
    linkSince = Date()
    // A lost primary almost always means a lost link (a board out of radio range, a server
    // restart): the stream sessions go with it and are re-placed by their owners.
    let streams = streamSessions
    streamSessions.removeAll()
    lock.unlock()
    logger.warning("link to \(address) lost: \(reason); reconnecting")
    for stream in streams { stream.close(reason: "link lost: \(reason)") }
    notify(.down(reason: reason))
    guard policy.enabled else { return }
    reconnect(attempt: 0)
  }

  private func reconnect(attempt: Int) {
    let delay = backoff(attempt: attempt)
    DispatchQueue.global().asyncAfter(deadline: .now() + delay.timeInterval) { [self] in
      lock.lock()
      guard case .down = link else {
        lock.unlock()
        return
      }
      lock.unlock()
      let result = Result { () throws(NinePError) -> Session in try dialSession() }
      switch result {
      case .failure(let error):
        logger.info("reconnect attempt \(attempt + 1) to \(address) failed: \(error)")
        reconnect(attempt: attempt + 1)
      case .success(let session):
        lock.lock()
        guard case .down = link else {
          lock.unlock()
          session.close(reason: "pool closed")
          return
        }
        reconnects += 1
        install(primary: session)
        let waiters = upWaiters.values
        upWaiters.removeAll()
        lock.unlock()
        logger.notice("link to \(address) is back (reconnect \(reconnects))")
        notify(.up)
        for waiter in waiters { waiter(.success(session)) }
      }
    }
  }

  /// Exponential backoff with ±25% jitter, so many clients do not hammer a server together.
  func backoff(attempt: Int) -> Duration {
    let base = policy.initialBackoff.timeInterval * pow(2, Double(min(attempt, 20)))
    let capped = min(base, policy.maximumBackoff.timeInterval)
    return .milliseconds(Int(capped * Double.random(in: 0.75...1.25) * 1000))
  }

  private func notify(_ state: LinkState) {
    lock.lock()
    let all = observers
    lock.unlock()
    for observer in all { observer(state) }
  }

  // MARK: - Keepalive

  private func startKeepalive() {
    guard let interval = policy.keepaliveInterval, keepaliveThread == nil else { return }
    let thread = Thread { [weak self] in
      var misses = 0
      var lastReceived: UInt64 = 0
      while true {
        Thread.sleep(forTimeInterval: interval.timeInterval)
        guard let self else { return }
        if case .closed = self.linkState { return }
        guard let session = self.current else {
          misses = 0
          continue
        }
        // Traffic came back since the last look: the link is alive, no probe needed.
        let received = session.statistics.messagesReceived
        if received != lastReceived {
          lastReceived = received
          misses = 0
          continue
        }
        let box = ResultBox()
        session.send(
          .tstat(fid: session.rootFid), options: RequestOptions(timeout: .some(interval))
        ) { box.set($0) }
        switch box.wait() {
        case .success, .failure(.server):
          misses = 0
          lastReceived = session.statistics.messagesReceived
        case .failure(.timedOut):
          misses += 1
          self.logger.warning("keepalive: no answer from \(self.address) (\(misses) in a row)")
          if misses >= self.policy.keepaliveMisses {
            misses = 0
            session.close(reason: "no answer to \(self.policy.keepaliveMisses) keepalives")
          }
        case .failure:
          misses = 0
        }
      }
    }
    thread.name = "9p-keepalive"
    keepaliveThread = thread
    thread.start()
  }

  private func dialSession(handshake: Duration? = nil) throws(NinePError) -> Session {
    let transport: any MessageTransport
    do {
      transport = try dial(address, options: dialOptions)
    } catch {
      throw .transport(error)
    }
    return try Session.connect(
      transport: transport, configuration: configuration, handshakeTimeout: handshake,
      logger: logger)
  }
}
