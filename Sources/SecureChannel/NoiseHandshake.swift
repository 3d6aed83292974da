import Crypto
import Foundation

/// The handshake of `Noise_XX_25519_ChaChaPoly_SHA256` (the Noise Protocol Framework, revision
/// 34): the SymmetricState of §5.2 and the HandshakeState of §5.3, for the one pattern the
/// secure channel uses:
///
/// ```
/// XX:
///   -> e
///   <- e, ee, s, es
///   -> s, se
/// ```
///
/// Each side has a static X25519 key; the responder (the board) sends its static key in the
/// second message and the initiator (the client) in the third, both encrypted. Why XX and what
/// the payloads carry: docs/authentication.md, "The secure channel".
///
/// ```swift
/// var client = try NoiseHandshake(role: .initiator, prologue: p, staticKey: .init())
/// let first = try client.writeMessage(payload: [])
/// ```
public struct NoiseHandshake {
  /// Which end of the handshake this is.
  public enum Role: Sendable {
    case initiator
    case responder
  }

  /// The protocol name, hashed first into the handshake (exactly 32 bytes, so it is `h` as is).
  public static let protocolName = "Noise_XX_25519_ChaChaPoly_SHA256"
  /// Noise's limit on one message, handshake or transport.
  public static let maxMessageSize = 65535
  /// Bytes of an X25519 public key.
  public static let keySize = 32

  private enum Token {
    case e, s, ee, es, se
  }

  private static let pattern: [[Token]] = [[.e], [.e, .ee, .s, .es], [.s, .se]]

  public let role: Role
  private var chainingKey: [UInt8]
  private var hash: [UInt8]
  private var cipher = NoiseCipherState()
  private let localStatic: Curve25519.KeyAgreement.PrivateKey
  private var localEphemeral: Curve25519.KeyAgreement.PrivateKey
  private var remoteEphemeral: Curve25519.KeyAgreement.PublicKey?
  private var remoteStatic: Curve25519.KeyAgreement.PublicKey?
  private var step = 0

  /// Starts a handshake. `prologue` is data both sides must agree on (it is hashed in, so a
  /// difference makes the handshake fail). `ephemeralKey` is for test vectors only: a fresh
  /// key is the default and the only safe choice.
  public init(
    role: Role, prologue: [UInt8], staticKey: Curve25519.KeyAgreement.PrivateKey,
    ephemeralKey: Curve25519.KeyAgreement.PrivateKey = .init()
  ) {
    self.role = role
    hash = Array(Self.protocolName.utf8)
    chainingKey = hash
    localStatic = staticKey
    localEphemeral = ephemeralKey
    mixHash(prologue)
  }

  /// Whether all three messages have been processed: ``split()`` may be called.
  public var isFinished: Bool { step == Self.pattern.count }

  /// Whether the next message is this side's to write.
  public var isWriting: Bool { (step % 2 == 0) == (role == .initiator) }

  /// `h`, the hash of everything sent and received so far: after the handshake, a value
  /// unique to this channel that both ends hold (its channel binding).
  public var handshakeHash: [UInt8] { hash }

  /// The other side's static public key, once its message carrying it was read.
  public var remoteStaticKey: [UInt8]? { remoteStatic.map { Array($0.rawRepresentation) } }

  /// Writes the next message, its payload made by `payload` from `h` as it stands before the
  /// payload is added (so a payload can sign the handshake so far).
  public mutating func writeMessage(payload: ([UInt8]) throws(SecureChannelError) -> [UInt8])
    throws(SecureChannelError) -> [UInt8]
  {
    guard !isFinished, isWriting else { throw .outOfOrder }
    var message: [UInt8] = []
    for token in Self.pattern[step] {
      switch token {
      case .e:
        let key = Array(localEphemeral.publicKey.rawRepresentation)
        message += key
        mixHash(key)
      case .s:
        message += try encryptAndHash(Array(localStatic.publicKey.rawRepresentation))
      default:
        try mixKey(dh(token))
      }
    }
    message += try encryptAndHash(try payload(hash))
    guard message.count <= Self.maxMessageSize else { throw .badHandshake("message too long") }
    step += 1
    return message
  }

  /// Writes the next message with a fixed payload.
  public mutating func writeMessage(payload: [UInt8]) throws(SecureChannelError) -> [UInt8] {
    try writeMessage { (_: [UInt8]) throws(SecureChannelError) in payload }
  }

