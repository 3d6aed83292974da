import Glibc
import Synchronization

/// The concrete transport behind `dial(_:options:)` for every kind of address, and what
/// `Listener.accept()` returns.
///
/// Framed I/O (`send`, `receive`) segments and reassembles 9P messages. Raw I/O (`sendRaw`,
/// `receiveRaw`) moves single SDUs or stream chunks unmodified, for a server that emulates a
/// device's SDU-level rules. Do not mix framed and raw receiving on one transport, except that
/// `receiveRaw` first hands back any bytes `receive` had buffered. A client sends with
/// `sendWithoutWaiting` and `flushPending` (SocketTransport+NonWaiting.swift), a server with the
/// waiting `send` calls; the two are not used on one transport at the same time.
public final class SocketTransport: FileRegionSending {
  /// Where this transport leads (for accepted TCP connections: the peer).
  public let address: TransportAddress
  /// The largest SDU `send` produces on packet transports; nil for byte streams.
  public let sendSDULimit: Int?
  /// True when each send/receive call is one packet (SDU): seqpacket and l2cap.
  public let isPacket: Bool

  let readFD: Int32
  let writeFD: Int32
  let readIsSocket: Bool
  let writeIsSocket: Bool
  let gate: IOGate
  /// Held around each message's writes, so concurrent senders' messages never interleave.
  // house: its job is the socket writes under it.
  let sendLock = Mutex(())
  /// What non-waiting sends left for a flush (SocketTransport+NonWaiting.swift).
  let backlog = Mutex(SendBacklog())
  /// Whether the descriptors were set O_NONBLOCK for sendfile(2) and splice(2) (done once, on
  /// first use).
  private let madeNonBlocking = Atomic(false)
  /// The receive buffer, held by the one receiving thread around its reads.
  // house: its job is the socket reads under it (one receiver; nothing else takes it).
  private let receiveState = Mutex(ReceiveState())
  /// A reply's pieces overflowed the pipe it was spliced into: splicing stops (Splice.swift).
  let spliceOverflowed = Atomic(false)
  /// For tests: the size of the pipes replies are spliced into (0: what each reply needs).
  let splicePipeSize = Atomic(0)
  /// Whether `receive` holds the first bytes of a message whose rest has not arrived.
  private let partialMessage = Atomic(false)

  /// Bytes moved so far, each way (a server tells a slow client from a stalled one by them).
  let bytesSent = Atomic(0)
  private let bytesReceived = Atomic(0)

  /// Whether part of a message has arrived and the rest not yet (framed receiving only): a
  /// server uses it to time out a client that stops halfway through a request.
  public var isInsideMessage: Bool { partialMessage.load(ordering: .relaxed) }

  /// Bytes sent and received so far. A server that times out stalled clients checks these
  /// move, so a client on a slow link is not taken for one that stopped.
  public var transferredBytes: (sent: Int, received: Int) {
    (bytesSent.load(ordering: .relaxed), bytesReceived.load(ordering: .relaxed))
  }

  private struct ReceiveState {
    var assembler = FrameAssembler()
    var scratch: [UInt8] = []
  }

  /// Packet reads use a buffer at least this large, so any L2CAP SDU (≤ 65535 bytes) fits whole.
  static let packetBufferSize = 65536
  /// Stream reads take up to this many bytes at a time.
  static let streamChunkSize = 65536
  /// A stream message with at least this many bytes still to come is received straight into
  /// its own storage rather than through the assembler's buffer (one copy fewer per byte).
  static let directReadThreshold = 16384

  /// Wraps connected descriptors; the transport owns them and closes them on `close()`
  /// (descriptors 0–2 are pointed at /dev/null instead, so they never get reused).
  init(
    address: TransportAddress, readFD: Int32, writeFD: Int32, isPacket: Bool, sendSDULimit: Int?
  ) throws(TransportError) {
    self.address = address
    self.readFD = readFD
    self.writeFD = writeFD
    self.isPacket = isPacket
    self.sendSDULimit = sendSDULimit
    readIsSocket = socketType(of: readFD) != nil
    writeIsSocket = socketType(of: writeFD) != nil
    gate = try IOGate { [readFD, writeFD] in
      releaseDescriptor(readFD)
      if writeFD != readFD { releaseDescriptor(writeFD) }
    }
  }

