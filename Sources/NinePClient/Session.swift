// A 9P2000 session: one connection (TCP stream, Unix socket, L2CAP channel…) with its
// version/attach, tag table, fid table and wire discipline.
//
// Moving parts, split as plan9port splits lib9pclient (fs.c) from libmux (mux.c, io.c):
// - SessionHandshake.swift: Tversion, Tauth and Tattach, before anyone else sees the session.
// - TagTable.swift: the requests and the tags they hold, the queue, timeouts and the Tflush
//   bookkeeping, as a value whose transitions return actions. The session owns one under its
//   lock and runs the actions (completions among them) after unlocking.
// - SessionIO.swift: the writer and reader threads.
// - Callers (FUSE worker threads, room feeds, the pool's keepalive) call
//   `send(_:options:completion:)`, which queues the request under the lock and signals the
//   writer. On a multiplexing server a caller with nothing queued ahead writes its own
//   request instead (the fast path: no thread hop). A completion that sends takes it too, on
//   the reader thread.
// - Nobody but the writer thread ever waits for the socket. Every frame goes out with the
//   transport's `sendWithoutWaiting`: what the socket does not take now stays queued in the
//   transport, in order, and the writer thread flushes it (`flushOwed`). This is what lets the
//   reader thread send: if it waited for room while the server (which writes a reply before it
//   reads the next request) waited for us to read, both would stall, as a large chained write
//   with large reads flowing back on one session did (ChainedTransferTests).
// - The writer thread takes queued requests in order whenever the tag table lets one go (a
//   free tag, the ``WireDiscipline``'s leave) and writes them. It also expires request
//   timeouts, sending Tflush for what was already on the wire, and flushes the parked read
//   whose turn is over.
// - The reader thread decodes replies, hands them to the tag table and runs the completions.
//   Completions run on the reader thread and must not block.
// - Any transport error, EOF or protocol violation closes the session: every pending request
//   fails with `.sessionClosed(reason)` and `onClose` tells the owner (the pool) why.

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
///
/// `@unchecked Sendable`: every mutable stored property is guarded by `condition`, except
/// `rootQid` and `authenticatedIdentity`, which are set once before `connect` returns the
/// session to anyone.
public final class Session: @unchecked Sendable {
  public typealias Completion = @Sendable (Result<Message, NinePError>) -> Void

  public let configuration: SessionConfiguration
  public let transport: any MessageTransport
  /// The msize agreed in Tversion.
  public let msize: UInt32
  /// The fid of the attach point; every walk starts here.
  public let rootFid: Fid
  /// The qid the server gave the attach point (set once, before `connect` returns).
  public internal(set) var rootQid = Qid(path: 0)
  /// The identity the server verified for this session (Tauth), or nil for one attached
  /// without authentication (set once, before `connect` returns).
  public internal(set) var authenticatedIdentity: String?
  let logger: Logger

  /// Guards `state` and `onCloseHandlers`. A condition variable rather
  /// than a `Mutex`: the writer thread sleeps on it until a request, a reply or a deadline.
  /// Only the Session*.swift files touch it.
  let condition = NSCondition()
  var state: State
  private var onCloseHandlers: [@Sendable (String) -> Void] = []

  /// How a request's caller is answered (the tag table's `Callback`).
  struct Callbacks {
    let completion: Completion
    /// For a Tread that takes its data in a pipe: called instead of `completion` when the
    /// reply came spliced (see ``SpliceRule``).
    let spliceSink: (@Sendable (SplicedBytes) -> Void)?
  }

  typealias Action = TagTable<Callbacks>.Action

  struct State {
    var table: TagTable<Callbacks>
    var usedFids: Set<Fid>
    var nextFid: Fid = 1
    /// Set when the session closed because the server stopped answering: since when it had
    /// been silent (its last message).
    var silentSince: ContinuousClock.Instant?
    /// The counters; requests, parked reads and the round trip come from the tag table.
    var statistics = SessionStatistics()
    var loggedOversize = false
    /// When the sleeping writer will look again by itself; nil while it runs or sleeps until
    /// signalled.
    var writerWakesAt: ContinuousClock.Instant?
    /// A send that could not wait left bytes in the transport; the writer thread flushes them.
    var flushOwed = false
    /// When the last frame came from the server (the handshake's, at first): the pool's
    /// keepalive measures the link's silence from here.
    var lastReceived = ContinuousClock.now
  }

  /// A session on a transport whose Tversion is done; `connect` starts its threads and
  /// attaches.
  init(
    transport: any MessageTransport, configuration: SessionConfiguration, msize: UInt32,
    rootFid: Fid, logger: Logger
  ) {
    self.transport = transport
    self.configuration = configuration
    self.msize = msize
    self.rootFid = rootFid
    self.logger = logger
    state = State(table: TagTable(configuration), usedFids: [rootFid])
  }

  // MARK: - Requests

