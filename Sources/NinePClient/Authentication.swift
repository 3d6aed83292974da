import Foundation
import NinePProtocol
import NinePTransport

/// How a session proves who it is with the 9p4z core's Tauth (docs/board-facts.md §6): Tauth(afid,
/// identity) → Tread(afid) gives a challenge → Twrite(afid, response) → [Tread(afid) gives
/// the board's proof, when the answer asks for one] → Tattach(afid, identity) → Tclunk(afid).
/// Every session of a pool and every reconnect does it again.
///
/// The key never reaches this module: `respond` turns what the afid read gave into the bytes
/// to write (signature ‖ public key) and, for a board that presented its own key, a check of
/// the board's proof; what is signed, which boards are trusted and the signing itself (in
/// memory, or by an ssh-agent) stay with the caller (BBSIdentity, docs/authentication.md).
public struct Authentication: Sendable {
  /// What to do when the server does not authenticate.
  public enum Policy: String, Sendable {
    /// Authenticate when the server wants it; a server that answers Tauth with
    /// `authentication not required` is attached without (with the configured uname).
    case auto
    /// Fail unless the session is authenticated.
    case required
  }

  /// What the board handed out: the afid read's bytes, the address they came from, and the
  /// secure channel they came over (nil: a plain connection), which a signature is bound to.
  public struct Challenge: Sendable {
    public var bytes: [UInt8]
    public var address: TransportAddress
    public var channel: ChannelSecurity?

    public init(bytes: [UInt8], address: TransportAddress, channel: ChannelSecurity? = nil) {
      self.bytes = bytes
      self.address = address
      self.channel = channel
    }
  }

  /// How to answer a challenge.
  public struct Answer: Sendable {
    /// The bytes to write to the afid.
    public var response: [UInt8]
    /// Checks the board's proof (the afid read after the write); nil: read none. Throws
    /// (any error, shown to the user) when the board does not prove itself.
    public var checkProof: (@Sendable (_ proof: [UInt8]) throws -> Void)?

    public init(
      response: [UInt8], checkProof: (@Sendable (_ proof: [UInt8]) throws -> Void)? = nil
    ) {
      self.response = response
      self.checkProof = checkProof
    }
  }

  /// The identity named in Tauth and Tattach.
  public var identity: String
  public var policy: Policy
  /// The answer to a challenge; throws when the client will not answer it (an
  /// ``AuthenticationError`` as it is, any other error as ``AuthenticationError/signing(_:)``).
  public var respond: @Sendable (_ challenge: Challenge) throws -> Answer
  /// Authentications running at once against the server, across every session made with
  /// this value (a board authenticates at most 4 at a time).
  let gate: Gate

  /// Authentications one board runs at once.
  public static let concurrentLimit = 4

  public init(
    identity: String, policy: Policy,
    respond: @escaping @Sendable (_ challenge: Challenge) throws -> Answer
  ) {
    self.identity = identity
    self.policy = policy
    self.respond = respond
    gate = Gate(limit: Self.concurrentLimit)
  }

  /// A counting semaphore that gives up after a deadline.
  ///
  /// `@unchecked Sendable`: `inUse` is read and written only with `condition` locked (an
  /// NSCondition, not a Mutex: `enter` waits on it until a place comes free).
  final class Gate: @unchecked Sendable {
    private let condition = NSCondition()
    private let limit: Int
    private var inUse = 0

    init(limit: Int) { self.limit = limit }

    /// Takes a place, waiting until `deadline`; false if none came free in time.
    func enter(before deadline: Date) -> Bool {
      condition.lock()
      defer { condition.unlock() }
      while inUse >= limit {
        guard condition.wait(until: deadline) else { return false }
      }
      inUse += 1
      return true
    }

    func leave() {
      condition.lock()
      inUse -= 1
      condition.signal()
      condition.unlock()
    }
  }
}

