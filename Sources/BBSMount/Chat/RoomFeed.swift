import Foundation
import Logging
import NinePClient
import NinePProtocol
import Synchronization

/// One server-side reader per chat room, fanned out to every local reader.
///
/// A 9BBS room ignores the 9P offset and keeps one read position per user name, so two local
/// readers reading the server directly would steal lines from each other. The feed reads the
/// room on a stream session of the pool (so ordinary requests never queue behind its parked
/// read), appends what arrives to the room's ``Transcript`` and wakes readers waiting at the
/// end. A 0-byte Rread is never end-of-file: it means "nothing yet", "cancelled" or "no
/// parking slot"; when such replies come back at once the feed backs off instead of spinning.
/// When more feeds share a session than it has parking slots, the reads beyond the slots wait
/// in the session's queue; the session rotates the slots (see
/// ``SessionConfiguration/parkingTurn``) and a feed whose read was flushed reads again.
///
/// Catching up. The transcript a stopped feed keeps (and the history a remount starts with)
/// is stale: the server has kept what was said since for this user. So each run of the feed
/// starts not caught up, and is caught up once the server has nothing more to send: a read
/// comes back with room to spare (a board sends every unread line that fits the count, so a
/// reply with room for one more line had them all), empty (a board that answers at once) or
/// stays unanswered past ``parkedAfter(roundTrip:)`` (a board that parks caught-up reads).
/// Lines said after that are live, not backlog: an open in a busy room does not wait for a
/// quiet moment. Opens wait for that
/// (``whenCaughtUp(within:_:)``), bounded, so what they show is what the server has now.
///
/// The feed's state and its transitions are ``RoomFeedState``; this class runs the actions
/// they return (requests on the session, timers, wake-ups) outside its lock. Sessions come
/// from a ``StreamSessions`` provider: the pool in the mount.
final class RoomFeed: Sendable {
  /// The feed's state, placing reads on the pool's sessions.
  typealias FeedState = RoomFeedState<Session>

  let room: String
  let path: [String]
  private let sessions: any StreamSessions
  private let logger: Logger
  private let state: Mutex<FeedState>
  private let callbacks = Mutex(Callbacks())

  /// What the feed tells the rest of the mount, set once after it is made (see ``RoomFeeds``).
  private struct Callbacks {
    var onLines: (@Sendable (_ lines: [UInt8], _ end: UInt64) -> Void)?
    var onBacklogIncomplete: (@Sendable () -> Void)?
    var onParking: (@Sendable (_ parks: Bool) -> Void)?
  }

  /// Called (outside the lock, in order) with what the server's reads added and the
  /// transcript offset they end at: the watcher's unread counts, mentions and events (see
  /// Awareness/). Readers may have read them already: they are in the transcript first.
  var onLines: (@Sendable (_ lines: [UInt8], _ end: UInt64) -> Void)? {
    get { callbacks.withLock { $0.onLines } }
    set { callbacks.withLock { $0.onLines = newValue } }
  }
  /// Called when a read shows how the board answers caught-up reads: it parks them, or
  /// (false) answers at once.
  var onParking: (@Sendable (_ parks: Bool) -> Void)? {
    get { callbacks.withLock { $0.onParking } }
    set { callbacks.withLock { $0.onParking = newValue } }
  }
  /// Called when an open showed the room without the end of the server's backlog.
  var onBacklogIncomplete: (@Sendable () -> Void)? {
    get { callbacks.withLock { $0.onBacklogIncomplete } }
    set { callbacks.withLock { $0.onBacklogIncomplete = newValue } }
  }

  /// First pause after an instant empty reply; doubles while the room stays idle.
  static let minimumBackoff: Duration = .milliseconds(25)
  /// The longest pause between polls of an idle room on a board that does not park reads:
  /// about three requests a second keep radio use low and still catch a 49-line ring filling
  /// up on a board that takes ~10 ms a request.
  static let maximumIdlePoll: Duration = .milliseconds(300)
  /// The longest wait before dialling again after a failure.
  static let maximumRetry: Duration = .seconds(2)
  /// A reply faster than this that carries nothing counts as "instant" and backs off.
  static let instantReply: Duration = .milliseconds(20)
  /// How long an open waits for the server's backlog before it shows what the mount has
  /// (a slow or dead link).
  static let catchUpWait: Duration = .milliseconds(1500)
  /// A reply this much shorter than its count had room for one more line (the longest is
  /// about 300 bytes).
  static let longestLine = 512
  /// The shortest a read stays unanswered before it counts as parked (caught up).
  static let minimumParkedAfter: Duration = .milliseconds(150)

