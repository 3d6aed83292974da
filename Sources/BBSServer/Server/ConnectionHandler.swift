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
final class ConnectionHandler: Sendable {
  private struct FidState {
    var node: NamespaceNode
    var user: BoardUser
    var openMode: OpenMode?
    var fd: Int32?
  }

  private struct Parked {
    var fid: Fid
    var room: String
    var count: Int
    var user: BoardUser
    var waiter: ChatWaiterID
    var generation: UInt64
  }

  private struct State {
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
  private let namespace: Namespace
  private let configuration: BBSServerConfiguration
  private let logger: Logger
  private let send: @Sendable ([[UInt8]]) -> Void
  private let wakeQueue: DispatchQueue
  private let state: Mutex<State>
  private let limiter: PostingLimiter
  /// The client's TCP host: who posts when the user is no verified identity. Nil for local
  /// clients (Unix sockets, seqpacket, standard input), whose posting is not limited.
  private let address: String?

  /// Device or gen1: a board's fid, create, remove and wstat rules.
  private var device: Bool { configuration.profile.imitatesBoard }
  /// The Gen-1 board's synchronous core and chat (docs/board-facts.md §1.3, §1.9, §7, §10).
  private var gen1: Bool { configuration.profile == .gen1 }

  /// - Parameters:
  ///   - send: sends frames in order, atomically with respect to other sends.
  ///   - limiter: the server's posting allowance, shared by every session.
  ///   - address: the client's TCP host; nil for a local client.
  init(
    id: Int, namespace: Namespace, configuration: BBSServerConfiguration, logger: Logger,
    wakeQueue: DispatchQueue, limiter: PostingLimiter, address: String?,
    send: @escaping @Sendable ([[UInt8]]) -> Void
  ) {
    self.id = id
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

  /// Number of parked reads (for tests and status).
  var parkedCount: Int { state.withLock { $0.parked.count } }

  /// Whether the session has a parked read, without taking the session's lock (which a
  /// wake-up holds while it sends to a client that may not be reading): for the watchdog.
  var hasParkedRead: Bool { parkedGauge.load(ordering: .relaxed) > 0 }
  private let parkedGauge = Atomic(0)
  private let attachedFlag = Atomic(false)

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

  private func reset(_ state: inout State) {
    for parked in state.parked.values { namespace.board.chat.removeWaiter(parked.waiter) }
    state.parked.removeAll()
    for fid in state.fids.values { if let fd = fid.fd { Glibc.close(fd) } }
    state.fids.removeAll()
    state.auth.removeAll()
    for user in state.present { namespace.board.chat.leave(user) }
    state.present.removeAll()
  }

  /// Whether a new fid (or afid) may be made with this number.
  private func checkNewFid(_ fid: Fid, _ state: State) throws(NinePFailure) {
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

  /// How many bytes a Tread asking for `count` gets at most: what one Rread can carry.
  private func readLimit(_ count: UInt32, _ state: State) -> Int {
    // Gen-1 clamps to its 8192-byte TX buffer, not to the msize (docs/board-facts.md §7.2).
    let buffer = gen1 ? configuration.maxMessageSize : state.msize
    return min(Int(count), max(0, buffer - NineP.readOverhead))
  }

  /// A Tread of an open regular file of the file area, as the region of the file its Rread
  /// carries (on a descriptor of its own, which the sender closes); nil for every other read,
  /// and for a read `handle` must refuse, so the usual path answers it.
  private func fileRegion(fid: Fid, offset: UInt64, count: UInt32, state: State) -> FileRegion? {
    guard let entry = state.fids[fid], case .files = entry.node, let fd = entry.fd,
      entry.openMode?.allowsReading == true
    else { return nil }
    var info = stat()
    guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
    let limit = readLimit(count, state)
    let size = UInt64(max(0, info.st_size))
    let available = offset < size ? Int(clamping: size - offset) : 0
    let own = dup(fd)
    guard own >= 0 else { return nil }
    return FileRegion(
      descriptor: own, offset: Int64(clamping: offset), count: min(limit, available))
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
      // Gen-1 wants exactly 9P2000; HEAD leaves the session untouched on an unknown version.
      if gen1 && version != NineP.version { throw NinePFailure("unsupported version") }
      guard version.hasPrefix("9P2000") else {
        return .rversion(msize: UInt32(clamping: state.msize), version: "unknown")
      }
      // Never more than the client offered; a header-only msize cannot carry a reply.
      guard msize >= 64 else { throw NinePFailure("bad Tversion") }
      // A new version drops parked reads without replies and clunks every fid.
      reset(&state)
      state.versioned = true
      state.msize = min(Int(msize), configuration.maxMessageSize)
      return .rversion(msize: UInt32(state.msize), version: NineP.version)

    case .tauth(let afid, let uname, _):
      guard configuration.auth != .off else { throw NinePFailure("authentication not required") }
      // An identity is the hex of 20 bytes; anything else is refused before it is kept or
      // logged.
      guard uname.utf8.count == 40, uname.utf8.allSatisfy(isASCIIHexDigit) else {
        logger.notice(
          "session \(id): Tauth refused: invalid identity '\(LogText.escaped(uname))'")
        throw NinePFailure("invalid identity")
      }
      do {
        try checkNewFid(afid, state)
      } catch {
        throw NinePFailure("cannot allocate afid")
      }
      return .rauth(
        aqid: try state.auth.begin(
          afid: afid, claimed: uname, boardKey: configuration.boardKey.flatMap(BoardKey.init(of:))))

    case .tattach(let fid, let afid, let uname, let aname):
      let user = try attachingUser(afid: afid, uname: uname, state: state)
      try checkNewFid(fid, state)
      var node = NamespaceNode.root
      for name in aname.split(separator: "/") where !name.isEmpty {
        guard let next = namespace.walk(from: node, name: String(name)) else {
          throw NinePFailure("aname not found")
        }
        node = next
      }
      namespace.board.etc.register(user: user.id)
      // Counted once per user a session attaches as, and for a bounded number of them.
      if !state.present.contains(user) && state.present.count < 64 {
        namespace.board.chat.arrive(user)
        state.present.append(user)
      }
      state.fids[fid] = FidState(node: node, user: user)
      state.attached = true
      attachedFlag.store(true, ordering: .relaxed)
      logger.debug(
        "session \(id): attach fid \(fid) uname '\(LogText.escaped(uname))' as \(LogText.escaped(user.description)) aname '\(LogText.escaped(aname))'"
      )
      return .rattach(qid: namespace.walkQid(node))

    case .tflush(let oldtag):
      if let parked = state.parked.removeValue(forKey: oldtag) {
        namespace.board.chat.removeWaiter(parked.waiter)
        before.append(Message.rread(data: []).encoded(tag: oldtag))
      }
      return .rflush

    case .twalk(let fid, let newfid, let names):
      guard let source = state.fids[fid] else { throw NinePFailure("unknown fid") }
      guard source.openMode == nil else { throw NinePFailure("cannot walk an open fid") }
      if newfid == fid {
        if device { throw NinePFailure("cannot allocate newfid") }
      } else {
        try checkNewFid(newfid, state)
      }
      guard names.count <= NineP.maxWalkElements else {
        throw NinePFailure("too many name elements")
      }
      var node = source.node
      var qids: [Qid] = []
      for name in names {
        guard let next = namespace.walk(from: node, name: name) else { break }
        node = next
        qids.append(namespace.walkQid(node))
      }
      if qids.count < names.count {
        // Gen-1 has no partial Rwalk.
        if qids.isEmpty || gen1 { throw NinePFailure.notFound }
        return .rwalk(qids: qids)
      }
      state.fids[newfid] = FidState(node: node, user: source.user)
      return .rwalk(qids: qids)

    case .topen(let fid, let mode):
      guard var entry = state.fids[fid] else { throw NinePFailure("unknown fid") }
      guard entry.openMode == nil else { throw NinePFailure("fid already open") }
      if case .files(let path) = entry.node, let files = namespace.files {
        if !(try files.info(path)).isDirectory {
          try checkOpenFiles(state)
          entry.fd = try files.open(path, mode: mode)
        } else if mode.allowsWriting {
          throw NinePFailure(errno: EISDIR, operation: "open")
        }
      }
      entry.openMode = mode
      state.fids[fid] = entry
      return .ropen(qid: namespace.walkQid(entry.node), iounit: gen1 ? 0 : iounit(state))

    case .tcreate(let fid, let name, let perm, let mode):
      guard var entry = state.fids[fid] else { throw NinePFailure("unknown fid") }
      guard entry.openMode == nil else { throw NinePFailure("fid already open") }
      if case .files = entry.node, !perm.isDirectory { try checkOpenFiles(state) }
      // A new board message, or a new board room at the root, is a post.
      switch (entry.node, poster(entry.user)) {
      case (.boardRoom, let poster?), (.root, let poster?):
        try limiter.spend(poster: poster, posts: 1, bytes: 0)
      default: break
      }
      let created = try namespace.create(
        in: entry.node, name: name, perm: perm, mode: mode, user: entry.user)
      entry.node = created.node
      entry.fd = created.fd
      entry.openMode = mode
      state.fids[fid] = entry
      logger.debug("session \(id): created \(LogText.escaped(created.node.path))")
      return .rcreate(qid: namespace.walkQid(created.node), iounit: device ? 0 : iounit(state))

    case .tread(let fid, let offset, let count) where state.auth.isAuthFid(fid):
      return .rread(
        data: try state.auth.read(
          afid: fid, offset: offset, count: Int(count), lifetime: configuration.challengeLifetime)[
            ...])

    case .tread(let fid, let offset, let count):
      guard let entry = state.fids[fid] else { throw NinePFailure("unknown fid") }
      guard let mode = entry.openMode else { throw NinePFailure("fid not open") }
      guard mode.allowsReading else { throw NinePFailure("fid not open for reading") }
      let limit = readLimit(count, state)
      if case .chatRoom(let room) = entry.node {
        if gen1 { return try readGen1Chat(room: room, count: limit) }
        return try readChat(
          room: room, fid: fid, tag: tag, count: limit, user: entry.user, state: &state,
          before: &before)
      }
      return .rread(
        data: try namespace.read(
          entry.node, offset: offset, count: limit, user: entry.user, fd: entry.fd)[...])

    case .twrite(let fid, _, let data) where state.auth.isAuthFid(fid):
      let count = try state.auth.write(
        afid: fid, data: Array(data), form: configuration.authSign,
        boardKey: configuration.boardKey, lifetime: configuration.challengeLifetime,
        logger: logger, session: id)
      return .rwrite(count: UInt32(count))

    case .twrite(let fid, let offset, let data):
      guard let entry = state.fids[fid] else { throw NinePFailure("unknown fid") }
      guard let mode = entry.openMode else { throw NinePFailure("fid not open") }
      guard mode.allowsWriting else { throw NinePFailure("fid not open for writing") }
      // Any Twrite, even one that fails, makes its uname the Gen-1 board's user.
      if gen1 { namespace.noteWriter(entry.user.id) }
      switch (entry.node, poster(entry.user)) {
      case (.chatPost, let poster?):
        let lines = data.reduce(0) { $1 == 0x0A ? $0 + 1 : $0 }
        try limiter.spend(poster: poster, posts: max(1, lines), bytes: data.count)
      case (.boardMessage, let poster?):
        try limiter.spend(poster: poster, posts: 0, bytes: data.count)
      default: break
      }
      let count = try namespace.write(
        entry.node, offset: offset, data: data, user: entry.user, fd: entry.fd)
      return .rwrite(count: UInt32(clamping: count))

    case .tclunk(let fid):
      state.auth.remove(fid)
      answerParked(onFid: fid, state: &state, before: &before)
      if let entry = state.fids.removeValue(forKey: fid), let fd = entry.fd { Glibc.close(fd) }
      return .rclunk

    case .tremove(let fid):
      guard let entry = state.fids[fid] else { throw NinePFailure("unknown fid") }
      do {
        try namespace.remove(entry.node)
      } catch {
        // A device keeps the fid after a failed remove; remove(5) says it is clunked.
        if !device { clunk(fid, state: &state, before: &before) }
        throw error
      }
      clunk(fid, state: &state, before: &before)
      return .rremove

    case .tstat(let fid):
      guard let entry = state.fids[fid] else { throw NinePFailure("unknown fid") }
      if case .files(let path) = entry.node { _ = try namespace.files?.info(path) }
      return .rstat(stat: namespace.stat(entry.node, user: entry.user))

    case .twstat(let fid, let stat):
      guard let entry = state.fids[fid] else { throw NinePFailure("unknown fid") }
      // A board has no Twstat, even for a wstat that changes nothing (docs/board-facts.md §10).
      guard !device else { throw NinePFailure("wstat not supported") }
      state.fids[fid]?.node = try namespace.wstat(entry.node, stat)
      return .rwstat

    default:
      throw NinePFailure("operation not supported")
    }
  }

  /// Who a Tattach's fid belongs to (docs/board-facts.md §6): unauthenticated, the uname; with
  /// it the identity its afid proved, else a guest, unless authentication is required.
  private func attachingUser(afid: Fid, uname: String, state: State) throws(NinePFailure)
    -> BoardUser
  {
    guard configuration.auth != .off else {
      // The uname is what chat lines and messages show: a control character in it could
      // forge a line or a header.
      guard !uname.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F }) else {
        logger.notice(
          "session \(id): attach refused: control characters in uname '\(LogText.escaped(uname))'")
        throw NinePFailure("invalid argument")
      }
      return BoardUser(uname)
    }
    if afid != NineP.noFid {
      if let identity = try state.auth.verifiedIdentity(afid: afid, uname: uname) {
        return BoardUser(
          id: identity.hex, name: configuration.nicknames[identity.hex] ?? identity.short)
      }
      if configuration.auth == .required { throw NinePFailure("authentication incomplete") }
    } else if configuration.auth == .required {
      throw NinePFailure("authentication required")
    }
    return .guest
  }

