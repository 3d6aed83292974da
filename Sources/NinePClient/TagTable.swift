// The requests of one session and the tags they hold, as a value with no locks, threads or
// I/O: libmux's tag table (plan9port src/libmux/mux.c) plus what 9P asks of a client on top,
// the queue, timeouts and the Tflush bookkeeping. A ``Session`` owns one under its lock; every
// transition returns ``TagTable/Action``s (answer a caller, clunk a fid, a protocol
// violation…) that the session runs after unlocking, so no completion ever runs under it.
//
// A request's life:
// - `submit` queues it (or refuses it at once when the session is closed).
// - `dispatchNext` lets the first queued request that may go have a tag: a free tag and the
//   ``WireDiscipline``'s leave. The session encodes and writes it. (`submitAndDispatch` does
//   both at once for a request with nothing queued ahead: the session's fast path.)
// - `receive` matches a reply to its tag, checks it against the request, frees the tag and
//   answers the caller.
// - `cancel`, `expire` (a deadline passed) and `stopParking` withdraw requests: one still queued
//   is answered and forgotten; one on the wire gets a Tflush, queued ahead of new work.
// - `close` answers every caller not yet answered, once.
//
// Flush rules (intro(5), flush(5)): a tag is busy until the server is done with it, and a
// flushed request's tag is free again only at the Rflush, even when the request's own reply
// crossed the Tflush. Such a crossed reply still answers the caller (the server did the work);
// a caller that gave up (a timeout, a cancel) is not answered twice, and a walk that created a
// fid it no longer wants has the fid clunked. A reply to a tag nobody holds is a protocol
// violation (except after close: replies racing it are nobody's fault).

import DequeModule
import NinePProtocol
import NinePTransport

/// The requests of one session, the tags they hold and the Tflush bookkeeping. Pure state; see
/// the file comment. `Callback` is whatever the owner needs to answer a caller; the table
/// only hands it back in ``Action/complete(id:callback:result:)``.
struct TagTable<Callback> {
  /// What a reply brings its caller.
  enum Reply {
    /// The reply as decoded (an Rerror is a failure instead).
    case message(Message)
    /// An Rread whose data the transport spliced into a pipe, for a request that takes it so.
    case spliced(SplicedBytes)
  }

  /// What the owner must do after a transition, in order, outside its lock.
  enum Action {
    /// Answer the caller of request `id` (exactly once per request).
    case complete(id: UInt64, callback: Callback, result: Result<Reply, NinePError>)
    /// A walk the caller gave up on created `fid` after all: clunk it, then release it.
    case clunk(Fid)
    /// The server broke the protocol: the session must close with this reason.
    case violation(String)
    /// `request` on the wire got no reply before its deadline; its Tflush is queued.
    case flushingLateRequest(Message)
    /// The Tflush `flush` got no Rflush before its deadline: the server stopped answering,
    /// and the session must close.
    case serverStoppedAnswering(flush: Message)
  }

  /// A request the table let go on the wire with `tag`: the owner encodes and writes it.
  struct Dispatch {
    var id: UInt64
    var tag: Tag
    var message: Message
  }

  /// One request, from submission until the server is done with its tag.
  private struct Request {
    let message: Message
    /// What the wire discipline needs to know of it.
    let traits: WireDiscipline.Request
    /// A Tread whose reply may come spliced (``Reply/spliced(_:)``).
    let splices: Bool
    /// Nil for a Tflush, which answers nobody.
    let callback: Callback?
    var deadline: ContinuousClock.Instant?
    var tag: Tag?
    var sentAt: ContinuousClock.Instant?
    /// The caller has been answered (timeout, cancel); a late reply is only cleaned up.
    var abandoned = false
    /// A Tflush for it is queued or on the wire.
    var flushing = false
    /// Its reply crossed the Tflush and went to the caller; the tag waits for the Rflush.
    var answered = false
    /// For a Tflush: the request it flushes.
    var flushTarget: UInt64?

    var isFlush: Bool {
      if case .tflush = message { return true }
      return false
    }
  }

