import Foundation
import Logging
import NinePClient
import NinePProtocol

/// Everything a ``RoomFeed`` keeps, as a value: each event of the feed's life (a reader
/// opening, a session placed, a reply) is a transition that returns the ``Action``s to run,
/// which ``RoomFeed`` runs outside its lock, in order.
///
/// The server-side read goes through the ``Phase``s stopped → placing → opening → reading ⇄
/// pausing, and to retrying after a failure; each phase carries what it holds (the placement,
/// the fid, the read on the wire). Every run of the feed (from the first reader's open to the
/// last reader's close) has a new `generation`: a reply, placement or timer of an earlier run
/// finds the generation moved on and starts nothing.
///
/// Generic over the session reads are placed on (``Session`` in the mount), as
/// ``PoolLink`` is over its connection, so tests drive it with a stand-in.
struct RoomFeedState<Stream: AnyObject & Sendable> {
  /// A parking slot the provider reserved for the feed on `session`; `quiet` when it was
  /// asked for with no reader (a watched room).
  struct Placement {
    let session: Stream
    let quiet: Bool
  }

  /// Where the server-side read is.
  enum Phase {
    /// No reader (or a local stream): nothing is asked of the server.
    case stopped
    /// Waiting for the provider's stream session, `keeping` this run's placement before a
    /// retry (its slot goes back when the next placement comes).
    case placing(keeping: Placement?)
    /// Walking to the room and opening it.
    case opening(Placement)
    /// A read on `fid` on the wire (or in the session's queue), `token` telling it from later
    /// ones; `handle` once `send` has returned it.
    case reading(Placement, Fid, token: UInt64, handle: RequestHandle?)
    /// Between a reply and the next read (backing off after an instant empty reply).
    case pausing(Placement, Fid)
    /// A request failed: dialling again after a pause, `keeping` the placement as `placing`.
    case retrying(keeping: Placement?)

    /// The slot this run holds.
    var placement: Placement? {
      switch self {
      case .stopped: nil
      case .placing(let kept), .retrying(let kept): kept
      case .opening(let placement), .reading(let placement, _, _, _),
        .pausing(let placement, _):
        placement
      }
    }
  }

  /// What a transition asks the feed to do, outside the lock.
  enum Action: Sendable {
    /// Ask the provider for a stream session (``placed(_:generation:)`` next);
    /// `quiet` when no reader waits on the feed (a watched room).
    case place(generation: UInt64, quiet: Bool)
    /// A reader opened a room watched so far: if the feed reads on the session ordinary
    /// requests use, it moves (``move(off:)``).
    case leaveIfShared(Stream)
    /// Walk to the room and open it (``opened(_:fid:generation:)`` next).
    case open(Stream, generation: UInt64)
    /// Send the next read (``beginRead(_:_:generation:)`` first).
    case read(Stream, Fid, generation: UInt64)
    /// The same, after `delay`.
    case readLater(Stream, Fid, after: Duration, generation: UInt64)
    /// Dial again after `delay` (``retryDue(generation:)`` then).
    case retry(after: Duration, generation: UInt64)
    /// Flush a read on the wire.
    case cancel(Stream, RequestHandle)
    case clunk(Stream, Fid)
    /// Clunk unless the session has closed (the server forgot the fid with it).
    case clunkUnlessClosed(Stream, Fid)
    /// Give the parking slot on `session` (placed `quiet` or not) back to the provider.
    case releaseStream(Stream, quiet: Bool)
    /// Waiters now ready (`concurrently` when many readers wait on a reply).
    case wake([@Sendable () -> Void], concurrently: Bool = false)
    /// What the server's reads added, ending at transcript offset `end`, for the
    /// ``RoomFeed/onLines`` observer (before the waiters are woken).
    case observe([UInt8], end: UInt64)
    /// The transcript grew by these bytes: the growth callback, then the history on disk
    /// (after the waiters).
    case grew([UInt8])
    case log(Logger.Level, String)
    /// How the board answers a caught-up read: it parks it, or (`parks` false) answers at
    /// once (``RoomFeed/onParking``).
    case learnedParking(parks: Bool)
  }