  /// Refuses to open one more file of the files area when the session holds
  /// ``BBSServerConfiguration/maxOpenFilesPerSession`` already: each holds a descriptor, and
  /// a client opening thousands would take the server's last one (accept(2) then fails).
  private func checkOpenFiles(_ state: State) throws(NinePFailure) {
    let open = state.fids.values.lazy.filter { $0.fd != nil }.count
    guard open < configuration.maxOpenFilesPerSession else {
      logger.notice(
        "session \(id): \(open) files open, the most a session may hold; refusing another")
      throw NinePFailure("resource temporarily unavailable")
    }
  }

  /// Whose allowance a post spends: a verified identity's own; everyone else's (guests, and
  /// unverified unames, which cost nothing to change) is their address's. Nil for a local
  /// client: the limits are against the network, and local users share one machine.
  private func poster(_ user: BoardUser) -> String? {
    guard let address else { return nil }
    if configuration.auth != .off, !user.id.isEmpty { return "id " + user.id }
    return "address " + address
  }

  private func iounit(_ state: State) -> UInt32 {
    UInt32(clamping: max(0, state.msize - 24))
  }

  private func clunk(_ fid: Fid, state: inout State, before: inout [[UInt8]]) {
    answerParked(onFid: fid, state: &state, before: &before)
    if let entry = state.fids.removeValue(forKey: fid), let fd = entry.fd { Glibc.close(fd) }
  }

