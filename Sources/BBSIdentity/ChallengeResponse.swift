import Crypto

/// The Tauth challenge response of 9p4z (docs/board-facts.md §6), and the board's proof of its own
/// key: what the client reads from and writes to the afid, and how either side checks it.
/// `docs/authentication.md` gives the same bytes for a board's verifier.
///
/// A board's afid read is a challenge of exactly 32 bytes (a board without a key, as deployed
/// boards are), or those 32 bytes ‖ ``boardKeyMagic`` ‖ the board's Ed25519 key. Anything
/// else is refused before any key signs.
///
/// What the client signs (the ``Form/bound`` form, the default) is an SSHSIG blob in
/// ``clientNamespace`` over a message that names the context, the identity, the board key the
/// client believes it talks to (or none) and the challenge, so the signature is good for that
/// one authentication at that one board and is never a valid SSH login or git signature.
/// ``Form/raw`` (the raw 32 challenge bytes) is what deployed boards probably verify: an
/// explicit compatibility form, never the default.
///
/// A board with a key then proves it: after the response is accepted, a second afid read
/// gives a 64-byte Ed25519 signature over ``boardProofData(challenge:response:)``.
public enum ChallengeResponse {
  /// Bytes of challenge a server hands out, and the only challenge size a client answers.
  public static let challengeSize = 32
  /// Bytes of signature at the start of a response, and of a board's proof.
  public static let signatureSize = 64
  /// The response sizes a server accepts: signature ‖ Ed25519 key, signature ‖ P-256 key.
  public static let sizes: Set<Int> = Set(
    KeyAlgorithm.allCases.map { signatureSize + $0.publicKeySize })
  /// Between the challenge and the board's key in a keyed board's afid read.
  public static let boardKeyMagic = Array("9BBS-BOARD-KEY-1".utf8)
  /// The SSHSIG namespace of a client's signature.
  public static let clientNamespace = "9bbs-auth-v1@mount9bbs"
  /// The SSHSIG namespace of a board's proof.
  public static let boardNamespace = "9bbs-board-v1@mount9bbs"
  /// The first field of the message a client signs on a plain connection.
  public static let clientContext = "9bbs client authentication v1"
  /// The first field of the message a client signs on the secure channel, where the message
  /// ends with the channel's binding.
  public static let channelClientContext = "9bbs client authentication v2"
  /// The first field of the message a board signs.
  public static let boardContext = "9bbs board proof v1"

  /// What a client signs for a challenge.
  public enum Form: String, Sendable, CaseIterable {
    /// The SSHSIG blob over context, identity, board key and challenge.
    case bound
    /// The challenge's 32 raw bytes (deployed boards; compatibility only).
    case raw
  }

  /// What a board's afid read holds, and the secure channel it came over.
  public struct Challenge: Equatable, Sendable {
    /// The 32 random bytes.
    public let nonce: [UInt8]
    /// The board's key, nil for a board without one.
    public let boardKey: BoardKey?
    /// The secure channel's binding (its Noise handshake hash); nil on a plain connection.
    public var channelBinding: [UInt8]?

    public init(nonce: [UInt8], boardKey: BoardKey?, channelBinding: [UInt8]? = nil) {
      self.nonce = nonce
      self.boardKey = boardKey
      self.channelBinding = channelBinding
    }

    /// Reads an afid read: 32 bytes, or 32 ‖ magic ‖ Ed25519 key.
    public init(parsing bytes: [UInt8]) throws(ChallengeRefusal) {
      let keyed = challengeSize + boardKeyMagic.count + BoardKey.size
      switch bytes.count {
      case challengeSize:
        self.init(nonce: bytes, boardKey: nil)
      case keyed:
        guard Array(bytes[challengeSize..<challengeSize + boardKeyMagic.count]) == boardKeyMagic
        else { throw .notAChallenge(bytes.count) }
        guard let key = BoardKey(publicKey: Array(bytes[(keyed - BoardKey.size)...])) else {
          throw .badBoardKey
        }
        self.init(nonce: Array(bytes[..<challengeSize]), boardKey: key)
      default:
        throw .notAChallenge(bytes.count)
      }
    }

    /// The bytes a board returns for the afid read.
    public var encoded: [UInt8] {
      guard let boardKey else { return nonce }
      return nonce + boardKeyMagic + boardKey.publicKey
    }
  }

  /// Why a client will not answer what a board sent as a challenge.
  public enum ChallengeRefusal: Error, Equatable, Sendable, CustomStringConvertible {
    /// Neither 32 bytes nor 32 ‖ magic ‖ key.
    case notAChallenge(Int)
    /// The board key is no Ed25519 key.
    case badBoardKey

    public var description: String {
      switch self {
      case .notAChallenge(let size):
        "the board sent a \(size)-byte challenge; a 9BBS challenge is exactly 32 bytes "
          + "(or 32 followed by the board's key), so nothing was signed"
      case .badBoardKey: "the board sent a challenge with an invalid board key; nothing was signed"
      }
    }
  }