  deinit {
    gate.close()
  }

  // MARK: Framed I/O

  /// Sends one complete, size-prefixed 9P message. On packet transports it goes out as SDUs
  /// of at most `sendSDULimit` bytes, none shared with another message. Concurrent callers are
  /// serialised, so messages never interleave.
  public func send(_ message: [UInt8]) throws(TransportError) {
    try gate.withAccess { () throws(TransportError) in
      try sendLock.withLock { _ throws(TransportError) in
        if isPacket, let limit = sendSDULimit {
          for segment in SDUSegmenter.segments(of: message, limit: limit) {
            try writePacket(segment)
          }
        } else if isPacket {
          try writePacket(message[...])
        } else {
          try writeStream(message[...])
        }
      }
    }
  }

  /// Blocks until one complete message has arrived and returns it, size prefix included;
  /// returns nil at an orderly end of stream.
  /// - Throws: `frameTooSmall`/`frameTooLarge` for a bad size prefix, `truncatedMessage` if the
  ///   peer hangs up mid-message, `.closed` after `close()`.
  public func receive(limit: Int) throws(TransportError) -> [UInt8]? {
    guard case .frame(let message)? = try receive(limit: limit, rule: nil) else { return nil }
    return message
  }

  /// Receives like ``receive(limit:)``; on a stream socket the data of a large Rread that
  /// `rule` accepts comes spliced into a pipe (see Splice.swift).
  public func receive(limit: Int, splicing rule: SpliceRule) throws(TransportError)
    -> ReceivedMessage?
  {
    try receive(limit: limit, rule: canSplice ? rule : nil)
  }

  private func receive(limit: Int, rule: SpliceRule?) throws(TransportError) -> ReceivedMessage? {
    try gate.withAccess { () throws(TransportError) -> ReceivedMessage? in
      try receiveState.withLock { (state) throws(TransportError) -> ReceivedMessage? in
        while true {
          if let rule {
            if state.assembler.bufferedByteCount >= rreadHeaderSize,
              let spliced = try receiveSplicedRead(&state.assembler, limit: limit, rule: rule)
            {
              return spliced
            }
            if state.assembler.bufferedByteCount == 0, rule.isExpecting() {
              // The header alone first: if it starts a large Rread, its data can go to a pipe.
              let count = try readOnce(into: &state.scratch, streamLimit: rreadHeaderSize)
              if count == 0 { return nil }
              state.assembler.append(state.scratch[0..<count])
              continue
            }
          }
          if !isPacket, let size = state.assembler.pendingMessageSize,
            Int(size) - state.assembler.bufferedByteCount >= Self.directReadThreshold
          {
            // A large message: the rest goes straight into its own storage.
            partialMessage.store(true, ordering: .relaxed)
            let message = try state.assembler.nextMessage(limit: limit) {
              (rest) throws(TransportError) in try readOnce(into: rest)
            }
            partialMessage.store(state.assembler.bufferedByteCount > 0, ordering: .relaxed)
            return message.map { .frame($0) }
          }
          if let message = try state.assembler.nextMessage(limit: limit) {
            partialMessage.store(state.assembler.bufferedByteCount > 0, ordering: .relaxed)
            return .frame(message)
          }
          partialMessage.store(state.assembler.bufferedByteCount > 0, ordering: .relaxed)
          let count = try readOnce(into: &state.scratch)
          if count == 0 {
            let buffered = state.assembler.bufferedByteCount
            if buffered > 0 { throw .truncatedMessage(bufferedBytes: buffered) }
            return nil
          }
          state.assembler.append(state.scratch[0..<count])
        }
      }
    }
  }

  /// Closes the transport: threads blocked in `send` or `receive` wake and throw `.closed`,
  /// and the descriptors are closed once they have left. Idempotent.
  public func close() {
    gate.close()
  }

  // MARK: Raw I/O

