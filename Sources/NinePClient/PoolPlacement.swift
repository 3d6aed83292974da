import Foundation

/// What a request is for, so the pool can keep long-parked stream reads away from the session
/// that ordinary requests use.
public enum Placement: Sendable {
  /// Walks, stats, reads of regular files, posts: the primary session.
  case ordinary
  /// A read that may park at the server for a long time (a chat room feed).
  case stream
  /// A stream nobody reads yet (a watched room): it takes a free slot on the primary before a
  /// new session is dialled for it, so watching a few rooms takes no shared board's session.
  case quietStream
}

/// Where a new stream goes, given how loaded the open sessions are: the rule alone.
///
/// In order of preference: a stream session with a free parking slot (the least loaded, the
/// first of equals); a new stream session, when one may be dialled; the primary while it has
/// a free slot (on a device each read there holds ordinary requests back for the park grace);
/// last the least loaded session, where the session rotates its slots
/// (``SessionConfiguration/parkingTurn``).
struct StreamPlacement: Equatable {
  /// Parked reads a session serves at once (``SessionConfiguration/maxParkedReads``).
  let slots: Int
  /// Most sessions the pool opens, primary included.
  let maxSessions: Int

  enum Choice: Equatable {
    /// The stream session at this index of the loads given.
    case stream(Int)
    case primary
    /// Dial a new stream session and place the stream there.
    case dial
  }

  /// A `quiet` stream (nobody reads it yet: a watched room) takes the primary's free slot
  /// before a new session, so watching a few rooms never takes a shared board's sessions.
  ///
  /// - Parameters:
  ///   - mayDial: false once a stream has waited ``Pool/dialPatience`` for a new session.
  ///   - extraSessionsRefused: the server left a second session unanswered this link.
  func choose(
    primaryLoad: Int, streamLoads: [Int], mayDial: Bool, extraSessionsRefused: Bool,
    quiet: Bool = false
  ) -> Choice {
    let least = streamLoads.indices.min { streamLoads[$0] < streamLoads[$1] }
    if let least, streamLoads[least] < slots { return .stream(least) }
    if quiet && primaryLoad < slots { return .primary }
    if mayDial && !extraSessionsRefused && streamLoads.count + 1 < maxSessions { return .dial }
    if primaryLoad < slots { return .primary }
    return least.map { .stream($0) } ?? .primary
  }
}

/// The pool's streams: how many it placed on each session and its owner has not given back,
/// and the streams waiting for a new stream session.
///
/// A reservation counts a feed from its placement on, before its first read exists, so feeds
/// that start together spread over sessions. Reservations hold their session, so a session
/// whose object identifier is counted here is never freed and its identifier never reused.
struct StreamLedger<Connection: AnyObject & Sendable> {
  typealias Waiter = PoolLink<Connection>.Waiter

  /// Per session: the streams reserved there, and how many of them are quiet.
  private var reserved: [ObjectIdentifier: (session: Connection, count: Int, quiet: Int)] = [:]
  /// Streams waiting for the stream session being dialled, by id, and whether each is quiet.
  private(set) var waiters: [UInt64: (waiter: Waiter, quiet: Bool)] = [:]
  private var nextWaiterID: UInt64 = 1
  /// A stream session is being dialled.
  private(set) var dialing = false
  /// Told when the dial in progress is over (a tidy close waits for it).
  private var dialSettled: [@Sendable () -> Void] = []

  /// Streams placed on `session` and not given back.
  func reservations(on session: Connection) -> Int {
    reserved[ObjectIdentifier(session)]?.count ?? 0
  }

  /// Of those, the streams someone reads (not quiet).
  func readStreams(on session: Connection) -> Int {
    reserved[ObjectIdentifier(session)].map { $0.count - $0.quiet } ?? 0
  }

  /// What a stream on `session` weighs in placement: its reservations, or its parked and
  /// queued stream reads if more (a read the owner has not given back yet, or a feed moved
  /// here by a session's rotation).
  func load(of session: Connection, parked: Int) -> Int {
    max(reservations(on: session), parked)
  }

  mutating func reserve(_ session: Connection, quiet: Bool = false) {
    reserved[ObjectIdentifier(session), default: (session, 0, 0)].count += 1
    if quiet { reserved[ObjectIdentifier(session)]?.quiet += 1 }
  }

  /// A stream placed on `session` (`quiet` as it was placed) stopped, or moved.
  mutating func release(_ session: Connection, quiet: Bool = false) {
    let key = ObjectIdentifier(session)
    guard var entry = reserved[key] else { return }
    entry.count -= 1
    if quiet { entry.quiet = max(0, entry.quiet - 1) }
    reserved[key] = entry.count > 0 ? entry : nil
  }

  /// Forgets the reservations on sessions the pool no longer holds.
  mutating func keepOnly(_ sessions: [Connection]) {
    let kept = Set(sessions.map(ObjectIdentifier.init))
    reserved = reserved.filter { kept.contains($0.key) }
  }

