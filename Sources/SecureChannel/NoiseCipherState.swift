/// Noise's CipherState (the Noise Protocol Framework, revision 34, §5.1) for ChaChaPoly: a key
/// and a 64-bit nonce counted up by every message, encoded as 32 zero bits then the counter
/// little-endian. Each direction of a channel has one, so each message has its own nonce and a
/// reordered, replayed or dropped record fails the next decryption.
///
/// A copy shares the cipher context of the original (the nonce is its own): use one of them,
/// from one thread at a time.
public struct NoiseCipherState: Sendable {
  /// Bytes of ChaChaPoly's authentication tag at the end of each ciphertext.
  public static let tagSize = ChaChaPolyContext.tagSize

  private var keyBytes: [UInt8]?
  /// Made from the key on first use.
  private var context: ChaChaPolyContext?
  private var nonce: UInt64 = 0

  init(key: [UInt8]? = nil) { keyBytes = key }

  /// Whether a key was mixed in (before that, "encryption" is the identity, as the spec says).
  var hasKey: Bool { keyBytes != nil }

  /// Encrypts `plaintext` with `associatedData`; without a key returns it as it is.
  public mutating func encrypt(_ plaintext: [UInt8], associatedData: [UInt8] = [])
    throws(SecureChannelError) -> [UInt8]
  {
    guard hasKey else { return plaintext }
    var sealed = plaintext + [UInt8](repeating: 0, count: Self.tagSize)
    var failure: SecureChannelError?
    sealed.withUnsafeMutableBytes { bytes in
      do throws(SecureChannelError) {
        try seal(
          inPlace: UnsafeMutableRawBufferPointer(rebasing: bytes[..<plaintext.count]),
          tag: UnsafeMutableRawBufferPointer(rebasing: bytes[plaintext.count...]),
          associatedData: associatedData)
      } catch {
        failure = error
      }
    }
    if let failure { throw failure }
    return sealed
  }

  /// Decrypts and authenticates `ciphertext` (tag at the end); without a key returns it as it
  /// is. A failed check leaves the nonce unchanged, and the channel must end.
  public mutating func decrypt(_ ciphertext: ArraySlice<UInt8>, associatedData: [UInt8] = [])
    throws(SecureChannelError) -> [UInt8]
  {
    guard hasKey else { return Array(ciphertext) }
    guard ciphertext.count >= Self.tagSize else { throw .badRecord }
    var plaintext = [UInt8](repeating: 0, count: ciphertext.count - Self.tagSize)
    var failure: SecureChannelError?
    ciphertext.withUnsafeBytes { record in
      plaintext.withUnsafeMutableBytes { output in
        do throws(SecureChannelError) {
          try open(record, into: output, associatedData: associatedData)
        } catch {
          failure = error
        }
      }
    }
    if let failure { throw failure }
    return plaintext
  }

  /// Encrypts `text` where it lies and writes the tag to `tag` (16 bytes): a record is sealed
  /// in the buffer that goes to the socket.
  /// - Precondition: a key was mixed in.
  public mutating func seal(
    inPlace text: UnsafeMutableRawBufferPointer, tag: UnsafeMutableRawBufferPointer,
    associatedData: [UInt8] = []
  ) throws(SecureChannelError) {
    let context = try readyContext()
    let sealed = withNonce { nonce in
      associatedData.withUnsafeBytes {
        context.seal(text, tag: tag, nonce: nonce, associatedData: $0)
      }
    }
    guard sealed else { throw .crypto("ChaChaPoly encryption failed") }
    nonce += 1
  }

  /// Decrypts `record` (ciphertext, then the 16-byte tag) into `plaintext`, which has room for
  /// exactly the ciphertext (a message's own storage, say; it may be `record`'s memory). A failed
  /// check throws `badRecord`, leaves the nonce unchanged, and `plaintext` holds nothing to use.
  /// - Precondition: a key was mixed in.
  public mutating func open(
    _ record: UnsafeRawBufferPointer, into plaintext: UnsafeMutableRawBufferPointer,
    associatedData: [UInt8] = []
  ) throws(SecureChannelError) {
    guard record.count >= Self.tagSize, plaintext.count == record.count - Self.tagSize else {
      throw .badRecord
    }
    let context = try readyContext()
    let split = record.count - Self.tagSize
    let opened = withNonce { nonce in
      associatedData.withUnsafeBytes {
        context.open(
          UnsafeRawBufferPointer(rebasing: record[..<split]),
          tag: UnsafeRawBufferPointer(rebasing: record[split...]), into: plaintext, nonce: nonce,
          associatedData: $0)
      }
    }
    guard opened else { throw .badRecord }
    nonce += 1
  }

  private mutating func readyContext() throws(SecureChannelError) -> ChaChaPolyContext {
    guard nonce < .max else { throw .exhausted }
    if let context { return context }
    guard let keyBytes else { throw .crypto("a cipher used before its key") }
    let made = try ChaChaPolyContext(key: keyBytes)
    context = made
    return made
  }

  /// Calls `body` with this message's 12-byte nonce.
  private func withNonce<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
    var bytes = (
      UInt32(0), UInt32(truncatingIfNeeded: nonce).littleEndian,
      UInt32(truncatingIfNeeded: nonce >> 32).littleEndian
    )
    return withUnsafeBytes(of: &bytes) { body($0) }
  }
}