  /// Receives one SDU (packet transports) or up to `maxBytes` stream bytes; nil at end of
  /// stream. On packet transports the whole SDU is returned even when it is longer than
  /// `maxBytes` (reads use a buffer of at least 64 KiB), so a caller emulating a device can
  /// judge oversize SDUs itself; `sduTooLarge` only if even that buffer was too small.
  public func receiveRaw(maxBytes: Int) throws(TransportError) -> [UInt8]? {
    try gate.withAccess { () throws(TransportError) -> [UInt8]? in
      try receiveState.withLock { (state) throws(TransportError) -> [UInt8]? in
        if state.assembler.bufferedByteCount > 0 { return state.assembler.drain() }
        let count = try readOnce(into: &state.scratch, streamLimit: max(1, maxBytes))
        return count == 0 ? nil : Array(state.scratch[0..<count])
      }
    }
  }

  /// Sends `bytes` unmodified: as one SDU on packet transports (even beyond `sendSDULimit`),
  /// as plain stream bytes otherwise.
  public func sendRaw(_ bytes: [UInt8]) throws(TransportError) {
    try gate.withAccess { () throws(TransportError) in
      try sendLock.withLock { _ throws(TransportError) in
        if isPacket { try writePacket(bytes[...]) } else { try writeStream(bytes[...]) }
      }
    }
  }

  // MARK: Descriptor I/O (called inside the gate)

  /// One read: a whole SDU on packet transports, else up to `streamLimit` bytes. 0 means EOF.
  private func readOnce(into buffer: inout [UInt8], streamLimit: Int = streamChunkSize)
    throws(TransportError) -> Int
  {
    let capacity = isPacket ? Self.packetBufferSize : min(streamLimit, Self.streamChunkSize)
    if buffer.count < capacity { buffer = [UInt8](repeating: 0, count: capacity) }
    return try buffer.withUnsafeMutableBytes { raw in
      Result { () throws(TransportError) in
        try readOnce(into: UnsafeMutableRawBufferPointer(rebasing: raw[..<capacity]))
      }
    }.get()
  }

  /// One read into `buffer`: a whole SDU on packet transports, else up to `buffer.count` bytes.
  /// 0 means EOF.
  func readOnce(into buffer: UnsafeMutableRawBufferPointer) throws(TransportError) -> Int {
    let capacity = buffer.count
    var tried = false
    while true {
      // Read first and wait only when nothing is there: a poll per read doubles the system
      // calls of a bulk transfer.
      if tried || !readIsSocket || isPacket {
        _ = try gate.wait(for: readFD, events: Int16(POLLIN))
      }
      tried = true
      let count: Int
      if isPacket {
        count = recv(readFD, buffer.baseAddress, capacity, Int32(MSG_DONTWAIT | MSG_TRUNC))
      } else if readIsSocket {
        count = recv(readFD, buffer.baseAddress, capacity, Int32(MSG_DONTWAIT))
      } else {
        count = Glibc.read(readFD, buffer.baseAddress, capacity)
      }
      if count >= 0 {
        if count > capacity { throw .sduTooLarge(size: count, limit: capacity) }
        bytesReceived.add(count, ordering: .relaxed)
        return count
      }
      let code = errno
      if code == EAGAIN || code == EWOULDBLOCK || code == EINTR { continue }
      throw .io(operation: "receive", errno: code)
    }
  }

