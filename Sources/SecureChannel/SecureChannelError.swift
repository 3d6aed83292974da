/// Why a secure channel could not be set up or went on no longer.
public enum SecureChannelError: Error, Sendable, Equatable, CustomStringConvertible {
  /// A handshake message was malformed or failed its check; the text says which.
  case badHandshake(String)
  /// A record did not decrypt: altered, replayed, reordered or not from the peer.
  case badRecord
  /// A handshake step was taken out of turn (a bug, or a peer breaking the pattern).
  case outOfOrder
  /// 2^64 - 1 records in one direction: the channel must end.
  case exhausted
  /// The peer asked for the channel but did not go on with it, or closed it.
  case peerLeft
  /// The handshake did not finish in time.
  case timedOut
  /// A primitive failed where it cannot fail for valid input.
  case crypto(String)
  /// The server answered the request for the channel with something that is not 9P.
  case notNineP(String)
  /// The client would not go on with this board (its proof or its key); the text says why.
  case boardRefused(String)

  public var description: String {
    switch self {
    case .badHandshake(let what): "the handshake failed: \(what)"
    case .badRecord:
      "a record did not decrypt (altered or injected on the way, or not from the peer)"
    case .outOfOrder: "a handshake message came out of turn"
    case .exhausted: "the channel used up its nonces"
    case .peerLeft: "the peer closed the connection during the handshake"
    case .timedOut: "the handshake did not finish in time"
    case .crypto(let what): what
    case .notNineP(let what): "the server's answer is not 9P (\(what))"
    case .boardRefused(let why): why
    }
  }
}
