// A 9P2000 session: one connection (TCP stream, Unix socket, L2CAP channel…) with its
// version/attach, tag table, fid table and wire discipline.
//
// Moving parts:
// - Callers (FUSE worker threads, room feeds, the pool's keepalive) call `send(_:options:completion:)`,
//   which only queues the request under the lock and signals the writer; it never blocks on I/O.
// - The writer thread takes queued requests in order whenever a tag is free and the
//   ``WireDiscipline`` allows (device busy rule and park grace, parked-read slots, one read per
//   fid), assigns tags and writes frames. It also expires request timeouts, sending Tflush for
//   what was already on the wire, and flushes the parked read whose turn is over.
// - The reader thread decodes replies, checks them against their requests and calls the
//   completions. Completions run on the reader thread and must not block.
// - Any transport error, EOF or protocol violation closes the session: every pending request
//   fails with `.sessionClosed(reason)` and `onClose` tells the owner (the pool) why.

import DequeModule
import Foundation
import Logging
import NinePProtocol
import NinePTransport

/// Per-request options.
public struct RequestOptions: Sendable {
  /// The read targets a stream and may park at the server until data arrives: it does not
  /// keep a device channel busy, never times out, and counts against the parked-read slots.
  public var mayPark: Bool
  /// Overrides the session's default timeout; `.some(nil)` waits forever.
  public var timeout: Duration??

  public init(mayPark: Bool = false, timeout: Duration?? = .none) {
    self.mayPark = mayPark
    self.timeout = timeout
  }
}

/// Identifies a submitted request, for ``Session/cancel(_:)``.
public struct RequestHandle: Hashable, Sendable {
  let id: UInt64
}

/// Counters for status displays and benchmarks.
public struct SessionStatistics: Sendable {
  public var requestsInFlight = 0
  public var requestsQueued = 0
  public var parkedReads = 0
  public var messagesSent: UInt64 = 0
  public var messagesReceived: UInt64 = 0
  public var bytesSent: UInt64 = 0
  public var bytesReceived: UInt64 = 0
  /// Smoothed round-trip time of non-parked requests.
  public var roundTrip: Duration = .zero
}

/// One 9P2000 connection. Thread-safe; see the file comment for its threads.
public final class Session: @unchecked Sendable {
  public typealias Completion = @Sendable (Result<Message, NinePError>) -> Void

  public let configuration: SessionConfiguration
  public let transport: any MessageTransport
  /// The msize agreed in Tversion.
  public let msize: UInt32
  /// The fid of the attach point; every walk starts here.
  public let rootFid: Fid
  /// The qid the server gave the attach point (set once, before `connect` returns).
  public private(set) var rootQid = Qid(path: 0)
  /// The identity the server verified for this session (Tauth), or nil for one attached
  /// without authentication (set once, before `connect` returns).
  public private(set) var authenticatedIdentity: String?
  let logger: Logger

  private let condition = NSCondition()
  private var state: State
  private var onCloseHandlers: [@Sendable (String) -> Void] = []

  private final class Pending {
    let id: UInt64
    let message: Message
    /// What the wire discipline needs to know of it (whether it may park, the fid it reads).
    let traits: WireDiscipline.Request
    let completion: Completion?
    /// For a Tread that takes its data in a pipe: called instead of `completion` when the
    /// reply came spliced (see ``SpliceRule``).
    let spliceSink: (@Sendable (SplicedBytes) -> Void)?
    var deadline: ContinuousClock.Instant?
    var tag: Tag?
    var sentAt: ContinuousClock.Instant?
    /// The caller has been answered (timeout, cancel); a late reply is only cleaned up.
    var abandoned = false
    /// Tflush sent for this request.
    var flushing = false
    /// The reply crossed the Tflush and went to the caller; the tag waits for Rflush.
    var answered = false
    /// For Tflush: the request it flushes.
    weak var flushTarget: Pending?

    init(
      id: UInt64, message: Message, mayPark: Bool, completion: Completion?,
      spliceSink: (@Sendable (SplicedBytes) -> Void)? = nil
    ) {
      self.id = id
      self.message = message
      self.traits = WireDiscipline.Request(message, mayPark: mayPark)
      self.completion = completion
      self.spliceSink = spliceSink
    }
  }

