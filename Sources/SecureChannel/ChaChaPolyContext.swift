import COpenSSLCrypto

/// ChaCha20-Poly1305 (RFC 8439) with one key, from OpenSSL's libcrypto: it seals and opens a
/// record where it lies.
///
/// Why not swift-crypto's `ChaChaPoly`, which the handshake's other primitives come from: its
/// API seals into a new buffer and then copies nonce, ciphertext and tag into a `SealedBox`,
/// and opening copies the record into a `SealedBox` first. Measured on a 256 MiB first read
/// (`perf record -a`), those copies cost the board three times what the cipher did, and held a
/// large read over the channel to a third of plain. Here a record's bytes are sealed in the
/// buffer that goes to the socket, and opened straight into the message they belong to.
// @unchecked Sendable: the context holds the key and the state of one operation at a time, and
// each NoiseCipherState using it is used by one thread at a time (a transport holds each
// direction's under its own lock; a handshake runs on one thread).
final class ChaChaPolyContext: @unchecked Sendable {
  private let context: OpaquePointer

  static let keySize = 32
  static let nonceSize = 12
  static let tagSize = 16

  /// A context for `key` (32 bytes).
  init(key: [UInt8]) throws(SecureChannelError) {
    guard key.count == Self.keySize else { throw .crypto("ChaChaPoly key of \(key.count) bytes") }
    guard let context = EVP_CIPHER_CTX_new() else {
      throw .crypto("OpenSSL could not allocate a cipher context")
    }
    self.context = context
    let ready = key.withUnsafeBufferPointer {
      EVP_CipherInit_ex(context, EVP_chacha20_poly1305(), nil, $0.baseAddress, nil, 1) == 1
    }
    guard ready else { throw .crypto("OpenSSL refused the ChaChaPoly key") }
  }

  deinit { EVP_CIPHER_CTX_free(context) }

  /// Encrypts `text` in place with `nonce` and `associatedData`, and writes the 16-byte tag
  /// to `tag`. False if OpenSSL failed.
  func seal(
    _ text: UnsafeMutableRawBufferPointer, tag: UnsafeMutableRawBufferPointer,
    nonce: UnsafeRawBufferPointer, associatedData: UnsafeRawBufferPointer
  ) -> Bool {
    guard tag.count == Self.tagSize, start(encrypting: true, nonce: nonce),
      absorb(associatedData),
      update(text.baseAddress, from: UnsafeRawPointer(text.baseAddress), text.count)
    else { return false }
    var scratch: Int32 = 0
    return EVP_CipherFinal_ex(context, nil, &scratch) == 1
      && EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_AEAD_GET_TAG, Int32(Self.tagSize), tag.baseAddress)
        == 1
  }

  /// Decrypts `ciphertext` into `plaintext` (as many bytes; it may be the same memory) and
  /// checks `tag`. False if the tag does not match: `plaintext` then holds nothing to use.
  func open(
    _ ciphertext: UnsafeRawBufferPointer, tag: UnsafeRawBufferPointer,
    into plaintext: UnsafeMutableRawBufferPointer, nonce: UnsafeRawBufferPointer,
    associatedData: UnsafeRawBufferPointer
  ) -> Bool {
    guard tag.count == Self.tagSize, plaintext.count == ciphertext.count,
      start(encrypting: false, nonce: nonce)
    else { return false }
    // The control call takes a mutable pointer, though it only reads the tag.
    var expected = [UInt8](tag)
    guard
      EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_AEAD_SET_TAG, Int32(Self.tagSize), &expected) == 1,
      absorb(associatedData),
      update(plaintext.baseAddress, from: ciphertext.baseAddress, ciphertext.count)
    else { return false }
    var scratch: Int32 = 0
    return EVP_CipherFinal_ex(context, nil, &scratch) == 1
  }

  /// Sets the direction and the nonce; the key stays.
  private func start(encrypting: Bool, nonce: UnsafeRawBufferPointer) -> Bool {
    guard nonce.count == Self.nonceSize else { return false }
    return EVP_CipherInit_ex(
      context, nil, nil, nil, nonce.baseAddress?.assumingMemoryBound(to: UInt8.self),
      encrypting ? 1 : 0) == 1
  }

  private func absorb(_ associatedData: UnsafeRawBufferPointer) -> Bool {
    guard let base = associatedData.baseAddress, !associatedData.isEmpty else { return true }
    var written: Int32 = 0
    return EVP_CipherUpdate(
      context, nil, &written, base.assumingMemoryBound(to: UInt8.self), Int32(associatedData.count))
      == 1
  }

  private func update(
    _ output: UnsafeMutableRawPointer?, from input: UnsafeRawPointer?, _ count: Int
  ) -> Bool {
    guard count > 0 else { return true }
    guard let output, let input, count <= Int(Int32.max) else { return false }
    var written: Int32 = 0
    return EVP_CipherUpdate(
      context, output.assumingMemoryBound(to: UInt8.self), &written,
      input.assumingMemoryBound(to: UInt8.self), Int32(count)) == 1 && Int(written) == count
  }
}
