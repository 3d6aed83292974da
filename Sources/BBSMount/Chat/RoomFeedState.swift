import Foundation
import Logging
import NinePClient
import NinePProtocol

/// Everything a ``RoomFeed`` keeps, as a value: each event of the feed's life (a reader
/// opening, a session placed, a reply) is a transition that returns the ``Action``s to run,
/// which ``RoomFeed`` runs outside its lock, in order.
///
/// The server-side read goes through the ``Phase``s stopped → placing → opening → reading ⇄
/// pausing, and to retrying after a failure. Every run of the feed (from the first reader's
/// open to the last reader's close) has a new `generation`: a reply, placement or timer of an
/// earlier run finds the generation moved on and starts nothing.
struct RoomFeedState {
  /// Where the server-side read is.
  enum Phase {
    /// No reader (or a local stream): nothing is asked of the server.
    case stopped
    /// Waiting for the provider's stream session.
    case placing
    /// Walking to the room and opening it on `session`.
    case opening(Session)
    /// A read on the wire (or in the session's queue), `token` telling it from later ones;
    /// `handle` once `send` has returned it.
    case reading(Session, Fid, token: UInt64, handle: RequestHandle?)
    /// Between a reply and the next read (backing off after an instant empty reply).
    case pausing(Session, Fid)
    /// A request failed: dialling again after a pause.
    case retrying
  }

  /// One wait for the transcript (``RoomFeed/wait(beyond:_:)``, ``RoomFeed/whenCaughtUp(within:_:)``).
  struct Waiter {
    /// Wake when the transcript is longer than this; nil: once the feed is caught up.
    var beyond: UInt64?
    var callback: @Sendable () -> Void

