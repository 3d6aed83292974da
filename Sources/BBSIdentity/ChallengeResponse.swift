import Crypto

/// The Tauth challenge response of the 9p4z core (facts §6): what the client writes to the
/// afid after reading the challenge, and how a server checks it.
///
/// The core leaves the signed bytes to the application; here (client and server alike) they
/// are the challenge's raw bytes, and ``signedMessage(challenge:)`` is the only place that
/// says so.
public enum ChallengeResponse {
  /// Bytes of challenge a server hands out.
  public static let challengeSize = 32
  /// Bytes of signature at the start of a response.
  public static let signatureSize = 64
  /// The response sizes a server accepts: signature ‖ Ed25519 key, signature ‖ P-256 key.
  public static let sizes: Set<Int> = Set(
    KeyAlgorithm.allCases.map { signatureSize + $0.publicKeySize })

  /// What is signed for a challenge: its raw bytes.
  public static func signedMessage(challenge: [UInt8]) -> [UInt8] { challenge }

  /// The bytes to write to the afid: signature[64] ‖ public key.
  public static func respond(to challenge: [UInt8], with signer: any Signer) throws(IdentityError)
    -> [UInt8]
  {
    let signature = try signer.sign(signedMessage(challenge: challenge))
    guard signature.count == signatureSize else {
      throw .signingFailed(
        origin: signer.origin, reason: "a \(signature.count)-byte signature (expected 64)")
    }
    return signature + signer.publicKey
  }

  /// Why a response was not accepted.
  public enum Rejection: Error, Equatable, Sendable, CustomStringConvertible {
    /// Not 96 or 129 bytes.
    case wrongSize(Int)
    /// The key is not a valid point (P-256) or key (Ed25519).
    case badKey(KeyAlgorithm)
    /// The key's identity is not the one claimed in Tauth.
    case identityMismatch(claimed: String, key: Identity)
    /// The signature does not verify.
    case badSignature(KeyAlgorithm)

    public var description: String {
      switch self {
      case .wrongSize(let size): "a \(size)-byte response (96 or 129 expected)"
      case .badKey(let algorithm): "not a valid \(algorithm) public key"
      case .identityMismatch(let claimed, let key):
        "the key's identity is \(key), not the claimed \(claimed)"
      case .badSignature(let algorithm): "the \(algorithm) signature does not verify"
      }
    }
  }

  /// Checks a response against the challenge and the identity claimed in Tauth; returns the
  /// proven identity.
  public static func verify(_ response: [UInt8], challenge: [UInt8], claimedIdentity: String)
    throws(Rejection) -> Identity
  {
    guard response.count > signatureSize,
      let algorithm = KeyAlgorithm(publicKeySize: response.count - signatureSize)
    else { throw .wrongSize(response.count) }
    let signature = Array(response[..<signatureSize])
    let publicKey = Array(response[signatureSize...])
    let identity = Identity(publicKey: publicKey)
    guard Identity(parsing: claimedIdentity) == identity else {
      throw .identityMismatch(claimed: claimedIdentity, key: identity)
    }
    let message = signedMessage(challenge: challenge)
    let valid: Bool
    switch algorithm {
    case .ed25519:
      guard let key = try? Curve25519.Signing.PublicKey(rawRepresentation: publicKey) else {
        throw .badKey(algorithm)
      }
      valid = key.isValidSignature(signature, for: message)
    case .p256:
      guard let key = try? P256.Signing.PublicKey(x963Representation: publicKey) else {
        throw .badKey(algorithm)
      }
      guard let parsed = try? P256.Signing.ECDSASignature(rawRepresentation: signature) else {
        throw .badSignature(algorithm)
      }
      valid = key.isValidSignature(parsed, for: message)
    }
    guard valid else { throw .badSignature(algorithm) }
    return identity
  }
}