  typealias Waiter = FeedWaiter

  let room: String
  /// A mount-local stream (`chat/events`, `chat/mentions`): never read from the server,
  /// always caught up.
  let isLocal: Bool
  private(set) var phase = Phase.stopped
  private(set) var transcript: Transcript
  private(set) var users = 0
  /// Of the users, those who watch the room (``RoomWatcher``) rather than read it.
  private(set) var watchers = 0
  /// Readers of the room: users who are not watchers.
  var readers: Int { users - watchers }
  private(set) var generation: UInt64 = 0
  /// Identifies reads on the wire across runs, so a reply that beats `send`'s return is not
  /// mistaken for a newer read.
  private var lastToken: UInt64 = 0
  /// The session the provider placed this run on (holding one of its parking slots).
  var placedOn: Stream? { phase.placement?.session }
  private(set) var backoff: Duration = .zero
  private var waiters = Waiters()
  /// What received lines go through before the transcript.
  private var filters: RoomLineFilters
  /// A read failed since the last one that worked: the next may replay what we have (a
  /// restarted server's backlog, a post the outbox sends again). Stopping and starting again
  /// as readers come and go replays nothing: the server keeps the user's place.
  private var lostRead = false
  /// This run of the feed has read everything the server had for the user (see
  /// ``RoomFeed``). False while stopped: the server may be keeping lines for us.
  private(set) var caughtUp: Bool

  /// A server room's state; `history` is what the last mount kept (visible already).
  init(room: String, rawText: Bool, history: (bytes: [UInt8], modified: Date)? = nil) {
    self.room = room
    isLocal = false
    caughtUp = false
    transcript = Transcript()
    filters = RoomLineFilters(rawText: rawText)
    if let history, !history.bytes.isEmpty {
      // The last mount's lines: the room opens at once with them, and the server, which may
      // have restarted since, could send some of them again.
      transcript.append(history.bytes, at: history.modified)
      lostRead = true
    }
  }

  /// A mount-local stream's state, keeping at most `capacity` bytes.
  init(localStream room: String, capacity: Int) {
    self.room = room
    isLocal = true
    caughtUp = true
    transcript = Transcript(capacity: capacity)
    filters = RoomLineFilters(rawText: true)
  }

  private func isCurrent(_ generation: UInt64) -> Bool { generation == self.generation }

  /// Set once the server answered a caught-up read with nothing at once (a board that does
  /// not park reads, Gen-1).
  var answersAtOnce: Bool { filters.echoes != nil }

  // MARK: Waiters

  /// Registers `waiter`; nil (and nothing kept) when it is ready now.
  mutating func add(_ waiter: Waiter) -> UInt64? {
    if waiter.isReady(length: transcript.length, caughtUp: caughtUp) { return nil }
    return waiters.add(waiter)
  }

  /// Forgets waiter `id`, returning it if it had not run.
  mutating func removeWaiter(_ id: UInt64) -> Waiter? {
    waiters.remove(id)
  }

  /// Removes and returns the callbacks of the waiters now ready.
  private mutating func readyWaiters() -> [@Sendable () -> Void] {
    waiters.removeReady(length: transcript.length, caughtUp: caughtUp)
  }

  // MARK: Readers coming and going

  /// A reader (or, `watching`, the watcher) opened the room: the first starts a run. The
  /// first reader of a room watched so far moves it off the session ordinary requests use.
  mutating func retain(watching: Bool = false) -> [Action] {
    users += 1
    if watching { watchers += 1 }
    guard users == 1, case .stopped = phase, !isLocal else {
      guard !watching, readers == 1, let placement = phase.placement, placement.quiet else {
        return []
      }
      return [.leaveIfShared(placement.session)]
    }
    generation += 1
    // A new run polls at once: an old backoff would miss lines a board's ring drops.
    backoff = .zero
    // What the server kept for us while stopped is still to come.
    caughtUp = false
    phase = .placing(keeping: nil)
    return [placing()]
  }

