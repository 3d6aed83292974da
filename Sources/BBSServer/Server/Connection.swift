import BBSIdentity
import Dispatch
import Foundation
import Logging
import NinePProtocol
import NinePTransport
import SecureChannel
import Synchronization

/// One client connection: its transport, the handler of its 9P requests and the reader loop
/// that feeds it.
final class Connection: Sendable {
  /// The device RX state machine of docs/board-facts.md §3.2.
  private enum Receive: Sendable {
    case waitSize
    case waitData
    case processing(String)
  }

  let id: Int
  /// The client's TCP host or Bluetooth address, for the per-address cap and as the poster of
  /// its guests; nil for Unix-socket, seqpacket and standard-input clients (local ones).
  let host: String?
  /// When the connection was accepted.
  let opened = ContinuousClock.now
  private let activity = ConnectionActivity()
  private let transport: any MessageTransport
  /// The connection, when it may turn secure (a stream socket, the board offering the
  /// channel); nil otherwise.
  private let upgradable: UpgradableTransport?
  /// Whether the secure policy applies: a TCP client (Unix-socket ones are local).
  private let overTCP: Bool
  private let raw: SocketTransport?
  /// The socket under it all: what the watchdog reads the byte counts from (on the secure
  /// channel, a half-sent record is a half-sent request).
  private let socket: SocketTransport?
  private let server: BBSServer
  private let handler: ConnectionHandler
  private let logger: Logger
  private let sendFrames: @Sendable ([OutgoingFrame]) -> Void
  private let receive = Mutex(Receive.waitSize)
  private let closed = Mutex(false)

  init(id: Int, transport plain: any MessageTransport, server: BBSServer) {
    self.id = id
    let socket = plain as? SocketTransport
    self.socket = socket
    let configuration = server.configuration
    if configuration.secure != .off, configuration.profile != .gen1, let socket, !socket.isPacket {
      upgradable = UpgradableTransport(socket)
    } else {
      upgradable = nil
    }
    let transport: any MessageTransport = upgradable ?? plain
    self.transport = transport
    self.server = server
    switch transport.address {
    case .tcp(let host, _), .l2cap(let host, _, _): self.host = host
    default: self.host = nil
    }
    if case .tcp = transport.address { overTCP = true } else { overTCP = false }
    self.logger = server.logger
    raw = server.configuration.profile == .device && socket?.isPacket == true ? socket : nil
    // Frames of one batch go out back to back (Rread(0) before Rflush). A device sends every
    // reply as exactly one SDU. Send failures surface as a receive failure on the reader.
    // house: its job is the sends (and the closes of the files sent) under it.
    let lock = Mutex(())
    let packets = raw
    let activity = activity
    let sendAll: @Sendable ([OutgoingFrame]) -> Void = { frames in
      lock.withLock { _ in
        // A client that stops reading leaves this send waiting; the watchdog closes it.
        activity.sending(true)
        defer { activity.sending(false) }
        for frame in frames {
          switch frame {
          case .bytes(let bytes):
            if let packets { try? packets.sendRaw(bytes) } else { try? transport.send(bytes) }
          case .fileRead(let header, let file):
            defer { Glibc.close(file.descriptor) }
            if packets == nil, let sender = transport as? any FileRegionSending {
              try? sender.send(header: header, file: file)
            } else if let contents = try? file.contents() {
              if let packets {
                try? packets.sendRaw(header + contents)
              } else {
                try? transport.send(header + contents)
              }
            }
          }
        }
      }
    }
    sendFrames = sendAll
    handler = ConnectionHandler(
      id: id, namespace: server.namespace, configuration: server.configuration,
      logger: server.logger,
      wakeQueue: server.wakeQueue, limiter: server.limiter, address: host,
      admitAttach: { [weak server] user, member in
        server?.settleAttach(of: id, as: user, member: member)
      },
      channel: { [upgradable] in upgradable?.security },
      signaturesNeedChannel: upgradable != nil && overTCP,
      send: { sendAll($0.map(OutgoingFrame.bytes)) })
  }