  private var nextID: UInt64 = 1
  /// Requests waiting for a tag or the discipline's leave, in order; Tflushes go first.
  private var queue: Deque<UInt64> = []
  /// Every request not yet done: queued, on the wire, or abandoned and waiting for its reply.
  private var requests: [UInt64: Request] = [:]
  private var inFlight: [Tag: UInt64] = [:]
  /// Requests on the wire that got no reply before their deadline, possibly since answered
  /// or gone (``serverIsSilent()`` forgets those).
  private var timedOut: Set<UInt64> = []
  private var freeTags: [Tag]
  private var discipline: WireDiscipline
  /// How long a Tflush may wait for its Rflush (nil: for ever).
  private let flushTimeout: Duration?
  /// Why the table closed, or nil while it is open.
  private(set) var closedReason: String?
  /// Set by ``stopParking(reason:now:)``: reads that may park are refused from then on.
  private(set) var parkingStoppedReason: String?
  /// Requests on the wire whose reply may come spliced.
  private(set) var splicesOnWire = 0
  /// Smoothed round-trip time of the non-parked requests answered so far.
  private(set) var roundTrip: Duration = .zero

  /// A table of `maxTags` tags (at most NOTAG − 1) with the discipline of `configuration`.
  init(_ configuration: SessionConfiguration) {
    let tagCount = max(1, min(configuration.maxTags, Int(NineP.noTag)))
    freeTags = (0..<Tag(tagCount)).reversed()
    discipline = WireDiscipline(configuration)
    flushTimeout = configuration.requestTimeout
  }

  // MARK: - Looking

  /// Requests waiting to go on the wire (Tflushes included).
  var queuedCount: Int { queue.count }
  /// Requests holding a tag.
  var inFlightCount: Int { inFlight.count }
  /// Reads that may park holding a parked-read slot.
  var parkedReads: Int { discipline.parkedReads }
  /// When the oldest request on the wire that should be answered soon was sent: not a read
  /// that may park, not one already answered, not a Tflush. Nil: none waits.
  var oldestWaitingSentAt: ContinuousClock.Instant? {
    inFlight.values.compactMap { id -> ContinuousClock.Instant? in
      guard let request = requests[id], !request.traits.mayPark, !request.answered,
        request.callback != nil
      else { return nil }
      return request.sentAt
    }.min()
  }
  /// Reads in the queue that may park (they wait for a parked-read slot, or will).
  var queuedStreams: Int {
    queue.reduce(0) { $0 + (requests[$1]?.traits.mayPark == true ? 1 : 0) }
  }

  /// Whether request `id` still waits in the queue.
  func isQueued(_ id: UInt64) -> Bool { queue.contains(id) }

  /// Whether the request holding `tag` takes its data spliced.
  func acceptsSplice(tag: Tag) -> Bool {
    inFlight[tag].flatMap { requests[$0] }?.splices == true
  }

  /// The next instant the owner must look again without a new request or reply: a deadline,
  /// the end of a park grace or a parking turn. Nil: only a request or a reply changes anything.
  func nextWake(now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
    var wake = discipline.nextWake(now: now, queued: queue.count, queuedStreams: queuedStreams)
    for request in requests.values {
      if let deadline = request.deadline, !request.abandoned {
        wake = min(wake ?? deadline, deadline)
      }
    }
    return wake
  }

  // MARK: - Sending

  /// The longest a new request waits while ``serverIsSilent``.
  static var silentServerGrace: Duration { .seconds(1) }

  /// A request got no reply for a whole timeout and neither it nor its Tflush has been
  /// answered since: the server has stopped answering, or is about to be found so. A new
  /// request then waits ``silentServerGrace`` at most, so a command's second request (`touch`:
  /// a lookup, then a create) fails with the first rather than a whole timeout later.
  /// Checked on every send: looks only at the requests that timed out (usually none), and
  /// forgets those the server has since answered or that are gone.
  mutating func serverIsSilent() -> Bool {
    guard !timedOut.isEmpty else { return false }
    timedOut = timedOut.filter { requests[$0].map { !$0.answered } ?? false }
    return !timedOut.isEmpty
  }