  private struct State {
    var nextID: UInt64 = 1
    var queue: Deque<Pending> = []
    var inFlight: [Tag: Pending] = [:]
    var byID: [UInt64: Pending] = [:]
    var freeTags: [Tag]
    var usedFids: Set<Fid> = []
    var nextFid: Fid = 1
    var discipline: WireDiscipline
    var closedReason: String?
    /// Set by ``stopParking(reason:)``: reads that may park are refused from then on.
    var parkingStoppedReason: String?
    /// Set when the session closed because the server stopped answering: since when it had
    /// been silent (its last message).
    var silentSince: ContinuousClock.Instant?
    var statistics = SessionStatistics()
    var loggedOversize = false
    /// When the sleeping writer will look again by itself; nil while it runs or sleeps until
    /// signalled.
    var writerWakesAt: ContinuousClock.Instant?
    /// When the last frame came from the server (the handshake's, at first): the pool's
    /// keepalive measures the link's silence from here.
    var lastReceived = ContinuousClock.now
    /// Requests on the wire that take their data spliced.
    var splicesOnWire = 0
  }

  private init(
    transport: any MessageTransport, configuration: SessionConfiguration, msize: UInt32,
    rootFid: Fid, logger: Logger
  ) {
    self.transport = transport
    self.configuration = configuration
    self.msize = msize
    self.rootFid = rootFid
    self.logger = logger
    let tagCount = max(1, min(configuration.maxTags, Int(NineP.noTag)))
    state = State(
      freeTags: (0..<Tag(tagCount)).reversed(), discipline: WireDiscipline(configuration))
  }

  // MARK: - Connecting

  /// Negotiates the version, proves the configured identity (Tauth, see ``Authentication``)
  /// and attaches.
  ///
  /// Blocks the calling thread for at most `handshakeTimeout`, else the configuration's
  /// timeout (or 30 s).
  public static func connect(
    transport: any MessageTransport, configuration: SessionConfiguration,
    handshakeTimeout: Duration? = nil, logger: Logger = Logger(label: "mount9bbs.client")
  ) throws(NinePError) -> Session {
    let timeout = handshakeTimeout ?? configuration.requestTimeout ?? .seconds(30)
    let msize = try negotiateVersion(transport, configuration, timeout: timeout, logger: logger)
    var logger = logger
    logger[metadataKey: "server"] = "\(transport.address)"
    let session = Session(
      transport: transport, configuration: configuration, msize: msize, rootFid: 0,
      logger: logger)
    session.state.usedFids.insert(0)
    session.startThreads()
    let afid: Fid
    do {
      afid = try session.authenticate(timeout: timeout)
    } catch {
      session.close(reason: "authentication failed: \(error)")
      throw error
    }
    let identity = afid == NineP.noFid ? nil : configuration.authentication?.identity
    let reply = session.sendAndWait(
      .tattach(
        fid: 0, afid: afid, uname: identity ?? configuration.uname, aname: configuration.aname),
      timeout: timeout)
    switch reply {
    case .success(.rattach(let qid)):
      session.rootQid = qid
      session.authenticatedIdentity = identity
      // The afid has done its work: clunking it frees the server's authentication slot.
      if afid != NineP.noFid {
        session.send(.tclunk(fid: afid)) { [session] _ in session.releaseFid(afid) }
      }
      return session
    case .success(let other):
      session.close(reason: "unexpected attach reply")
      throw .protocolViolation("Tattach answered with \(other.type)")
    case .failure(.server(let ename, _)) where AuthenticationError.isAttachError(ename):
      session.close(reason: "attach failed: \(ename)")
      throw .authentication(AuthenticationError(ename: ename))
    case .failure(let error):
      session.close(reason: "attach failed: \(error)")
      throw error
    }
  }

  /// Proves the configured identity (see ``Authentication``) and returns the afid to attach
  /// with: NOFID when nothing is configured, or when the server does not authenticate and
  /// the policy allows that. A failure closes the session, which frees the afid at the server.
  private func authenticate(timeout: Duration) throws(NinePError) -> Fid {
    guard let authentication = configuration.authentication else { return NineP.noFid }
    guard authentication.gate.enter(before: Date(timeIntervalSinceNow: timeout.timeInterval))
    else { throw .authentication(.busy) }
    defer { authentication.gate.leave() }
    let afid = try allocateFid()
    do throws(NinePError) {
      _ = try authenticationStep(
        .tauth(afid: afid, uname: authentication.identity, aname: configuration.aname),
        timeout: timeout)
    } catch .authentication(let error) where error.meansNoAuthentication {
      // The server made no afid. With auth=auto, attach as before; the attach says whether
      // the server wanted authentication after all.
      guard authentication.policy == .auto else { throw .authentication(error) }
      releaseFid(afid)
      return NineP.noFid
    }
    let count = UInt32(min(Int(msize) - NineP.readOverhead, 1024))
    guard
      case .rread(let challenge) = try authenticationStep(
        .tread(fid: afid, offset: 0, count: count), timeout: timeout), !challenge.isEmpty
    else { throw .authentication(.noChallenge) }
    let answer: Authentication.Answer
    do {
      answer = try authentication.respond(
        .init(bytes: Array(challenge), address: transport.address))
    } catch let error as AuthenticationError {
      throw .authentication(error)
    } catch {
      throw .authentication(.signing("\(error)"))
    }
    _ = try authenticationStep(
      .twrite(fid: afid, offset: 0, data: answer.response[...]), timeout: timeout)
    if let checkProof = answer.checkProof {
      guard
        case .rread(let proof) = try authenticationStep(
          .tread(fid: afid, offset: 0, count: count), timeout: timeout)
      else { throw .authentication(.boardRefused("the board answered its proof's read oddly")) }
      do {
        try checkProof(Array(proof))
      } catch let error as AuthenticationError {
        throw .authentication(error)
      } catch {
        throw .authentication(.boardRefused("\(error)"))
      }
    }
    return afid
  }