  /// How long a read stays unanswered before it counts as parked: a reply with the backlog
  /// comes within a few round trips of the link (slow on a device link), a parked one never.
  static func parkedAfter(roundTrip: Duration) -> Duration {
    max(minimumParkedAfter, roundTrip * 4)
  }

  /// Lines kept on disk between mounts (nil: this mount keeps none).
  private let history: RoomHistory?

  init(
    room: String, path: [String], sessions: any StreamSessions, history: RoomHistory? = nil,
    rawText: Bool = false, logger: Logger
  ) {
    self.room = room
    self.path = path
    self.sessions = sessions
    self.history = history
    self.logger = logger
    var kept: (bytes: [UInt8], modified: Date)?
    if let history {
      let (loaded, modified) = history.load()
      // Kept by a mount that may have had `rawtext`: made visible like what comes in.
      var visible = VisibleControls()
      kept = (rawText ? loaded : visible.escape(loaded) + visible.finish(), modified)
      if let count = kept?.bytes.count, count > 0 {
        logger.debug("room feed \(room): \(count) bytes of history from \(history.path)")
      }
    }
    state = Mutex(FeedState(room: room, rawText: rawText, history: kept))
  }

  /// A mount-local stream's feed (never read from the server, always caught up, grown by
  /// ``appendLocal(_:)``), keeping at most `localCapacity` bytes.
  init(
    room: String, path: [String], pool: any StreamSessions, localCapacity: Int, logger: Logger
  ) {
    self.room = room
    self.path = path
    sessions = pool
    self.logger = logger
    history = nil
    state = Mutex(FeedState(localStream: room, capacity: localCapacity))
  }

  /// Adds `data` to a local stream and wakes its readers.
  func appendLocal(_ data: [UInt8]) {
    guard !data.isEmpty else { return }
    let (local, ready) = state.withLock { ($0.isLocal, $0.appendLocal(data)) }
    guard local else { return }
    for callback in ready { callback() }
    notifyPollers()
  }

  // MARK: Readers in poll(2)

  /// The readers to tell when the transcript grows (those that called poll(2)), by reader:
  /// the room's own index, so a growth wakes only its readers.
  private let pollers = Mutex<[ObjectIdentifier: @Sendable () -> Void]>([:])

  /// Calls `notify` (outside the lock) whenever the transcript grows, until
  /// ``stopNotifying(_:)`` with the same `reader`.
  func notifyOnGrowth(_ reader: AnyObject, _ notify: @escaping @Sendable () -> Void) {
    pollers.withLock { $0[ObjectIdentifier(reader)] = notify }
  }

  func stopNotifying(_ reader: AnyObject) {
    _ = pollers.withLock { $0.removeValue(forKey: ObjectIdentifier(reader)) }
  }

  private func notifyPollers() {
    for notify in pollers.withLock({ Array($0.values) }) { notify() }
  }

  // MARK: What readers see

  var length: UInt64 {
    state.withLock { $0.transcript.length }
  }

  var modified: Date {
    state.withLock { $0.transcript.modified }
  }

  /// Readers (the watcher not counted), whether it is watched, lines, the last line's time.
  var status: (readers: Int, watched: Bool, lines: Int, lastMessage: Date) {
    state.withLock {
      ($0.readers, $0.watchers > 0, $0.transcript.lineCount, $0.transcript.modified)
    }
  }

  func read(at offset: UInt64, count: Int) -> [UInt8] {
    state.withLock { $0.transcript.read(at: offset, count: count) }
  }

  /// The offsets the transcript still keeps: from its oldest kept byte to its length.
  var extent: Range<UInt64> {
    state.withLock { $0.transcript.base..<$0.transcript.length }
  }

  /// Up to `count` bytes from `offset`, none at or past `end`; nil when the transcript no
  /// longer keeps the bytes at `offset` (dropped past its capacity).
  func read(at offset: UInt64, count: Int, before end: UInt64) -> [UInt8]? {
    state.withLock {
      guard offset >= $0.transcript.base else { return nil }
      guard offset < end else { return [] }
      return $0.transcript.read(at: offset, count: Int(min(UInt64(max(0, count)), end - offset)))
    }
  }

