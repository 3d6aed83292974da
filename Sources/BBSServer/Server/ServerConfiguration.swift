import Foundation

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

/// Everything ``BBSServer`` needs to run.
public struct BBSServerConfiguration: Sendable {
  /// The default listen address of `9bbsd` (the 9P port is 564; this one needs no root).
  public static let defaultListen = "tcp!127.0.0.1!5640"

  /// Dial strings to listen on: `tcp!host!port`, `unix!/path`, `seqpacket!/path[!sdu]`.
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
  /// Largest msize granted. The device profile never grants more than 8192.
  public var maxMessageSize: Int
  /// Device profile: the largest SDU accepted from a client on packet transports.
  public var sduLimit: Int
  /// Device profile: how long the shared worker holds each request before answering.
  public var processingDelay: Duration
  /// Sessions served at once (device: 4); nil means unlimited.
  public var maxSessions: Int?
  /// Parked reads per session (device: 4).
  public var parkingSlots: Int
  /// Fids per session (device: 32).
  public var maxFids: Int
  /// Tags in use per session (device: 16); nil means unlimited.
  public var maxTags: Int?

  /// A configuration with the profile's defaults.
  public init(
    listen: [String] = [BBSServerConfiguration.defaultListen], profile: BBSProfile = .standard,
    rooms: [String] = ["lobby"], boardName: String? = nil, motd: String? = nil,
    filesDirectory: String? = nil, filesWritable: Bool = false, dataDirectory: String? = nil,
    maxMessageSize: Int? = nil, sduLimit: Int = 245, processingDelay: Duration = .zero
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
      maxSessions = 4
      parkingSlots = 4
      maxFids = 32
      maxTags = 16
    case .standard:
      self.maxMessageSize = maxMessageSize ?? (1 << 20)
      maxSessions = nil
      parkingSlots = 64
      maxFids = 4096
      maxTags = nil
    }
  }
}