  /// One request of the Tauth exchange; an Rerror is an ``AuthenticationError``.
  private func authenticationStep(_ request: Message, timeout: Duration) throws(NinePError)
    -> Message
  {
    switch sendAndWait(request, timeout: timeout) {
    case .success(let reply): return reply
    case .failure(.server(let ename, _)): throw .authentication(AuthenticationError(ename: ename))
    case .failure(let error): throw error
    }
  }

  private static func negotiateVersion(
    _ transport: any MessageTransport, _ configuration: SessionConfiguration,
    timeout: Duration, logger: Logger
  ) throws(NinePError) -> UInt32 {
    let request = Message.tversion(msize: configuration.requestedMsize, version: NineP.version)
    let watchdog = Watchdog(after: timeout) { transport.close() }
    defer { watchdog.cancel() }
    let frame: [UInt8]
    do {
      try transport.send(request.encoded(tag: NineP.noTag))
      guard let received = try transport.receive(limit: Int(configuration.requestedMsize)) else {
        throw NinePError.sessionClosed(reason: "the server closed the connection during Tversion")
      }
      frame = received
    } catch let error as TransportError {
      if watchdog.fired { throw .timedOut }
      if let notNineP = notNinePDiagnosis(error) { throw .protocolViolation(notNineP) }
      throw .transport(error)
    } catch let error as NinePError {
      throw error
    } catch {
      throw .sessionClosed(reason: "\(error)")
    }
    let reply: Message
    do {
      // Gen-1 devices answer NOTAG whatever we sent; HEAD echoes. Both are fine here.
      reply = try Message.decode(frame, limits: .unbounded).message
    } catch {
      throw .protocolViolation("bad Rversion: \(error)")
    }
    switch reply {
    case .rversion(let msize, let version):
      guard version.hasPrefix(NineP.version), !version.hasPrefix("9P2000.") else {
        throw .versionNotSupported(serverSaid: version)
      }
      guard msize >= 64 else {
        throw .protocolViolation("server offered msize \(msize), too small for 9P")
      }
      if msize > configuration.requestedMsize {
        logger.notice(
          "server answered msize \(msize) above the \(configuration.requestedMsize) asked; using ours"
        )
      }
      return min(msize, configuration.requestedMsize)
    case .rerror(let ename):
      throw .versionNotSupported(serverSaid: ename)
    default:
      throw .protocolViolation("Tversion answered with \(reply.type)")
    }
  }

  /// What to say when the answer to Tversion cannot even be framed: an Rversion is a few
  /// dozen bytes, so a size prefix beyond msize (or below the minimum) means the peer speaks
  /// something else (an HTTP or SSH server answers in text), not that msize is too small.
  static func notNinePDiagnosis(_ error: TransportError) -> String? {
    let size: UInt32
    switch error {
    case .frameTooLarge(let announced, _), .frameTooSmall(let announced): size = announced
    default: return nil
    }
    // The 4 bytes the peer sent first, read back from the little-endian size.
    let prefix = (0..<4).map { UInt8(truncatingIfNeeded: size >> (8 * $0)) }
    let printable = prefix.allSatisfy { (0x20..<0x7f).contains($0) }
    let shown =
      printable
      ? "\"\(String(decoding: prefix, as: UTF8.self))…\""
      : prefix.map { String(format: "%02x", $0) }.joined(separator: " ")
    return "not a 9P server: its answer to Tversion starts with \(shown)"
  }

  // MARK: - Requests

