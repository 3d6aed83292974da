import BBSIdentity
import Dispatch
import Glibc
import Logging
import NinePProtocol
import NinePTransport
import Synchronization

/// Serves the 9P session of one connection: version, fids, parked reads.
///
/// ``process(_:)`` handles one request frame and returns the frames to send now, in order.
/// Replies to parked reads are sent later through `send`, from the thread that ran the wake.
/// All state sits behind one lock held for a whole request, so a wake-up (or a Tflush) sees a
/// parked read either fully registered or not at all.
///
/// As in plan9port's lib9p (srv.c), each message kind has a handler of its own, in the file
/// named for it: `ConnectionHandler+Handshake.swift` (Tversion, Tauth, Tattach), `+Walk`,
/// `+Open` (Topen, Tcreate), `+Read`, `+Write`, `+Clunk` (Tclunk, Tremove), `+Stat` (Tstat,
/// Twstat) and `+ParkedReads` (Tflush and the chat reads that wait for a post).
final class ConnectionHandler: Sendable {
  struct FidState {
    var node: NamespaceNode
    var user: BoardUser
    var openMode: OpenMode?
    var fd: Int32?
    /// An open directory's entries as its read from offset 0 found them: later offsets read
    /// on from here (as a Plan 9 server keeps its Dir array per fid), so listing a directory
    /// of N entries costs one pass over it, not one per read.
    var listing: [[UInt8]]?
    /// The fid's Tcreate made its board message: clunked while still unwritten, the message
    /// goes (``MessageBoard/discardIfUnwritten(in:id:)``).
    var createdMessage = false
  }

  struct Parked {
    var fid: Fid
    var room: String
    var count: Int
    var user: BoardUser
    var waiter: ChatWaiterID
    var generation: UInt64
  }

  struct State {
    var msize: Int
    var fids: [Fid: FidState] = [:]
    /// Afids: fids of Tauth, which name no node.
    var auth = AuthTable()
    var parked: [Tag: Parked] = [:]
    var generation: UInt64 = 0
    var closed = false
    /// A Tversion has been answered: until then only Tversion is served.
    var versioned = false
    /// A Tattach has succeeded (the handshake timeout no longer applies).
    var attached = false
    /// The users this session's attaches made present in the chat (``ChatHub/arrive(_:)``).
    var present: [BoardUser] = []
  }

  let id: Int
  let namespace: Namespace
  let configuration: BBSServerConfiguration
  let logger: Logger
  let send: @Sendable ([[UInt8]]) -> Void
  let wakeQueue: DispatchQueue
  // house: a request runs under it from start to end (docs/architecture.md, "Threads and
  // locks"): its I/O and log lines are its job.
  let state: Mutex<State>
  let limiter: PostingLimiter
  /// The client's TCP host or Bluetooth address: who posts when the user is no verified
  /// identity. Nil for local clients (Unix sockets, seqpacket, standard input), whose posting
  /// is not limited.
  let address: String?
  /// Whether the session's first Tattach may go on (nil) or why not.
  let admitAttach: @Sendable (String, Bool) -> String?
  /// The secure channel the connection runs over, nil while it is plain: what a Tauth
  /// signature must be bound to.
  let channel: @Sendable () -> ChannelSecurity?
  /// Whether Tauth is refused while the connection is plain: a TCP connection to a board
  /// that offers the secure channel, where a signature made on a plain connection could be
  /// a relay's (docs/authentication.md §6).
  let signaturesNeedChannel: Bool

  /// Device or gen1: a board's fid, create, remove and wstat rules.
  var device: Bool { configuration.profile.imitatesBoard }
  /// The Gen-1 board's synchronous core and chat (docs/board-facts.md §1.3, §1.9, §7, §10).
  var gen1: Bool { configuration.profile == .gen1 }

  /// - Parameters:
  ///   - send: sends frames in order, atomically with respect to other sends.
  ///   - limiter: the server's posting allowance, shared by every session.
  ///   - address: the client's TCP host or Bluetooth address; nil for a local client.
  ///   - admitAttach: told the user id of the session's first Tattach and whether it is a
  ///     verified identity; a refusal (`board full: …`) fails that Tattach (see
  ///     ``BBSServer/settleAttach(of:as:member:)``).
  init(
    id: Int, namespace: Namespace, configuration: BBSServerConfiguration, logger: Logger,
    wakeQueue: DispatchQueue, limiter: PostingLimiter, address: String?,
    admitAttach: @escaping @Sendable (String, Bool) -> String? = { _, _ in nil },
    channel: @escaping @Sendable () -> ChannelSecurity? = { nil },
    signaturesNeedChannel: Bool = false,
    send: @escaping @Sendable ([[UInt8]]) -> Void
  ) {
    self.id = id
    self.channel = channel
    self.signaturesNeedChannel = signaturesNeedChannel
    self.admitAttach = admitAttach
    self.limiter = limiter
    self.address = address
    self.namespace = namespace
    self.configuration = configuration
    self.logger = logger
    self.wakeQueue = wakeQueue
    self.send = send
    state = Mutex(State(msize: configuration.maxMessageSize))
  }