  mutating func wait(_ waiter: @escaping Waiter, quiet: Bool = false) -> UInt64 {
    let id = nextWaiterID
    nextWaiterID += 1
    waiters[id] = (waiter, quiet)
    return id
  }

  mutating func removeWaiter(_ id: UInt64) -> (waiter: Waiter, quiet: Bool)? {
    waiters.removeValue(forKey: id)
  }

  mutating func takeWaiters() -> [(waiter: Waiter, quiet: Bool)] {
    defer { waiters.removeAll() }
    return Array(waiters.values)
  }

  /// A stream wants a new session: whether this caller starts the dial (none is under way).
  mutating func startDial() -> Bool {
    defer { dialing = true }
    return !dialing
  }

  /// The dial is over (adopted, failed, or its late session retired): the callbacks of
  /// ``whenDialSettled(_:)`` to call once the lock is let go.
  mutating func finishDial() -> [@Sendable () -> Void] {
    dialing = false
    defer { dialSettled.removeAll() }
    return dialSettled
  }

  /// Calls `settled` when the dial under way is over; false (and nothing kept) when there is
  /// none.
  mutating func whenDialSettled(_ settled: @escaping @Sendable () -> Void) -> Bool {
    guard dialing else { return false }
    dialSettled.append(settled)
    return true
  }
}

/// What the pool measured of a session without its own lock held: whether it closed, and its
/// parked and queued stream reads.
struct SessionLoad {
  let closed: Bool
  let parked: Int
}

extension PoolState {
  /// What ``Pool/session(for:completion:)`` does with a stream, decided under the lock and
  /// done after it.
  enum StreamPlacing: Sendable {
    /// Wait for the link to come back, then place again.
    case linkDown
    /// Hand this session over (the stream is already reserved on it).
    case placed(Connection)
    /// The completion waits in the ledger under `id` for a stream session; `dial` says
    /// whether this caller starts the dial.
    case waiting(id: UInt64, dial: Bool)
  }

  /// Places a stream, reserving it on the session chosen, by `rule` and the loads `measured`
  /// (sessions not measured count as open and empty). With `waiter`, a stream may wait for a
  /// new session; without, it takes a place on an open one (nil: the link is down).
  mutating func placeStream(
    by rule: StreamPlacement, measured: [ObjectIdentifier: SessionLoad],
    waiter: PoolLink<Connection>.Waiter?, quiet: Bool = false,
    now: ContinuousClock.Instant = .now
  ) -> StreamPlacing {
    guard let primary = link.primary else { return .linkDown }
    link.dropStreams { measured[ObjectIdentifier($0)]?.closed == true }
    ledger.keepOnly(link.sessions)
    func load(_ session: Connection) -> Int {
      ledger.load(of: session, parked: measured[ObjectIdentifier(session)]?.parked ?? 0)
    }
    let choice = rule.choose(
      primaryLoad: load(primary), streamLoads: link.streams.map(load),
      mayDial: waiter != nil && link.mayDialExtraSessions(now: now),
      extraSessionsRefused: link.extraSessionsRefused, quiet: quiet)
    let chosen: Connection
    switch choice {
    case .stream(let index): chosen = link.streams[index]
    case .primary: chosen = primary
    case .dial:
      guard let waiter else { preconditionFailure("placement dialled without a waiter") }
      let id = ledger.wait(waiter, quiet: quiet)
      return .waiting(id: id, dial: ledger.startDial())
    }
    ledger.reserve(chosen, quiet: quiet)
    return .placed(chosen)
  }
}

extension Result {
  fileprivate var isSuccess: Bool {
    if case .success = self { true } else { false }
  }
}

extension Pool {
  /// How long a stream waits for a new session before it takes a place on an open one.
  static let dialPatience: Duration = .seconds(2)

  /// The longest wait for a stream session's version and attach.
  static let streamHandshake: Duration = .seconds(5)