  /// Queues a request; `completion` is called exactly once with the reply (Rerror becomes
  /// ``NinePError/server(ename:errno:)``) or an error. Never blocks.
  @discardableResult
  public func send(
    _ message: Message, options: RequestOptions = RequestOptions(),
    completion: @escaping Completion
  ) -> RequestHandle {
    send(message, options: options, spliceSink: nil, completion: completion)
  }

  /// Queues a request like ``send(_:options:completion:)``; a Tread's reply that comes spliced
  /// goes to `spliceSink` instead of `completion`.
  func send(
    _ message: Message, options: RequestOptions,
    spliceSink: (@Sendable (SplicedBytes) -> Void)?, completion: @escaping Completion
  ) -> RequestHandle {
    condition.lock()
    let id = state.nextID
    state.nextID += 1
    if let reason = state.closedReason {
      condition.unlock()
      completion(.failure(.sessionClosed(reason: reason)))
      return RequestHandle(id: id)
    }
    if options.mayPark, let reason = state.parkingStoppedReason {
      condition.unlock()
      completion(.failure(.sessionClosed(reason: reason)))
      return RequestHandle(id: id)
    }
    let pending = Pending(
      id: id, message: message, mayPark: options.mayPark, completion: completion,
      spliceSink: spliceSink)
    let timeout: Duration? =
      if let explicit = options.timeout { explicit } else if options.mayPark { nil } else {
        configuration.requestTimeout
      }
    if let timeout { pending.deadline = .now + timeout }
    state.byID[id] = pending
    // Multiplex fast path: with nothing queued and a free tag, send on the caller's thread
    // instead of handing over to the writer (a thread hop and two context switches).
    let now = ContinuousClock.now
    if configuration.profile == .multiplex && state.queue.isEmpty
      && canSendLocked(pending, now: now)
    {
      let frame = dispatchLocked(pending, now: now)
      // The writer expires timeouts; wake it only if it would otherwise sleep past this one.
      if let deadline = pending.deadline, state.writerWakesAt.map({ deadline < $0 }) ?? true {
        condition.signal()
      }
      condition.unlock()
      _ = transmit(frame, pending)
      return RequestHandle(id: id)
    }
    state.queue.append(pending)
    condition.signal()
    condition.unlock()
    return RequestHandle(id: id)
  }

  /// Withdraws a request. Not yet sent: it completes with `.cancelled`. On the wire: Tflush is
  /// sent and the request completes with its reply if that crosses the flush, else `.flushed`.
  public func cancel(_ handle: RequestHandle) {
    condition.lock()
    guard let pending = state.byID[handle.id], !pending.abandoned else {
      condition.unlock()
      return
    }
    if pending.tag == nil {
      state.queue.removeAll { $0 === pending }
      state.byID[handle.id] = nil
      condition.unlock()
      pending.completion?(.failure(.cancelled))
      return
    }
    enqueueFlushLocked(pending)
    condition.signal()
    condition.unlock()
  }

  private func enqueueFlushLocked(_ pending: Pending) {
    guard !pending.flushing, let tag = pending.tag else { return }
    pending.flushing = true
    state.discipline.willFlush(tag: tag)
    let flush = Pending(
      id: state.nextID, message: .tflush(oldtag: tag), mayPark: false, completion: nil)
    state.nextID += 1
    flush.flushTarget = pending
    // A server that does not answer a Tflush in time has stopped answering altogether.
    if let timeout = configuration.requestTimeout { flush.deadline = .now + timeout }
    state.byID[flush.id] = flush
    // Flushes go ahead of new work: they free tags and parked-read slots.
    state.queue.prepend(flush)
  }

  /// Sends and blocks until the reply: for start-up and tests, never for FUSE threads.
  func sendAndWait(_ message: Message, timeout: Duration?) -> Result<Message, NinePError> {
    let box = ResultBox()
    send(message, options: RequestOptions(timeout: .some(timeout))) { box.set($0) }
    return box.wait()
  }

  // MARK: - Fids

  /// Allocates an unused fid number (never the attach fid), or fails at the profile's limit.
  public func allocateFid() throws(NinePError) -> Fid {
    condition.lock()
    defer { condition.unlock() }
    guard state.usedFids.count < configuration.maxFids else {
      throw .resourceExhausted("fids (\(configuration.maxFids) in use on this session)")
    }
    while state.usedFids.contains(state.nextFid) || state.nextFid == NineP.noFid {
      state.nextFid &+= 1
    }
    let fid = state.nextFid
    state.nextFid &+= 1
    state.usedFids.insert(fid)
    return fid
  }

  /// The fids the server knows for this session (the attach fid included).
  public var openFids: [Fid] {
    condition.lock()
    defer { condition.unlock() }
    return state.usedFids.sorted()
  }