/// Why authentication failed: the 9p4z core's Tauth/Tattach errors (docs/board-facts.md §6) and the
/// client's own.
public enum AuthenticationError: Error, Sendable, Equatable, CustomStringConvertible {
  /// `authentication not required`: the server does not authenticate (an error only with
  /// ``Authentication/Policy/required``).
  case notRequired
  /// `invalid identity`: the identity is empty or longer than 63 bytes.
  case invalidIdentity
  /// `authentication timeout`: the challenge expired (60 s after Tauth).
  case expired
  /// `invalid auth response size`: the response was not 96 or 129 bytes.
  case invalidResponseSize
  /// `must read challenge first`.
  case challengeNotRead
  /// `authentication failed`: the server refused the key or its signature.
  case refused
  /// `uname does not match authenticated identity`.
  case unameMismatch
  /// `authentication required`: the server admits no guests, and no key was configured.
  case required
  /// `authentication incomplete`: the afid had not finished authenticating.
  case incomplete
  /// `too many concurrent authentications` (4 at once on a board).
  case busy
  /// `authentication only over the secure channel`: the board takes no signature on a plain
  /// TCP connection (docs/authentication.md §6).
  case needsSecureChannel
  /// The server's challenge was empty.
  case noChallenge
  /// The key could not sign; the text says why.
  case signing(String)
  /// The client would not answer the board, or the board did not prove its key (a
  /// malformed challenge, a changed board key, a bad proof); the text says why.
  case boardRefused(String)
  /// Another Rerror during authentication.
  case server(String)

  /// The error for a server's Rerror text. Plan 9's lib9p prefixes its program name
  /// (`u9fs: authentication not required`).
  public init(ename: String) {
    if ename.hasSuffix("authentication not required") {
      self = .notRequired
      return
    }
    switch ename {
    case "invalid identity": self = .invalidIdentity
    case "authentication timeout": self = .expired
    case "invalid auth response size": self = .invalidResponseSize
    case "must read challenge first": self = .challengeNotRead
    case "authentication failed": self = .refused
    case "uname does not match authenticated identity": self = .unameMismatch
    case "authentication required": self = .required
    case "authentication incomplete": self = .incomplete
    case "too many concurrent authentications": self = .busy
    case "authentication only over the secure channel": self = .needsSecureChannel
    default: self = .server(ename)
    }
  }

  /// Whether a Tauth answered so means that the server does not do this authentication at
  /// all (it does not need it, or speaks no Tauth we know), rather than refusing ours.
  var meansNoAuthentication: Bool {
    switch self {
    case .notRequired, .server: true
    default: false
    }
  }

  /// Whether Tattach's error is about authentication (else it is reported as it is).
  static func isAttachError(_ ename: String) -> Bool {
    if case .server = AuthenticationError(ename: ename) { return false }
    return true
  }

  public var description: String {
    switch self {
    case .notRequired:
      "the server does not authenticate (authentication not required); mount with -o auth=auto to use it without"
    case .invalidIdentity: "the server refused the identity's form (invalid identity)"
    case .expired: "the challenge expired before it was answered (authentication timeout)"
    case .invalidResponseSize:
      "the server refused the response's size (invalid auth response size); is the key Ed25519 or P-256?"
    case .challengeNotRead: "the challenge was not read first (must read challenge first)"
    case .refused: "the server refused the key (authentication failed)"
    case .unameMismatch:
      "the attach named another user than the identity authenticated (uname does not match authenticated identity)"
    case .required:
      "the server admits no guests (authentication required): make a key with `mount9bbs keygen`, or use yours with -o identity=~/.ssh/id_ed25519 or -o identity=agent"
    case .incomplete: "the authentication did not finish (authentication incomplete)"
    case .busy:
      "the server is authenticating too many sessions at once (too many concurrent authentications)"
    case .needsSecureChannel:
      "the board takes signatures only over its secure channel, and this connection is plain (authentication only over the secure channel): mount without -o secure=off"
    case .noChallenge: "the server sent an empty challenge"
    case .signing(let reason): reason
    case .boardRefused(let reason): reason
    case .server(let ename): "authentication failed: \(ename)"
    }
  }
}