  /// Queues `message`, due by `deadline`; returns its id. A closed table (or, for a read that
  /// may park, one that stopped parking) refuses it: the action answers the caller at once.
  mutating func submit(
    _ message: Message, mayPark: Bool = false, splices: Bool = false,
    deadline: ContinuousClock.Instant?, callback: Callback
  ) -> (id: UInt64, actions: [Action]) {
    let (id, request, refused) = admit(
      message, mayPark: mayPark, splices: splices, deadline: deadline, callback: callback)
    if let request {
      requests[id] = request
      queue.append(id)
    }
    return (id, refused)
  }

  /// Submits `message` like ``submit(_:mayPark:splices:deadline:callback:)``, but when nothing
  /// is queued ahead and it may go at `now`, it takes its tag at once, without passing through
  /// the queue: the caller writes it (a session's fast path).
  mutating func submitAndDispatch(
    _ message: Message, mayPark: Bool = false, splices: Bool = false,
    deadline: ContinuousClock.Instant?, callback: Callback, now: ContinuousClock.Instant
  ) -> (id: UInt64, actions: [Action], dispatch: Dispatch?) {
    let (id, admitted, refused) = admit(
      message, mayPark: mayPark, splices: splices, deadline: deadline, callback: callback)
    guard let request = admitted else { return (id, refused, nil) }
    guard queue.isEmpty, !freeTags.isEmpty, discipline.canSend(request.traits, now: now) else {
      requests[id] = request
      queue.append(id)
      return (id, [], nil)
    }
    return (id, [], send(id, request, now: now))
  }

  /// A new request for `message`, or the refusal that answers its caller at once.
  private mutating func admit(
    _ message: Message, mayPark: Bool, splices: Bool, deadline: ContinuousClock.Instant?,
    callback: Callback
  ) -> (id: UInt64, request: Request?, refused: [Action]) {
    let id = nextID
    nextID += 1
    if let reason = closedReason ?? (mayPark ? parkingStoppedReason : nil) {
      let refusal = NinePError.sessionClosed(reason: reason)
      return (id, nil, [.complete(id: id, callback: callback, result: .failure(refusal))])
    }
    let request = Request(
      message: message, traits: WireDiscipline.Request(message, mayPark: mayPark),
      splices: splices, callback: callback, deadline: deadline)
    return (id, request, [])
  }

  /// Takes the first queued request that may go on the wire at `now` (requests go in order,
  /// but one the discipline holds back does not hold back the others) and gives it a tag.
  mutating func dispatchNext(now: ContinuousClock.Instant) -> Dispatch? {
    guard !freeTags.isEmpty,
      let index = queue.firstIndex(where: { id in
        requests[id].map { discipline.canSend($0.traits, now: now) } ?? false
      })
    else { return nil }
    let id = queue.remove(at: index)
    guard let request = requests[id] else { return nil }
    return send(id, request, now: now)
  }

  /// Gives request `id` a free tag and tells the discipline it went at `now`.
  private mutating func send(
    _ id: UInt64, _ request: Request, now: ContinuousClock.Instant
  ) -> Dispatch {
    var request = request
    let tag = freeTags.removeLast()
    request.tag = tag
    request.sentAt = now
    requests[id] = request
    inFlight[tag] = id
    if request.splices { splicesOnWire += 1 }
    discipline.didSend(request.traits, tag: tag, now: now, roundTrip: roundTrip)
    return Dispatch(id: id, tag: tag, message: request.message)
  }

  // MARK: - Hearing back

