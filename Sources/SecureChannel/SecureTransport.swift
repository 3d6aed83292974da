import NinePTransport
import Synchronization

/// 9P messages over the secure channel: a ``MessageTransport`` that encrypts what it sends
/// and decrypts what it receives with the ciphers of a finished ``NoiseHandshake``.
///
/// The 9P byte stream is cut into records of at most 65,519 bytes of plaintext (Noise's 65,535
/// with the 16-byte tag). A record on the wire is `size[4]` (little-endian, counting itself,
/// as a 9P message's) ‖ ChaChaPoly ciphertext ‖ tag, so the socket below frames records
/// exactly as it frames 9P messages. A message of up to 65,519 bytes, every request and reply
/// of a chat, is one record; a megabyte Rread is 17.
///
/// A record that does not decrypt ends the connection: the stream cannot be trusted after it.
public final class SecureTransport: FileRegionSending {
  /// Most plaintext in one record.
  public static let maxRecordPlaintext = NoiseHandshake.maxMessageSize - NoiseCipherState.tagSize
  /// Most bytes of one record on the wire, its size prefix included.
  public static let maxRecordSize = 4 + NoiseHandshake.maxMessageSize

  private struct Inbound {
    var cipher: NoiseCipherState
    var assembler = FrameAssembler()
  }

  private let underlying: any MessageTransport
  // house: its job is the sends: a record's nonce is its place on the wire, so encrypting and
  // writing happen together.
  private let outbound: Mutex<NoiseCipherState>
  private let inbound: Mutex<Inbound>
  public let security: ChannelSecurity?

  /// A transport over `underlying` with the ciphers `split()` gave; `security` tells the layers
  /// above what the channel is bound to.
  public init(
    over underlying: any MessageTransport, send: NoiseCipherState, receive: NoiseCipherState,
    security: ChannelSecurity
  ) {
    self.underlying = underlying
    outbound = Mutex(send)
    inbound = Mutex(Inbound(cipher: receive))
    self.security = security
  }

  public var address: TransportAddress { underlying.address }
  public var sendSDULimit: Int? { underlying.sendSDULimit }

  public func send(_ message: [UInt8]) throws(TransportError) {
    try outbound.withLock { cipher throws(TransportError) in
      for record in try Self.seal(message[...], with: &cipher) {
        try underlying.send(record)
      }
    }
  }

  /// Sends `header` and the bytes of `file` as one message, read from the file a record's
  /// worth at a time: a megabyte Rread is never whole in memory.
  public func send(header: [UInt8], file: FileRegion) throws(TransportError) {
    try outbound.withLock { cipher throws(TransportError) in
      var plaintext = header
      plaintext.reserveCapacity(Self.maxRecordPlaintext)
      var region = FileRegion(descriptor: file.descriptor, offset: file.offset, count: 0)
      var rest = file.count
      while true {
        region.count = min(rest, Self.maxRecordPlaintext - plaintext.count)
        // house: the file is read under it, a record at a time, as its job is the sends.
        if region.count > 0 { plaintext += try region.contents() }
        rest -= region.count
        region.offset += Int64(region.count)
        for record in try Self.seal(plaintext[...], with: &cipher) {
          try underlying.send(record)
        }
        guard rest > 0 else { return }
        plaintext.removeAll(keepingCapacity: true)
      }
    }
  }

  public func sendWithoutWaiting(header: [UInt8], payload: ArraySlice<UInt8>)
    throws(TransportError) -> Bool
  {
    try outbound.withLock { cipher throws(TransportError) in
      var left = false
      for record in try Self.seal(header + payload, with: &cipher) {
        // A flush owed for any record is owed for the message.
        if try underlying.sendWithoutWaiting(header: record, payload: []) { left = true }
      }
      return left
    }
  }

  public func flushPending() throws(TransportError) {
    try underlying.flushPending()
  }

  public func receive(limit: Int) throws(TransportError) -> [UInt8]? {
    try inbound.withLock { state throws(TransportError) -> [UInt8]? in
      while true {
        if let message = try state.assembler.nextMessage(limit: limit) { return message }
        // house: the one receiving thread waits here; senders use the other lock.
        guard let record = try underlying.receive(limit: Self.maxRecordSize) else {
          if state.assembler.bufferedByteCount > 0 {
            throw .truncatedMessage(bufferedBytes: state.assembler.bufferedByteCount)
          }
          return nil
        }
        do throws(SecureChannelError) {
          try state.cipher.decrypt(record[4...]) { state.assembler.append($0) }
        } catch {
          throw .secureChannel(reason: error.description)
        }
      }
    }
  }

  public func close() { underlying.close() }

  /// `bytes` as records, each encrypted with the next nonce.
  static func seal(_ bytes: ArraySlice<UInt8>, with cipher: inout NoiseCipherState)
    throws(TransportError) -> [[UInt8]]
  {
    var records: [[UInt8]] = []
    var rest = bytes
    repeat {
      let chunk = rest.prefix(maxRecordPlaintext)
      rest = rest.dropFirst(chunk.count)
      let size = UInt32(4 + chunk.count + NoiseCipherState.tagSize)
      var record: [UInt8] = [
        UInt8(truncatingIfNeeded: size), UInt8(truncatingIfNeeded: size >> 8),
        UInt8(truncatingIfNeeded: size >> 16), UInt8(truncatingIfNeeded: size >> 24),
      ]
      do throws(SecureChannelError) {
        try cipher.encrypt(chunk, appendingTo: &record)
        records.append(record)
      } catch {
        throw .secureChannel(reason: error.description)
      }
    } while !rest.isEmpty
    return records
  }

  /// A record: its size prefix, then `ciphertext`.
  static func record(_ ciphertext: [UInt8]) -> [UInt8] {
    let size = UInt32(4 + ciphertext.count)
    return [
      UInt8(truncatingIfNeeded: size), UInt8(truncatingIfNeeded: size >> 8),
      UInt8(truncatingIfNeeded: size >> 16), UInt8(truncatingIfNeeded: size >> 24),
    ] + ciphertext
  }
}