  /// A reader (or, `watching`, the watcher) closed the room; the last one stops the run.
  mutating func release(watching: Bool = false) -> [Action] {
    users = max(0, users - 1)
    if watching { watchers = max(0, watchers - 1) }
    return users == 0 ? stop() : []
  }

  /// Asks for a place, quietly when nobody reads the room.
  private func placing() -> Action {
    .place(generation: generation, quiet: readers == 0)
  }

  /// Stops for good (unmount): every waiter is woken so replies go out.
  mutating func shutdown() -> [Action] {
    users = 0
    let stopping = stop()
    let all = waiters.removeAll()
    return stopping + [.wake(all)]
  }

  /// Moves to a new generation, so replies still on their way start nothing: the read is
  /// flushed, its fid clunked, its slot given back.
  private mutating func stop() -> [Action] {
    generation += 1
    // Stopped, the transcript falls behind what the server keeps for us.
    caughtUp = isLocal
    var actions: [Action] = []
    switch phase {
    case .reading(let placement, let fid, _, let handle):
      if let handle { actions.append(.cancel(placement.session, handle)) }
      actions.append(.clunk(placement.session, fid))
    case .pausing(let placement, let fid):
      actions.append(.clunk(placement.session, fid))
    case .stopped, .placing, .opening, .retrying:
      break
    }
    if let placement = phase.placement {
      actions.append(.releaseStream(placement.session, quiet: placement.quiet))
    }
    phase = .stopped
    return actions
  }

  /// A stream session opened after a reconnect's comeback window, while this run reads on
  /// `crowded` (the primary, where it went meanwhile): it starts again, placed anew. Its read
  /// there is flushed (a reply already on its way still counts, see ``received``) and the
  /// board's read position for us is where the new run goes on, so nothing is lost.
  mutating func move(off crowded: Stream) -> [Action] {
    guard users > 0, placedOn === crowded else { return [] }
    switch phase {
    case .reading, .pausing: break
    case .stopped, .placing, .opening, .retrying: return []
    }
    let wasCaughtUp = caughtUp
    var actions = stop()
    caughtUp = wasCaughtUp
    backoff = .zero
    phase = .placing(keeping: nil)
    actions.append(.log(.debug, "room feed \(room): moving to a stream session"))
    actions.append(placing())
    return actions
  }

  // MARK: Placing and opening

  /// The provider placed the feed on `session` (a parking slot reserved there), `quiet` as
  /// it was asked.
  mutating func placed(_ session: Stream, quiet: Bool = false, generation: UInt64) -> [Action] {
    // A run that stopped meanwhile gives back only the slot placed for it: the phase holds
    // the current run's (stopping gave the old run's back).
    guard isCurrent(generation) else { return [.releaseStream(session, quiet: quiet)] }
    // The slot of this run's earlier placement (before a retry) goes back.
    let previous = phase.placement.map { [Action.releaseStream($0.session, quiet: $0.quiet)] } ?? []
    phase = .opening(Placement(session: session, quiet: quiet))
    return previous + [.open(session, generation: generation)]
  }

  /// The room is open on `fid`.
  mutating func opened(_ session: Stream, fid: Fid, generation: UInt64) -> [Action] {
    guard isCurrent(generation), case .opening(let placement) = phase else {
      return [.clunk(session, fid)]
    }
    if transcript.length > 0 && lostRead {
      // Reading again after a loss: the server may replay lines we have (a restarted
      // server's backlog, a post the outbox sent twice). Remember what we have.
      filters.dedupe = ReplayFilter(lines: transcript.lastLines(ReplayFilter.window))
    }
    lostRead = false
    phase = .pausing(placement, fid)
    return [
      .log(.debug, "room feed \(room) reading on session \(ObjectIdentifier(session).hashValue)"),
      .read(session, fid, generation: generation),
      // A reader came while it was being placed quietly.
    ] + (placement.quiet && readers > 0 ? [.leaveIfShared(session)] : [])
  }

