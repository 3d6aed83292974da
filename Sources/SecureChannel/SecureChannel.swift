import Crypto
import NinePProtocol
import NinePTransport

/// Asking for the secure channel and setting it up, on a connection that has just opened.
///
/// The client asks with a 9P Tversion naming ``version``. A board that offers the channel
/// answers Rversion with the same string, and both ends then run the handshake of
/// ``NoiseHandshake`` in records (``SecureTransport``), after which 9P starts again inside,
/// with a Tversion of its own. Any other server answers as 9P2000 says of an unknown version
/// (Rversion `9P2000` or `unknown`, or Gen-1's Rerror): then the connection stays plain.
///
/// The version string is the Noise prologue, so a handshake that follows another request
/// fails. The board's handshake payload is its key's proof (BBSIdentity's `ChannelProof`),
/// made (`accept`'s `proof`) and checked (`ask`'s `accept`, before the client's last message)
/// by closures of the caller: this module knows records and ciphers, not whose keys are
/// trusted.
public enum SecureChannel {
  /// The version a client asks for and an offering board echoes.
  public static let version = "9P2000.9bbs-noise1"

  /// How a board answered the request.
  public enum Offer: Sendable {
    /// No channel: the server answered `version` (9P2000 or unknown) or refused it with this
    /// text. The connection is plain, its 9P session not yet started.
    case plain(serverSaid: String)
    /// The channel is up, its board's payload accepted.
    case secure(SecureTransport)
  }

  // MARK: - Client

  /// Asks for the channel on a freshly dialled `transport` and sets it up if the board
  /// offers it. `accept` checks the board's payload against the hash it signs, before the
  /// client's last handshake message goes out, and returns the board key it proves (nil:
  /// none); it throws (``SecureChannelError/boardRefused(_:)``) to refuse the board. Gives up
  /// after `timeout`, closing `transport`.
  public static func ask(
    over transport: any MessageTransport, timeout: Duration,
    accept: ([UInt8], [UInt8]) throws(SecureChannelError) -> [UInt8]?,
    staticKey: Curve25519.KeyAgreement.PrivateKey = .init()
  ) throws(SecureChannelError) -> Offer {
    try withDeadline(timeout, closing: transport) { () throws(SecureChannelError) -> Offer in
      try send(
        .tversion(msize: UInt32(NineP.defaultMessageSize), version: version), tag: NineP.noTag,
        on: transport)
      let reply = try receiveMessage(from: transport)
      switch reply {
      case .rversion(_, let said) where said == version: break
      case .rversion(_, let said): return .plain(serverSaid: said)
      case .rerror(let ename): return .plain(serverSaid: ename)
      default: throw .notNineP("a \(reply.type) to Tversion")
      }
      var handshake = NoiseHandshake(
        role: .initiator, prologue: Array(version.utf8), staticKey: staticKey)
      try transport.sendRecord(try handshake.writeMessage(payload: []))
      let (payload, signedHash) = try handshake.readMessage(try transport.receiveRecord())
      let boardKey = try accept(payload, signedHash)
      try transport.sendRecord(try handshake.writeMessage(payload: []))
      let (send, receive) = try handshake.split()
      return .secure(
        SecureTransport(
          over: transport, send: send, receive: receive,
          security: ChannelSecurity(binding: handshake.handshakeHash, boardKey: boardKey)))
    }
  }

  // MARK: - Board

  /// Whether `frame` is a Tversion asking for the channel; its tag if so.
  public static func request(in frame: [UInt8]) -> Tag? {
    guard let (tag, message) = try? Message.decode(frame, limits: DecodeLimits(maxFrameSize: 8192)),
      case .tversion(_, let asked) = message, asked == version
    else { return nil }
    return tag
  }

  /// Answers a request (tag `tag`) and runs the board's side of the handshake on `transport`,
  /// its payload made by `proof` from the hash it must sign; `boardKey` is the raw key that
  /// proof names (nil: none). Gives up after `timeout`, closing `transport`.
  public static func accept(
    over transport: any MessageTransport, tag: Tag, timeout: Duration, boardKey: [UInt8]?,
    proof: @escaping ([UInt8]) throws(SecureChannelError) -> [UInt8],
    staticKey: Curve25519.KeyAgreement.PrivateKey = .init()
  ) throws(SecureChannelError) -> SecureTransport {
    try withDeadline(timeout, closing: transport) { () throws(SecureChannelError) in
      try send(
        .rversion(msize: UInt32(NineP.defaultMessageSize), version: version), tag: tag,
        on: transport)
      var handshake = NoiseHandshake(
        role: .responder, prologue: Array(version.utf8), staticKey: staticKey)
      _ = try handshake.readMessage(try transport.receiveRecord())
      try transport.sendRecord(try handshake.writeMessage(payload: proof))
      _ = try handshake.readMessage(try transport.receiveRecord())
      let (send, receive) = try handshake.split()
      return SecureTransport(
        over: transport, send: send, receive: receive,
        security: ChannelSecurity(binding: handshake.handshakeHash, boardKey: boardKey))
    }
  }

  // MARK: - Helpers

  /// Runs `body`, closing `transport` if it has not returned after `timeout` (its blocked
  /// receive then fails, and that failure is reported as ``SecureChannelError/timedOut``).
  private static func withDeadline<T>(
    _ timeout: Duration, closing transport: any MessageTransport,
    _ body: () throws(SecureChannelError) -> T
  ) throws(SecureChannelError) -> T {
    let watchdog = Watchdog(after: timeout) { transport.close() }
    do throws(SecureChannelError) {
      let result = try body()
      watchdog.cancel()
      if watchdog.fired { throw .timedOut }
      return result
    } catch {
      watchdog.cancel()
      throw watchdog.fired ? .timedOut : error
    }
  }

  private static func send(_ message: Message, tag: Tag, on transport: any MessageTransport)
    throws(SecureChannelError)
  {
    do {
      try transport.send(message.encoded(tag: tag))
    } catch {
      throw .peerLeft
    }
  }

  private static func receiveMessage(from transport: any MessageTransport)
    throws(SecureChannelError) -> Message
  {
    let frame: [UInt8]?
    do {
      frame = try transport.receive(limit: 8192)
    } catch .closed {
      throw .peerLeft
    } catch {
      throw .notNineP("\(error)")
    }
    guard let frame else { throw .peerLeft }
    do {
      return try Message.decode(frame, limits: DecodeLimits(maxFrameSize: 8192)).message
    } catch {
      throw .notNineP("\(error)")
    }
  }
}

extension MessageTransport {
  /// Sends a handshake message as a record.
  fileprivate func sendRecord(_ message: [UInt8]) throws(SecureChannelError) {
    do {
      try send(SecureTransport.record(message))
    } catch {
      throw .peerLeft
    }
  }

  /// The next record's contents.
  fileprivate func receiveRecord() throws(SecureChannelError) -> [UInt8] {
    let record: [UInt8]?
    do {
      record = try receive(limit: SecureTransport.maxRecordSize)
    } catch .closed {
      throw .peerLeft
    } catch {
      throw .badHandshake("\(error)")
    }
    guard let record else { throw .peerLeft }
    return Array(record[4...])
  }
}