  /// The message a client signs in ``Form/bound``: SSH strings of the context, the identity
  /// (40 hex characters), the board key as an SSH public-key blob (empty: no board key) and
  /// the challenge; on the secure channel (v2), then the channel's binding.
  public static func clientMessage(identity: Identity, challenge: Challenge) -> [UInt8] {
    var writer = SSHWriter()
    writer.string(challenge.channelBinding == nil ? clientContext : channelClientContext)
    writer.string(identity.hex)
    writer.string(challenge.boardKey?.sshBlob ?? [])
    writer.string(challenge.nonce)
    if let binding = challenge.channelBinding { writer.string(binding) }
    return writer.bytes
  }

  /// The bytes a client's key signs for a challenge.
  public static func signedData(identity: Identity, challenge: Challenge, form: Form) -> [UInt8] {
    switch form {
    case .bound:
      SSHSignature.signedData(
        namespace: clientNamespace, message: clientMessage(identity: identity, challenge: challenge)
      )
    case .raw: challenge.nonce
    }
  }

  /// The bytes to write to the afid: signature[64] ‖ public key.
  public static func respond(to challenge: Challenge, with signer: any Signer, form: Form = .bound)
    throws(IdentityError) -> [UInt8]
  {
    let data = signedData(identity: signer.identity, challenge: challenge, form: form)
    let signature = try signer.sign(data)
    guard signature.count == signatureSize else {
      throw .signingFailed(
        origin: signer.origin, reason: "a \(signature.count)-byte signature (expected 64)")
    }
    return signature + signer.publicKey
  }

  /// Why a response (or a board's proof) was not accepted.
  public enum Rejection: Error, Equatable, Sendable, CustomStringConvertible {
    /// Not 96 or 129 bytes.
    case wrongSize(Int)
    /// The key is not a valid point (P-256) or key (Ed25519).
    case badKey(KeyAlgorithm)
    /// The key's identity is not the one claimed in Tauth.
    case identityMismatch(claimed: String, key: Identity)
    /// The signature does not verify.
    case badSignature(KeyAlgorithm)
    /// The board's proof is not its key's signature.
    case badBoardProof

    public var description: String {
      switch self {
      case .wrongSize(let size): "a \(size)-byte response (96 or 129 expected)"
      case .badKey(let algorithm): "not a valid \(algorithm) public key"
      case .identityMismatch(let claimed, let key):
        "the key's identity is \(key), not the claimed \(claimed)"
      case .badSignature(let algorithm): "the \(algorithm) signature does not verify"
      case .badBoardProof: "the board's proof is not a signature by the key it presented"
      }
    }
  }

  /// Checks a response against the challenge the board issued and the identity claimed in
  /// Tauth; returns the proven identity.
  public static func verify(
    _ response: [UInt8], challenge: Challenge, claimedIdentity: String, form: Form = .bound
  ) throws(Rejection) -> Identity {
    guard response.count > signatureSize,
      let algorithm = KeyAlgorithm(publicKeySize: response.count - signatureSize)
    else { throw .wrongSize(response.count) }
    let signature = Array(response[..<signatureSize])
    let publicKey = Array(response[signatureSize...])
    let identity = Identity(publicKey: publicKey)
    guard Identity(parsing: claimedIdentity) == identity else {
      throw .identityMismatch(claimed: claimedIdentity, key: identity)
    }
    let message = signedData(identity: identity, challenge: challenge, form: form)
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

  // MARK: - The board's proof

  /// The message a board signs: SSH strings of the context, its key's SSH blob, the
  /// challenge and the client's whole response (signature ‖ public key).
  public static func boardMessage(boardKey: BoardKey, nonce: [UInt8], response: [UInt8])
    -> [UInt8]
  {
    var writer = SSHWriter()
    writer.string(boardContext)
    writer.string(boardKey.sshBlob)
    writer.string(nonce)
    writer.string(response)
    return writer.bytes
  }

  /// The bytes a board's key signs after accepting `response`.
  public static func boardProofData(boardKey: BoardKey, nonce: [UInt8], response: [UInt8])
    -> [UInt8]
  {
    SSHSignature.signedData(
      namespace: boardNamespace,
      message: boardMessage(boardKey: boardKey, nonce: nonce, response: response))
  }

  /// The board's proof for an accepted response: its key's 64-byte signature.
  public static func proveBoard(nonce: [UInt8], response: [UInt8], with key: PrivateKey)
    throws(IdentityError) -> [UInt8]
  {
    guard let boardKey = BoardKey(of: key) else {
      throw .boardKeyNotEd25519(path: key.origin, algorithm: key.algorithm)
    }
    return try key.sign(boardProofData(boardKey: boardKey, nonce: nonce, response: response))
  }

  /// Checks a board's proof against the key it presented in `challenge`.
  public static func verifyBoardProof(
    _ proof: [UInt8], boardKey: BoardKey, nonce: [UInt8], response: [UInt8]
  ) throws(Rejection) {
    guard proof.count == signatureSize,
      let key = try? Curve25519.Signing.PublicKey(rawRepresentation: boardKey.publicKey),
      key.isValidSignature(
        proof, for: boardProofData(boardKey: boardKey, nonce: nonce, response: response))
    else { throw .badBoardProof }
  }
}
