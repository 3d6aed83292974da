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
      var offset = 0
      repeat {
        let count = min(message.count - offset, Self.maxRecordPlaintext)
        let record = try Self.record(count, with: &cipher) { text in
          Self.copy(message[offset..<offset + count], to: text)
        }
        try underlying.send(record)
        offset += count
      } while offset < message.count
    }
  }

  /// Sends `header` and the bytes of `file` as one message, read from the file a record's
  /// worth at a time straight into the record it is sealed in: a megabyte Rread is never whole
  /// in memory, and its bytes are not copied on the way.
  public func send(header: [UInt8], file: FileRegion) throws(TransportError) {
    try outbound.withLock { cipher throws(TransportError) in
      var head = header[...]
      var region = FileRegion(descriptor: file.descriptor, offset: file.offset, count: 0)
      var rest = file.count
      repeat {
        let headCount = min(head.count, Self.maxRecordPlaintext)
        region.count = min(rest, Self.maxRecordPlaintext - headCount)
        let record = try Self.record(headCount + region.count, with: &cipher) {
          (text) throws(TransportError) in
          Self.copy(head.prefix(headCount), to: text)
          // house: the file is read under it, a record at a time, as its job is the sends.
          try region.read(into: UnsafeMutableRawBufferPointer(rebasing: text[headCount...]))
        }
        try underlying.send(record)
        head = head.dropFirst(headCount)
        rest -= region.count
        region.offset += Int64(region.count)
      } while rest > 0 || !head.isEmpty
    }
  }

  public func sendWithoutWaiting(header: [UInt8], payload: ArraySlice<UInt8>)
    throws(TransportError) -> Bool
  {
    try outbound.withLock { cipher throws(TransportError) in
      var left = false
      var head = header[...]
      var tail = payload
      repeat {
        let headCount = min(head.count, Self.maxRecordPlaintext)
        let tailCount = min(tail.count, Self.maxRecordPlaintext - headCount)
        let record = try Self.record(headCount + tailCount, with: &cipher) { text in
          Self.copy(head.prefix(headCount), to: text)
          Self.copy(
            tail.prefix(tailCount), to: UnsafeMutableRawBufferPointer(rebasing: text[headCount...]))
        }
        // A flush owed for any record is owed for the message.
        if try underlying.sendWithoutWaiting(header: record, payload: []) { left = true }
        head = head.dropFirst(headCount)
        tail = tail.dropFirst(tailCount)
      } while !head.isEmpty || !tail.isEmpty
      return left
    }
  }

  public func flushPending() throws(TransportError) {
    try underlying.flushPending()
  }

  public func receive(limit: Int) throws(TransportError) -> [UInt8]? {
    try inbound.withLock { state throws(TransportError) -> [UInt8]? in
      var cipher = state.cipher
      defer { state.cipher = cipher }
      while true {
        if let message = try state.assembler.nextMessage(limit: limit) { return message }
        if let size = state.assembler.pendingMessageSize,
          Int(size) - state.assembler.bufferedByteCount > Self.maxRecordPlaintext
        {
          return try receiveLarge(into: &state.assembler, with: &cipher, limit: limit)
        }
        // house: the one receiving thread waits here; senders use the other lock.
        guard let record = try nextRecord() else {
          if state.assembler.bufferedByteCount > 0 {
            throw .truncatedMessage(bufferedBytes: state.assembler.bufferedByteCount)
          }
          return nil
        }
        try state.assembler.append(count: record.count - 4 - NoiseCipherState.tagSize) {
          (text) throws(TransportError) in try Self.open(record, with: &cipher, into: text)
        }
      }
    }
  }

  /// Receives a message of more than a record: its records are opened straight into the
  /// message's own storage (FrameAssembler's direct receiving), so its bytes are written once.
  private func receiveLarge(
    into assembler: inout FrameAssembler, with cipher: inout NoiseCipherState, limit: Int
  ) throws(TransportError) -> [UInt8]? {
    // The plaintext of a record that runs past the message's end (a peer may pack records so).
    var beyond: [UInt8] = []
    let message = try assembler.nextMessage(limit: limit) {
      (rest) throws(TransportError) -> Int in
      // house: the one receiving thread waits here; senders use the other lock.
      guard let record = try nextRecord() else { return 0 }
      let count = record.count - 4 - NoiseCipherState.tagSize
      if count <= rest.count {
        try Self.open(
          record, with: &cipher, into: UnsafeMutableRawBufferPointer(rebasing: rest[..<count]))
        return count
      }
      var text = [UInt8](repeating: 0, count: count)
      var failure: TransportError?
      text.withUnsafeMutableBytes { text in
        do throws(TransportError) {
          try Self.open(record, with: &cipher, into: text)
        } catch {
          failure = error
        }
      }
      if let failure { throw failure }
      Self.copy(text[..<rest.count], to: rest)
      beyond = Array(text[rest.count...])
      return rest.count
    }
    assembler.append(beyond)
    return message
  }

  /// The next record from the socket, size prefix included; nil at the end of the stream.
  private func nextRecord() throws(TransportError) -> [UInt8]? {
    guard let record = try underlying.receive(limit: Self.maxRecordSize) else { return nil }
    guard record.count >= 4 + NoiseCipherState.tagSize else {
      throw .secureChannel(reason: SecureChannelError.badRecord.description)
    }
    return record
  }

  public func close() { underlying.close() }

  /// A record of `count` bytes of plaintext, which `fill` writes into the record's own
  /// storage, where they are sealed with the next nonce: size prefix ‖ ciphertext ‖ tag.
  static func record(
    _ count: Int, with cipher: inout NoiseCipherState,
    fill: (UnsafeMutableRawBufferPointer) throws(TransportError) -> Void
  ) throws(TransportError) -> [UInt8] {
    let size = 4 + count + NoiseCipherState.tagSize
    var failure: TransportError?
    let record = [UInt8](unsafeUninitializedCapacity: size) { storage, initialized in
      let bytes = UnsafeMutableRawBufferPointer(storage)
      bytes.storeBytes(of: UInt32(size).littleEndian, as: UInt32.self)
      let text = UnsafeMutableRawBufferPointer(rebasing: bytes[4..<4 + count])
      let tag = UnsafeMutableRawBufferPointer(rebasing: bytes[(4 + count)...])
      do throws(TransportError) {
        try fill(text)
        do throws(SecureChannelError) {
          try cipher.seal(inPlace: text, tag: tag)
        } catch {
          throw .secureChannel(reason: error.description)
        }
        initialized = size
      } catch {
        failure = error
        initialized = 0
      }
    }
    if let failure { throw failure }
    return record
  }

  /// Opens `record` (size prefix ‖ ciphertext ‖ tag) into `text`, which has room for exactly
  /// its plaintext.
  static func open(
    _ record: [UInt8], with cipher: inout NoiseCipherState, into text: UnsafeMutableRawBufferPointer
  )
    throws(TransportError)
  {
    var failure: SecureChannelError?
    record.withUnsafeBytes { bytes in
      do throws(SecureChannelError) {
        try cipher.open(UnsafeRawBufferPointer(rebasing: bytes[4...]), into: text)
      } catch {
        failure = error
      }
    }
    if let failure { throw .secureChannel(reason: failure.description) }
  }

  /// Copies `bytes` to the start of `buffer`.
  static func copy(_ bytes: ArraySlice<UInt8>, to buffer: UnsafeMutableRawBufferPointer) {
    precondition(bytes.count <= buffer.count, "copying past a record's plaintext")
    bytes.withUnsafeBytes { source in
      guard let from = source.baseAddress, let to = buffer.baseAddress, !source.isEmpty else {
        return
      }
      to.copyMemory(from: from, byteCount: source.count)
    }
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