  /// Matches the reply `message` with `tag` to its request. `spliced` holds the data of an
  /// Rread that came in a pipe (`message` then has none).
  mutating func receive(
    tag: Tag, message: Message, spliced: SplicedBytes? = nil, now: ContinuousClock.Instant
  ) -> [Action] {
    guard let id = inFlight[tag], var request = requests[id] else {
      // A reply racing our own close (a clunk sent just before) is no server's fault.
      if closedReason != nil { return [] }
      return [.violation("reply \(message.type) with unknown tag \(tag)")]
    }
    if let violation = ReplyValidation.validate(reply: message, for: request.message) {
      return [.violation(violation)]
    }
    if let spliced, case .tread(_, _, let count) = request.message, spliced.count > Int(count) {
      return [
        .violation(ProtocolError.readReplyTooLong(asked: count, got: spliced.count).description)
      ]
    }
    // What the request held on the wire is free once the server has answered.
    discipline.didReceiveReply(tag: tag, now: now)
    if !request.traits.mayPark, let sentAt = request.sentAt {
      let sample = sentAt.duration(to: now)
      roundTrip = roundTrip == .zero ? sample : (roundTrip * 7 + sample) / 8
    }
    if request.isFlush {
      free(tag)
      guard let target = request.flushTarget else { return [] }
      return finishFlushed(target, now: now)
    }
    // A second reply to a flushed request whose tag waits for the Rflush: nothing to do.
    if request.answered { return [] }
    if request.flushing {
      // The reply crossed our Tflush: it answers the caller, but the tag stays reserved
      // until the Rflush.
      request.answered = true
      requests[id] = request
    } else {
      free(tag)
    }
    if request.abandoned {
      // The caller gave up; undo what a late walk created.
      if case .twalk(_, let newfid, let names) = request.message,
        case .rwalk(let qids) = message, qids.count == names.count
      {
        return [.clunk(newfid)]
      }
      return []
    }
    guard let callback = request.callback else { return [] }
    let result: Result<Reply, NinePError>
    if let spliced, request.splices {
      result = .success(.spliced(spliced))
    } else if case .rerror(let ename) = message {
      result = .failure(.server(ename: ename, errno: ErrorStrings.errno(for: ename)))
    } else {
      result = .success(.message(message))
    }
    return [.complete(id: id, callback: callback, result: result)]
  }

  /// The Rflush for a flush of request `target` came: the request is over and only now may
  /// its tag be used again. If its reply did not cross the flush, it ends here.
  private mutating func finishFlushed(_ target: UInt64, now: ContinuousClock.Instant) -> [Action] {
    guard let request = requests[target], let tag = request.tag, inFlight[tag] == target else {
      return []
    }
    discipline.didReceiveReply(tag: tag, now: now)
    free(tag)
    guard !request.answered, !request.abandoned, let callback = request.callback else { return [] }
    return [.complete(id: target, callback: callback, result: .failure(.flushed))]
  }

  /// Makes `tag` reusable and forgets its request.
  private mutating func free(_ tag: Tag) {
    guard let id = inFlight.removeValue(forKey: tag) else { return }
    if requests.removeValue(forKey: id)?.splices == true { splicesOnWire -= 1 }
    freeTags.append(tag)
  }

  // MARK: - Withdrawing

  /// Withdraws request `id`. Still queued: it is answered `.cancelled`. On the wire: a Tflush
  /// is queued, and the request is answered by its reply if that crosses the flush, else
  /// `.flushed` at the Rflush. Nothing for a request already answered or done.
  mutating func cancel(_ id: UInt64, now: ContinuousClock.Instant) -> [Action] {
    guard let request = requests[id], !request.abandoned else { return [] }
    guard request.tag != nil else { return withdrawQueued(id) }
    enqueueFlush(of: id, now: now)
    return []
  }

  /// Answers and forgets the queued request `id`.
  private mutating func withdrawQueued(_ id: UInt64) -> [Action] {
    queue.removeAll { $0 == id }
    guard let callback = requests.removeValue(forKey: id)?.callback else { return [] }
    return [.complete(id: id, callback: callback, result: .failure(.cancelled))]
  }

  /// Queues a Tflush for the request `id` on the wire, ahead of new work (it frees a tag and
  /// maybe a parked-read slot). Once per request.
  private mutating func enqueueFlush(of id: UInt64, now: ContinuousClock.Instant) {
    guard var request = requests[id], !request.flushing, let tag = request.tag else { return }
    request.flushing = true
    requests[id] = request
    discipline.willFlush(tag: tag)
    let flushID = nextID
    nextID += 1
    var flush = Request(
      message: .tflush(oldtag: tag), traits: WireDiscipline.Request(mayPark: false),
      splices: false, callback: nil)
    flush.flushTarget = id
    // A server that does not answer a Tflush in time has stopped answering altogether.
    flush.deadline = flushTimeout.map { now + $0 }
    requests[flushID] = flush
    queue.prepend(flushID)
  }

