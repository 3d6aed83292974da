// The rules that decide when a request may go on the wire, as a value with no locks, threads
// or I/O (in the manner of SwiftNIO's state machines). A ``Session`` owns one under its lock:
// it asks ``WireDiscipline/canSend(_:now:)`` before sending, reports what happened
// (``WireDiscipline/didSend(_:tag:now:roundTrip:)``, ``WireDiscipline/didReceiveReply(tag:)``…),
// and acts on the answers of ``WireDiscipline/nextWake(now:queued:queuedStreams:)`` and
// ``WireDiscipline/readToRotate(now:queuedStreams:)``. Tags, fids, timeouts and the queue stay
// with the session.
//
// Device rules (docs/board-facts.md §2, §3.2, §9.3–9.4): a 9p4z board serves one request at a time
// per channel and drops the channel when an SDU arrives while it is busy.
// - Busy: one non-parked request in flight at a time.
// - Grace: after a read that may park, nothing else goes for `parkGrace` (or three smoothed
//   round trips if longer), since the board gives no sign that the read has parked; only that
//   read's own reply ends the grace early. The board's one worker serves every channel in
//   turn, so with a ``BoardQueue`` the grace starts only once the requests that went out
//   before the read on the board's other sessions are done.
// - One read per fid: a second Tread on a fid would cancel the parked one.
// Both profiles:
// - Parked-read slots: at most `maxParkedReads` reads that may park in flight.
// - Rotation: while reads wait for a slot, the read parked longest gives its slot up (the
//   session flushes it) after `parkingTurn`, so a quiet room cannot keep one from a busy room.

import NinePProtocol

/// When a session may send: the device profile's busy rule, park grace and one read per fid,
/// and both profiles' parked-read slots and their rotation. Pure state; see the file comment.
struct WireDiscipline: Sendable {
  /// What the discipline needs to know about a request.
  struct Request: Sendable, Equatable {
    /// The read may park at the server (it takes a parked-read slot, not the busy channel).
    var mayPark: Bool
    /// The fid a Tread reads, or nil for any other message.
    var readFid: Fid?

    init(mayPark: Bool, readFid: Fid? = nil) {
      self.mayPark = mayPark
      self.readFid = readFid
    }

    init(_ message: Message, mayPark: Bool) {
      var readFid: Fid? = nil
      if case .tread(let fid, _, _) = message { readFid = fid }
      self.init(mayPark: mayPark, readFid: readFid)
    }
  }

  /// A request on the wire that still holds what it took.
  private struct Held {
    var request: Request
    var sentAt: ContinuousClock.Instant
    /// Its place in the board's queue.
    var ticket: BoardQueue.Ticket?
    /// A Tflush for it is on its way: it is giving its slot up already.
    var flushing = false
  }

  let profile: ServerProfile
  let maxParkedReads: Int
  let parkGrace: Duration
  let parkingTurn: Duration
  /// The board's work queue, shared with its other sessions (device profile, in a pool).
  let board: BoardQueue?

  /// Requests sent and not yet answered (or flushed), by tag.
  private var held: [Tag: Held] = [:]
  /// Reads in `held` that may park.
  private(set) var parkedReads = 0
  private var readingFids: Set<Fid> = []
  /// Device: the non-parked request that keeps the channel busy.
  private var busyTag: Tag?
  /// Device: the grace after a read that may park. The channel counts as busy until `length`
  /// after the board's worker could take the read up, unless the reply of that read, and only
  /// that read, comes first.
  private var grace: Grace?

  private struct Grace {
    var tag: Tag
    var sentAt: ContinuousClock.Instant
    var ticket: BoardQueue.Ticket?
    var length: Duration
  }

  init(
    profile: ServerProfile, maxParkedReads: Int, parkGrace: Duration, parkingTurn: Duration,
    board: BoardQueue? = nil
  ) {
    self.profile = profile
    self.maxParkedReads = maxParkedReads
    self.parkGrace = parkGrace
    self.parkingTurn = parkingTurn
    self.board = profile == .device ? board : nil
  }

  init(_ configuration: SessionConfiguration) {
    self.init(
      profile: configuration.profile, maxParkedReads: configuration.maxParkedReads,
      parkGrace: configuration.parkGrace, parkingTurn: configuration.parkingTurn,
      board: configuration.board)
  }

  /// When the grace ends: nil while the read still waits behind other sessions' requests.
  private func graceEnd(_ grace: Grace, now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
    guard let board, let ticket = grace.ticket else { return grace.sentAt + grace.length }
    return board.workerFree(before: ticket, sentAt: grace.sentAt, now: now).map {
      $0 + grace.length
    }
  }

  // MARK: - Sending

