import Foundation
import Logging

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

/// The link of a ``Pool`` as a value: which session is the primary and on which transport,
/// or why there is none, who waits for one, and what the pool must do about each event.
///
/// Every event (a dial that succeeded or failed, a lost session, a more preferred transport
/// answering, closing) is a mutating method that returns ``Action``s; the pool calls it under
/// its lock and runs the actions after letting go, so no session, observer or waiter is ever
/// called with the pool's lock held. No sockets, threads or clocks here: `Connection` is
/// ``Session`` in the pool and a plain object in the tests.
struct PoolLink<Connection: AnyObject & Sendable> {
  typealias Waiter = @Sendable (Result<Connection, NinePError>) -> Void

  enum Phase {
    /// `primary` serves ordinary requests on `addresses[endpoint]`.
    case up(primary: Connection)
    /// No primary since `since` (when the server was last heard, for a silent one); the
    /// reconnect rounds that failed so far are `attempt`.
    case down(reason: String, attempt: Int, since: ContinuousClock.Instant)
    /// Closed by the owner: nothing is dialled again.
    case closed
  }

  /// What the pool does after a transition, in order, without its lock.
  enum Action: Sendable {
    /// Watch the new primary: its close comes back as ``sessionLost(_:reason:silentSince:now:)``.
    case watch(Connection)
    /// Tell the observers.
    case notify(LinkState)
    /// Dial `addresses[endpoint]` after `delay`, if the link is still down then; the outcome
    /// is ``redialled(_:on:)`` or ``redialFailed(on:error:)``.
    case redial(endpoint: Int, after: Duration)
    /// Dial the more preferred `addresses[endpoint]` now; the outcome is
    /// ``preferredAnswered(_:on:)`` or ``preferredDialFailed(on:below:)``. `below` is the
    /// endpoint in use when the round began: the round tries every one before it.
    case dialPreferred(endpoint: Int, below: Int)
    /// Call ``preferredRetryDue()`` after `delay`.
    case schedulePreferredRetry(after: Duration)
    /// Close these sessions at once (their link is gone).
    case close([Connection], reason: String)
    /// Let these sessions finish what they have on the wire and give their fids back, each
    /// on a thread of its own; with `awaited`, return only once all are done.
    case retire([Connection], reason: String, within: Duration, awaited: Bool)
    /// Wait (at most this long) for a stream session still being dialled to retire itself.
    case settleStreamDial(within: Duration)
    /// Call the pool's extra-session check after `delay` (the comeback window is over): room
    /// feeds that went to the primary meanwhile may move to a stream session.
    case allowExtraSessions(after: Duration, generation: UInt64)
    /// Hand the new primary to these waiters.
    case wake([Waiter], Connection)
    /// Fail these waiters.
    case fail([Waiter], NinePError)
    case log(Logger.Level, String)
  }

  /// What ``awaitUp(_:timeout:now:)`` found.
  enum Awaiting: Sendable {
    case up(Connection)
    case closed
    /// The waiter is kept under `id`; after `remaining` (nil: never) the pool calls
    /// ``waiterTimedOut(_:)`` and fails it with `reason`.
    case waiting(id: UInt64, remaining: Duration?, reason: String)
  }

  /// The least a request waits for a lost link, even once the outage has lasted longer than
  /// its timeout: a server that just came back (thawed, restarted) is being re-dialled, and a
  /// command run then should find it.
  static var comebackGrace: Duration { .seconds(1) }

  /// How long the old primary and the stream sessions may finish their requests and clunk
  /// their fids after a switch.
  static var switchGrace: Duration { .seconds(2) }

  /// The transports' names (for the log), most preferred first.
  let endpoints: [String]
  let policy: ReconnectPolicy
  /// A factor near 1 for each backoff, so many clients do not hammer a server together.
  let jitter: @Sendable () -> Double