  /// Ends what is overdue at `now`: a queued request is answered `.timedOut` and forgotten; one
  /// on the wire is answered `.timedOut` and flushed (its late reply is only cleaned up). A
  /// Tflush past its deadline means the server stopped answering (the last action).
  mutating func expire(now: ContinuousClock.Instant) -> [Action] {
    // Runs on every pass of the writer: nothing is allocated unless something is overdue.
    var overdue: [UInt64] = []
    for (id, request) in requests where !request.abandoned {
      if let deadline = request.deadline, deadline <= now { overdue.append(id) }
    }
    if overdue.isEmpty { return [] }
    overdue.sort()
    var actions: [Action] = []
    var unansweredFlush: Message?
    for id in overdue {
      guard var request = requests[id] else { continue }
      request.abandoned = true
      requests[id] = request
      if request.isFlush {
        unansweredFlush = request.message
        continue
      }
      if let tag = request.tag {
        timedOut.insert(id)
        actions.append(.flushingLateRequest(request.message))
        discipline.didTimeOut(tag: tag, now: now)
        enqueueFlush(of: id, now: now)
      } else {
        queue.removeAll { $0 == id }
        requests[id] = nil
      }
      if let callback = request.callback {
        actions.append(.complete(id: id, callback: callback, result: .failure(.timedOut)))
      }
    }
    if let unansweredFlush { actions.append(.serverStoppedAnswering(flush: unansweredFlush)) }
    return actions
  }

  /// When reads wait for a parking slot, the read parked longest gives its slot up after
  /// ``SessionConfiguration/parkingTurn``: a Tflush is queued for it, and its owner (which
  /// hears `.flushed`, or the empty Rread a device sends before Rflush) reads again, queueing
  /// behind the others. Returns whether a read was flushed.
  mutating func rotateParkedRead(now: ContinuousClock.Instant) -> Bool {
    guard let tag = discipline.readToRotate(now: now, queuedStreams: queuedStreams),
      let id = inFlight[tag]
    else { return false }
    enqueueFlush(of: id, now: now)
    return true
  }

  /// Withdraws every read that may park and refuses new ones; other requests go on. A read
  /// still queued is answered `.cancelled`; one on the wire is flushed (see ``cancel(_:now:)``).
  mutating func stopParking(reason: String, now: ContinuousClock.Instant) -> [Action] {
    guard closedReason == nil, parkingStoppedReason == nil else { return [] }
    parkingStoppedReason = reason
    var actions: [Action] = []
    for (id, request) in requests.sorted(by: { $0.key < $1.key })
    where request.traits.mayPark && !request.abandoned && !request.answered {
      if request.tag == nil {
        actions += withdrawQueued(id)
      } else {
        enqueueFlush(of: id, now: now)
      }
    }
    return actions
  }

  /// Closes the table: every caller not yet answered is answered `.sessionClosed(reason)`, in
  /// the order of submission, and every later request is refused. Only the first close acts.
  mutating func close(reason: String, now: ContinuousClock.Instant = .now) -> [Action] {
    guard closedReason == nil else { return [] }
    closedReason = reason
    discipline.didClose(now: now)
    let pending = requests.sorted { $0.key < $1.key }
    requests.removeAll()
    queue.removeAll()
    inFlight.removeAll()
    splicesOnWire = 0
    return pending.compactMap { id, request in
      guard !request.abandoned, !request.answered, let callback = request.callback else {
        return nil
      }
      return .complete(id: id, callback: callback, result: .failure(.sessionClosed(reason: reason)))
    }
  }
}

extension TagTable.Reply: Equatable {
  static func == (lhs: Self, rhs: Self) -> Bool {
    switch (lhs, rhs) {
    case (.message(let a), .message(let b)): a == b
    case (.spliced(let a), .spliced(let b)): a === b
    default: false
    }
  }
}

extension TagTable.Action: Equatable where Callback: Equatable {}

extension TagTable.Action {
  /// Whether the action ends the session for a protocol violation.
  var isViolation: Bool {
    if case .violation = self { return true }
    return false
  }
}
