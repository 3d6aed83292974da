/// The awareness options: which rooms are watched, what counts as a mention, how the user is
/// told (`-o watch=`, `watch-interval=`, `highlight=`, `notify=`, `notify-command=`).
public struct AwarenessOptions: Sendable, Equatable {
  /// Which rooms are read in the background, so unread counts, mentions and events exist
  /// without a reader open.
  public enum Watch: Sendable, Equatable {
    /// Every room of the chat listing.
    case all
    /// The rooms this member reads or posts to through the mount (kept across mounts), the
    /// most recently read ``AwarenessOptions/mineWatched(maxParkedReads:)`` of them: a 9BBS
    /// board's default.
    case mine
    /// None: only rooms someone has open count.
    case none
    /// These rooms (`watch=ROOM:ROOM`).
    case rooms(Set<String>)
    /// Whether `room` is watched.
    public func includes(_ room: String) -> Bool {
      switch self {
      case .all: true
      case .mine, .none: false
      case .rooms(let names): names.contains(room)
      }
    }
  }

  /// Which lines become desktop notifications.
  public enum Notify: String, Sendable, Equatable {
    case mentions
    case all
    case off
  }

  /// Nil: the profile's default (every room on a multiplex server, the member's own on a
  /// 9BBS board).
  public var watch: Watch?
  /// How often the chat listing (rooms coming and going) and, while someone reads
  /// `chat/events`, `chat/users` (users arriving and leaving) are read again. Nil: the
  /// profile's default, ``defaultInterval(device:)``.
  public var watchInterval: Duration?
  /// Extra words that make a line a mention (whole words, any case).
  public var highlights: [String] = []
  public var notify: Notify = .mentions
  /// A program run per mention with ROOM, AUTHOR and TEXT in its environment (no shell).
  public var notifyCommand: String?
  /// The board as the user named it when mounting (`ble:GRID9`, `tcp:bbs.example:5640`): which
  /// board a notification is from, when several are mounted.
  public var board = ""

  public init() {}

  /// The chat listing is read every 10 s, or every 60 s on a device board (a listing holds
  /// up its one-request-at-a-time session).
  public static func defaultInterval(device: Bool) -> Duration {
    device ? .seconds(60) : .seconds(10)
  }

  /// How many of the member's rooms `watch=mine` watches: a session's parking slots but one,
  /// so the rooms fit the session the mount holds anyway (they never make it dial another)
  /// and one slot stays free for a room opened next.
  public static func mineWatched(maxParkedReads: Int) -> Int {
    max(1, maxParkedReads - 1)
  }

  /// `watch-interval=` at most, in seconds (an hour).
  public static let longestWatchInterval = 3600
}