  /// Whether `request` may go on the wire at `now` (a free tag is the session's business).
  func canSend(_ request: Request, now: ContinuousClock.Instant) -> Bool {
    if request.mayPark && parkedReads >= maxParkedReads { return false }
    guard profile == .device else { return true }
    if busyTag != nil { return false }
    if let grace {
      guard let end = graceEnd(grace, now: now), end <= now else { return false }
    }
    if let fid = request.readFid, readingFids.contains(fid) { return false }
    return true
  }

  /// `request` went out with `tag` at `now`: it takes its slot, the busy channel or the grace.
  /// `roundTrip` is the session's smoothed round-trip time, which lengthens the grace.
  mutating func didSend(
    _ request: Request, tag: Tag, now: ContinuousClock.Instant, roundTrip: Duration
  ) {
    let ticket = board?.arrived(mayPark: request.mayPark, at: now)
    held[tag] = Held(request: request, sentAt: now, ticket: ticket)
    if let fid = request.readFid { readingFids.insert(fid) }
    if request.mayPark {
      parkedReads += 1
      if profile == .device {
        // The device gives no sign that a read has parked: wait long enough for it to have
        // been processed, which on a loaded board takes a few round trips.
        grace = Grace(tag: tag, sentAt: now, ticket: ticket, length: max(parkGrace, roundTrip * 3))
      }
    } else if profile == .device {
      busyTag = tag
    }
  }

  // MARK: - Hearing back

  /// The server is done with `tag` (its reply, or the Rflush of a flush for it): it gives back
  /// what it held. Idempotent, and a no-op for a tag the discipline does not hold.
  mutating func didReceiveReply(tag: Tag, now: ContinuousClock.Instant) {
    guard let done = held.removeValue(forKey: tag) else { return }
    if let ticket = done.ticket { board?.finished(ticket, at: now) }
    if busyTag == tag { busyTag = nil }
    if done.request.mayPark {
      parkedReads -= 1
      // An older parked read answered now says nothing about the one in its grace.
      if grace?.tag == tag { grace = nil }
    }
    if let fid = done.request.readFid { readingFids.remove(fid) }
  }

  /// A Tflush for `tag` is queued: it no longer counts for rotation.
  mutating func willFlush(tag: Tag) {
    held[tag]?.flushing = true
  }

  /// `tag` got no reply in time. A lost reply (docs/board-facts.md §3.2: TX buffer timeout,
  /// oversized SDU) would keep a device channel busy for ever; after a whole timeout the device
  /// is done with it, so the channel is free for the Tflush. Its other slots stay taken until
  /// the reply or the Rflush.
  mutating func didTimeOut(tag: Tag, now: ContinuousClock.Instant) {
    if busyTag == tag { busyTag = nil }
    if let ticket = held[tag]?.ticket { board?.finished(ticket, at: now) }
  }

  /// The session closed: the board is done with everything it had sent, as far as the
  /// board's other sessions are concerned.
  mutating func didClose(now: ContinuousClock.Instant) {
    for ticket in held.values.compactMap(\.ticket) { board?.finished(ticket, at: now) }
  }

  // MARK: - Time

  /// The parked read that has held its slot longest while `queuedStreams` reads wait for one
  /// (nil when nobody waits).
  private func oldestContendedRead(queuedStreams: Int) -> (
    tag: Tag, sentAt: ContinuousClock.Instant
  )? {
    guard parkedReads >= maxParkedReads, queuedStreams > 0 else { return nil }
    let oldest = held.filter { $0.value.request.mayPark && !$0.value.flushing }
      .min { $0.value.sentAt < $1.value.sentAt }
    return oldest.map { ($0.key, $0.value.sentAt) }
  }

  /// The parked read the session should flush now to give its slot to one of `queuedStreams`
  /// waiting reads, or nil. Costs nothing while there are enough slots.
  func readToRotate(now: ContinuousClock.Instant, queuedStreams: Int) -> Tag? {
    guard let oldest = oldestContendedRead(queuedStreams: queuedStreams),
      oldest.sentAt.duration(to: now) >= parkingTurn
    else { return nil }
    return oldest.tag
  }

  /// When the session must look again by itself for the discipline's sake: the end of a grace
  /// that holds `queued` requests back, or the next parking turn. Nil: only a reply (or a new
  /// request) changes anything.
  /// How often a grace that waits for the board's other sessions looks again.
  static let boardPoll: Duration = .milliseconds(5)

  func nextWake(
    now: ContinuousClock.Instant, queued: Int, queuedStreams: Int
  ) -> ContinuousClock.Instant? {
    var wake: ContinuousClock.Instant? = nil
    if let grace, queued > 0 {
      if let end = graceEnd(grace, now: now) {
        if end > now { wake = end }
      } else {
        // Another session's reply frees the worker and nobody tells this one: look again soon.
        wake = now + Self.boardPoll
      }
    }
    if let oldest = oldestContendedRead(queuedStreams: queuedStreams) {
      let turn = oldest.sentAt + parkingTurn
      wake = min(wake ?? turn, turn)
    }
    return wake
  }
}