  /// The negotiated msize (the server's maximum before Tversion).
  var msize: Int { state.withLock { $0.msize } }

  /// Whether the session has a parked read, without taking the session's lock (which a
  /// wake-up holds while it sends to a client that may not be reading): for the watchdog.
  var hasParkedRead: Bool { parkedGauge.load(ordering: .relaxed) > 0 }
  let parkedGauge = Atomic(0)
  let attachedFlag = Atomic(false)

  /// Whether a Tattach has succeeded on this session.
  /// Lock-free, like ``hasParkedRead``.
  var isAttached: Bool { attachedFlag.load(ordering: .relaxed) }

  /// Drops parked reads without replies and releases every fid; later wake-ups do nothing.
  /// Returns how many fids the client had not clunked.
  @discardableResult
  func close() -> Int {
    state.withLock { state in
      defer { parkedGauge.store(state.parked.count, ordering: .relaxed) }
      let open = state.closed ? 0 : state.fids.count
      state.closed = true
      reset(&state)
      return open
    }
  }

  func reset(_ state: inout State) {
    for parked in state.parked.values { namespace.board.chat.removeWaiter(parked.waiter) }
    state.parked.removeAll()
    for fid in state.fids.values {
      if let fd = fid.fd { Glibc.close(fd) }
      dropIfUnwritten(fid)
    }
    state.fids.removeAll()
    state.auth.removeAll()
    for user in state.present { namespace.board.chat.leave(user) }
    state.present.removeAll()
  }

  /// A fid that created a board message let go: the message goes if it was never written.
  func dropIfUnwritten(_ fid: FidState) {
    guard fid.createdMessage, case .boardMessage(let room, let message) = fid.node else { return }
    namespace.board.rooms.discardIfUnwritten(in: room, id: message)
  }

  /// Whether a new fid (or afid) may be made with this number.
  func checkNewFid(_ fid: Fid, _ state: State) throws(NinePFailure) {
    guard state.fids[fid] == nil, !state.auth.isAuthFid(fid) else {
      throw NinePFailure("FID already in use")
    }
    guard state.fids.count + state.auth.count < configuration.maxFids else {
      throw NinePFailure("cannot allocate newfid")
    }
  }

  // MARK: Requests

  /// Handles one request frame (size prefix included) and returns the reply frames to send
  /// now, in order: possibly Rread(0) for displaced parked reads, then the reply, which is
  /// absent when the request parked.
  func process(_ frame: [UInt8]) -> [OutgoingFrame] {
    var fileRead: OutgoingFrame?
    let frames = state.withLock { state -> [[UInt8]] in
      defer { parkedGauge.store(state.parked.count, ordering: .relaxed) }
      guard !state.closed else { return [] }
      let decoded: (tag: Tag, message: Message)
      do throws(ProtocolError) {
        decoded = try Message.decode(
          frame, limits: DecodeLimits(maxFrameSize: max(state.msize, configuration.maxMessageSize)))
      } catch {
        return [malformed(frame, error: error)]
      }
      let (tag, message) = decoded
      guard message.type.isRequest else {
        logger.warning("session \(id): client sent a reply message (\(message.type)); refusing")
        return [Message.rerror(ename: "operation not supported").encoded(tag: tag)]
      }
      logger.trace("session \(id): <- \(message)")
      var out: [[UInt8]] = []
      // A new request reusing a parked read's tag answers the parked read first.
      if case .tflush = message {
      } else if let parked = state.parked.removeValue(forKey: tag) {
        namespace.board.chat.removeWaiter(parked.waiter)
        out.append(Message.rread(data: []).encoded(tag: tag))
      }
      if let maxTags = configuration.maxTags, state.parked.count + 1 > maxTags {
        out.append(Message.rerror(ename: "resource temporarily unavailable").encoded(tag: tag))
        return out
      }
      if case .tread(let fid, let offset, let count) = message,
        let region = fileRegion(fid: fid, offset: offset, count: count, state: state)
      {
        fileRead = .fileRead(
          header: Message.rreadHeader(tag: tag, count: region.count), file: region)
        return out
      }
      let reply: Message?
      do throws(NinePFailure) {
        reply = try handle(message, tag: tag, state: &state, before: &out)
      } catch {
        reply = .rerror(ename: gen1 ? Self.gen1Ename(error, for: message) : error.ename)
      }
      if let reply {
        // Gen-1 tags every answer to Tversion NOTAG, whatever the request carried.
        let replyTag: Tag
        if gen1, case .tversion = message { replyTag = NineP.noTag } else { replyTag = tag }
        logger.trace("session \(id): -> \(reply) tag \(replyTag)")
        out.append(reply.encoded(tag: replyTag))
      }
      return out
    }
    return frames.map(OutgoingFrame.bytes) + (fileRead.map { [$0] } ?? [])
  }