  /// Calls `callback` once the transcript is longer than `offset` (at once if it already is).
  /// Returns an id for ``cancelWait(_:)``, or nil if it called back already.
  ///
  /// `wait(beyond: 0)` is how a room opens: not before it has a line, so `st_size` is never a
  /// 0 that GNU tail would read to an end that never comes. An empty reply (a board answering
  /// at once, a parked read flushed to give its slot to another room) says nothing about the
  /// room, so it does not count.
  func wait(beyond offset: UInt64, _ callback: @escaping @Sendable () -> Void) -> UInt64? {
    add(FeedState.Waiter(beyond: offset, callback: callback))
  }

  /// Calls `callback` once this run of the feed has read what the server kept for the user
  /// (at once if it has), or after `limit` (logged) if the server has not said so by then.
  /// Returns an id for ``cancelWait(_:)``, or nil if it called back already.
  func whenCaughtUp(
    within limit: Duration, _ callback: @escaping @Sendable () -> Void
  ) -> UInt64? {
    guard let id = add(FeedState.Waiter(beyond: nil, callback: callback)) else { return nil }
    DispatchQueue.global().asyncAfter(deadline: .now() + limit.timeInterval) { [self] in
      guard let waiter = state.withLock({ $0.removeWaiter(id) }) else { return }
      logger.notice(
        "room feed \(room): no end of the server's backlog within \(limit); showing what the mount has"
      )
      onBacklogIncomplete?()
      waiter.callback()
    }
    return id
  }

  /// Whether the server answers a caught-up read at once instead of parking it (a Gen-1
  /// board): following the room then means polling it (see ``maximumIdlePoll``).
  var answersAtOnce: Bool {
    state.withLock { $0.answersAtOnce }
  }

  /// Whether this run of the feed has read what the server kept for the user.
  var isCaughtUp: Bool {
    state.withLock { $0.caughtUp }
  }

  /// How long a run a `stat` started goes on after it caught up: `ls -l` then `tail`, or a
  /// `stat` in a loop, find the room current at once.
  static let statLinger: Duration = .seconds(3)

  /// For a `stat` of the room or an open of its log (chat/log): runs the feed (if no reader
  /// does) until it is caught up, then calls `callback`; the run goes on for ``statLinger``
  /// after that.
  func catchUpForStat(_ callback: @escaping @Sendable () -> Void) {
    retain()
    _ = whenCaughtUp(within: Self.catchUpWait) { [self] in
      callback()
      DispatchQueue.global().asyncAfter(deadline: .now() + Self.statLinger.timeInterval) {
        [self] in release()
      }
    }
  }

  /// Registers `waiter`, or calls it at once (returning nil) if it is ready.
  private func add(_ waiter: FeedState.Waiter) -> UInt64? {
    guard let id = state.withLock({ $0.add(waiter) }) else {
      waiter.callback()
      return nil
    }
    return id
  }

  /// Forgets a waiter (its reader was interrupted). Returns false if it already ran.
  @discardableResult
  func cancelWait(_ id: UInt64) -> Bool {
    state.withLock { $0.removeWaiter(id) != nil }
  }

  /// Watches for a second copy of `text` (a post of this mount sent again because the link
  /// died under its first send): the room shows it once.
  func expectRepeat(of text: [UInt8]) {
    state.withLock { $0.expectRepeat(of: text) }
  }

  // MARK: Life cycle

  /// A reader (or, `watching`, the ``RoomWatcher``) opened the room: the feed runs while
  /// anyone has it open.
  func retain(watching: Bool = false) {
    run(state.withLock { $0.retain(watching: watching) })
  }

  /// A reader (or the watcher) closed the room; the last one stops the server-side read.
  func release(watching: Bool = false) {
    run(state.withLock { $0.release(watching: watching) })
  }

  /// Places the feed again if it reads on `crowded` (see ``RoomFeedState/move(off:)``).
  func move(off crowded: Session) {
    run(state.withLock { $0.move(off: crowded) })
  }

  /// Stops for good (unmount): wakes every waiter so replies go out.
  func shutdown() {
    run(state.withLock { $0.shutdown() })
    history?.flush()
  }

  // MARK: Running the transitions' actions

