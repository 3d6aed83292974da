import BBSIdentity
import Foundation
import NinePProtocol

/// Why the server could not start or serve.
public enum ServerError: Error, Equatable, Sendable, CustomStringConvertible {
  /// A setting is unusable; the text says which and why.
  case badConfiguration(String)
  /// A listener could not be opened.
  case listenFailed(address: String, reason: String)
  /// The data store could not be opened.
  case storeFailed(String)

  public var description: String {
    switch self {
    case .badConfiguration(let text): return text
    case .listenFailed(let address, let reason): return "cannot listen on \(address): \(reason)"
    case .storeFailed(let text): return "cannot open the data store: \(text)"
    }
  }
}

/// How many clients the server serves at once, and what happens to the next one.
public enum ConnectionLimit: Sendable, Equatable {
  /// Every connection is served.
  case unlimited
  /// While this many clients are connected, no more are accepted: later clients wait in the
  /// listen backlog, unserved, until one disconnects (9p4z's TCP transport, with 1).
  case backlog(Int)
  /// Connections beyond this many are accepted and closed at once (a board whose L2CAP
  /// session pool has no free session).
  case refuse(Int)
}

/// Everything ``BBSServer`` needs to run.
public struct BBSServerConfiguration: Sendable {
  /// The default listen address of `9bbsd` (the 9P port is 564; this one needs no root).
  public static let defaultListen = "tcp!127.0.0.1!5640"

  /// Dial strings to listen on: `tcp!host!port`, `unix!/path`, `seqpacket!/path[!sdu]`,
  /// `l2cap!PSM` (LE credit-based channels on every adapter) or `l2cap!BDADDR!PSM` (on one).
  public var listen: [String]
  /// Which board to imitate.
  public var profile: BBSProfile
  /// Chat rooms (and the board rooms created on first start).
  public var rooms: [String]
  /// `/etc/boardname` until the sysop changes it.
  public var boardName: String?
  /// `/etc/motd` until the sysop changes it.
  public var motd: String?
  /// A directory served under `/files`.
  public var filesDirectory: String?
  /// Whether `/files` may be written.
  public var filesWritable: Bool
  /// Where the SQLite store lives; nil keeps everything in memory.
  public var dataDirectory: String?
  /// Largest msize granted. The device and gen1 profiles never grant more than 8192.
  public var maxMessageSize: Int
  /// Device profile: the largest SDU accepted from a client on packet transports.
  public var sduLimit: Int
  /// Device and gen1 profiles: how long the shared worker holds each request before answering.
  public var processingDelay: Duration
  /// Clients served at once (device: 4, default profile: 256, refused beyond; gen1:
  /// unlimited).
  public var connectionLimit: ConnectionLimit
  /// Parked reads per session (device: 4; gen1: none, its chat reads never park).
  public var parkingSlots: Int
  /// Fids per session (device: 32).
  public var maxFids: Int
  /// Tags in use per session (device: 16); nil means unlimited.
  public var maxTags: Int?
  /// Whether clients prove an identity with Tauth (not in the gen1 profile, whose core
  /// predates it).
  public var auth: AuthPolicy = .off
  /// Identities (40 hex characters) that may write /etc. Empty: the first user registered,
  /// as on a device.
  public var sysops: Set<String> = []
  /// Names chat lines show for identities; others show their first 8 characters.
  public var nicknames: [String: String] = [:]
  /// The board's own Ed25519 key, which it proves to every client that authenticates (see
  /// docs/authentication.md); nil: a board without a key, as deployed boards are.
  public var boardKey: PrivateKey?
  /// Whether TCP clients may, or must, use the secure channel (docs/authentication.md §6).
  public var secure: SecurePolicy = .offered
  /// What a client's key must have signed: ``ChallengeResponse/Form/bound`` (the default),
  /// or the raw challenge, as a deployed board probably verifies it (compatibility only).
  public var authSign: ChallengeResponse.Form = .bound
  /// How long a Tauth challenge may be answered (a board: 60 s).
  public var challengeLifetime: Duration = .seconds(60)
  /// Without ``sysops``: whether the first user to attach becomes the sysop, as on a device.
  /// `9bbsd --sysop none` turns it off: then nobody writes `/etc`.
  public var firstUserIsSysop = true

