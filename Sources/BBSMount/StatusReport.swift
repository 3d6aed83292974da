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
    /// Whether the session runs over the secure channel; nil from an older daemon.
    public var secure: Bool?
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
