/// The awareness options: which rooms are watched, what counts as a mention, how the user is
/// told (`-o watch=`, `highlight=`, `notify=`, `notify-command=`).
public struct AwarenessOptions: Sendable, Equatable {
  /// Which rooms are read in the background, so unread counts, mentions and events exist
  /// without a reader open.
  public enum Watch: Sendable, Equatable {
    /// Every room of the chat listing.
    case all
    /// None: only rooms someone has open count.
    case none
    /// These rooms (`watch=ROOM:ROOM`).
    case rooms(Set<String>)
    /// Whether `room` is watched.
    public func includes(_ room: String) -> Bool {
      switch self {
      case .all: true
      case .none: false
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

  /// Nil: the profile's default (every room on a multiplex server, none on a device board).
  public var watch: Watch?
  /// Extra words that make a line a mention (whole words, any case).
  public var highlights: [String] = []
  public var notify: Notify = .mentions
  /// A program run per mention with ROOM, AUTHOR and TEXT in its environment (no shell).
  public var notifyCommand: String?

  public init() {}
}
