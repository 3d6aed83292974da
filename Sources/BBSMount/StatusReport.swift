import Foundation
import NinePClient

/// What `mount9bbs status` shows: the link, the sessions, the outbox and the room feeds.
public struct StatusReport: Codable, Sendable {
  public struct Link: Codable, Sendable {
    /// `up`, `down` or `closed`.
    public var state: String
    public var since: Date
    public var reason: String?
    public var reconnects: Int
    /// The transport in use (while down, the one last used).
    public var transport: String?
    /// Every transport of the BBS, most preferred first.
    public var transports: [String]?
    /// Moves to another transport so far: failovers and returns to a preferred one.
    public var switches: Int?
  }

  public struct SessionStatus: Codable, Sendable {
    /// `primary` or `stream`.
    public var role: String
    public var open: Bool
    public var msize: UInt32
    public var requestsInFlight: Int
    public var requestsQueued: Int
    public var parkedReads: Int
    public var roundTripMilliseconds: Double
    public var messagesIn: UInt64
    public var messagesOut: UInt64
    public var bytesIn: UInt64
    public var bytesOut: UInt64
    /// Whether the server verified the identity for this session (Tauth).
    public var authenticated: Bool?
  }

  public struct Room: Codable, Sendable {
    public var path: String
    /// Readers with the room open (the watcher not counted).
    public var readers: Int
    /// Read in the background for `chat/unread` (`-o watch=`); nil from an older daemon.
    public var watched: Bool?
    public var lines: Int
    /// Seconds since the last line arrived.
    public var lastMessageAge: Double
    /// Lines since the room was last read to its end through the mount (`chat/unread`).
    public var unread: Int?
  }

  public var mountpoint: String
  public var address: String
  public var profile: String
  public var uname: String
  /// The identity the mount proves (its key's), if it has a key.
  public var identity: String?
  /// `auto` or `required` with a key; nil without one.
  public var auth: String?
  public var pid: Int32
  public var link: Link
  public var sessions: [SessionStatus]
  public var outbox: Int?
  public var rooms: [Room]
}

extension BBSFileSystem {
  /// What `status` and `chat/events` say while the link is stalled.
  static let stalledReason = "no answer for \(Int(Pool.stallAfter.timeInterval)) s"

  /// A snapshot of the mount's state.
  public func statusReport(mountpoint: String) -> StatusReport {
    let state = pool.linkState
    var since = pool.linkStateSince
    let linkText: String
    var reason: String?
    switch state {
    case .up where pool.isStalled:
      linkText = "stalled"
      reason = Self.stalledReason
      since = pool.stalledSince
    case .up: linkText = "up"
    case .down(let why):
      linkText = "down"
      reason = why
    case .closed: linkText = "closed"
    }
    let sessions = pool.sessions.enumerated().map { index, session in
      let stats = session.statistics
      return StatusReport.SessionStatus(
        role: index == 0 && session === pool.current ? "primary" : "stream",
        open: session.closedReason == nil, msize: session.msize,
        requestsInFlight: stats.requestsInFlight, requestsQueued: stats.requestsQueued,
        parkedReads: stats.parkedReads, roundTripMilliseconds: stats.roundTrip.timeInterval * 1000,
        messagesIn: stats.messagesReceived, messagesOut: stats.messagesSent,
        bytesIn: stats.bytesReceived, bytesOut: stats.bytesSent,
        authenticated: session.authenticatedIdentity != nil)
    }
    let now = Date()
    let rooms = feeds.status.map {
      StatusReport.Room(
        path: $0.path, readers: $0.readers, watched: $0.watched, lines: $0.lines,
        lastMessageAge: now.timeIntervalSince($0.lastMessage),
        unread: awareness.ledger.count(String($0.path.split(separator: "/").last ?? "")))
    }
    return StatusReport(
      mountpoint: mountpoint, address: pool.addresses.map(\.description).joined(separator: ","),
      profile: pool.configuration.profile.rawValue, uname: pool.configuration.uname,
      identity: pool.configuration.authentication?.identity,
      auth: pool.configuration.authentication?.policy.rawValue, pid: getpid(),
      link: StatusReport.Link(
        state: linkText, since: since, reason: reason,
        reconnects: pool.reconnectCount, transport: pool.address.description,
        transports: pool.addresses.map(\.description), switches: pool.switchCount),
      sessions: sessions, outbox: outboxCount, rooms: rooms)
  }
}
