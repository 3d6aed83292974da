import Foundation
import Logging
import NinePClient
import NinePProtocol

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
final class RoomFeed: @unchecked Sendable {
  let room: String
  let path: [String]
  private let pool: Pool
  private let logger: Logger
  private let lock = NSLock()
  private var transcript = Transcript()
  private var waiters: [UInt64: Waiter] = [:]
  private var nextWaiterID: UInt64 = 1
  private var users = 0
  private var generation: UInt64 = 0
  private var active: (session: Session, fid: Fid)?
  private var inFlight: (session: Session, handle: RequestHandle)?
  /// Identifies the read on the wire, so a reply that beats `send`'s return is not mistaken
  /// for a newer read.
  private var readToken: UInt64 = 0
  /// The session the pool placed this feed on (holding one of its stream reservations).
  private var placedOn: Session?
  private var backoff: Duration = .zero
  /// Set for a while after a reconnect, to drop lines the transcript already has.
  private var dedupe: ReplayFilter?
  /// Second copies of this mount's own posts sent again after a lost link.
  private var repeats = RepeatFilter()
  /// Makes other users' control characters visible (nil with `-o rawtext`).
  private var controls: VisibleControls?
  /// Set once the server answered a caught-up read with nothing at once (a board that does
  /// not park reads). Such a board (Gen-1) keys every reader's place by its last writer, so
  /// a new author replays the whole ring: exact copies of recent lines are dropped.
  private var echoes: EchoFilter?
  /// A read failed since the last one that worked: the next may replay what we have (a
  /// restarted server's backlog, a post the outbox sends again). Stopping and starting again
  /// as readers come and go replays nothing: the server keeps the user's place.
  private var lostRead = false
  /// This run of the feed has read everything the server had for the user (see the type's
  /// comment). False while stopped: the server may be keeping lines for us.
  private var caughtUp = false
  /// Called (outside the lock) whenever the transcript grows: poll wake-ups.
  var onGrowth: (@Sendable () -> Void)?
  /// Called (outside the lock, in order) with what the server's reads added: the watcher's
  /// unread counts, mentions and events (see Awareness/).
  var onLines: (@Sendable ([UInt8]) -> Void)?
  /// Called when an open showed the room without the end of the server's backlog.
  var onBacklogIncomplete: (@Sendable () -> Void)?
  /// A mount-local stream (`chat/events`, `chat/mentions`): never read from the server,
  /// always caught up, grown by ``appendLocal(_:)``.
  private let isLocal: Bool

  private struct Waiter {
    /// Wake when the transcript is longer than this; nil: once the feed is caught up.
    var beyond: UInt64?
    var callback: @Sendable () -> Void

    func isReady(length: UInt64, caughtUp: Bool) -> Bool {
      if let beyond { return length > beyond }
      return caughtUp
    }
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
  /// The shortest a read stays unanswered before it counts as parked (caught up).
  /// A reply this much shorter than its count had room for one more line (the longest is
  /// about 300 bytes).
  static let longestLine = 512
  static let minimumParkedAfter: Duration = .milliseconds(150)

  /// How long a read stays unanswered before it counts as parked: a reply with the backlog
  /// comes within a few round trips of the link (slow on a device link), a parked one never.
  static func parkedAfter(roundTrip: Duration) -> Duration {
    max(minimumParkedAfter, roundTrip * 4)
  }

  /// Lines kept on disk between mounts (nil: this mount keeps none).
  private let history: RoomHistory?

  init(
    room: String, path: [String], pool: Pool, history: RoomHistory? = nil,
    rawText: Bool = false, logger: Logger
  ) {
    self.room = room
    self.path = path
    self.pool = pool
    self.history = history
    self.logger = logger
    isLocal = false
    controls = rawText ? nil : VisibleControls()
    if let history {
      let (loaded, modified) = history.load()
      // Kept by a mount that may have had `rawtext`: made visible like what comes in.
      var visible = VisibleControls()
      let kept = rawText ? loaded : visible.escape(loaded) + visible.finish()
      if !kept.isEmpty {
        // The last mount's lines: the room opens at once with them, and the server, which
        // may have restarted since, could send some of them again.
        transcript.append(kept, at: modified)
        lostRead = true
        logger.debug("room feed \(room): \(kept.count) bytes of history from \(history.path)")
      }
    }
  }

  /// A mount-local stream's feed (see ``isLocal``), keeping at most `localCapacity` bytes.
  init(room: String, path: [String], pool: Pool, localCapacity: Int, logger: Logger) {
    self.room = room
    self.path = path
    self.pool = pool
    self.logger = logger
    history = nil
    isLocal = true
    caughtUp = true
    transcript = Transcript(capacity: localCapacity)
  }