  private func send(_ frames: [OutgoingFrame]) {
    if !frames.isEmpty { sendFrames(frames) }
  }

  /// Whether a request of this channel is on the worker (device profile).
  var isProcessing: Bool {
    if case .processing = receive.withLock({ $0 }) { return true }
    return false
  }

  /// The reader loop; returns when the client goes away or the connection is closed.
  func run() {
    logger.info("session \(id): \(transport.address) connected")
    if raw != nil {
      runDevicePackets()
    } else if server.configuration.profile.imitatesBoard {
      runSerially()
    } else {
      runMultiplexed()
    }
    close(reason: nil)
  }

  /// Closes the transport and drops the session's parked reads. Idempotent.
  func close(reason: String?) {
    let first = closed.withLock { closed -> Bool in
      defer { closed = true }
      return !closed
    }
    guard first else { return }
    transport.close()
    let leftOpen = handler.close()
    // A Gen-1 board never releases them; count them so tests can check the client clunked.
    let gen1 = server.configuration.profile == .gen1
    if gen1 && leftOpen > 0 {
      logger.info(
        "session \(id): \(leftOpen) fid\(leftOpen == 1 ? "" : "s") left open at disconnect (gen1 does not clunk them)"
      )
    }
    server.connectionEnded(id, fidsLeftOpen: gen1 ? leftOpen : 0)
    logger.info("session \(id): disconnected\(reason.map { " (\($0))" } ?? "")")
  }

  // MARK: Default profile

  private func runMultiplexed() {
    var first = true
    while let frame = receiveFrame(failure: {
      "session \(id): receive failed: \($0); disconnecting"
    }) {
      defer { first = false }
      switch screen(frame, first: first) {
      case .serve: send(handler.process(frame))
      case .handled: continue
      case .end: return
      }
    }
  }

  // MARK: Secure channel

  private enum Screening {
    /// A 9P request for the handler.
    case serve
    /// Answered here (the channel was set up, or a plain request refused).
    case handled
    /// The connection must end.
    case end
  }

  /// What to do with `frame` before the handler sees it: set up the secure channel when the
  /// first request asks for it, and refuse plain requests on TCP when the board requires it.
  private func screen(_ frame: [UInt8], first: Bool) -> Screening {
    guard let upgradable, !upgradable.isSecure else { return .serve }
    if first, let tag = SecureChannel.request(in: frame) {
      return openChannel(on: upgradable, tag: tag) ? .handled : .end
    }
    guard server.configuration.secure == .required, overTCP else { return .serve }
    let tag = frame.count >= 7 ? UInt16(frame[5]) | UInt16(frame[6]) << 8 : NineP.noTag
    logger.notice("session \(id): plain request refused: this board requires the secure channel")
    send([.bytes(Message.rerror(ename: Self.plainRefusal).encoded(tag: tag))])
    return .handled
  }

  /// The Rerror of any plain request on TCP to a board that requires the secure channel.
  static let plainRefusal = "this board requires the secure channel"

  /// Answers the request (tag `tag`) and runs the board's side of the handshake; false if it
  /// failed (logged; the connection must end).
  private func openChannel(on upgradable: UpgradableTransport, tag: Tag) -> Bool {
    let boardKey = server.configuration.boardKey
    do {
      let channel = try SecureChannel.accept(
        over: upgradable.plain, tag: tag, timeout: server.configuration.handshakeTimeout,
        boardKey: boardKey.flatMap(BoardKey.init(of:))?.publicKey
      ) { hash throws(SecureChannelError) in
        do {
          return try ChannelProof.payload(handshakeHash: hash, key: boardKey)
        } catch {
          throw .crypto("cannot sign the channel proof: \(error)")
        }
      }
      upgradable.upgrade(to: channel)
      logger.info("session \(id): secure channel up (\(NoiseHandshake.protocolName))")
      return true
    } catch {
      logger.notice("session \(id): secure channel refused: \(error)")
      return false
    }
  }

