import Crypto

/// What a board sends in the second message of the secure channel's handshake (the
/// SecureChannel module, docs/authentication.md §6): nothing, for a board without a key, or
/// its Ed25519 key ‖ the key's signature over the handshake so far. So the board proves its
/// key before the client has sent anything but a fresh ephemeral key, and the proof is good
/// for this one handshake only: a relay that passes it on holds a different handshake.
public enum ChannelProof {
  /// The SSHSIG namespace of the board's signature.
  public static let namespace = "9bbs-channel-v1@mount9bbs"
  /// The first field of the message it signs.
  public static let context = "9bbs board channel v1"
  /// Bytes of a keyed board's payload.
  public static let size = BoardKey.size + ChallengeResponse.signatureSize

  /// The message a board signs: SSH strings of the context, its key's SSH blob and the
  /// handshake hash `h` before the payload.
  public static func message(boardKey: BoardKey, handshakeHash: [UInt8]) -> [UInt8] {
    var writer = SSHWriter()
    writer.string(context)
    writer.string(boardKey.sshBlob)
    writer.string(handshakeHash)
    return writer.bytes
  }

  /// The payload for a board with `key` (nil: none, an empty payload).
  public static func payload(handshakeHash: [UInt8], key: PrivateKey?) throws(IdentityError)
    -> [UInt8]
  {
    guard let key else { return [] }
    guard let boardKey = BoardKey(of: key) else {
      throw .boardKeyNotEd25519(path: key.origin, algorithm: key.algorithm)
    }
    let signature = try key.sign(
      SSHSignature.signedData(
        namespace: namespace, message: message(boardKey: boardKey, handshakeHash: handshakeHash)))
    return boardKey.publicKey + signature
  }

  /// The board key a payload proves for the handshake hash `handshakeHash`; nil for an empty
  /// payload (a board without a key). Throws when it proves nothing.
  public static func verify(_ payload: [UInt8], handshakeHash: [UInt8])
    throws(ChallengeResponse.Rejection) -> BoardKey?
  {
    guard !payload.isEmpty else { return nil }
    guard payload.count == size,
      let boardKey = BoardKey(publicKey: Array(payload.prefix(BoardKey.size))),
      let key = try? Curve25519.Signing.PublicKey(rawRepresentation: boardKey.publicKey),
      key.isValidSignature(
        Array(payload.suffix(ChallengeResponse.signatureSize)),
        for: SSHSignature.signedData(
          namespace: namespace, message: message(boardKey: boardKey, handshakeHash: handshakeHash)))
    else { throw .badBoardProof }
    return boardKey
  }
}