  /// Adds `data` to a local stream and wakes its readers.
  func appendLocal(_ data: [UInt8]) {
    guard isLocal, !data.isEmpty else { return }
    lock.lock()
    transcript.append(data)
    let ready = readyWaitersLocked()
    let growth = onGrowth
    lock.unlock()
    for callback in ready { callback() }
    growth?()
  }

  // MARK: What readers see

  var length: UInt64 {
    lock.lock()
    defer { lock.unlock() }
    return transcript.length
  }

  var modified: Date {
    lock.lock()
    defer { lock.unlock() }
    return transcript.modified
  }

  var status: (readers: Int, lines: Int, lastMessage: Date) {
    lock.lock()
    defer { lock.unlock() }
    return (users, transcript.lineCount, transcript.modified)
  }

  func read(at offset: UInt64, count: Int) -> [UInt8] {
    lock.lock()
    defer { lock.unlock() }
    return transcript.read(at: offset, count: count)
  }

  /// The offsets the transcript still keeps: from its oldest kept byte to its length.
  var extent: Range<UInt64> {
    lock.withLock { transcript.base..<transcript.length }
  }

  /// Up to `count` bytes from `offset`, none at or past `end`; nil when the transcript no
  /// longer keeps the bytes at `offset` (dropped past its capacity).
  func read(at offset: UInt64, count: Int, before end: UInt64) -> [UInt8]? {
    lock.withLock {
      guard offset >= transcript.base else { return nil }
      guard offset < end else { return [] }
      return transcript.read(at: offset, count: Int(min(UInt64(max(0, count)), end - offset)))
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
    add(Waiter(beyond: offset, callback: callback))
  }

  /// Calls `callback` once this run of the feed has read what the server kept for the user
  /// (at once if it has), or after `limit` (logged) if the server has not said so by then.
  /// Returns an id for ``cancelWait(_:)``, or nil if it called back already.
  func whenCaughtUp(
    within limit: Duration, _ callback: @escaping @Sendable () -> Void
  ) -> UInt64? {
    guard let id = add(Waiter(beyond: nil, callback: callback)) else { return nil }
    DispatchQueue.global().asyncAfter(deadline: .now() + limit.timeInterval) { [self] in
      guard let waiter = lock.withLock({ waiters.removeValue(forKey: id) }) else { return }
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
    lock.withLock { echoes != nil }
  }

  /// Whether this run of the feed has read what the server kept for the user.
  var isCaughtUp: Bool {
    lock.withLock { caughtUp }
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
  private func add(_ waiter: Waiter) -> UInt64? {
    lock.lock()
    if waiter.isReady(length: transcript.length, caughtUp: caughtUp) {
      lock.unlock()
      waiter.callback()
      return nil
    }
    let id = nextWaiterID
    nextWaiterID += 1
    waiters[id] = waiter
    lock.unlock()
    return id
  }

  /// Removes and returns the callbacks of the waiters now ready. Lock held.
  private func readyWaitersLocked() -> [@Sendable () -> Void] {
    let length = transcript.length
    var ready: [@Sendable () -> Void] = []
    for (id, waiter) in waiters where waiter.isReady(length: length, caughtUp: caughtUp) {
      ready.append(waiter.callback)
      waiters[id] = nil
    }
    return ready
  }

  /// Forgets a waiter (its reader was interrupted). Returns false if it already ran.
  @discardableResult
  func cancelWait(_ id: UInt64) -> Bool {
    lock.lock()
    defer { lock.unlock() }
    return waiters.removeValue(forKey: id) != nil
  }

  // MARK: Life cycle

  /// A reader opened the room: the feed runs while anyone has it open.
  func retain() {
    lock.lock()
    users += 1
    let start = users == 1 && active == nil && inFlight == nil && !isLocal
    if start {
      generation += 1
      // A new run polls at once: an old backoff would miss lines a board's ring drops.
      backoff = .zero
      // What the server kept for us while stopped is still to come.
      caughtUp = false
    }
    let current = generation
    lock.unlock()
    if start { connect(generation: current) }
  }

  /// A reader closed the room; the last one stops the server-side read.
  func release() {
    lock.lock()
    users = max(0, users - 1)
    guard users == 0 else {
      lock.unlock()
      return
    }
    let stopped = stopLocked()
    lock.unlock()
    stopped.finish(releasingOn: pool)
  }

  /// Stops for good (unmount): wakes every waiter so replies go out.
  func shutdown() {
    lock.lock()
    users = 0
    let stopped = stopLocked()
    let all = waiters.values
    waiters.removeAll()
    lock.unlock()
    stopped.finish(releasingOn: pool)
    for waiter in all { waiter.callback() }
    history?.flush()
  }

  /// The server-side read being stopped: what to cancel, clunk and give back.
  private struct StoppedRead {
    var reading: (session: Session, handle: RequestHandle)?
    var opened: (session: Session, fid: Fid)?
    var placed: Session?

    /// Done outside the lock: the read is flushed, its fid clunked, its slot given back.
    func finish(releasingOn pool: Pool) {
      if let reading { reading.session.cancel(reading.handle) }
      if let opened { opened.session.clunk(opened.fid) }
      if let placed { pool.releaseStream(on: placed) }
    }
  }

  /// Moves to a new generation, so replies still on their way start nothing. Lock held.
  private func stopLocked() -> StoppedRead {
    generation += 1
    // Stopped, the transcript falls behind what the server keeps for us.
    caughtUp = isLocal
    defer {
      inFlight = nil
      active = nil
      placedOn = nil
    }
    return StoppedRead(reading: inFlight, opened: active, placed: placedOn)
  }

  // MARK: The server-side read loop

  private func isCurrent(_ generation: UInt64) -> Bool {
    lock.lock()
    defer { lock.unlock() }
    return generation == self.generation
  }

  private func connect(generation: UInt64) {
    pool.session(for: .stream) { [self] placed in
      guard case .success(let session) = placed else {
        if case .failure(let error) = placed { return failed(error, generation: generation) }
        return
      }
      // The pool reserved a parking slot for this feed on `session`; give it back when the
      // feed stops or moves.
      lock.lock()
      let previous = placedOn
      placedOn = session
      let current = generation == self.generation
      if !current { placedOn = nil }
      lock.unlock()
      if let previous { pool.releaseStream(on: previous) }
      guard current else { return pool.releaseStream(on: session) }
      session.walkOpen(path, mode: .read) { [self] opened in
        guard case .success(let file) = opened else {
          if case .failure(let error) = opened { failed(error, generation: generation) }
          return
        }
        lock.lock()
        guard generation == self.generation else {
          lock.unlock()
          session.clunk(file.fid)
          return
        }
        active = (session, file.fid)
        if transcript.length > 0 && lostRead {
          // Reading again after a loss: the server may replay lines we have (a restarted
          // server's backlog, a post the outbox sent twice). Remember what we have.
          dedupe = ReplayFilter(lines: transcript.lastLines(ReplayFilter.window))
        }
        lostRead = false
        lock.unlock()
        logger.debug(
          "room feed \(room) reading on session \(ObjectIdentifier(session).hashValue)")
        readNext(session: session, fid: file.fid, generation: generation)
      }
    }
  }

  private func readNext(session: Session, fid: Fid, generation: UInt64) {
    let started = ContinuousClock.now
    // Chat lines can be ~300 bytes and a line longer than the count is never delivered.
    let count = min(session.maxReadCount, 8192)
    lock.lock()
    guard generation == self.generation else {
      lock.unlock()
      return
    }
    let offset = transcript.length
    readToken += 1
    let token = readToken
    lock.unlock()
    let handle = session.read(fid, offset: offset, count: count, mayPark: true) { [self] result in
      lock.lock()
      if readToken == token { readToken += 1 }
      lock.unlock()
      let elapsed = started.duration(to: .now)
      switch result {
      case .success(let data):
        received(
          Array(data), count: Int(count), elapsed: elapsed, session: session, fid: fid,
          generation: generation)
      case .failure(.flushed), .failure(.cancelled):
        // Released or shut down (the generation moved on), or gave up its turn: queue again.
        readNext(session: session, fid: fid, generation: generation)
      case .failure(let error):
        lock.lock()
        if generation == self.generation {
          active = nil
          inFlight = nil
        }
        lock.unlock()
        if session.closedReason == nil { session.clunk(fid) }
        failed(error, generation: generation)
      }
    }
    lock.lock()
    if generation == self.generation && readToken == token { inFlight = (session, handle) }
    let watch = !caughtUp
    lock.unlock()
    if watch { watchForPark(handle, token: token, session: session, generation: generation) }
  }

  /// Counts the feed caught up if the read `token` is still unanswered, though sent, after
  /// ``parkedAfter(roundTrip:)``: the server parked it, it has nothing more for us.
  private func watchForPark(
    _ handle: RequestHandle, token: UInt64, session: Session, generation: UInt64
  ) {
    let wait = Self.parkedAfter(roundTrip: session.statistics.roundTrip)
    DispatchQueue.global().asyncAfter(deadline: .now() + wait.timeInterval) { [self] in
      let watching = lock.withLock {
        generation == self.generation && readToken == token && !caughtUp
      }
      guard watching else { return }
      // Still queued behind the wire discipline (a device link's busy rule): not parked yet.
      if session.isQueued(handle) {
        return watchForPark(handle, token: token, session: session, generation: generation)
      }
      noticeParked(token: token, generation: generation, after: wait)
    }
  }

  /// Watches for a second copy of `text` (a post of this mount sent again because the link
  /// died under its first send): the room shows it once.
  func expectRepeat(of text: [UInt8]) {
    lock.lock()
    defer { lock.unlock() }
    var shown = text
    if var visible = controls { shown = visible.escape(text) }
    repeats.expect(shown, recent: transcript.lastLines(RepeatFilter.recent))
  }

  private func noticeParked(token: UInt64, generation: UInt64, after wait: Duration) {
    lock.lock()
    guard generation == self.generation, readToken == token, !caughtUp else {
      return lock.unlock()
    }
    caughtUp = true
    dedupe = nil
    let ready = readyWaitersLocked()
    lock.unlock()
    logger.debug("room feed \(room): caught up (a read unanswered for \(wait))")
    for callback in ready { callback() }
  }

  private func received(
    _ data: [UInt8], count: Int, elapsed: Duration, session: Session, fid: Fid,
    generation: UInt64
  ) {
    lock.lock()
    let current = generation == self.generation
    guard current || !data.isEmpty else {
      lock.unlock()
      return
    }
    // A reply to a read the last reader's close was flushing still counts: the server moved
    // this user's place past these lines, so they will never come again.
    if current { inFlight = nil }
    // A reply with room for another line (or none at all): the server had nothing more.
    let caughtUpNow = current && data.count + Self.longestLine <= count && !caughtUp
    if caughtUpNow { caughtUp = true }
    var data = data
    if data.isEmpty && elapsed < Self.instantReply && echoes == nil {
      echoes = EchoFilter(lines: transcript.lastLines(EchoFilter.window))
      logger.debug("room feed \(room): the server answers caught-up reads at once; polling")
    }
    // Visible first: the filters compare lines with the transcript's, which are visible.
    if var visible = controls {
      data = visible.escape(data)
      controls = visible
    }
    data = drop(data, through: &echoes, "bytes the board sent again")
    data = drop(data, through: &dedupe, "replayed bytes")
    if !repeats.isEmpty {
      let before = data.count
      data = repeats.filter(data)
      if data.count < before {
        logger.info("room feed \(room): dropped the second copy of a post sent again")
      }
    }
    // The backlog is over: what comes next is new, whatever it says.
    if caughtUpNow { dedupe = nil }
    transcript.append(data)
    let ready = readyWaitersLocked()
    if data.isEmpty && elapsed < Self.instantReply {
      backoff = backoff == .zero ? Self.minimumBackoff : min(backoff * 2, Self.maximumIdlePoll)
    } else {
      backoff = .zero
    }
    let delay = backoff
    let growth = data.isEmpty ? nil : onGrowth
    let lines = data.isEmpty ? nil : onLines
    lock.unlock()
    if caughtUpNow {
      logger.debug("room feed \(room): caught up (\(data.count) bytes of \(count))")
    }
    // The next read goes out first, so the server has it parked by the next post; then the
    // waiting readers are answered, several at a time when there are many.
    if !current {
      // Stopped: no next read.
    } else if delay == .zero {
      readNext(session: session, fid: fid, generation: generation)
    } else {
      DispatchQueue.global().asyncAfter(deadline: .now() + delay.timeInterval) { [self] in
        readNext(session: session, fid: fid, generation: generation)
      }
    }
    // Before the readers: a reader that reads the new lines to the end resets the room's
    // unread count after they were counted.
    lines?(data)
    if ready.count > 4 {
      let callbacks = ready
      DispatchQueue.concurrentPerform(iterations: callbacks.count) { callbacks[$0]() }
    } else {
      for callback in ready { callback() }
    }
    growth?()
    // After the readers: one read is in flight per feed, so appends keep their order.
    history?.append(data)
  }

  /// `data` less what `filter` (if any) drops, logged as `what`.
  private func drop<Filter: LineFilter>(
    _ data: [UInt8], through filter: inout Filter?, _ what: String
  ) -> [UInt8] {
    guard let kept = filter?.filter(data) else { return data }
    if kept.count != data.count {
      logger.info("room feed \(room): dropped \(data.count - kept.count) \(what)")
    }
    return kept
  }

  private func failed(_ error: NinePError, generation: UInt64) {
    lock.lock()
    guard generation == self.generation else {
      lock.unlock()
      return
    }
    lostRead = true
    backoff = min(max(backoff * 2, .milliseconds(100)), Self.maximumRetry)
    let delay = backoff
    lock.unlock()
    logger.warning("room feed \(room): \(error); retrying in \(delay)")
    DispatchQueue.global().asyncAfter(deadline: .now() + delay.timeInterval) { [self] in
      if isCurrent(generation) { connect(generation: generation) }
    }
  }
}