  /// Sends one SDU with one send() call.
  private func writePacket(_ bytes: ArraySlice<UInt8>) throws(TransportError) {
    while true {
      let count = bytes.withUnsafeBytes { raw in
        Glibc.send(writeFD, raw.baseAddress, raw.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT))
      }
      if count == bytes.count {
        bytesSent.add(count, ordering: .relaxed)
        return
      }
      if count >= 0 { throw .io(operation: "packet send (short write)", errno: EMSGSIZE) }
      let code = errno
      switch code {
      case EAGAIN, EWOULDBLOCK, ENOBUFS:
        _ = try gate.wait(for: writeFD, events: Int16(POLLOUT))
      case EINTR:
        continue
      case EMSGSIZE:
        throw .sduTooLarge(size: bytes.count, limit: sendSDULimit ?? bytes.count - 1)
      default:
        throw .io(operation: "send", errno: code)
      }
    }
  }

  /// After a send that moved nothing and failed with `code`: waits for room on EAGAIN,
  /// returns at once on EINTR (the caller tries again), throws on anything else.
  func awaitRoomToSend(after code: Int32, operation: String = "send") throws(TransportError) {
    switch code {
    case EAGAIN, EWOULDBLOCK:
      _ = try gate.wait(for: writeFD, events: Int16(POLLOUT))
    case EINTR, 0:
      return
    default:
      throw .io(operation: operation, errno: code)
    }
  }

  /// Writes all of `bytes` to a byte stream; `flags` are added to a socket's send flags
  /// (`MSG_MORE` when more of the message follows).
  func writeStream(_ bytes: ArraySlice<UInt8>, flags: Int32 = 0) throws(TransportError) {
    var rest = bytes
    while !rest.isEmpty {
      if !writeIsSocket {
        // A blocking pipe write could outlast close(); poll first and write at most PIPE_BUF,
        // which fits once the pipe reports writable.
        _ = try gate.wait(for: writeFD, events: Int16(POLLOUT))
      }
      let (count, code) = rest.withUnsafeBytes { raw -> (Int, Int32) in
        if writeIsSocket {
          let count = Glibc.send(
            writeFD, raw.baseAddress, raw.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT) | flags)
          return (count, count < 0 ? errno : 0)
        }
        return withoutSIGPIPE {
          let count = Glibc.write(writeFD, raw.baseAddress, min(raw.count, Int(PIPE_BUF)))
          return (count, count < 0 ? errno : 0)
        }
      }
      if count > 0 {
        bytesSent.add(count, ordering: .relaxed)
        rest = rest.dropFirst(count)
        continue
      }
      try awaitRoomToSend(after: code)
    }
  }
}

extension SocketTransport {
  /// Sets the socket descriptors O_NONBLOCK, once. sendfile(2) and splice(2) have no MSG_DONTWAIT;
  /// every other call on them already passes it and waits in the gate, so this changes
  /// nothing else, and a peer that stops reading or writing cannot hold a thread past close().
  func ensureNonBlocking() throws(TransportError) {
    guard !madeNonBlocking.load(ordering: .relaxed) else { return }
    for (fd, isSocket) in [(readFD, readIsSocket), (writeFD, writeIsSocket)] where isSocket {
      let flags = fcntl(fd, F_GETFL)
      if flags >= 0, flags & O_NONBLOCK == 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 {
        throw .io(operation: "set non-blocking", errno: errno)
      }
    }
    madeNonBlocking.store(true, ordering: .relaxed)
  }
}

/// Runs `body` (one write(2) or sendfile(2), returning its count and errno) with SIGPIPE
/// blocked on this thread, so a vanished reader gives EPIPE instead of killing the process;
/// the SIGPIPE the call raised is consumed. The equivalent of MSG_NOSIGNAL for calls that have
/// no flags.
func withoutSIGPIPE(_ body: () -> (Int, Int32)) -> (Int, Int32) {
  var pipeSet = sigset_t()
  sigemptyset(&pipeSet)
  sigaddset(&pipeSet, SIGPIPE)
  var oldMask = sigset_t()
  pthread_sigmask(SIG_BLOCK, &pipeSet, &oldMask)
  var pending = sigset_t()
  sigpending(&pending)
  let alreadyPending = sigismember(&pending, SIGPIPE) == 1
  let (count, code) = body()
  if code == EPIPE && !alreadyPending {
    var noWait = timespec(tv_sec: 0, tv_nsec: 0)
    _ = sigtimedwait(&pipeSet, nil, &noWait)
  }
  pthread_sigmask(SIG_SETMASK, &oldMask, nil)
  return (count, code)
}

/// Closes a descriptor the transport owns; standard descriptors are pointed at /dev/null
/// instead, so their numbers are not reused by unrelated files.
func releaseDescriptor(_ fd: Int32) {
  if fd <= 2 {
    let null = open("/dev/null", O_RDWR | O_CLOEXEC)
    if null >= 0 {
      _ = dup2(null, fd)
      _ = Glibc.close(null)
      return
    }
  }
  _ = Glibc.close(fd)
}
