/// Which kind of 9BBS the server imitates.
public enum BBSProfile: String, Sendable, CaseIterable {
  /// A comfortable server: multiplexed sessions, wall-clock chat lines, large limits.
  case standard = "default"
  /// A faithful copy of a Zephyr/9p4z board: its limits, its quirks and its wire discipline.
  case device
  /// The "Gen-1" board (9p4z's 9BBS at `9aa8a00`): the device's limits and tree quirks on the
  /// old synchronous core: chat reads never park, one chat cursor keyed by the last writer,
  /// generic error strings, Rversion tagged NOTAG, fids not clunked at disconnect.
  case gen1

  /// Whether the profile imitates a 9BBS board's tree, limits and quirks (device and gen1).
  var imitatesBoard: Bool { self != .standard }
}

/// How chat line stamps are taken and rendered.
public enum ChatClockStyle: Sendable {
  /// Milliseconds since the server started; `[HH:MM:SS]` counts hours since start, like a
  /// device's `k_uptime_get()`.
  case uptime
  /// Unix milliseconds; `[HH:MM:SS]` is the UTC time of day.
  case wallClock
}

/// Sizes and behaviours of the board that differ between profiles.
public struct BoardLimits: Sendable, Equatable {
  /// Chat messages kept per room (a device's 50-slot ring holds 49).
  public var chatRingCapacity: Int
  /// Distinct chat readers; the next one gets ENOMEM on read. `nil` means unlimited.
  public var maxChatUsers: Int?
  /// Bytes of chat text kept per post (device: 255).
  public var maxChatText: Int
  /// Bytes of author name kept (device: 31).
  public var maxAuthor: Int
  /// Messages per board room: beyond, Tcreate fails with ENOSPC (device: 20), or the oldest
  /// message goes (``roomsAreRings``).
  public var messagesPerRoom: Int
  /// Board rooms in all (device: 8).
  public var maxBoardRooms: Int
  /// Longest room name in bytes (device buffers are 32 bytes with the NUL).
  public var maxRoomName: Int
  /// Chat line stamps.
  public var clock: ChatClockStyle
  /// Creating a board room at the root reports failure although the room is created, as a
  /// device does (docs/board-facts.md §1.6).
  public var failsRootRoomCreate: Bool
  /// Only the latest Twrite makes up a board message (device). Otherwise writes at increasing
  /// offsets are assembled and the whole text is parsed again, so chunked writes work.
  public var messageWriteReplaces: Bool
  /// How message files read (and so their listed length).
  public var messageStyle: BoardMessageStyle
  /// Largest board message text a client may write, in bytes; a write beyond it fails with
  /// ENOSPC (`9bbsd --max-board-message`).
  public var maxMessageBytes: Int = BoardLimits.defaultMaxMessageBytes
  /// Chat posts with control characters other than tab (a lone `\r`, an escape sequence) are
  /// refused. A real board keeps whatever it is given, and the device and gen1 profiles do
  /// too, so that clients meet what they must make safe to show; lines are split at `\n`
  /// everywhere.
  public var refusesControlCharacters = false
  /// `/chat/users` lists the users present now: those with a session attached, each with
  /// the time since their last read, post or attach. A board lists every user who ever read
  /// a room while it runs (docs/board-facts.md §1.4), and the device and gen1 profiles do too.
  public var listsConnectedUsers = false
  /// A full board room drops its oldest message for a new one, as a chat ring does, instead of
  /// refusing every new message with ENOSPC (one poster could fill a room for everyone). A
  /// device refuses.
  public var roomsAreRings = false
  /// Nothing empty is kept: a chat post with no visible text is refused (EINVAL), blank lines
  /// of a longer post are dropped, a write that would leave a board message empty is refused,
  /// and a message is stored only once written, so one created and never written goes when
  /// its creator clunks it. A device keeps empty posts and messages.
  public var refusesEmptyPosts = false

  /// The default ``maxMessageBytes`` of the default profile: 64 KiB.
  public static let defaultMaxMessageBytes = 64 << 10

  /// The limits of a real 9BBS device (also Gen-1's: the same 9BBS Kconfig).
  public static let device = BoardLimits(
    chatRingCapacity: 49, maxChatUsers: 8, maxChatText: 255, maxAuthor: 31,
    messagesPerRoom: 20, maxBoardRooms: 8, maxRoomName: 31, clock: .uptime,
    failsRootRoomCreate: true, messageWriteReplaces: true, messageStyle: .device,
    maxMessageBytes: 1 << 20)

  /// The limits of the default profile.
  public static let standard = BoardLimits(
    chatRingCapacity: 1000, maxChatUsers: nil, maxChatText: 255, maxAuthor: 31,
    messagesPerRoom: 10_000, maxBoardRooms: 1000, maxRoomName: 31, clock: .wallClock,
    failsRootRoomCreate: false, messageWriteReplaces: false, messageStyle: .standard,
    refusesControlCharacters: true, listsConnectedUsers: true, roomsAreRings: true,
    refusesEmptyPosts: true)

  /// The limits that go with a profile.
  public static func forProfile(_ profile: BBSProfile) -> BoardLimits {
    profile.imitatesBoard ? .device : .standard
  }
}

/// Everything needed to build a ``Board``.
public struct BoardConfiguration: Sendable {
  /// Chat rooms, in listing order. Chat rooms cannot be created by clients.
  public var chatRooms: [String]
  /// Board rooms created when the store has none yet.
  public var initialBoardRooms: [String]
  /// Sizes and behaviours.
  public var limits: BoardLimits
  /// Initial /etc values for fields the store does not hold yet.
  public var etcDefaults: [EtcField: String]
  /// The users (``BoardUser/id``s) who may write /etc; empty: the first registered user,
  /// unless `firstUserIsSysop` is off.
  public var sysops: Set<String>
  /// Without `sysops`: whether the first registered user is the sysop (else nobody is).
  public var firstUserIsSysop: Bool

  /// Creates a configuration; board rooms default to the chat rooms.
  public init(
    chatRooms: [String] = ["lobby"], initialBoardRooms: [String]? = nil,
    limits: BoardLimits = .standard, etcDefaults: [EtcField: String] = [:],
    sysops: Set<String> = [], firstUserIsSysop: Bool = true
  ) {
    self.firstUserIsSysop = firstUserIsSysop
    self.chatRooms = chatRooms
    self.initialBoardRooms = initialBoardRooms ?? chatRooms
    self.limits = limits
    self.etcDefaults = etcDefaults
    self.sysops = sysops
  }
}
