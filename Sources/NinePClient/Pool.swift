import Foundation
import Logging
import NinePProtocol
import NinePTransport
import Synchronization

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
///
/// The files: the link's behaviour is ``PoolLink`` (PoolLink.swift), where streams go is
/// PoolPlacement.swift, the keepalive is PoolKeepalive.swift; this class holds their state
/// and runs what they decide.
///
/// Locking: one lock, `state`, and nothing is called with it held. Link transitions and
/// placement decisions run under it and return what to do; sessions, observers and waiters
/// are called after it is let go, and what placement needs of a session (closed? how many
/// parked reads?) is read before it is taken. So there is no lock order between a pool and
/// its sessions: neither ever holds its own lock while taking the other's.
public final class Pool: Sendable {
  /// The server's addresses, most preferred first.
  public let addresses: [TransportAddress]
  public let configuration: SessionConfiguration
  public let dialOptions: DialOptions
  public let policy: ReconnectPolicy
  /// Most sessions this pool opens, primary included.
  public let maxSessions: Int
  let logger: Logger

  typealias Completion = PoolLink<Session>.Waiter

  /// Everything that changes, under the pool's one lock.
  let state: Mutex<PoolState<Session>>

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
    var configuration = configuration
    if configuration.profile == .device, configuration.board == nil {
      // One board, one worker: every session this pool opens shares its queue.
      configuration.board = BoardQueue()
    }
    self.configuration = configuration
    self.maxSessions = max(1, maxSessions)
    self.dialOptions = dialOptions
    self.policy = policy
    self.logger = logger
    state = Mutex(
      PoolState(link: PoolLink(endpoints: addresses.map(\.description), policy: policy)))
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
      run(state.withLock { $0.link.started(session, on: index) })
      startKeepalive()
      return
    }
    throw firstError ?? .sessionClosed(reason: "no address to dial")
  }

  /// Closes every session and stops reconnecting. With `tidy`, each session first clunks the
  /// fids it holds (all sessions at once, at most that long).
  public func close(tidyingWithin tidy: Duration? = nil) {
    run(
      state.withLock { state in
        let streamWaiters = state.ledger.takeWaiters().map(\.waiter)
        return state.link.close(tidyingWithin: tidy, failing: streamWaiters)
      })
  }

  // MARK: - State

  /// The address of the transport in use (while the link is down, the one last used).
  public var address: TransportAddress {
    addresses[state.withLock { $0.link.endpoint }]
  }

  /// How many times the pool moved to another transport: failovers and returns to a more
  /// preferred one.
  public var switchCount: Int {
    state.withLock { $0.link.switches }
  }

  /// The session for ordinary requests while the link is up; nil while it is down.
  public var current: Session? {
    state.withLock { $0.link.primary }
  }

  /// The session for ordinary requests. Valid after ``start()`` while the link is up.
  public var primary: Session {
    guard let primary = current else {
      preconditionFailure("Pool.primary used while the link is down")
    }
    return primary
  }

  /// All open sessions, primary first (for status output).
  public var sessions: [Session] {
    state.withLock { $0.link.sessions }
  }

  public var linkState: LinkState {
    state.withLock { $0.link.state }
  }

  /// When the link last changed state.
  public var linkStateSince: Date {
    state.withLock { $0.link.changedAt }
  }

  /// How many times the link came back after a loss.
  public var reconnectCount: Int {
    state.withLock { $0.link.reconnects }
  }

  /// Changes whenever the primary session is replaced: fids of an older generation are gone.
  public var generation: UInt64 {
    state.withLock { $0.link.generation }
  }

  /// Calls `mover` with the primary when a stream session opened after a reconnect's
  /// comeback window: streams placed on the primary meanwhile should be placed again.
  public func observeStreamRoom(_ mover: @escaping @Sendable (_ crowded: Session) -> Void) {
    state.withLock { $0.streamMovers.append(mover) }
  }

  /// Whether a request on the primary has gone unanswered longer than ``stallAfter`` while
  /// the link is up: the server or the radio has stopped, and the link may soon go down.
  public var isStalled: Bool {
    state.withLock { $0.stalled && $0.link.state == .up }
  }

  /// When the link last stalled (meaningful while ``isStalled``).
  public var stalledSince: Date {
    state.withLock { $0.stalledAt }
  }

  /// Calls `observer` with true when the link stalls and false when it answers again (on the
  /// keepalive thread).
  public func observeStall(_ observer: @escaping @Sendable (_ stalled: Bool) -> Void) {
    state.withLock { $0.stallObservers.append(observer) }
  }

  /// How long a request waits before the link counts as stalled.
  public static let stallAfter: Duration = .seconds(2)

  /// Records whether the primary is stalled now; observers hear of a change.
  func noteStall(_ stalled: Bool) {
    let observers = state.withLock { state -> [@Sendable (Bool) -> Void] in
      guard state.stalled != stalled else { return [] }
      state.stalled = stalled
      if stalled { state.stalledAt = Date() }
      return state.stallObservers
    }
    for observer in observers { observer(stalled) }
  }

  /// Calls `observer` on every link state change (on the thread that caused it).
  public func observe(_ observer: @escaping @Sendable (LinkState) -> Void) {
    state.withLock { $0.observers.append(observer) }
  }

  // MARK: - Getting a session

  /// The primary session now, or as soon as the link is back; fails after `timeout`.
  public func primary(
    within timeout: Duration?,
    _ completion: @escaping @Sendable (Result<Session, NinePError>) -> Void
  ) {
    switch state.withLock({ $0.link.awaitUp(completion, timeout: timeout) }) {
    case .up(let primary):
      completion(.success(primary))
    case .closed:
      completion(.failure(.sessionClosed(reason: "unmounting")))
    case .waiting(let id, let remaining, let reason):
      guard let remaining else { return }
      DispatchQueue.global().asyncAfter(deadline: .now() + remaining.timeInterval) { [self] in
        let waiter = state.withLock { $0.link.waiterTimedOut(id) }
        waiter?(.failure(.sessionClosed(reason: "link down (\(reason))")))
      }
    }
  }

  // MARK: - Running the link's actions

  /// Does what a link transition decided, in order, with the lock not held.
  private func run(_ actions: [PoolLink<Session>.Action]) {
    for action in actions {
      switch action {
      case .watch(let session):
        session.onClose { [weak self, weak session] reason in
          guard let self, let session else { return }
          self.lost(session, reason: reason)
        }
      case .notify(let linkState):
        for observer in state.withLock({ $0.observers }) { observer(linkState) }
      case .redial(let index, let delay):
        DispatchQueue.global().asyncAfter(deadline: .now() + delay.timeInterval) { [self] in
          redial(index)
        }
      case .dialPreferred(let index, let below):
        dialPreferred(index, below: below)
      case .schedulePreferredRetry(let delay):
        DispatchQueue.global().asyncAfter(deadline: .now() + delay.timeInterval) { [self] in
          run(state.withLock { $0.link.preferredRetryDue() })
        }
      case .close(let sessions, let reason):
        for session in sessions { session.close(reason: reason) }
      case .retire(let sessions, let reason, let grace, let awaited):
        if awaited {
          DispatchQueue.concurrentPerform(iterations: sessions.count) {
            sessions[$0].retire(within: grace, reason: reason)
          }
        } else {
          for session in sessions {
            Thread.detachNewThread { session.retire(within: grace, reason: reason) }
          }
        }
      case .settleStreamDial(let grace):
        // A stream session still being dialled retires itself when it is up: wait for that.
        let settled = DispatchSemaphore(value: 0)
        if state.withLock({ $0.ledger.whenDialSettled { settled.signal() } }) {
          _ = settled.wait(timeout: .now() + grace.timeInterval)
        }
      case .allowExtraSessions(let delay, let generation):
        DispatchQueue.global().asyncAfter(deadline: .now() + delay.timeInterval) { [self] in
          extraSessionsAllowed(generation: generation)
        }
      case .wake(let waiters, let session):
        for waiter in waiters { waiter(.success(session)) }
      case .fail(let waiters, let error):
        for waiter in waiters { waiter(.failure(error)) }
      case .log(let level, let message):
        logger.log(level: level, "\(message)")
      }
    }
  }

  // MARK: - Losing and regaining the link

  private func lost(_ session: Session, reason: String) {
    let silentSince = session.silentSince
    run(
      state.withLock {
        $0.link.sessionLost(session, reason: reason, silentSince: silentSince)
      })
  }

  /// One dial of a reconnect round, if the link is still down.
  private func redial(_ index: Int) {
    guard state.withLock({ $0.link.isDown }) else { return }
    let result = Result { () throws(NinePError) -> Session in
      try dialSession(to: index, handshake: failoverHandshake)
    }
    run(
      state.withLock {
        switch result {
        case .success(let session): $0.link.redialled(session, on: index)
        case .failure(let error): $0.link.redialFailed(on: index, error: error)
        }
      })
  }

  /// One dial of a round of tries of the more preferred transports.
  private func dialPreferred(_ index: Int, below: Int) {
    let handshake = min(Self.failoverHandshakeLimit, state.withLock { $0.link.preferredPeriod })
    let session = try? dialSession(to: index, handshake: handshake)
    run(
      state.withLock {
        if let session {
          $0.link.preferredAnswered(session, on: index)
        } else {
          $0.link.preferredDialFailed(on: index, below: below)
        }
      })
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

  func dialSession(to index: Int, handshake: Duration? = nil) throws(NinePError) -> Session {
    var transport: any MessageTransport
    do {
      transport = try dial(addresses[index], options: dialOptions)
    } catch {
      throw .transport(error)
    }
    if let openChannel = configuration.openChannel {
      transport = try openChannel(
        transport, handshake ?? configuration.requestTimeout ?? Self.failoverHandshakeLimit)
    }
    return try Session.connect(
      transport: transport, configuration: configuration, handshakeTimeout: handshake,
      logger: logger)
  }
}

/// What a ``Pool`` changes, all under its one lock.
struct PoolState<Connection: AnyObject & Sendable> {
  var link: PoolLink<Connection>
  var ledger = StreamLedger<Connection>()
  var observers: [@Sendable (LinkState) -> Void] = []
  /// A request on the primary has waited longer than ``Pool/stallAfter`` (the link is up).
  var stalled = false
  /// When it last stalled.
  var stalledAt = Date()
  var stallObservers: [@Sendable (Bool) -> Void] = []
  /// Told when streams placed on a session (the primary) may move to a new stream session.
  var streamMovers: [@Sendable (Connection) -> Void] = []
  var keepaliveStarted = false
}