  // Limits against hostile clients (issue 21).

  /// A connection that has not finished Tversion and Tattach this long after it was accepted
  /// is closed.
  public var handshakeTimeout: Duration = .seconds(10)
  /// A connection that sent no request for this long and has no parked read is closed.
  public var idleTimeout: Duration = .seconds(30 * 60)
  /// A request whose first bytes arrived must be whole within this time, and a reply the
  /// client does not read must be gone within it, or the connection is closed.
  public var stallTimeout: Duration = .seconds(30)
  /// Connections from one TCP network at once (``SourceNetwork``: a /24, an IPv6 /64; one
  /// machine holds all of 127/8), not counting those attached as members; the next is refused
  /// with a log line. nil means no cap (Unix and seqpacket clients are never counted: they
  /// are local).
  public var maxConnectionsPerNetwork: Int? = 32
  /// With `--auth optional` and a ``ConnectionLimit/refuse(_:)`` cap: sessions of the cap
  /// that guests never take, so members get in however many guests come (a guest's Tattach
  /// beyond cap minus this is refused `board full`). Clamped to the cap minus one.
  public var sessionsReservedForMembers = 16
  /// How much one TCP poster may post and write (see ``PostingLimits``).
  public var postingLimits: PostingLimits = .standard
  /// Files of the files area one session may hold open at once (each is a descriptor). A mount
  /// serves every process of its user through one session: fsstress's 8 processes held about
  /// 250 at once, so 256 refused their opens. 9bbsd raises its descriptor limit to the hard one
  /// (524288 under systemd), which 256 connections of 1024 files each stay well under.
  public var maxOpenFilesPerSession = 1024
  /// Largest board message text in bytes (default profile: 64 KiB).
  public var maxBoardMessageSize: Int = BoardLimits.defaultMaxMessageBytes

  /// The default cap on connections of the default profile: well under the 1024 descriptors
  /// systemd gives a service, leaving room for the files `/files` readers hold open.
  public static let defaultConnectionCap = 256

  /// A configuration with the profile's defaults.
  public init(
    listen: [String] = [BBSServerConfiguration.defaultListen], profile: BBSProfile = .standard,
    rooms: [String] = ["lobby"], boardName: String? = nil, motd: String? = nil,
    filesDirectory: String? = nil, filesWritable: Bool = false, dataDirectory: String? = nil,
    maxMessageSize: Int? = nil, sduLimit: Int = 245, processingDelay: Duration = .zero,
    connectionLimit: ConnectionLimit? = nil
  ) {
    self.listen = listen
    self.profile = profile
    self.rooms = rooms
    self.boardName = boardName
    self.motd = motd
    self.filesDirectory = filesDirectory
    self.filesWritable = filesWritable
    self.dataDirectory = dataDirectory
    self.sduLimit = sduLimit
    self.processingDelay = processingDelay
    switch profile {
    case .device:
      self.maxMessageSize = min(maxMessageSize ?? 8192, 8192)
      self.connectionLimit = connectionLimit ?? .refuse(4)
      parkingSlots = 4
      maxFids = 32
      maxTags = 16
    case .gen1:
      self.maxMessageSize = min(maxMessageSize ?? 8192, 8192)
      self.connectionLimit = connectionLimit ?? .unlimited
      parkingSlots = 0
      maxFids = 32
      maxTags = nil
    case .standard:
      self.maxMessageSize = maxMessageSize ?? NineP.defaultMessageSize
      self.connectionLimit = connectionLimit ?? .refuse(Self.defaultConnectionCap)
      parkingSlots = 64
      maxFids = 4096
      maxTags = nil
    }
  }
}

/// Whether the board speaks the secure channel (the SecureChannel module) to its clients.
public enum SecurePolicy: String, Sendable, CaseIterable {
  /// Never: a Tversion asking for it gets the plain answer (as a deployed board).
  case off
  /// To any stream client that asks; on TCP, Tauth is then refused on a plain connection,
  /// so a signature is only ever bound to a channel (guests may still attach plain).
  case offered
  /// TCP clients must use it: every other first request is refused. Unix-socket clients are
  /// local, and may still come plain.
  case required
}