  /// Picks a session for a request of the given kind. While the link is down, waits for it
  /// to come back (streams wait without a deadline).
  ///
  /// A stream (a read that parks) is reserved on the session it is placed on until its owner
  /// calls ``releaseStream(on:)``. It goes where ``StreamPlacement`` says; a new stream session
  /// is dialled off the caller's thread. A server that does not give a second session (one
  /// that serves one connection at a time) is not asked again until the link is
  /// re-established, and a caller never waits more than ``dialPatience`` for one.
  public func session(
    for placement: Placement, completion: @escaping @Sendable (Result<Session, NinePError>) -> Void
  ) {
    let placing: PoolState<Session>.StreamPlacing
    switch placement {
    case .ordinary:
      placing = current.map { .placed($0) } ?? .linkDown
    case .stream, .quietStream:
      let measured = measure(sessions)
      placing = state.withLock {
        $0.placeStream(
          by: streamPlacement, measured: measured, waiter: completion,
          quiet: placement == .quietStream)
      }
    }
    switch placing {
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

  /// A stream placed on `session` by ``session(for:completion:)`` has stopped (or moved
  /// after a failure): its reservation there is given back.
  public func releaseStream(on session: Session, quiet: Bool = false) {
    state.withLock { $0.ledger.release(session, quiet: quiet) }
  }

  /// Streams placed on `session` and not given back, or its parked and queued stream reads
  /// if more: what placement weighs it by.
  public func streamLoad(of session: Session) -> Int {
    let parked = session.parkedStreams
    return state.withLock { $0.ledger.load(of: session, parked: parked) }
  }

  private var streamPlacement: StreamPlacement {
    StreamPlacement(slots: configuration.maxParkedReads, maxSessions: maxSessions)
  }

  /// Reads each session's state with the pool's lock not held (see the lock note on ``Pool``).
  private func measure(_ sessions: [Session]) -> [ObjectIdentifier: SessionLoad] {
    Dictionary(
      sessions.map {
        (
          ObjectIdentifier($0),
          SessionLoad(closed: $0.closedReason != nil, parked: $0.parkedStreams)
        )
      },
      uniquingKeysWith: { first, _ in first })
  }

  /// A stream waited ``dialPatience`` for a new session: if it still waits, it takes a place
  /// on an open session, or (the link being down) waits for the link like any stream.
  private func patienceRanOut(waiter id: UInt64) {
    let measured = measure(sessions)
    let (waiting, placing) = state.withLock {
      state -> ((waiter: Completion, quiet: Bool)?, PoolState<Session>.StreamPlacing?) in
      guard let waiting = state.ledger.removeWaiter(id) else { return (nil, nil) }
      return (
        waiting,
        state.placeStream(
          by: streamPlacement, measured: measured, waiter: nil, quiet: waiting.quiet)
      )
    }
    guard let waiting else { return }
    if case .placed(let fallback) = placing {
      waiting.waiter(.success(fallback))
    } else {
      session(for: waiting.quiet ? .quietStream : .stream, completion: waiting.waiter)
    }
  }

  /// A reconnect's comeback window of `generation` is over: if streams went to the primary
  /// meanwhile and the board may give another session, one is dialled and, once open, the
  /// streams' owners are told to place them again (``observeStreamRoom(_:)``).
  func extraSessionsAllowed(generation: UInt64) {
    let primary = current
    let dial = state.withLock { state -> Bool in
      guard let primary, state.link.primary === primary, state.link.generation == generation,
        maxSessions > 1, !state.link.extraSessionsRefused, state.link.streams.isEmpty,
        // Streams someone reads: watched rooms alone are no reason for another session.
        state.ledger.readStreams(on: primary) > 0
      else { return false }
      return state.ledger.startDial()
    }
    guard dial, let primary else { return }
    Thread.detachNewThread { [self] in dialStreamSession(movingFrom: primary) }
  }

  /// Opens a stream session and places everyone waiting for it; with `crowded`, the owners of
  /// the streams placed there are told they may move (``observeStreamRoom(_:)``).
  private func dialStreamSession(movingFrom crowded: Session? = nil) {
    let handshake = min(configuration.requestTimeout ?? Self.streamHandshake, Self.streamHandshake)
    // The transport the primary uses: a stream session on another would outlive a switch.
    let target = state.withLock { $0.link.endpoint }
    let result = Result { () throws(NinePError) -> Session in
      try dialSession(to: target, handshake: handshake)
    }
    let (callers, late, settled, givenBack, movers) = state.withLock {
      state -> (
        [(waiter: Completion, quiet: Bool)], Session?, [@Sendable () -> Void], Session?,
        [@Sendable (Session) -> Void]
      )
      in
      let callers = state.ledger.takeWaiters()
      var late: Session?
      var givenBack: Session?
      switch result {
      case .success(let session):
        // Not adopted: the pool closed, lost the link or moved to another transport meanwhile.
        if !state.link.adopt(stream: session, dialledOn: target) { late = session }
      case .failure(let error):
        // A server that serves one connection at a time leaves the second one unanswered.
        state.link.extraSessionsRefused = true
        // A full board: someone else may be waiting for a session. Give the newest extra one
        // back; its streams share the others.
        if case .boardFull = error { givenBack = state.link.giveBackStream() }
      }
      let movers = crowded != nil && late == nil && result.isSuccess ? state.streamMovers : []
      return (callers, late, late == nil ? state.ledger.finishDial() : [], givenBack, movers)
    }
    for done in settled { done() }
    if case .failure(let error) = result {
      logger.warning(
        "could not open another session to \(addresses[target]) (\(error)); room feeds share the open ones"
      )
    }
    if let givenBack {
      logger.notice("the board is full: giving one of our extra sessions back")
      givenBack.retire(within: .seconds(2), reason: "given back: the board is full")
    }
    if let crowded {
      for mover in movers { mover(crowded) }
    }
    if let late {
      // Dialled while the pool closed or moved: give its attach fid back too, then let
      // close() go on.
      late.retire(within: .seconds(1), reason: "pool closed or moved")
      for done in state.withLock({ $0.ledger.finishDial() }) { done() }
    }
    // Placed again: one new session may not hold them all, and a second dial then starts.
    for caller in callers {
      session(for: caller.quiet ? .quietStream : .stream, completion: caller.waiter)
    }
  }
}