    func isReady(length: UInt64, caughtUp: Bool) -> Bool {
      if let beyond { return length > beyond }
      return caughtUp
    }
  }

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
  /// The session the provider placed this feed on (holding one of its parking slots), kept
  /// through a retry until the next placement.
  private(set) var placedOn: Session?
  /// `placedOn` was placed quietly (no reader then).
  private var placedQuietly = false
  private(set) var backoff: Duration = .zero
  private var waiters: [UInt64: Waiter] = [:]
  private var nextWaiterID: UInt64 = 1
  /// Set for a while after a reconnect, to drop lines the transcript already has.
  private var dedupe: ReplayFilter?
  /// Second copies of this mount's own posts sent again after a lost link.
  private var repeats = RepeatFilter()
  /// Makes other users' control characters visible (nil with `-o rawtext`).
  private var controls: VisibleControls?
  /// Set once the server answered a caught-up read with nothing at once (a board that does
  /// not park reads). Such a board (Gen-1) keys every reader's place by its last writer, so
  /// a new author replays the whole ring: exact copies of recent lines are dropped.
  private(set) var echoes: EchoFilter?
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
    controls = rawText ? nil : VisibleControls()
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
  }

  private func isCurrent(_ generation: UInt64) -> Bool { generation == self.generation }

  // MARK: Waiters

  /// Registers `waiter`; nil (and nothing kept) when it is ready now.
  mutating func add(_ waiter: Waiter) -> UInt64? {
    if waiter.isReady(length: transcript.length, caughtUp: caughtUp) { return nil }
    let id = nextWaiterID
    nextWaiterID += 1
    waiters[id] = waiter
    return id
  }

  /// Forgets waiter `id`, returning it if it had not run.
  mutating func removeWaiter(_ id: UInt64) -> Waiter? {
    waiters.removeValue(forKey: id)
  }

  /// Removes and returns the callbacks of the waiters now ready.
  private mutating func readyWaiters() -> [@Sendable () -> Void] {
    let length = transcript.length
    var ready: [@Sendable () -> Void] = []
    for (id, waiter) in waiters where waiter.isReady(length: length, caughtUp: caughtUp) {
      ready.append(waiter.callback)
      waiters[id] = nil
    }
    return ready
  }

  // MARK: Readers coming and going

  /// A reader (or, `watching`, the watcher) opened the room: the first starts a run. The
  /// first reader of a room watched so far moves it off the session ordinary requests use.
  mutating func retain(watching: Bool = false) -> [Action] {
    users += 1
    if watching { watchers += 1 }
    guard users == 1, case .stopped = phase, !isLocal else {
      guard !watching, readers == 1, placedQuietly, let placedOn else { return [] }
      return [.leaveIfShared(placedOn)]
    }
    generation += 1
    // A new run polls at once: an old backoff would miss lines a board's ring drops.
    backoff = .zero
    // What the server kept for us while stopped is still to come.
    caughtUp = false
    phase = .placing
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
    let all = waiters.values.map(\.callback)
    waiters.removeAll()
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
    case .reading(let session, let fid, _, let handle):
      if let handle { actions.append(.cancel(session, handle)) }
      actions.append(.clunk(session, fid))
    case .pausing(let session, let fid):
      actions.append(.clunk(session, fid))
    case .stopped, .placing, .opening, .retrying:
      break
    }
    if let placedOn { actions.append(.releaseStream(placedOn, quiet: placedQuietly)) }
    placedOn = nil
    phase = .stopped
    return actions
  }

  /// A stream session opened after a reconnect's comeback window, while this run reads on
  /// `crowded` (the primary, where it went meanwhile): it starts again, placed anew. Its read
  /// there is flushed (a reply already on its way still counts, see ``received``) and the
  /// board's read position for us is where the new run goes on, so nothing is lost.
  mutating func move(off crowded: Session) -> [Action] {
    guard users > 0, placedOn === crowded else { return [] }
    switch phase {
    case .reading, .pausing: break
    case .stopped, .placing, .opening, .retrying: return []
    }
    let wasCaughtUp = caughtUp
    var actions = stop()
    caughtUp = wasCaughtUp
    backoff = .zero
    phase = .placing
    actions.append(.log(.debug, "room feed \(room): moving to a stream session"))
    actions.append(placing())
    return actions
  }

  // MARK: Placing and opening

  /// The provider placed the feed on `session` (a parking slot reserved there), `quiet` as
  /// it was asked.
  mutating func placed(_ session: Session, quiet: Bool = false, generation: UInt64) -> [Action] {
    // A run that stopped meanwhile gives back only the slot placed for it: `placedOn` is
    // the current run's (stopping gave the old run's back).
    guard isCurrent(generation) else { return [.releaseStream(session, quiet: quiet)] }
    // The slot of this run's earlier placement (before a retry) goes back.
    let previous = placedOn.map { [Action.releaseStream($0, quiet: placedQuietly)] } ?? []
    placedOn = session
    placedQuietly = quiet
    phase = .opening(session)
    return previous + [.open(session, generation: generation)]
  }

  /// The room is open on `fid`.
  mutating func opened(_ session: Session, fid: Fid, generation: UInt64) -> [Action] {
    guard isCurrent(generation) else { return [.clunk(session, fid)] }
    if transcript.length > 0 && lostRead {
      // Reading again after a loss: the server may replay lines we have (a restarted
      // server's backlog, a post the outbox sent twice). Remember what we have.
      dedupe = ReplayFilter(lines: transcript.lastLines(ReplayFilter.window))
    }
    lostRead = false
    phase = .pausing(session, fid)
    return [
      .log(.debug, "room feed \(room) reading on session \(ObjectIdentifier(session).hashValue)"),
      .read(session, fid, generation: generation),
      // A reader came while it was being placed quietly.
    ] + (placedQuietly && readers > 0 ? [.leaveIfShared(session)] : [])
  }

  /// Placing, opening or reading failed: dial again after a pause that grows with failures.
  mutating func failed(_ error: NinePError, generation: UInt64) -> [Action] {
    guard isCurrent(generation) else { return [] }
    lostRead = true
    backoff = min(max(backoff * 2, .milliseconds(100)), RoomFeed.maximumRetry)
    phase = .retrying
    return [
      .log(.warning, "room feed \(room): \(error); retrying in \(backoff)"),
      .retry(after: backoff, generation: generation),
    ]
  }

  /// The pause after a failure is over.
  mutating func retryDue(generation: UInt64) -> [Action] {
    guard isCurrent(generation), case .retrying = phase else { return [] }
    phase = .placing
    return [placing()]
  }

  // MARK: Reading

  /// A read is about to go out on `fid`: its offset and token, or nil when the run is over.
  mutating func beginRead(
    _ session: Session, _ fid: Fid, generation: UInt64
  ) -> (offset: UInt64, token: UInt64)? {
    guard isCurrent(generation) else { return nil }
    lastToken += 1
    phase = .reading(session, fid, token: lastToken, handle: nil)
    return (transcript.length, lastToken)
  }

  /// `send` returned `handle` for read `token`: whether to watch it for parking.
  mutating func sent(_ handle: RequestHandle, token: UInt64) -> Bool {
    guard case .reading(let session, let fid, token, .none) = phase else { return false }
    phase = .reading(session, fid, token: token, handle: handle)
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
    dedupe = nil
    return [
      .log(.debug, "room feed \(room): caught up (a read unanswered for \(wait))"),
      .learnedParking(parks: true),
      .wake(readyWaiters()),
    ]
  }

  /// Read `token` was answered (data, flushed or failed): it is no longer on the wire.
  private mutating func answered(_ token: UInt64) {
    guard case .reading(let session, let fid, token, _) = phase else { return }
    phase = .pausing(session, fid)
  }

  /// Read `token` was flushed (its slot went to another room) or cancelled: read again.
  mutating func readFlushed(
    _ session: Session, _ fid: Fid, token: UInt64, generation: UInt64
  ) -> [Action] {
    answered(token)
    return [.read(session, fid, generation: generation)]
  }

  /// Read `token` failed: the fid is given up and the feed dials again.
  mutating func readFailed(
    _ error: NinePError, _ session: Session, _ fid: Fid, token: UInt64, generation: UInt64
  ) -> [Action] {
    answered(token)
    return [.clunkUnlessClosed(session, fid)] + failed(error, generation: generation)
  }

  /// Read `token` (of `count` bytes, answered after `elapsed`) brought `data`.
  mutating func received(
    _ data: [UInt8], count: Int, elapsed: Duration, _ session: Session, _ fid: Fid,
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
    if data.isEmpty && elapsed < RoomFeed.instantReply && echoes == nil {
      echoes = EchoFilter(lines: transcript.lastLines(EchoFilter.window))
      actions.append(
        .log(.debug, "room feed \(room): the server answers caught-up reads at once; polling"))
      // Before the readers are woken: what they read next may start watching (Awareness/).
      actions.append(.learnedParking(parks: false))
    }
    let shown = filtered(data, logging: &actions)
    // The backlog is over: what comes next is new, whatever it says.
    if caughtUpNow { dedupe = nil }
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

  /// `data` made visible and less what the filters drop (each drop logged into `actions`).
  private mutating func filtered(_ data: [UInt8], logging actions: inout [Action]) -> [UInt8] {
    var data = data
    // Visible first: the filters compare lines with the transcript's, which are visible.
    if var visible = controls {
      data = visible.escape(data)
      controls = visible
    }
    data = drop(data, through: &echoes, "bytes the board sent again", logging: &actions)
    data = drop(data, through: &dedupe, "replayed bytes", logging: &actions)
    if !repeats.isEmpty {
      let before = data.count
      data = repeats.filter(data)
      if data.count < before {
        actions.append(
          .log(.info, "room feed \(room): dropped the second copy of a post sent again"))
      }
    }
    return data
  }

  /// `data` less what `filter` (if any) drops, logged as `what`.
  private func drop<Filter: LineFilter>(
    _ data: [UInt8], through filter: inout Filter?, _ what: String,
    logging actions: inout [Action]
  ) -> [UInt8] {
    guard let kept = filter?.filter(data) else { return data }
    if kept.count != data.count {
      actions.append(.log(.info, "room feed \(room): dropped \(data.count - kept.count) \(what)"))
    }
    return kept
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
    var shown = text
    if var visible = controls { shown = visible.escape(text) }
    repeats.expect(shown, recent: transcript.lastLines(RepeatFilter.recent))
  }
}