  /// Returns a fid to the pool once the server no longer knows it.
  public func releaseFid(_ fid: Fid) {
    guard fid != rootFid else { return }
    condition.lock()
    state.usedFids.remove(fid)
    condition.unlock()
  }

  // MARK: - State

  /// Whether `request` still waits in the queue (the wire discipline has not let it go yet).
  public func isQueued(_ request: RequestHandle) -> Bool {
    condition.lock()
    defer { condition.unlock() }
    return state.queue.contains { $0.id == request.id }
  }

  /// Why the session closed, or nil while it is open.
  public var closedReason: String? {
    condition.lock()
    defer { condition.unlock() }
    return state.closedReason
  }

  public var statistics: SessionStatistics {
    condition.lock()
    defer { condition.unlock() }
    var stats = state.statistics
    stats.requestsInFlight = state.inFlight.count
    stats.requestsQueued = state.queue.count
    stats.parkedReads = state.discipline.parkedReads
    return stats
  }

  /// When a session closed because its server stopped answering: the server's last message.
  /// Nil while open, or when it closed for another reason.
  public var silentSince: ContinuousClock.Instant? {
    condition.lock()
    defer { condition.unlock() }
    return state.silentSince
  }

  /// When the server last sent anything on this session (a reply, an error, an Rflush).
  public var lastReceived: ContinuousClock.Instant {
    condition.lock()
    defer { condition.unlock() }
    return state.lastReceived
  }

  /// Reads here that may park, in flight or queued: what ``Pool`` weighs this session by in
  /// placing streams, besides its own reservations.
  var parkedStreams: Int {
    condition.lock()
    defer { condition.unlock() }
    return state.discipline.parkedReads + queuedStreamsLocked
  }

  /// Registers a handler called once when the session closes (immediately if already closed).
  public func onClose(_ handler: @escaping @Sendable (String) -> Void) {
    condition.lock()
    if let reason = state.closedReason {
      condition.unlock()
      handler(reason)
      return
    }
    onCloseHandlers.append(handler)
    condition.unlock()
  }

  /// Withdraws every read that may park and refuses new ones (as if closed), so that their
  /// owners read on another session; the session goes on serving other requests. Called
  /// before a retire: a read the server parked holds lines posted meanwhile, and closing
  /// the socket under it would lose the ones the server had handed it. A flushed read
  /// completes with its reply if that crossed the flush (those lines are kept), else with
  /// `.flushed`; one still queued completes with `.cancelled`.
  public func stopParking(reason: String) {
    condition.lock()
    guard state.closedReason == nil, state.parkingStoppedReason == nil else {
      condition.unlock()
      return
    }
    state.parkingStoppedReason = reason
    var withdrawn: [Pending] = []
    for pending in state.byID.values.sorted(by: { $0.id < $1.id })
    where pending.traits.mayPark && !pending.abandoned && !pending.answered {
      if pending.tag == nil {
        state.queue.removeAll { $0 === pending }
        state.byID[pending.id] = nil
        withdrawn.append(pending)
      } else {
        enqueueFlushLocked(pending)
      }
    }
    condition.signal()
    condition.unlock()
    for pending in withdrawn { pending.completion?(.failure(.cancelled)) }
  }

  /// Closes the transport and fails every pending request with `.sessionClosed(reason)`.
  /// `silent`: the server stopped answering (its last message then counts as the start of
  /// the outage, see ``silentSince``).
  public func close(reason: String = "closed by the client", silent: Bool = false) {
    condition.lock()
    guard state.closedReason == nil else {
      condition.unlock()
      return
    }
    state.closedReason = reason
    if silent { state.silentSince = state.lastReceived }
    let pending = Array(state.byID.values).sorted { $0.id < $1.id }
    state.byID.removeAll()
    state.queue.removeAll()
    state.inFlight.removeAll()
    let handlers = onCloseHandlers
    onCloseHandlers.removeAll()
    condition.broadcast()
    condition.unlock()
    transport.close()
    for request in pending where !request.abandoned && !request.answered {
      request.completion?(.failure(.sessionClosed(reason: reason)))
    }
    for handler in handlers { handler(reason) }
  }

  // MARK: - Threads

  private func startThreads() {
    let writer = Thread { [self] in writerLoop() }
    writer.name = "9p-writer"
    writer.start()
    let reader = Thread { [self] in readerLoop() }
    reader.name = "9p-reader"
    reader.start()
  }

  /// Whether `pending` may go on the wire now: a free tag and the discipline's leave. Called
  /// with the lock held.
  private func canSendLocked(_ pending: Pending, now: ContinuousClock.Instant) -> Bool {
    !state.freeTags.isEmpty && state.discipline.canSend(pending.traits, now: now)
  }