  private(set) var phase: Phase
  /// The index of the transport the sessions use (while down, the one last used).
  private(set) var endpoint = 0
  /// When the link last changed state (for status output).
  private(set) var changedAt = Date()
  /// How many times the link came back after a loss.
  private(set) var reconnects = 0
  /// How many times the pool moved to another transport (failing over or going back).
  private(set) var switches = 0
  /// Changes whenever the primary is replaced: fids of an older generation are gone.
  private(set) var generation: UInt64 = 0
  /// The stream sessions: they live and die with the primary's link.
  private(set) var streams: [Connection] = []
  /// The server did not give an extra session: streams share the open ones until the link
  /// is established again.
  var extraSessionsRefused = false
  /// After a reconnect, no extra session is dialled before this: the other members of a
  /// shared board lost the link when we did and come back within about as long as the
  /// outage lasted (their backoff), each needing one of the board's few sessions for its
  /// primary. Nil: extra sessions may be dialled.
  private(set) var extraSessionsFrom: ContinuousClock.Instant?

  private var upWaiters: [UInt64: Waiter] = [:]
  private var nextWaiterID: UInt64 = 1
  /// The rest of the reconnect round in progress, in the order to dial.
  private var round: [Int] = []
  /// A try of the more preferred transports is scheduled.
  private var preferredRetryScheduled = false
  /// Tries of the more preferred transports that failed since the last switch: the period
  /// doubles with them (twice at most), so a transport that is gone for good (a PSM the
  /// board does not serve) costs a dial a minute, not four.
  private var preferredRetriesFailed = 0

  init(
    endpoints: [String], policy: ReconnectPolicy, now: ContinuousClock.Instant = .now,
    jitter: @escaping @Sendable () -> Double = { Double.random(in: 0.75...1.25) }
  ) {
    precondition(!endpoints.isEmpty, "a link needs at least one endpoint")
    self.endpoints = endpoints
    self.policy = policy
    self.jitter = jitter
    phase = .down(reason: "not started", attempt: 0, since: now)
  }

  // MARK: - What the pool reads

  var state: LinkState {
    switch phase {
    case .up: .up
    case .down(let reason, _, _): .down(reason: reason)
    case .closed: .closed
    }
  }

  var primary: Connection? {
    if case .up(let primary) = phase { primary } else { nil }
  }

  var isDown: Bool {
    if case .down = phase { true } else { false }
  }

  var isClosed: Bool {
    if case .closed = phase { true } else { false }
  }

  /// The primary first, then the stream sessions.
  var sessions: [Connection] {
    (primary.map { [$0] } ?? []) + streams
  }

  /// Exponential backoff with jitter: `initialBackoff` doubled per failed round, capped.
  func backoff(attempt: Int) -> Duration {
    let base = policy.initialBackoff.timeInterval * pow(2, Double(min(attempt, 20)))
    let capped = min(base, policy.maximumBackoff.timeInterval)
    return .milliseconds(Int(capped * jitter() * 1000))
  }

  /// How often the more preferred transports are tried while another is in use (at least a
  /// second; up to four times that after failed tries).
  var preferredPeriod: Duration {
    max(policy.keepaliveInterval ?? .seconds(15), .seconds(1))
  }

  // MARK: - Coming up

  /// Whether a stream session may be dialled now (not inside a comeback window).
  func mayDialExtraSessions(now: ContinuousClock.Instant = .now) -> Bool {
    extraSessionsFrom.map { now >= $0 } ?? true
  }

  /// How long after a reconnect from an outage of `outage` extra sessions wait: the longest
  /// backoff another client of the board can be in after an outage that long (its waits
  /// double, so the next is about as long as it has been down, capped and with jitter), and
  /// a second for its handshake.
  func comebackWindow(after outage: Duration) -> Duration {
    min(outage, policy.maximumBackoff) * Self.largestJitter + .seconds(1)
  }

  /// The largest factor ``jitter`` gives by default.
  static var largestJitter: Double { 1.25 }

  /// ``Pool/start()`` dialled `session` on `addresses[index]`.
  mutating func started(_ session: Connection, on index: Int) -> [Action] {
    guard !isClosed else { return [.close([session], reason: "pool closed")] }
    endpoint = index
    install(session)
    return [.notify(.up), .watch(session)] + preferredRetryWanted()
  }

