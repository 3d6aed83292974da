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
//   read's own reply ends the grace early.
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
    /// A Tflush for it is on its way: it is giving its slot up already.
    var flushing = false
  }

  let profile: ServerProfile
  let maxParkedReads: Int
  let parkGrace: Duration
  let parkingTurn: Duration

  /// Requests sent and not yet answered (or flushed), by tag.
  private var held: [Tag: Held] = [:]
  /// Reads in `held` that may park.
  private(set) var parkedReads = 0
  private var readingFids: Set<Fid> = []
  /// Device: the non-parked request that keeps the channel busy.
  private var busyTag: Tag?
  /// Device: the channel counts as busy until then (the grace after a read that may park)…
  private var graceUntil: ContinuousClock.Instant?
  /// …unless the reply of that read, and only that read, comes first.
  private var graceTag: Tag?

  init(profile: ServerProfile, maxParkedReads: Int, parkGrace: Duration, parkingTurn: Duration) {
    self.profile = profile
    self.maxParkedReads = maxParkedReads
    self.parkGrace = parkGrace
    self.parkingTurn = parkingTurn
  }

  init(_ configuration: SessionConfiguration) {
    self.init(
      profile: configuration.profile, maxParkedReads: configuration.maxParkedReads,
      parkGrace: configuration.parkGrace, parkingTurn: configuration.parkingTurn)
  }

  // MARK: - Sending

  /// Whether `request` may go on the wire at `now` (a free tag is the session's business).
  func canSend(_ request: Request, now: ContinuousClock.Instant) -> Bool {
    if request.mayPark && parkedReads >= maxParkedReads { return false }
    guard profile == .device else { return true }
    if busyTag != nil { return false }
    if let graceUntil, graceUntil > now { return false }
    if let fid = request.readFid, readingFids.contains(fid) { return false }
    return true
  }

  /// `request` went out with `tag` at `now`: it takes its slot, the busy channel or the grace.
  /// `roundTrip` is the session's smoothed round-trip time, which lengthens the grace.
  mutating func didSend(
    _ request: Request, tag: Tag, now: ContinuousClock.Instant, roundTrip: Duration
  ) {
    held[tag] = Held(request: request, sentAt: now)
    if let fid = request.readFid { readingFids.insert(fid) }
    if request.mayPark {
      parkedReads += 1
      if profile == .device {
        // The device gives no sign that a read has parked: wait long enough for it to have
        // been processed, which on a loaded board takes a few round trips.
        graceUntil = now + max(parkGrace, roundTrip * 3)
        graceTag = tag
      }
    } else if profile == .device {
      busyTag = tag
    }
  }

  // MARK: - Hearing back

  /// The server is done with `tag` (its reply, or the Rflush of a flush for it): it gives back
  /// what it held. Idempotent, and a no-op for a tag the discipline does not hold.
  mutating func didReceiveReply(tag: Tag) {
    guard let done = held.removeValue(forKey: tag) else { return }
    if busyTag == tag { busyTag = nil }
    if done.request.mayPark {
      parkedReads -= 1
      // An older parked read answered now says nothing about the one in its grace.
      if graceTag == tag {
        graceUntil = nil
        graceTag = nil
      }
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
  mutating func didTimeOut(tag: Tag) {
    if busyTag == tag { busyTag = nil }
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
  func nextWake(
    now: ContinuousClock.Instant, queued: Int, queuedStreams: Int
  ) -> ContinuousClock.Instant? {
    var wake: ContinuousClock.Instant? = nil
    if let graceUntil, graceUntil > now, queued > 0 { wake = graceUntil }
    if let oldest = oldestContendedRead(queuedStreams: queuedStreams) {
      let turn = oldest.sentAt + parkingTurn
      wake = min(wake ?? turn, turn)
    }
    return wake
  }
}