  /// Reads in the queue that may park (they wait for a parked-read slot, or will).
  private var queuedStreamsLocked: Int {
    state.queue.reduce(0) { $0 + ($1.traits.mayPark ? 1 : 0) }
  }

  private func writerLoop() {
    condition.lock()
    while state.closedReason == nil {
      let now = ContinuousClock.now
      let (expired, unanswered) = expireLocked(now: now)
      if let unanswered {
        condition.unlock()
        for request in expired { request.completion?(.failure(.timedOut)) }
        logger.error("no reply to \(unanswered) in time; closing the session")
        close(reason: "the server stopped answering (no reply to \(unanswered))", silent: true)
        return
      }
      if !expired.isEmpty {
        condition.unlock()
        for request in expired { request.completion?(.failure(.timedOut)) }
        condition.lock()
        continue
      }
      rotateParkedReadsLocked(now: now)
      // Requests go in order, but one the profile holds back (a second read on a fid, a
      // parked read with no free slot) does not hold back the others.
      if let index = state.queue.firstIndex(where: { canSendLocked($0, now: now) }) {
        let first = state.queue.remove(at: index)
        let frame = dispatchLocked(first, now: now)
        condition.unlock()
        guard transmit(frame, first) else { return }
        condition.lock()
        continue
      }
      let wake = nextWakeLocked(now: now)
      state.writerWakesAt = wake
      defer { state.writerWakesAt = nil }
      if let wake {
        let seconds = now.duration(to: wake).timeInterval
        _ = condition.wait(until: Date(timeIntervalSinceNow: max(seconds, 0.0005)))
      } else {
        condition.wait()
      }
    }
    condition.unlock()
  }

  /// A dispatched message ready to go: its encoding, or for a Twrite its header and the data
  /// where it lies (the transport gathers the two, so the data is not copied into a frame).
  private struct Outgoing {
    var header: [UInt8]
    var payload: ArraySlice<UInt8> = []
    var count: Int { header.count + payload.count }
  }

  /// Gives `pending` a tag and tells the discipline; returns its frame. The caller sends the
  /// frame (after unlocking) with ``transmit(_:_:)``.
  private func dispatchLocked(_ pending: Pending, now: ContinuousClock.Instant) -> Outgoing {
    let tag = state.freeTags.removeLast()
    pending.tag = tag
    pending.sentAt = now
    state.inFlight[tag] = pending
    if pending.spliceSink != nil { state.splicesOnWire += 1 }
    state.discipline.didSend(
      pending.traits, tag: tag, now: now, roundTrip: state.statistics.roundTrip)
    let frame: Outgoing
    if case .twrite(let fid, let offset, let data) = pending.message, !data.isEmpty {
      frame = Outgoing(
        header: Message.twriteHeader(tag: tag, fid: fid, offset: offset, count: data.count),
        payload: data)
    } else {
      frame = Outgoing(header: pending.message.encoded(tag: tag))
    }
    state.statistics.messagesSent += 1
    state.statistics.bytesSent += UInt64(frame.count)
    return frame
  }

  /// Writes a dispatched frame; a failed write closes the session. Returns whether it went.
  private func transmit(_ frame: Outgoing, _ pending: Pending) -> Bool {
    logger.trace("→ \(pending.message) tag=\(pending.tag ?? NineP.noTag)")
    do {
      if frame.payload.isEmpty {
        try transport.send(frame.header)
      } else if let gathering = transport as? any GatheredSending {
        try gathering.send(header: frame.header, payload: frame.payload)
      } else {
        try transport.send(frame.header + frame.payload)
      }
      return true
    } catch {
      close(reason: "send failed: \(error)")
      return false
    }
  }

  /// When reads wait for a parking slot, the read parked longest gives its slot up after
  /// ``SessionConfiguration/parkingTurn``: it is flushed, and its owner (which sees `.flushed`,
  /// or the empty Rread a device sends before Rflush) reads again, queueing behind the others.
  private func rotateParkedReadsLocked(now: ContinuousClock.Instant) {
    guard let tag = state.discipline.readToRotate(now: now, queuedStreams: queuedStreamsLocked),
      let oldest = state.inFlight[tag]
    else { return }
    logger.debug("a parked read gives up its slot to a waiting one")
    enqueueFlushLocked(oldest)
  }