  /// Answers every read parked on `fid` with Rread(0).
  private func answerParked(onFid fid: Fid, state: inout State, before: inout [[UInt8]]) {
    for (tag, parked) in state.parked where parked.fid == fid {
      namespace.board.chat.removeWaiter(parked.waiter)
      state.parked[tag] = nil
      before.append(Message.rread(data: []).encoded(tag: tag))
    }
  }

  // MARK: Chat streams and parked reads

  /// A Gen-1 chat read: never parks (a caught-up or empty room answers 0 bytes at once) and
  /// always uses, and registers, the board-wide last writer's cursor.
  private func readGen1Chat(room: String, count: Int) throws(NinePFailure) -> Message {
    do {
      return .rread(
        data: try namespace.board.chat.read(
          room: room, user: BoardUser(namespace.authenticatedUser), count: count)[...])
    } catch {
      throw NinePFailure(error, operation: "read")
    }
  }

  private func readChat(
    room: String, fid: Fid, tag: Tag, count: Int, user: BoardUser, state: inout State,
    before: inout [[UInt8]]
  ) throws(NinePFailure) -> Message? {
    // One parked read per fid: a new Tread answers the old one with Rread(0).
    answerParked(onFid: fid, state: &state, before: &before)
    var wake: (@Sendable () -> Void)?
    let generation = state.generation + 1
    if state.parked.count < configuration.parkingSlots {
      wake = makeWake(tag: tag, generation: generation)
    } else {
      logger.warning(
        "session \(id): all \(configuration.parkingSlots) parking slots in use; answering tag \(tag) at once"
      )
    }
    let outcome: ChatReadOutcome
    do {
      outcome = try namespace.board.chat.readOrPark(
        room: room, user: user, count: count, wake: wake)
    } catch {
      throw NinePFailure(error, operation: "read")
    }
    switch outcome {
    case .data(let bytes): return .rread(data: bytes[...])
    case .empty: return .rread(data: [])
    case .parked(let waiter):
      state.generation = generation
      state.parked[tag] = Parked(
        fid: fid, room: room, count: count, user: user, waiter: waiter, generation: generation)
      logger.debug("session \(id): parked read tag \(tag) on \(room)")
      return nil
    }
  }