  /// Reads the other side's next message; returns its payload and `h` as it stood before the
  /// payload (what a signature in the payload covers).
  public mutating func readMessage(_ message: [UInt8]) throws(SecureChannelError) -> (
    payload: [UInt8], hashBeforePayload: [UInt8]
  ) {
    guard !isFinished, !isWriting else { throw .outOfOrder }
    guard message.count <= Self.maxMessageSize else { throw .badHandshake("message too long") }
    var rest = message[...]
    for token in Self.pattern[step] {
      switch token {
      case .e:
        guard rest.count >= Self.keySize else { throw .badHandshake("message too short") }
        let key = Array(rest.prefix(Self.keySize))
        rest = rest.dropFirst(Self.keySize)
        guard let parsed = try? Curve25519.KeyAgreement.PublicKey(rawRepresentation: key) else {
          throw .badHandshake("not an X25519 key")
        }
        remoteEphemeral = parsed
        mixHash(key)
      case .s:
        let size = Self.keySize + (cipher.hasKey ? NoiseCipherState.tagSize : 0)
        guard rest.count >= size else { throw .badHandshake("message too short") }
        let key = try decryptAndHash(rest.prefix(size))
        rest = rest.dropFirst(size)
        guard let parsed = try? Curve25519.KeyAgreement.PublicKey(rawRepresentation: key) else {
          throw .badHandshake("not an X25519 key")
        }
        remoteStatic = parsed
      default:
        try mixKey(dh(token))
      }
    }
    let before = hash
    let payload = try decryptAndHash(rest)
    step += 1
    return (payload, before)
  }

  /// The two transport ciphers once the handshake is finished: one to send with, one to
  /// receive with (§5.2 Split, the initiator sending with the first).
  public func split() throws(SecureChannelError) -> (
    send: NoiseCipherState, receive: NoiseCipherState
  ) {
    guard isFinished else { throw .outOfOrder }
    let (first, second) = Self.hkdf(chainingKey: chainingKey, input: [])
    let one = NoiseCipherState(key: first)
    let two = NoiseCipherState(key: second)
    return role == .initiator ? (one, two) : (two, one)
  }

  // MARK: - SymmetricState

  private mutating func mixHash(_ data: [UInt8]) {
    var hasher = SHA256()
    hasher.update(data: hash)
    hasher.update(data: data)
    hash = Array(hasher.finalize())
  }

  private mutating func mixKey(_ input: [UInt8]) {
    let (nextChainingKey, key) = Self.hkdf(chainingKey: chainingKey, input: input)
    chainingKey = nextChainingKey
    cipher = NoiseCipherState(key: key)
  }

  private mutating func encryptAndHash(_ plaintext: [UInt8]) throws(SecureChannelError)
    -> [UInt8]
  {
    let ciphertext = try cipher.encrypt(plaintext, associatedData: hash)
    mixHash(ciphertext)
    return ciphertext
  }

  private mutating func decryptAndHash(_ ciphertext: ArraySlice<UInt8>)
    throws(SecureChannelError) -> [UInt8]
  {
    let plaintext: [UInt8]
    do {
      plaintext = try cipher.decrypt(ciphertext, associatedData: hash)
    } catch {
      throw .badHandshake("a handshake message failed its authentication")
    }
    mixHash(Array(ciphertext))
    return plaintext
  }

  /// The Diffie-Hellman of a token, from this side's point of view (`es`: the initiator's
  /// ephemeral with the responder's static, whichever side computes it).
  private func dh(_ token: Token) throws(SecureChannelError) -> [UInt8] {
    let local: Curve25519.KeyAgreement.PrivateKey
    let remote: Curve25519.KeyAgreement.PublicKey?
    let initiator = role == .initiator
    switch token {
    case .ee: (local, remote) = (localEphemeral, remoteEphemeral)
    case .es:
      (local, remote) = initiator ? (localEphemeral, remoteStatic) : (localStatic, remoteEphemeral)
    case .se:
      (local, remote) = initiator ? (localStatic, remoteEphemeral) : (localEphemeral, remoteStatic)
    default: throw .outOfOrder
    }
    guard let remote else { throw .outOfOrder }
    do {
      let secret = try local.sharedSecretFromKeyAgreement(with: remote)
      return secret.withUnsafeBytes { Array($0) }
    } catch {
      // X25519 with a low-order point gives all zeros, which BoringSSL refuses.
      throw .badHandshake("the peer's key gave no shared secret")
    }
  }

  /// HKDF of §4.3 with HMAC-SHA256, two outputs.
  static func hkdf(chainingKey: [UInt8], input: [UInt8]) -> ([UInt8], [UInt8]) {
    let tempKey = SymmetricKey(
      data: HMAC<SHA256>.authenticationCode(for: input, using: SymmetricKey(data: chainingKey)))
    let first = Array(HMAC<SHA256>.authenticationCode(for: [1], using: tempKey))
    let second = Array(HMAC<SHA256>.authenticationCode(for: first + [2], using: tempKey))
    return (first, second)
  }
}
