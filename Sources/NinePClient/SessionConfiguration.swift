import NinePProtocol
import NinePTransport

/// The wire discipline a session follows, chosen per server.
///
/// A 9p4z device serves one request at a time per channel and drops the channel when an SDU
/// arrives while it is busy; a TCP 9P server multiplexes. See `docs/board-facts.md` §3, §9.
public enum ServerProfile: String, Sendable, CaseIterable, CustomStringConvertible {
  /// One non-parked request in flight, ≤ 16 tags, ≤ 32 fids, ≤ 4 parked reads, one read per
  /// fid, msize ≤ 8192.
  case device
  /// Pipelined requests up to a tag window.
  case multiplex

  /// The default for a transport: packet transports (l2cap, seqpacket) lead to devices.
  public static func `default`(for address: TransportAddress) -> ServerProfile {
    address.isPacketTransport ? .device : .multiplex
  }

  public var description: String { rawValue }
}

/// How a session talks to its server.
public struct SessionConfiguration: Sendable {
  public var profile: ServerProfile
  /// The msize asked for in Tversion; the server may answer less. Also the receive buffer:
  /// replies up to this size are accepted even when the negotiated msize is smaller (old
  /// devices overshoot it), anything larger resets the session.
  public var requestedMsize: UInt32
  public var uname: String
  public var aname: String
  /// Tags that may be outstanding at once (NOTAG excluded).
  public var maxTags: Int
  /// Fids that may exist at once, attach fid included.
  public var maxFids: Int
  /// Reads that may park at the server at once (device: 4 per session).
  public var maxParkedReads: Int
  /// Default time to wait for a reply; `nil` waits forever (parked reads never time out).
  public var requestTimeout: Duration?
  /// Device profile: how long after sending a read that may park the channel counts as busy
  /// (at least; three smoothed round trips if that is longer). A board takes milliseconds per
  /// request, more when its one worker serves several channels or is held up (a flash write,
  /// a busy radio); sending the next SDU before the read has parked kills the channel, which
  /// costs far more than waiting: 250 ms, since 100 ms was seen to run out on a loaded host.
  public var parkGrace: Duration
  /// How long a parked read keeps its slot while other reads wait for one.
  public var parkingTurn: Duration = .seconds(1)
  /// Prove an identity with Tauth before attaching; nil attaches as `uname` without.
  public var authentication: Authentication?
  /// Turns each freshly dialled transport into the one the session uses, within the time
  /// given: the secure channel (Mount9BBSCommand sets it up and checks the board's key), or
  /// nil to use the transport as dialled. Throws to refuse the connection.
  public var openChannel:
    (@Sendable (any MessageTransport, Duration) throws(NinePError) -> any MessageTransport)?
  /// Device profile: the board's one work queue, shared by the sessions a ``Pool`` opens to it
  /// (the pool makes one), so a park grace counts the other sessions' requests.
  public var board: BoardQueue?

  public init(
    profile: ServerProfile, uname: String, aname: String = "", requestedMsize: UInt32? = nil,
    requestTimeout: Duration? = .seconds(30)
  ) {
    self.profile = profile
    self.uname = uname
    self.aname = aname
    self.requestTimeout = requestTimeout
    switch profile {
    case .device:
      self.requestedMsize = min(requestedMsize ?? 8192, 8192)
      maxTags = 16
      maxFids = 32
      maxParkedReads = 4
      parkGrace = .milliseconds(250)
    case .multiplex:
      self.requestedMsize = requestedMsize ?? UInt32(NineP.defaultMessageSize)
      maxTags = 256
      maxFids = 4096
      maxParkedReads = 64
      parkGrace = .zero
    }
  }
}