  /// The next instant the writer must look again without a signal: a deadline, the end of a
  /// park grace or a parking turn.
  private func nextWakeLocked(now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
    var wake = state.discipline.nextWake(
      now: now, queued: state.queue.count, queuedStreams: queuedStreamsLocked)
    for pending in state.byID.values {
      if let deadline = pending.deadline, !pending.abandoned {
        wake = min(wake ?? deadline, deadline)
      }
    }
    return wake
  }

  /// Removes or abandons timed-out requests; returns those whose callers must hear of it, and
  /// the Tflush that went unanswered, if one did (the session must then close).
  private func expireLocked(now: ContinuousClock.Instant) -> (
    expired: [Pending], unansweredFlush: Message?
  ) {
    var expired: [Pending] = []
    var unansweredFlush: Message?
    for pending in state.byID.values {
      guard let deadline = pending.deadline, deadline <= now, !pending.abandoned else { continue }
      pending.abandoned = true
      if case .tflush = pending.message {
        unansweredFlush = pending.message
        continue
      }
      expired.append(pending)
      if pending.tag == nil {
        state.queue.removeAll { $0 === pending }
        state.byID[pending.id] = nil
      } else {
        logger.warning("no reply to \(pending.message) in time; flushing it")
        if let tag = pending.tag { state.discipline.didTimeOut(tag: tag) }
        enqueueFlushLocked(pending)
      }
    }
    return (expired, unansweredFlush)
  }

  private func readerLoop() {
    let limit = Int(configuration.requestedMsize)
    let rule = SpliceRule(
      isExpecting: { [unowned self] in
        condition.lock()
        defer { condition.unlock() }
        return state.splicesOnWire > 0
      },
      accepts: { [unowned self] tag in
        condition.lock()
        defer { condition.unlock() }
        return state.inFlight[tag]?.spliceSink != nil
      })
    while true {
      let received: ReceivedMessage
      do {
        guard let message = try transport.receive(limit: limit, splicing: rule) else {
          close(reason: "the server closed the connection")
          return
        }
        received = message
      } catch {
        close(reason: closedReason ?? "receive failed: \(error)")
        return
      }
      let tag: Tag
      let message: Message
      var spliced: SplicedBytes?
      let frameSize: Int
      switch received {
      case .frame(let frame):
        do {
          (tag, message) = try Message.decode(frame, limits: DecodeLimits(maxFrameSize: limit))
          frameSize = frame.count
        } catch {
          logger.error("bad frame from \(transport.address): \(error); resetting the session")
          close(reason: "bad frame from the server: \(error)")
          return
        }
      case .splicedRead(let header, let data):
        // The transport checked the header (an Rread whose count matches its size).
        tag = Tag(header[5]) | Tag(header[6]) << 8
        message = .rread(data: [])
        spliced = data
        frameSize = header.count + data.count
      }
      if let violation = handleReply(
        tag: tag, message: message, frameSize: frameSize, spliced: spliced)
      {
        logger.error("\(violation); resetting the session")
        close(reason: violation)
        return
      }
    }
  }