  /// Queues a request; `completion` is called exactly once with the reply (Rerror becomes
  /// ``NinePError/server(ename:errno:)``) or an error. Never blocks (the fast path's write
  /// does not wait for the socket: see the file comment).
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
    let timeout: Duration? =
      if let explicit = options.timeout { explicit } else if options.mayPark { nil } else {
        configuration.requestTimeout
      }
    let callbacks = Callbacks(completion: completion, spliceSink: spliceSink)
    // Multiplex fast path: with nothing queued ahead, send on the caller's thread instead of
    // handing over to the writer (a thread hop and two context switches).
    let fastPath = configuration.profile == .multiplex
    let splices = spliceSink != nil
    condition.lock()
    let now = ContinuousClock.now
    var deadline = timeout.map { now + $0 }
    if let due = deadline, state.table.serverIsSilent() {
      deadline = min(due, now + TagTable<Callbacks>.silentServerGrace)
    }
    let id: UInt64
    let refused: [Action]
    var dispatch: TagTable<Callbacks>.Dispatch?
    if fastPath {
      (id, refused, dispatch) = state.table.submitAndDispatch(
        message, mayPark: options.mayPark, splices: splices, deadline: deadline,
        callback: callbacks, now: now)
    } else {
      (id, refused) = state.table.submit(
        message, mayPark: options.mayPark, splices: splices, deadline: deadline,
        callback: callbacks)
    }
    let handle = RequestHandle(id: id)
    if !refused.isEmpty {
      condition.unlock()
      run(refused)
      return handle
    }
    guard let dispatch else {
      condition.signal()
      condition.unlock()
      return handle
    }
    let frame = frameLocked(dispatch)
    // The writer expires timeouts; wake it only if it would otherwise sleep past this one.
    if let deadline, state.writerWakesAt.map({ deadline < $0 }) ?? true {
      condition.signal()
    }
    condition.unlock()
    _ = transmit(frame, dispatch, mayWait: false)
    return handle
  }

  /// Withdraws a request. Not yet sent: it completes with `.cancelled`. On the wire: Tflush is
  /// sent and the request completes with its reply if that crosses the flush, else `.flushed`.
  public func cancel(_ handle: RequestHandle) {
    condition.lock()
    let actions = state.table.cancel(handle.id, now: .now)
    condition.signal()
    condition.unlock()
    run(actions)
  }

  /// Sends and blocks until the reply: for start-up and tests, never for FUSE threads.
  func sendAndWait(_ message: Message, timeout: Duration?) -> Result<Message, NinePError> {
    let box = ResultBox()
    send(message, options: RequestOptions(timeout: .some(timeout))) { box.set($0) }
    return box.wait()
  }

  /// Runs what the tag table asked for, in order. Never with the lock held: completions may
  /// send, cancel or close.
  func run(_ actions: [Action]) {
    for action in actions {
      switch action {
      case .complete(_, let callbacks, .success(.spliced(let bytes))):
        if let sink = callbacks.spliceSink {
          sink(bytes)
        } else {
          callbacks.completion(.success(.rread(data: [])))
        }
      case .complete(_, let callbacks, .success(.message(let reply))):
        callbacks.completion(.success(reply))
      case .complete(_, let callbacks, .failure(let error)):
        callbacks.completion(.failure(error))
      case .clunk(let fid):
        send(.tclunk(fid: fid)) { [self] _ in releaseFid(fid) }
      case .violation(let violation):
        logger.error("\(violation); resetting the session")
        close(reason: violation)
      case .flushingLateRequest(let request):
        logger.warning("no reply to \(request) in time; flushing it")
      case .serverStoppedAnswering(let flush):
        logger.error("no reply to \(flush) in time; closing the session")
        close(reason: "the server stopped answering (no reply to \(flush))", silent: true)
      }
    }
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
    return state.table.isQueued(request.id)
  }

  /// Why the session closed, or nil while it is open.
  public var closedReason: String? {
    condition.lock()
    defer { condition.unlock() }
    return state.table.closedReason
  }

  public var statistics: SessionStatistics {
    condition.lock()
    defer { condition.unlock() }
    var stats = state.statistics
    stats.requestsInFlight = state.table.inFlightCount
    stats.requestsQueued = state.table.queuedCount
    stats.parkedReads = state.table.parkedReads
    stats.roundTrip = state.table.roundTrip
    return stats
  }

  /// When a session closed because its server stopped answering: the server's last message.
  /// Nil while open, or when it closed for another reason.
  public var silentSince: ContinuousClock.Instant? {
    condition.lock()
    defer { condition.unlock() }
    return state.silentSince
  }

  /// When the oldest request on the wire that should be answered soon (not a parked read) was
  /// sent; nil when none waits. A link is stalled while this is long ago.
  public var waitingSince: ContinuousClock.Instant? {
    condition.lock()
    defer { condition.unlock() }
    return state.table.oldestWaitingSentAt
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
    return state.table.parkedReads + state.table.queuedStreams
  }

  /// Registers a handler called once when the session closes (immediately if already closed).
  public func onClose(_ handler: @escaping @Sendable (String) -> Void) {
    condition.lock()
    if let reason = state.table.closedReason {
      condition.unlock()
      handler(reason)
      return
    }
    onCloseHandlers.append(handler)
    condition.unlock()
  }

  // MARK: - Ending

  /// Withdraws every read that may park and refuses new ones (as if closed), so that their
  /// owners read on another session; the session goes on serving other requests. Called
  /// before a retire: a read the server parked holds lines posted meanwhile, and closing
  /// the socket under it would lose the ones the server had handed it. A flushed read
  /// completes with its reply if that crossed the flush (those lines are kept), else with
  /// `.flushed`; one still queued completes with `.cancelled`.
  public func stopParking(reason: String) {
    condition.lock()
    let actions = state.table.stopParking(reason: reason, now: .now)
    condition.signal()
    condition.unlock()
    run(actions)
  }

  /// Closes the transport and fails every pending request with `.sessionClosed(reason)`.
  /// `silent`: the server stopped answering (its last message then counts as the start of
  /// the outage, see ``silentSince``).
  public func close(reason: String = "closed by the client", silent: Bool = false) {
    condition.lock()
    guard state.table.closedReason == nil else {
      condition.unlock()
      return
    }
    let failed = state.table.close(reason: reason)
    if silent { state.silentSince = state.lastReceived }
    let handlers = onCloseHandlers
    onCloseHandlers.removeAll()
    condition.broadcast()
    condition.unlock()
    transport.close()
    run(failed)
    for handler in handlers { handler(reason) }
  }
}