  /// A reconnect dial to `addresses[index]` answered.
  mutating func redialled(
    _ session: Connection, on index: Int, now: ContinuousClock.Instant = .now
  ) -> [Action] {
    guard case .down(_, _, let since) = phase else {
      return [.close([session], reason: "pool closed")]
    }
    reconnects += 1
    if index != endpoint { switches += 1 }
    endpoint = index
    install(session)
    // The primary first, for every member: extra sessions only once the others are back.
    let window = comebackWindow(after: since.duration(to: now))
    extraSessionsFrom = now + window
    let waiters = Array(upWaiters.values)
    upWaiters.removeAll()
    return [
      .log(.notice, "link to \(endpoints[index]) is back (reconnect \(reconnects))"),
      .notify(.up), .wake(waiters, session), .watch(session),
      .allowExtraSessions(after: window, generation: generation),
    ] + preferredRetryWanted()
  }

  /// A reconnect dial to `addresses[index]` failed: the next transport of the round, or,
  /// the round over, a new round of all of them after a longer backoff.
  mutating func redialFailed(on index: Int, error: NinePError) -> [Action] {
    guard case .down(var reason, let attempt, let since) = phase else { return [] }
    var actions: [Action] = [
      .log(.info, "reconnect attempt \(attempt + 1) to \(endpoints[index]) failed: \(error)")
    ]
    // The board answers but has no session for us: that, not the old loss, is why we are
    // still down, and the user should read it.
    if case .boardFull = error, reason != error.description {
      reason = error.description
      phase = .down(reason: reason, attempt: attempt, since: since)
      changedAt = Date()
      actions.append(.notify(.down(reason: reason)))
    }
    var delay = Duration.zero
    if round.isEmpty {
      phase = .down(reason: reason, attempt: attempt + 1, since: since)
      round = Array(endpoints.indices)
      delay = backoff(attempt: attempt + 1)
    }
    actions.append(.redial(endpoint: round.removeFirst(), after: delay))
    return actions
  }

  /// Makes `session` the primary. The caller says what to tell whom.
  private mutating func install(_ session: Connection) {
    phase = .up(primary: session)
    extraSessionsRefused = false
    extraSessionsFrom = nil
    preferredRetriesFailed = 0
    generation += 1
    changedAt = Date()
    round = []
  }

  // MARK: - Losing the link

  /// `session` closed (transport error, EOF, protocol violation, missed keepalives). Only
  /// the primary's loss counts: the link goes down, the stream sessions go with it (their
  /// owners place their streams again) and, with reconnecting on, the first round starts.
  /// `silentSince` is the session's ``Session/silentSince``.
  mutating func sessionLost(
    _ session: Connection, reason: String, silentSince: ContinuousClock.Instant?,
    now: ContinuousClock.Instant = .now
  ) -> [Action] {
    guard case .up(let primary) = phase, primary === session else { return [] }
    phase = .down(reason: reason, attempt: 0, since: silentSince ?? now)
    changedAt = Date()
    let lost = streams
    streams.removeAll()
    var actions: [Action] = [
      .log(.warning, "link to \(endpoints[endpoint]) lost: \(reason); reconnecting"),
      .close(lost, reason: "link lost: \(reason)"),
      .notify(.down(reason: reason)),
    ]
    guard policy.enabled else { return actions }
    // The transport that just died goes last in the first round: the others are likelier to
    // answer now, and the preferred one is tried again once it might be back.
    round = endpoints.indices.map { (endpoint + 1 + $0) % endpoints.count }
    actions.append(.redial(endpoint: round.removeFirst(), after: backoff(attempt: 0)))
    return actions
  }

  // MARK: - Going back to the preferred transport

  /// Schedules a try of the more preferred transports, unless one is scheduled or the
  /// preferred one is in use.
  mutating func preferredRetryWanted() -> [Action] {
    guard policy.enabled, endpoint > 0, !preferredRetryScheduled else { return [] }
    preferredRetryScheduled = true
    return [.schedulePreferredRetry(after: preferredPeriod * (1 << min(preferredRetriesFailed, 2)))]
  }

  /// The scheduled try is due: while up on a less preferred transport, dial the most
  /// preferred first. Down (the reconnect rounds try the preferred one first) or closed:
  /// nothing to do.
  mutating func preferredRetryDue() -> [Action] {
    preferredRetryScheduled = false
    guard case .up = phase, endpoint > 0 else { return [] }
    return [.dialPreferred(endpoint: 0, below: endpoint)]
  }