  /// Matches a reply to its request. Returns a protocol-violation text, or nil.
  /// `spliced` holds the data of an Rread that came in a pipe (`message` then has none).
  private func handleReply(
    tag: Tag, message: Message, frameSize: Int, spliced: SplicedBytes? = nil
  ) -> String? {
    logger.trace("← \(message) tag=\(tag)\(spliced.map { " spliced=\($0.count)" } ?? "")")
    condition.lock()
    state.statistics.messagesReceived += 1
    state.statistics.bytesReceived += UInt64(frameSize)
    state.lastReceived = .now
    if frameSize > Int(msize) && !state.loggedOversize {
      state.loggedOversize = true
      logger.notice(
        "server sent a \(frameSize)-byte reply above msize \(msize); accepted (old devices do)")
    }
    guard let pending = state.inFlight[tag] else {
      condition.unlock()
      // A reply racing our own close (a clunk sent just before) is no server's fault.
      if closedReason != nil { return nil }
      return "reply \(message.type) with unknown tag \(tag)"
    }
    if let violation = Self.validate(reply: message, for: pending.message) {
      condition.unlock()
      return violation
    }
    if let spliced, case .tread(_, _, let count) = pending.message, spliced.count > Int(count) {
      condition.unlock()
      return ProtocolError.readReplyTooLong(asked: count, got: spliced.count).description
    }
    // What the request held on the wire is free once the server has answered.
    state.discipline.didReceiveReply(tag: tag)
    if !pending.traits.mayPark, let sentAt = pending.sentAt {
      let sample = sentAt.duration(to: .now)
      let old = state.statistics.roundTrip
      state.statistics.roundTrip = old == .zero ? sample : (old * 7 + sample) / 8
    }
    var toComplete: [@Sendable () -> Void] = []
    var cleanup: Message?
    if case .tflush = pending.message {
      freeTagLocked(tag, pending)
      // Rflush: the flushed request is over, and only now may its tag be used again. If its
      // reply did not cross the flush, it ends here.
      if let target = pending.flushTarget, let oldTag = target.tag,
        state.inFlight[oldTag] === target
      {
        state.discipline.didReceiveReply(tag: oldTag)
        freeTagLocked(oldTag, target)
        if !target.answered, !target.abandoned, let completion = target.completion {
          toComplete.append { completion(.failure(.flushed)) }
        }
      }
    } else if pending.answered {
      // A second reply to a flushed request whose tag waits for Rflush: nothing to do.
    } else {
      if pending.flushing {
        // The reply crossed our Tflush: deliver it, but the tag stays reserved until Rflush.
        pending.answered = true
      } else {
        freeTagLocked(tag, pending)
      }
      if pending.abandoned {
        // The caller gave up; undo what a late walk created.
        if case .twalk(_, let newfid, let names) = pending.message,
          case .rwalk(let qids) = message, qids.count == names.count
        {
          cleanup = .tclunk(fid: newfid)
        }
      } else if let spliced, let sink = pending.spliceSink {
        toComplete.append { sink(spliced) }
      } else if let completion = pending.completion {
        if case .rerror(let ename) = message {
          let error = NinePError.server(ename: ename, errno: ErrorStrings.errno(for: ename))
          toComplete.append { completion(.failure(error)) }
        } else {
          toComplete.append { completion(.success(message)) }
        }
      }
    }
    // A freed tag or wire slot matters only to queued requests; deadlines only move later, so
    // an idle writer sleeps on (a wake per reply costs two context switches on a bulk read).
    if !state.queue.isEmpty { condition.signal() }
    condition.unlock()
    if let cleanup {
      send(cleanup) { [self] _ in
        if case .tclunk(let fid) = cleanup { releaseFid(fid) }
      }
    }
    for complete in toComplete { complete() }
    return nil
  }

  /// Makes a tag reusable and forgets its request.
  private func freeTagLocked(_ tag: Tag, _ pending: Pending) {
    guard state.inFlight[tag] === pending else { return }
    if pending.spliceSink != nil { state.splicesOnWire -= 1 }
    state.inFlight[tag] = nil
    state.byID[pending.id] = nil
    state.freeTags.append(tag)
  }

  /// Checks that a reply fits its request.
  static func validate(reply: Message, for request: Message) -> String? {
    if case .rerror = reply {
      if case .tflush = request { return "Tflush answered with Rerror" }
      return nil
    }
    guard reply.type.rawValue == request.type.rawValue + 1 else {
      return "\(request.type) answered with \(reply.type)"
    }
    switch (request, reply) {
    case (.tread(_, _, let count), .rread(let data)) where data.count > Int(count):
      return ProtocolError.readReplyTooLong(asked: count, got: data.count).description
    case (.twalk(_, _, let names), .rwalk(let qids)) where qids.count > names.count:
      return ProtocolError.walkReplyTooLong(asked: names.count, got: qids.count).description
    case (.twalk(_, _, let names), .rwalk(let qids)) where qids.isEmpty && !names.isEmpty:
      return "Rwalk with no qids for \(names.count) names (a failed first name must be Rerror)"
    case (.twrite(_, _, let data), .rwrite(let count)) where Int(count) > data.count:
      return "Rwrite count \(count) exceeds the \(data.count) bytes written"
    default:
      return nil
    }
  }
}

/// Blocks a thread until a result arrives.
final class ResultBox: @unchecked Sendable {
  private let condition = NSCondition()
  private var result: Result<Message, NinePError>?

  func set(_ value: Result<Message, NinePError>) {
    condition.lock()
    result = value
    condition.signal()
    condition.unlock()
  }

  func wait() -> Result<Message, NinePError> {
    condition.lock()
    defer { condition.unlock() }
    while true {
      if let result { return result }
      condition.wait()
    }
  }
}

/// Runs an action once after a delay unless cancelled first.
final class Watchdog: @unchecked Sendable {
  private let lock = NSLock()
  private var done = false
  private(set) var fired = false

  init(after delay: Duration, action: @escaping @Sendable () -> Void) {
    DispatchQueue.global().asyncAfter(deadline: .now() + delay.timeInterval) { [self] in
      lock.lock()
      let run = !done
      done = true
      if run { fired = true }
      lock.unlock()
      if run { action() }
    }
  }

  func cancel() {
    lock.lock()
    done = true
    lock.unlock()
  }
}