  /// The next whole message, or nil at the end of the connection (a failure is logged with
  /// `failure`'s text unless the connection was closed on purpose).
  private func receiveFrame(failure: (TransportError) -> String) -> [UInt8]? {
    do {
      let frame = try transport.receive(limit: handler.msize)
      if frame != nil { activity.requestArrived() }
      return frame
    } catch {
      if !closed.withLock({ $0 }) { logger.warning("\(failure(error))") }
      return nil
    }
  }

  // MARK: Device profile

  /// Device profile over a byte stream (TCP, Unix), and gen1 over any transport: no SDUs to
  /// police, but one request at a time on the shared worker. Pipelined requests wait in the
  /// socket and are served in order.
  private func runSerially() {
    let profile = server.configuration.profile.rawValue
    var first = true
    while let frame = receiveFrame(failure: {
      "\(profile) profile: session \(id): \($0) — disconnecting"
    }) {
      defer { first = false }
      switch screen(frame, first: first) {
      case .serve: break
      case .handled: continue
      case .end: return
      }
      let done = DispatchSemaphore(value: 0)
      process(frame) { done.signal() }
      done.wait()
    }
  }

  /// Device profile over SDUs: the RX state machine of a board's L2CAP session pool.
  private func runDevicePackets() {
    guard let raw else { return }
    let limit = server.configuration.sduLimit
    let receiveBuffer = server.configuration.maxMessageSize
    var buffer: [UInt8] = []
    while true {
      let sdu: [UInt8]?
      do {
        sdu = try raw.receiveRaw(maxBytes: 65536)
      } catch {
        if !closed.withLock({ $0 }) {
          logger.warning("session \(id): receive failed: \(error); disconnecting")
        }
        return
      }
      guard let sdu else { return }
      if case .processing(let what) = receive.withLock({ $0 }) {
        return violation("SDU arrived while busy (\(what) in progress)")
      }
      if sdu.count > limit {
        return violation("SDU of \(sdu.count) bytes exceeds the \(limit)-byte limit")
      }
      buffer += sdu
      guard buffer.count >= 4 else {
        receive.withLock { $0 = .waitSize }
        continue
      }
      let size =
        Int(buffer[0]) | Int(buffer[1]) << 8 | Int(buffer[2]) << 16 | Int(buffer[3]) << 24
      if size < NineP.headerSize || size > receiveBuffer {
        return violation(
          "bad size prefix \(size) (must be 7…\(receiveBuffer), the receive buffer)")
      }
      if buffer.count < size {
        receive.withLock { $0 = .waitData }
        continue
      }
      if buffer.count > size {
        return violation(
          "SDU carries \(buffer.count - size) bytes after a complete \(describe(buffer)) (two messages in one SDU)"
        )
      }
      let frame = buffer
      buffer = []
      activity.requestArrived()
      receive.withLock { $0 = .processing(describe(frame)) }
      process(frame) {}
    }
  }

  /// Runs one request on the shared worker, honouring the processing delay. The channel is
  /// idle again before the reply is sent (or as soon as the read parks).
  private func process(_ frame: [UInt8], completion: @escaping @Sendable () -> Void) {
    let delay = server.configuration.processingDelay
    server.worker.async { [self] in
      if delay > .zero { Thread.sleep(forTimeInterval: delay.timeInterval) }
      let replies = closed.withLock({ $0 }) ? [] : handler.process(frame)
      receive.withLock { $0 = .waitSize }
      send(replies)
      completion()
    }
  }

  // MARK: Timeouts