  private func makeWake(tag: Tag, generation: UInt64) -> @Sendable () -> Void {
    { [weak self] in
      guard let self else { return }
      self.wakeQueue.async { self.wake(tag: tag, generation: generation) }
    }
  }

  /// A post arrived in the room of a parked read: read again and answer, or park again if
  /// another reader with the same name took the lines.
  private func wake(tag: Tag, generation: UInt64) {
    state.withLock { state in
      defer { parkedGauge.store(state.parked.count, ordering: .relaxed) }
      guard !state.closed, let parked = state.parked[tag], parked.generation == generation else {
        return
      }
      state.parked[tag] = nil
      let next = state.generation + 1
      let reply: Message
      do throws(BoardError) {
        let outcome = try namespace.board.chat.readOrPark(
          room: parked.room, user: parked.user, count: parked.count,
          wake: makeWake(tag: tag, generation: next))
        switch outcome {
        case .data(let bytes): reply = .rread(data: bytes[...])
        case .empty: reply = .rread(data: [])
        case .parked(let waiter):
          state.generation = next
          var again = parked
          again.waiter = waiter
          again.generation = next
          state.parked[tag] = again
          return
        }
      } catch {
        reply = .rerror(ename: NinePFailure(error, operation: "read").ename)
      }
      logger.trace("session \(id): -> \(reply) tag \(tag) (woken)")
      send([reply.encoded(tag: tag)])
    }
  }
}

/// Whether `byte` is `0-9`, `a-f` or `A-F`.
private func isASCIIHexDigit(_ byte: UInt8) -> Bool {
  (0x30...0x39).contains(byte) || (0x41...0x46).contains(byte) || (0x61...0x66).contains(byte)
}