  /// Placing, opening or reading failed: dial again after a pause that grows with failures.
  mutating func failed(_ error: NinePError, generation: UInt64) -> [Action] {
    guard isCurrent(generation) else { return [] }
    lostRead = true
    backoff = min(max(backoff * 2, .milliseconds(100)), RoomFeed.maximumRetry)
    phase = .retrying(keeping: phase.placement)
    return [
      .log(.warning, "room feed \(room): \(error); retrying in \(backoff)"),
      .retry(after: backoff, generation: generation),
    ]
  }

  /// The pause after a failure is over.
  mutating func retryDue(generation: UInt64) -> [Action] {
    guard isCurrent(generation), case .retrying(let kept) = phase else { return [] }
    phase = .placing(keeping: kept)
    return [placing()]
  }

  // MARK: Reading

  /// A read is about to go out on `fid`: its offset and token, or nil when the run is over.
  mutating func beginRead(
    _ session: Stream, _ fid: Fid, generation: UInt64
  ) -> (offset: UInt64, token: UInt64)? {
    guard isCurrent(generation), let placement = phase.placement else { return nil }
    lastToken += 1
    phase = .reading(placement, fid, token: lastToken, handle: nil)
    return (transcript.length, lastToken)
  }

  /// `send` returned `handle` for read `token`: whether to watch it for parking.
  mutating func sent(_ handle: RequestHandle, token: UInt64) -> Bool {
    guard case .reading(let placement, let fid, token, .none) = phase else { return false }
    phase = .reading(placement, fid, token: token, handle: handle)
    return !caughtUp
  }

  /// Whether read `token` is still unanswered in a run not yet caught up.
  func isWatching(token: UInt64) -> Bool {
    guard case .reading(_, _, token, _) = phase else { return false }
    return !caughtUp
  }

  /// Read `token` stayed unanswered past the parking wait: the server parked it.
  mutating func parked(token: UInt64, after wait: Duration) -> [Action] {
    guard isWatching(token: token) else { return [] }
    caughtUp = true
    filters.dedupe = nil
    return [
      .log(.debug, "room feed \(room): caught up (a read unanswered for \(wait))"),
      .learnedParking(parks: true),
      .wake(readyWaiters()),
    ]
  }

  /// Read `token` was answered (data, flushed or failed): it is no longer on the wire.
  private mutating func answered(_ token: UInt64) {
    guard case .reading(let placement, let fid, token, _) = phase else { return }
    phase = .pausing(placement, fid)
  }

  /// Read `token` was flushed (its slot went to another room) or cancelled: read again.
  mutating func readFlushed(
    _ session: Stream, _ fid: Fid, token: UInt64, generation: UInt64
  ) -> [Action] {
    answered(token)
    return [.read(session, fid, generation: generation)]
  }

  /// Read `token` failed: the fid is given up and the feed dials again.
  mutating func readFailed(
    _ error: NinePError, _ session: Stream, _ fid: Fid, token: UInt64, generation: UInt64
  ) -> [Action] {
    answered(token)
    return [.clunkUnlessClosed(session, fid)] + failed(error, generation: generation)
  }