  /// A more preferred transport did not answer: the next one of the round, or a slower try.
  mutating func preferredDialFailed(on index: Int, below: Int) -> [Action] {
    if index + 1 < below { return [.dialPreferred(endpoint: index + 1, below: below)] }
    preferredRetriesFailed += 1
    return preferredRetryWanted()
  }

  /// `session`, on the more preferred `addresses[index]`, answered: it becomes the primary
  /// without the link ever counting as down. New requests go there at once; the old primary
  /// finishes what it has on the wire, gives its fids back and closes; the stream sessions
  /// retire too (not close: a room feed's read parked there may hold lines the server
  /// handed it as the switch happened; retiring flushes it and waits for them).
  mutating func preferredAnswered(_ session: Connection, on index: Int) -> [Action] {
    guard case .up(let old) = phase, index < endpoint else {
      // Lost meanwhile, or already back on a transport at least as preferred.
      return [.retire([session], reason: "not needed", within: .seconds(1), awaited: false)]
        + preferredRetryWanted()
    }
    let from = endpoints[endpoint]
    let to = endpoints[index]
    let moved = streams
    streams.removeAll()
    endpoint = index
    switches += 1
    install(session)
    return [
      .log(.notice, "\(to) answers again; moving over from \(from)"),
      .retire(moved, reason: "moved to \(to)", within: Self.switchGrace, awaited: false),
      .retire(
        [old], reason: "moved to another transport", within: Self.switchGrace, awaited: false),
      .notify(.up), .watch(session),
    ] + preferredRetryWanted()
  }

  // MARK: - Stream sessions

  /// A stream session dialled on `addresses[index]` joins, unless the pool closed, lost the
  /// link or moved to another transport meanwhile (a stream session on another transport
  /// would outlive a switch). False: the caller retires it.
  mutating func adopt(stream session: Connection, dialledOn index: Int) -> Bool {
    guard case .up = phase, index == endpoint else { return false }
    streams.append(session)
    return true
  }

  /// The newest stream session, no longer ours: the caller retires it.
  mutating func giveBackStream() -> Connection? {
    streams.popLast()
  }

  /// Forgets the stream sessions for which `isClosed` holds.
  mutating func dropStreams(where isClosed: (Connection) -> Bool) {
    streams.removeAll(where: isClosed)
  }

  // MARK: - Waiting for the link

  /// A caller wants the primary. While the link is down it waits what is left of the
  /// outage's `timeout` (the outage counted from when the server was last heard), so a
  /// user's command (several requests in a row) waits `timeout` in all, not once per
  /// request; but ``comebackGrace`` at least.
  mutating func awaitUp(
    _ waiter: @escaping Waiter, timeout: Duration?, now: ContinuousClock.Instant = .now
  ) -> Awaiting {
    let reason: String
    let since: ContinuousClock.Instant
    switch phase {
    case .up(let primary): return .up(primary)
    case .closed: return .closed
    case .down(let why, _, let when):
      reason = why
      since = when
    }
    let remaining = timeout.map { max(since.advanced(by: $0) - now, min($0, Self.comebackGrace)) }
    let id = nextWaiterID
    nextWaiterID += 1
    upWaiters[id] = waiter
    return .waiting(id: id, remaining: remaining, reason: reason)
  }

  /// The waiter `id` waited its time: the caller fails it (nil if it was woken already).
  mutating func waiterTimedOut(_ id: UInt64) -> Waiter? {
    upWaiters.removeValue(forKey: id)
  }

  // MARK: - Closing

  /// The owner closes the pool: every session goes (retired within `tidy`, so each clunks
  /// its fids first, or closed at once), and every waiter fails, `others` (the pool's stream
  /// waiters) included.
  mutating func close(tidyingWithin tidy: Duration?, failing others: [Waiter] = []) -> [Action] {
    let all = sessions
    phase = .closed
    streams.removeAll()
    round = []
    let waiters = Array(upWaiters.values) + others
    upWaiters.removeAll()
    let unmounting = "unmounting"
    var actions: [Action]
    if let tidy {
      actions = [
        .retire(all, reason: unmounting, within: tidy, awaited: true),
        .settleStreamDial(within: tidy),
      ]
    } else {
      actions = [.close(all, reason: unmounting)]
    }
    return actions + [.fail(waiters, .sessionClosed(reason: unmounting)), .notify(.closed)]
  }
}