  /// Runs `actions` in order (outside the lock: they send requests and call back).
  private func run(_ actions: [FeedState.Action]) {
    for action in actions {
      switch action {
      case .place(let generation, let quiet):
        place(generation: generation, quiet: quiet)
      case .leaveIfShared(let session):
        if sessions.carriesOrdinaryRequests(session) { move(off: session) }
      case .open(let session, let generation):
        open(on: session, generation: generation)
      case .read(let session, let fid, let generation):
        readNext(session: session, fid: fid, generation: generation)
      case .readLater(let session, let fid, let delay, let generation):
        DispatchQueue.global().asyncAfter(deadline: .now() + delay.timeInterval) { [self] in
          readNext(session: session, fid: fid, generation: generation)
        }
      case .retry(let delay, let generation):
        DispatchQueue.global().asyncAfter(deadline: .now() + delay.timeInterval) { [self] in
          run(state.withLock { $0.retryDue(generation: generation) })
        }
      case .cancel(let session, let handle):
        session.cancel(handle)
      case .clunk(let session, let fid):
        session.clunk(fid)
      case .clunkUnlessClosed(let session, let fid):
        if session.closedReason == nil { session.clunk(fid) }
      case .releaseStream(let session, let quiet):
        sessions.releaseStream(on: session, quiet: quiet)
      case .wake(let ready, let concurrently):
        if concurrently && ready.count > 4 {
          DispatchQueue.concurrentPerform(iterations: ready.count) { ready[$0]() }
        } else {
          for callback in ready { callback() }
        }
      case .observe(let data, let end):
        onLines?(data, end)
      case .grew(let data):
        notifyPollers()
        // After the readers: one read is in flight per feed, so appends keep their order.
        history?.append(data)
      case .log(let level, let message):
        logger.log(level: level, "\(message)")
      case .learnedParking(let parks):
        onParking?(parks)
      }
    }
  }

  private func place(generation: UInt64, quiet: Bool) {
    sessions.placeStream(quiet: quiet) { [self] placed in
      switch placed {
      case .success(let session):
        run(state.withLock { $0.placed(session, quiet: quiet, generation: generation) })
      case .failure(let error): run(state.withLock { $0.failed(error, generation: generation) })
      }
    }
  }

  private func open(on session: Session, generation: UInt64) {
    session.walkOpen(path, mode: .read) { [self] opened in
      switch opened {
      case .success(let file):
        run(state.withLock { $0.opened(session, fid: file.fid, generation: generation) })
      case .failure(let error):
        run(state.withLock { $0.failed(error, generation: generation) })
      }
    }
  }

  private func readNext(session: Session, fid: Fid, generation: UInt64) {
    let started = ContinuousClock.now
    // Chat lines can be ~300 bytes and a line longer than the count is never delivered.
    let count = min(session.maxReadCount, 8192)
    guard
      let (offset, token) = state.withLock({ $0.beginRead(session, fid, generation: generation) })
    else { return }
    let handle = session.read(fid, offset: offset, count: count, mayPark: true) { [self] result in
      let elapsed = started.duration(to: .now)
      let actions = state.withLock { state in
        switch result {
        case .success(let data):
          state.received(
            Array(data), count: Int(count), elapsed: elapsed, session, fid, token: token,
            generation: generation)
        case .failure(.flushed), .failure(.cancelled):
          // Released or shut down (the generation moved on), or gave up its turn: queue again.
          state.readFlushed(session, fid, token: token, generation: generation)
        case .failure(let error):
          state.readFailed(error, session, fid, token: token, generation: generation)
        }
      }
      run(actions)
    }
    if state.withLock({ $0.sent(handle, token: token) }) {
      watchForPark(handle, token: token, session: session)
    }
  }

  /// Counts the feed caught up if the read `token` is still unanswered, though sent, after
  /// ``parkedAfter(roundTrip:)``: the server parked it, it has nothing more for us.
  private func watchForPark(_ handle: RequestHandle, token: UInt64, session: Session) {
    let wait = Self.parkedAfter(roundTrip: session.statistics.roundTrip)
    DispatchQueue.global().asyncAfter(deadline: .now() + wait.timeInterval) { [self] in
      guard state.withLock({ $0.isWatching(token: token) }) else { return }
      // Still queued behind the wire discipline (a device link's busy rule): not parked yet.
      if session.isQueued(handle) { return watchForPark(handle, token: token, session: session) }
      run(state.withLock { $0.parked(token: token, after: wait) })
    }
  }
}