  /// Why the connection should be closed now (a timeout of ``BBSServerConfiguration``), or
  /// nil. Called by the server's watchdog. A parked chat read keeps a quiet connection open,
  /// unless `boardFull`: then it counts as idle, so a pile of parked reads cannot hold the
  /// board.
  func overdue(at now: ContinuousClock.Instant, boardFull: Bool = false) -> String? {
    let configuration = server.configuration
    if !handler.isAttached, opened.duration(to: now) > configuration.handshakeTimeout {
      return "no Tversion and Tattach within \(configuration.handshakeTimeout)"
    }
    let inside: Bool
    if raw != nil {
      if case .waitData = receive.withLock({ $0 }) { inside = true } else { inside = false }
    } else {
      inside = socket?.isInsideMessage ?? false
    }
    let seen = activity.observe(
      insideMessage: inside, transferred: socket?.transferredBytes ?? (0, 0), at: now)
    if let since = seen.sendingSince, since.duration(to: now) > configuration.stallTimeout {
      return "the client took no reply bytes for \(configuration.stallTimeout)"
    }
    if let since = seen.partialSince, since.duration(to: now) > configuration.stallTimeout {
      return "a request stayed half-sent, no byte coming, for \(configuration.stallTimeout)"
    }
    if seen.lastRequest.duration(to: now) > configuration.idleTimeout,
      boardFull || !handler.hasParkedRead, !isProcessing
    {
      let parked = handler.hasParkedRead ? " (a parked read, on a full board)" : ""
      return "idle for \(configuration.idleTimeout)\(parked)"
    }
    return nil
  }

  private func violation(_ what: String) {
    logger.error("device profile: session \(id): \(what) — disconnecting")
    close(reason: "device wire rule broken")
  }

  private func describe(_ frame: [UInt8]) -> String {
    guard frame.count >= 7 else { return "message" }
    let tag = UInt16(frame[5]) | UInt16(frame[6]) << 8
    let type = MessageType(rawValue: frame[4]).map { "\($0)" } ?? "type \(frame[4])"
    return "tag \(tag) \(type)"
  }
}

/// A reply ready to go out.
enum OutgoingFrame: Sendable {
  /// A whole encoded message.
  case bytes([UInt8])
  /// An Rread of a regular file: its header, then the bytes of `file`, which go from the page
  /// cache to the socket without passing through the server's memory where the transport
  /// allows it. The sender closes `file.descriptor`.
  case fileRead(header: [UInt8], file: FileRegion)
}

/// When a connection last did what the watchdog times: a request arrived, a request began to
/// arrive, a send began.
final class ConnectionActivity: Sendable {
  struct Seen {
    var lastRequest = ContinuousClock.now
    /// Since when part of a request has been waiting for the rest (as the watchdog saw it).
    var partialSince: ContinuousClock.Instant?
    /// Since when a send has been in progress without a byte going out.
    var sendingSince: ContinuousClock.Instant?
    /// The transport's byte counts when the watchdog last looked.
    var sent = 0
    var received = 0
  }

  private let state = Mutex(Seen())

  func requestArrived() {
    state.withLock {
      $0.lastRequest = .now
      $0.partialSince = nil
    }
  }

  func sending(_ active: Bool) {
    state.withLock { $0.sendingSince = active ? .now : nil }
  }

  /// Records whether a request is half received and how many bytes have moved, and returns
  /// what is known. A stall is timed from when the watchdog first saw no progress: every byte
  /// received restarts the clock of a partial request, every byte sent that of a send (a slow
  /// link is not a stalled client).
  func observe(
    insideMessage: Bool, transferred: (sent: Int, received: Int), at now: ContinuousClock.Instant
  ) -> Seen {
    state.withLock { seen in
      if !insideMessage {
        seen.partialSince = nil
      } else if seen.partialSince == nil || transferred.received != seen.received
        || seen.sendingSince != nil
      {
        // While a reply goes out the reader is not reading: the rest of a request may be
        // waiting in the socket, and only the send can be stalled.
        seen.partialSince = now
      }
      if seen.sendingSince != nil && transferred.sent != seen.sent { seen.sendingSince = now }
      seen.sent = transferred.sent
      seen.received = transferred.received
      return seen
    }
  }
}