  /// Read `token` (of `count` bytes, answered after `elapsed`) brought `data`.
  mutating func received(
    _ data: [UInt8], count: Int, elapsed: Duration, _ session: Stream, _ fid: Fid,
    token: UInt64, generation: UInt64
  ) -> [Action] {
    answered(token)
    let current = isCurrent(generation)
    // A reply to a read the last reader's close was flushing still counts: the server moved
    // this user's place past these lines, so they will never come again.
    guard current || !data.isEmpty else { return [] }
    var actions: [Action] = []
    // A reply with room for another line (or none at all): the server had nothing more.
    let caughtUpNow = current && data.count + RoomFeed.longestLine <= count && !caughtUp
    if caughtUpNow { caughtUp = true }
    if data.isEmpty && elapsed < RoomFeed.instantReply && filters.echoes == nil {
      filters.echoes = EchoFilter(lines: transcript.lastLines(EchoFilter.window))
      actions.append(
        .log(.debug, "room feed \(room): the server answers caught-up reads at once; polling"))
      // Before the readers are woken: what they read next may start watching (Awareness/).
      actions.append(.learnedParking(parks: false))
    }
    let (shown, drops) = filters.filter(data, room: room)
    actions += drops.map { .log(.info, $0) }
    // The backlog is over: what comes next is new, whatever it says.
    if caughtUpNow { filters.dedupe = nil }
    transcript.append(shown)
    let ready = readyWaiters()
    // Nothing new at once (an idle room, or only lines a Gen-1 board sent again): back off.
    if shown.isEmpty && elapsed < RoomFeed.instantReply {
      backoff =
        backoff == .zero ? RoomFeed.minimumBackoff : min(backoff * 2, RoomFeed.maximumIdlePoll)
    } else {
      backoff = .zero
    }
    if caughtUpNow {
      actions.append(
        .log(.debug, "room feed \(room): caught up (\(shown.count) bytes of \(count))"))
    }
    // The next read goes out first, so the server has it parked by the next post; then the
    // waiting readers are answered.
    if current {
      actions.append(
        backoff == .zero
          ? .read(session, fid, generation: generation)
          : .readLater(session, fid, after: backoff, generation: generation))
    }
    // Before the waiters: one that reads the new lines to the end resets the room's unread
    // count after they were counted. (A reader not waiting can read them first: the ledger
    // tells by where they end.)
    if !shown.isEmpty { actions.append(.observe(shown, end: transcript.length)) }
    actions.append(.wake(ready, concurrently: true))
    if !shown.isEmpty { actions.append(.grew(shown)) }
    return actions
  }

  // MARK: Local streams and repeats

  /// Adds `data` to a local stream: the waiters now ready.
  mutating func appendLocal(_ data: [UInt8]) -> [@Sendable () -> Void] {
    guard isLocal, !data.isEmpty else { return [] }
    transcript.append(data)
    return readyWaiters()
  }

  /// Watches for a second copy of `text` (a post of this mount sent again).
  mutating func expectRepeat(of text: [UInt8]) {
    filters.expectRepeat(of: text, recent: transcript.lastLines(RepeatFilter.recent))
  }
}

/// One wait for a feed's transcript (``RoomFeed/wait(beyond:_:)``,
/// ``RoomFeed/whenCaughtUp(within:_:)``).
struct FeedWaiter {
  /// Wake when the transcript is longer than this; nil: once the feed is caught up.
  var beyond: UInt64?
  var callback: @Sendable () -> Void

  func isReady(length: UInt64, caughtUp: Bool) -> Bool {
    if let beyond { return length > beyond }
    return caughtUp
  }
}

/// The waits on a feed's transcript, by id.
struct Waiters {
  private var waiting: [UInt64: FeedWaiter] = [:]
  private var nextID: UInt64 = 1

  /// Keeps `waiter`; its id.
  mutating func add(_ waiter: FeedWaiter) -> UInt64 {
    defer { nextID += 1 }
    waiting[nextID] = waiter
    return nextID
  }

  mutating func remove(_ id: UInt64) -> FeedWaiter? { waiting.removeValue(forKey: id) }

  /// Removes and returns the callbacks of the waiters ready at `length`.
  mutating func removeReady(length: UInt64, caughtUp: Bool) -> [@Sendable () -> Void] {
    var ready: [@Sendable () -> Void] = []
    for (id, waiter) in waiting where waiter.isReady(length: length, caughtUp: caughtUp) {
      ready.append(waiter.callback)
      waiting[id] = nil
    }
    return ready
  }

  /// Removes and returns every callback (the feed shuts down).
  mutating func removeAll() -> [@Sendable () -> Void] {
    defer { waiting.removeAll() }
    return waiting.values.map(\.callback)
  }
}
