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
  /// A cheap request (Tstat of the attach point, never Tversion) once the link has been
  /// silent this long; nil turns keepalives off. With several addresses, also how often the
  /// pool tries the preferred one again while it uses another.
  public var keepaliveInterval: Duration? = .seconds(15)
  /// Keepalive periods of silence, with a probe unanswered, after which the link counts as
  /// dead (at least 2: the probe goes out after one period of silence). A frozen server is
  /// thus noticed within `keepaliveMisses` periods of its last reply.
  public var keepaliveMisses = 2

  public init() {}
}

/// Several sessions to one server, each its own connection (or L2CAP channel) with its own
/// version and attach, re-established when the link drops.
///
/// A server may be reachable over several transports (an L2CAP channel and a TCP gateway of
/// one board): the pool is given them in order of preference, uses the first that answers,
/// fails over to the next when the link in use dies, and goes back to a more preferred one
/// as soon as it answers again (tried every keepalive period). A switch back replaces the
/// sessions like a reconnect does, without the link ever counting as down.
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
  /// The server's addresses, most preferred first.
  public let addresses: [TransportAddress]
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
  /// Since when the server is known not to answer: its last message when the link was lost
  /// to silence, else the moment it was lost. A request waits for the link only until this
  /// plus its timeout, so a user's command (several requests in a row) waits `timeout=` in
  /// all, not once per request.
  private var unansweredSince = ContinuousClock.now
  private var reconnects = 0
  private var sessionGeneration: UInt64 = 0
  private var observers: [@Sendable (LinkState) -> Void] = []
  private var keepaliveThread: Thread?
  /// The index in `addresses` of the transport the sessions use (or last used).
  private var endpoint = 0
  /// How many times the pool moved to another transport (failing over or going back).
  private var transportSwitches = 0
  /// A try of the more preferred transports is scheduled.
  private var preferredRetryScheduled = false
  /// Tries of the more preferred transports that failed since the last switch: the period
  /// doubles with them (twice at most), so a transport that is gone for good (a PSM the
  /// board does not serve) costs a dial a minute, not four.
  private var preferredRetriesFailed = 0

  public convenience init(
    address: TransportAddress, configuration: SessionConfiguration, maxSessions: Int,
    dialOptions: DialOptions = DialOptions(), policy: ReconnectPolicy = ReconnectPolicy(),
    logger: Logger = Logger(label: "mount9bbs.client")
  ) {
    self.init(
      addresses: [address], configuration: configuration, maxSessions: maxSessions,
      dialOptions: dialOptions, policy: policy, logger: logger)
  }

  /// - Parameter addresses: the transports of one server, most preferred first (not empty).
  public init(
    addresses: [TransportAddress], configuration: SessionConfiguration, maxSessions: Int,
    dialOptions: DialOptions = DialOptions(), policy: ReconnectPolicy = ReconnectPolicy(),
    logger: Logger = Logger(label: "mount9bbs.client")
  ) {
    precondition(!addresses.isEmpty, "a pool needs at least one address")
    self.addresses = addresses
    self.configuration = configuration
    self.maxSessions = max(1, maxSessions)
    self.dialOptions = dialOptions
    self.policy = policy
    self.logger = logger
  }

  // MARK: - Life cycle

  /// Connects the primary session on the first address that answers, in order of
  /// preference, blocking the calling thread. A failure here is reported (the first
  /// address's), not retried: the user should hear at once that the address is wrong.
  public func start() throws(NinePError) {
    var firstError: NinePError?
    for index in addresses.indices {
      let session: Session
      do {
        // The last candidate gets the whole request timeout, as a single address does.
        let limit = index + 1 < addresses.count ? failoverHandshake : nil
        session = try dialSession(to: index, handshake: limit)
      } catch {
        if index + 1 < addresses.count {
          logger.notice("\(addresses[index]): \(error); trying \(addresses[index + 1])")
        }
        firstError = firstError ?? error
        continue
      }
      lock.lock()
      endpoint = index
      install(primary: session)
      lock.unlock()
      notify(.up)
      startKeepalive()
      return
    }
    throw firstError ?? .sessionClosed(reason: "no address to dial")
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

  /// The address of the transport in use (while the link is down, the one last used).
  public var address: TransportAddress {
    lock.lock()
    defer { lock.unlock() }
    return addresses[endpoint]
  }

  /// How many times the pool moved to another transport: failovers and returns to a more
  /// preferred one.
  public var switchCount: Int {
    lock.lock()
    defer { lock.unlock() }
    return transportSwitches
  }

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
    let reason: String = if case .down(let why) = link { why } else { "link down" }
    // What is left of the outage's timeout, but a moment at least: a server that just came
    // back (thawed, restarted) is being re-dialled, and a command run then should find it.
    let remaining = timeout.map {
      max(unansweredSince.advanced(by: $0) - .now, min($0, Self.comebackGrace))
    }
    let id = nextWaiterID
    nextWaiterID += 1
    upWaiters[id] = completion
    lock.unlock()
    guard let remaining else { return }
    DispatchQueue.global().asyncAfter(deadline: .now() + remaining.timeInterval) { [self] in
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
    // The transport the primary uses: a stream session on another would outlive a switch.
    let target = lock.withLock { endpoint }
    let result = Result { () throws(NinePError) -> Session in
      try dialSession(to: target, handshake: handshake)
    }
    lock.lock()
    let callers = Array(streamWaiters.values)
    streamWaiters.removeAll()
    var late: Session?
    switch result {
    case .success(let session):
      if case .closed = link {
        late = session
      } else if target != endpoint || primarySession == nil {
        // The pool moved to another transport (or lost the link) meanwhile.
        late = session
      } else {
        streamSessions.append(session)
      }
    case .failure(let error):
      // A server that serves one connection at a time leaves the second one unanswered.
      extraSessionsRefused = true
      logger.warning(
        "could not open another session to \(addresses[target]) (\(error)); room feeds share the open ones"
      )
    }
    if late == nil { dialingStream = false }
    lock.unlock()
    if let late {
      // Dialled while the pool closed or moved: give its attach fid back too, then let
      // close() go on.
      late.retire(within: .seconds(1), reason: "pool closed or moved")
      lock.withLock { dialingStream = false }
    }
    // Placed again: one new session may not hold them all, and a second dial then starts.
    for caller in callers { session(for: .stream, completion: caller) }
  }

  /// The least a request waits for a lost link, even once the outage has lasted longer than
  /// its timeout.
  static let comebackGrace: Duration = .seconds(1)

  /// The longest wait for a stream session's version and attach.
  static let streamHandshake: Duration = .seconds(5)

  // MARK: - Losing and regaining the link

  /// Makes `session` the primary and watches it. Called with the lock held; the caller
  /// notifies the observers once it has let go of the lock.
  private func install(primary session: Session) {
    primarySession = session
    extraSessionsRefused = false
    preferredRetriesFailed = 0
    sessionGeneration += 1
    link = .up
    linkSince = Date()
    session.onClose { [weak self, weak session] reason in
      guard let self, let session else { return }
      self.lost(session, reason: reason)
    }
    if endpoint > 0 {
      // Not on the preferred transport: look for it again (after the lock is let go).
      DispatchQueue.global().async { [weak self] in self?.schedulePreferredRetry() }
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
    unansweredSince = session.silentSince ?? .now
    let died = endpoint
    // A lost primary almost always means a lost link (a board out of radio range, a server
    // restart): the stream sessions go with it and are re-placed by their owners.
    let streams = streamSessions
    streamSessions.removeAll()
    lock.unlock()
    logger.warning("link to \(addresses[died]) lost: \(reason); reconnecting")
    for stream in streams { stream.close(reason: "link lost: \(reason)") }
    notify(.down(reason: reason))
    guard policy.enabled else { return }
    // The transport that just died goes last in the first round: the others are likelier to
    // answer now, and the preferred one is tried again once it might be back.
    let first = addresses.indices.map { (died + 1 + $0) % addresses.count }
    reconnect(attempt: 0, order: first)
  }

  private func reconnect(attempt: Int, order: [Int]? = nil) {
    let delay = backoff(attempt: attempt)
    DispatchQueue.global().asyncAfter(deadline: .now() + delay.timeInterval) { [self] in
      for index in order ?? Array(addresses.indices) {
        guard lock.withLock({ if case .down = link { true } else { false } }) else { return }
        let result = Result { () throws(NinePError) -> Session in
          try dialSession(to: index, handshake: failoverHandshake)
        }
        switch result {
        case .failure(let error):
          logger.info("reconnect attempt \(attempt + 1) to \(addresses[index]) failed: \(error)")
        case .success(let session):
          lock.lock()
          guard case .down = link else {
            lock.unlock()
            session.close(reason: "pool closed")
            return
          }
          reconnects += 1
          if index != endpoint { transportSwitches += 1 }
          endpoint = index
          install(primary: session)
          let waiters = upWaiters.values
          upWaiters.removeAll()
          lock.unlock()
          logger.notice("link to \(addresses[index]) is back (reconnect \(reconnects))")
          notify(.up)
          for waiter in waiters { waiter(.success(session)) }
          return
        }
      }
      reconnect(attempt: attempt + 1)
    }
  }

  /// How long a handshake may take with several addresses (nil, the request timeout, with
  /// one): a transport that connects but never answers (a frozen gateway) must not hold the
  /// others up for the whole request timeout.
  private var failoverHandshake: Duration? {
    guard addresses.count > 1 else { return nil }
    return min(
      configuration.requestTimeout ?? Self.failoverHandshakeLimit, Self.failoverHandshakeLimit)
  }

  /// The longest handshake on one of several transports.
  static let failoverHandshakeLimit: Duration = .seconds(5)

  // MARK: - Going back to the preferred transport

  /// While a less preferred transport is in use, tries the more preferred ones every
  /// keepalive period (at least a second; up to four after failed tries); the first that
  /// answers takes over.
  private func schedulePreferredRetry() {
    let period = max(policy.keepaliveInterval ?? .seconds(15), .seconds(1))
    let delay = lock.withLock { () -> Duration? in
      guard policy.enabled, endpoint > 0, !preferredRetryScheduled else { return nil }
      preferredRetryScheduled = true
      return period * (1 << min(preferredRetriesFailed, 2))
    }
    guard let delay else { return }
    DispatchQueue.global().asyncAfter(deadline: .now() + delay.timeInterval) { [self] in
      let using = lock.withLock { () -> Int? in
        preferredRetryScheduled = false
        guard case .up = link else { return nil }
        return endpoint
      }
      // Down (the reconnect rounds try the preferred one first) or closed: nothing to do.
      guard let using, using > 0 else { return }
      for index in 0..<using {
        guard
          let session = try? dialSession(
            to: index, handshake: min(Self.failoverHandshakeLimit, period))
        else { continue }
        return switchBack(to: session, endpoint: index)
      }
      lock.withLock { preferredRetriesFailed += 1 }
      schedulePreferredRetry()
    }
  }

  /// Makes `session`, on the more preferred `addresses[index]`, the primary: new requests go
  /// there at once; the old primary finishes what it has on the wire, gives its fids back and
  /// closes; the stream sessions retire too, so room feeds move over with every line their
  /// parked reads held (and drop what the server replays).
  private func switchBack(to session: Session, endpoint index: Int) {
    lock.lock()
    guard case .up = link, index < endpoint, let old = primarySession else {
      lock.unlock()
      session.retire(within: .seconds(1), reason: "not needed")
      // Still on a less preferred transport (the link went down and up again meanwhile)?
      schedulePreferredRetry()
      return
    }
    let from = addresses[endpoint]
    let streams = streamSessions
    streamSessions.removeAll()
    endpoint = index
    transportSwitches += 1
    install(primary: session)
    lock.unlock()
    let to = addresses[index]
    logger.notice("\(to) answers again; moving over from \(from)")
    // Retired, not closed: a room feed's read parked there may hold lines the server handed
    // it as the switch happened; retiring flushes it and waits for them.
    for stream in streams {
      Thread.detachNewThread { stream.retire(within: Self.switchGrace, reason: "moved to \(to)") }
    }
    Thread.detachNewThread {
      old.retire(within: Self.switchGrace, reason: "moved to another transport")
    }
    notify(.up)
  }

  /// How long the old primary may finish its requests and clunk its fids after a switch.
  static let switchGrace: Duration = .seconds(2)

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

  /// Watches the primary session's silence: after one keepalive period without a frame from
  /// the server a probe goes out (whether or not other requests wait for replies: a frozen
  /// server answers none of them); when the silence reaches ``ReconnectPolicy/keepaliveMisses``
  /// periods with the probe unanswered, the session is closed and the link counts as down.
  private func startKeepalive() {
    guard let interval = policy.keepaliveInterval, keepaliveThread == nil else { return }
    let deadAfter = interval * max(2, policy.keepaliveMisses)
    // Looks often enough that "two periods" means two periods, not three.
    let tick = max(interval / 8, .milliseconds(20))
    let thread = Thread { [weak self] in
      var probing: (session: Session, answered: ProbeFlag)?
      while true {
        Thread.sleep(forTimeInterval: tick.timeInterval)
        guard let self else { return }
        if case .closed = self.linkState { return }
        guard let session = self.current else {
          probing = nil
          continue
        }
        let silence = session.lastReceived.duration(to: .now)
        if let probe = probing, probe.session === session, !probe.answered.isSet {
          guard silence >= deadAfter else { continue }
          probing = nil
          let seconds = Int(silence.timeInterval.rounded())
          self.logger.warning(
            "keepalive: nothing from \(self.address) for \(seconds) s; the link counts as down")
          session.close(reason: "no answer to keepalives for \(seconds) s", silent: true)
          continue
        }
        guard silence >= interval else { continue }
        let answered = ProbeFlag()
        probing = (session, answered)
        // No timeout of its own: the silence decides, and a flush would only add traffic.
        session.send(.tstat(fid: session.rootFid), options: RequestOptions(timeout: .some(nil))) {
          _ in answered.set()
        }
      }
    }
    thread.name = "9p-keepalive"
    keepaliveThread = thread
    thread.start()
  }

  private func dialSession(to index: Int, handshake: Duration? = nil) throws(NinePError)
    -> Session
  {
    let transport: any MessageTransport
    do {
      transport = try dial(addresses[index], options: dialOptions)
    } catch {
      throw .transport(error)
    }
    return try Session.connect(
      transport: transport, configuration: configuration, handshakeTimeout: handshake,
      logger: logger)
  }
}

/// Set once a keepalive probe has its answer (any answer: the server is alive).
private final class ProbeFlag: @unchecked Sendable {
  private let lock = NSLock()
  private var value = false

  var isSet: Bool { lock.withLock { value } }

  func set() { lock.withLock { value = true } }
}