  /// Answers one decoded request through the handler of its kind. Returns nil when the
  /// request parked; `before` collects frames that go out ahead of the reply (Rread(0) for
  /// parked reads the request displaced).
  private func handle(
    _ message: Message, tag: Tag, state: inout State, before: inout [[UInt8]]
  ) throws(NinePFailure) -> Message? {
    if !state.versioned {
      // As Plan 9 servers do: nothing but Tversion before a version is agreed.
      guard case .tversion = message else {
        logger.warning("session \(id): \(message.type) before Tversion; refusing")
        throw NinePFailure("version not negotiated")
      }
    }
    switch message {
    case .tversion(let msize, let version):
      return try handleVersion(msize: msize, version: version, state: &state)
    case .tauth(let afid, let uname, _):
      return try handleAuth(afid: afid, uname: uname, state: &state)
    case .tattach(let fid, let afid, let uname, let aname):
      return try handleAttach(fid: fid, afid: afid, uname: uname, aname: aname, state: &state)
    case .tflush(let oldtag):
      return handleFlush(oldtag: oldtag, state: &state, before: &before)
    case .twalk(let fid, let newfid, let names):
      return try handleWalk(fid: fid, newfid: newfid, names: names, state: &state)
    case .topen(let fid, let mode):
      return try handleOpen(fid: fid, mode: mode, state: &state)
    case .tcreate(let fid, let name, let perm, let mode):
      return try handleCreate(fid: fid, name: name, perm: perm, mode: mode, state: &state)
    case .tread(let fid, let offset, let count):
      return try handleRead(
        fid: fid, offset: offset, count: count, tag: tag, state: &state, before: &before)
    case .twrite(let fid, let offset, let data):
      return try handleWrite(fid: fid, offset: offset, data: data, state: &state)
    case .tclunk(let fid):
      return handleClunk(fid: fid, state: &state, before: &before)
    case .tremove(let fid):
      return try handleRemove(fid: fid, state: &state, before: &before)
    case .tstat(let fid):
      return try handleStat(fid: fid, state: state)
    case .twstat(let fid, let stat):
      return try handleWstat(fid: fid, stat: stat, state: &state)
    default:
      throw NinePFailure("operation not supported")
    }
  }

  /// Gen-1 collapses every file system errno into one string per op (docs/board-facts.md §1.9).
  private static func gen1Ename(_ error: NinePFailure, for message: Message) -> String {
    guard error.isFileSystemError else { return error.ename }
    switch message {
    case .topen: return "open failed"
    case .tread: return "read failed"
    case .twrite: return "write failed"
    case .tcreate: return "create failed"
    case .tremove: return "remove failed"
    case .tstat: return "stat failed"
    default: return error.ename
    }
  }

  private func malformed(_ frame: [UInt8], error: ProtocolError) -> [UInt8] {
    let tag = frame.count >= 7 ? Tag(frame[5]) | Tag(frame[6]) << 8 : NineP.noTag
    let type = frame.count >= 5 ? MessageType(rawValue: frame[4]) : nil
    let ename: String
    switch (type, error) {
    case (_, .tooManyWalkElements): ename = "too many name elements"
    case (.twalk?, _): ename = "malformed walk message"
    case (.tversion?, _): ename = "bad Tversion"
    case (.tread?, _): ename = "malformed Tread"
    case (.twrite?, _): ename = "malformed Twrite"
    case (.tcreate?, _): ename = "malformed Tcreate"
    default: ename = "invalid argument"
    }
    logger.warning("session \(id): malformed request: \(error); answering '\(ename)'")
    return Message.rerror(ename: ename).encoded(tag: tag)
  }

  /// Whether `user` is a member: an identity its Tauth proved (everyone else is a guest).
  func isMember(_ user: BoardUser) -> Bool {
    configuration.auth != .off && !user.id.isEmpty
  }

  /// Whose allowance a post (Tcreate of a message or room, Twrite of chat or a message)
  /// spends: a verified identity's own; everyone else's (guests, and unverified unames, which
  /// cost nothing to change) is their network's (``SourceNetwork``: one machine holds a whole
  /// /24 or /64), and the guests' shared budget. Nil for a local client: the limits are
  /// against the network, and local users share one machine.
  func poster(_ user: BoardUser) -> Poster? {
    guard let address else { return nil }
    if isMember(user) { return .member(user.id) }
    return .guest(network: SourceNetwork.key(of: address))
  }
}
