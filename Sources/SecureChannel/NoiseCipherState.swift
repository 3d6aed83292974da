import Crypto
import Foundation

/// Noise's CipherState (the Noise Protocol Framework, revision 34, §5.1) for ChaChaPoly: a key
/// and a 64-bit nonce counted up by every message, encoded as 32 zero bits then the counter
/// little-endian. Each direction of a channel has one, so each message has its own nonce and a
/// reordered, replayed or dropped record fails the next decryption.
public struct NoiseCipherState: Sendable {
  /// Bytes of ChaChaPoly's authentication tag at the end of each ciphertext.
  public static let tagSize = 16

  /// The key's bytes (swift-crypto's SymmetricKey is not Sendable here; making one per record
  /// costs nothing next to the cipher).
  private var keyBytes: [UInt8]?
  private var nonce: UInt64 = 0

  init(key: [UInt8]? = nil) { keyBytes = key }

  private var key: SymmetricKey? { keyBytes.map { SymmetricKey(data: $0) } }

  /// Whether a key was mixed in (before that, "encryption" is the identity, as the spec says).
  var hasKey: Bool { keyBytes != nil }

  /// Encrypts `plaintext` with `associatedData`; without a key returns it as it is.
  public mutating func encrypt(_ plaintext: some DataProtocol, associatedData: [UInt8] = [])
    throws(SecureChannelError) -> [UInt8]
  {
    var sealed: [UInt8] = []
    try encrypt(plaintext, associatedData: associatedData, appendingTo: &sealed)
    return sealed
  }

  /// Encrypts like ``encrypt(_:associatedData:)``, appending the ciphertext and tag to `out`
  /// (a record's size prefix, say), so a large record is copied once.
  public mutating func encrypt(
    _ plaintext: some DataProtocol, associatedData: [UInt8] = [], appendingTo out: inout [UInt8]
  ) throws(SecureChannelError) {
    guard let key else {
      out.append(contentsOf: plaintext)
      return
    }
    guard nonce < .max else { throw .exhausted }
    let box: ChaChaPoly.SealedBox
    do {
      box = try ChaChaPoly.seal(
        plaintext, using: key, nonce: try Self.chachaNonce(nonce), authenticating: associatedData)
    } catch {
      throw .crypto("ChaChaPoly encryption failed: \(error)")
    }
    nonce += 1
    out.reserveCapacity(out.count + box.ciphertext.count + Self.tagSize)
    // Through raw buffers: appending a Data element by element is slow.
    box.ciphertext.withUnsafeBytes { out.append(contentsOf: $0) }
    box.tag.withUnsafeBytes { out.append(contentsOf: $0) }
  }

  /// Decrypts and authenticates `ciphertext` (tag at the end); without a key returns it as it
  /// is. A failed check leaves the nonce unchanged, and the channel must end.
  public mutating func decrypt(_ ciphertext: ArraySlice<UInt8>, associatedData: [UInt8] = [])
    throws(SecureChannelError) -> [UInt8]
  {
    var plaintext: [UInt8] = []
    try decrypt(ciphertext, associatedData: associatedData) { plaintext = Array($0) }
    return plaintext
  }

  /// Decrypts like ``decrypt(_:associatedData:)``, handing the plaintext to `take` where it
  /// lies (a record's bytes go once into the reader's buffer).
  public mutating func decrypt(
    _ ciphertext: ArraySlice<UInt8>, associatedData: [UInt8] = [],
    into take: (UnsafeRawBufferPointer) -> Void
  ) throws(SecureChannelError) {
    guard let key else { return ciphertext.withUnsafeBytes(take) }
    guard nonce < .max else { throw .exhausted }
    guard ciphertext.count >= Self.tagSize else { throw .badRecord }
    let body = ciphertext.prefix(ciphertext.count - Self.tagSize)
    let tag = ciphertext.suffix(Self.tagSize)
    let opened: Data
    do {
      let box = try ChaChaPoly.SealedBox(
        nonce: try Self.chachaNonce(nonce), ciphertext: body, tag: tag)
      opened = try ChaChaPoly.open(box, using: key, authenticating: associatedData)
    } catch {
      throw .badRecord
    }
    nonce += 1
    opened.withUnsafeBytes(take)
  }

  private static func chachaNonce(_ counter: UInt64) throws -> ChaChaPoly.Nonce {
    var bytes = [UInt8](repeating: 0, count: 12)
    for index in 0..<8 { bytes[4 + index] = UInt8(truncatingIfNeeded: counter >> (8 * index)) }
    return try ChaChaPoly.Nonce(data: bytes)
  }
}
