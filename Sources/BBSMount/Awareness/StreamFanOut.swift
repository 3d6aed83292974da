import Foundation
import Logging
import NinePClient
import Synchronization

/// The readers of one mount-local stream file (`chat/mentions`, `chat/events`): each open gets
/// its own local ``RoomFeed`` (a transcript nothing reads from the server), so the room file
/// machinery (``RoomHandle``, the `tail -f` waits of ``RoomFollowing``) serves it unchanged.
///
/// An open starts with one line of its own (``opening``: the state at the open), then what
/// comes from then on. That line keeps a reader from losing one: the open of a room file
/// waits for its first line (GNU tail reads a 0-byte file to its end before printing
/// anything), so an empty stream's open waited for the first event and counted it in the size
/// `tail -n 0 -f` skips; and `cat` or `exec 3<` no longer hang in open.
final class StreamFanOut: Sendable {
  let name: String
  /// Only for the feeds' type: a local feed never asks it for a session.
  private let sessions: any StreamSessions
  private let logger: Logger
  private let subscribers = Mutex<[(feed: RoomFeed, since: ContinuousClock.Instant)]>([])
  private let opening: @Sendable () -> [UInt8]
  /// Kept per reader: a reader that stops reading loses the oldest lines, the daemon's memory
  /// stays bounded.
  static let readerCapacity = 1 << 20
  /// The most readers at once; an open beyond it fails (EMFILE).
  static let maximumReaders = 256

  /// - Parameter opening: the line each open starts with (newline included).
  init(
    name: String, sessions: any StreamSessions, logger: Logger,
    opening: @escaping @Sendable () -> [UInt8]
  ) {
    self.name = name
    self.sessions = sessions
    self.logger = logger
    self.opening = opening
  }

  /// A new reader's feed, starting with the opening line; nil when there are too many readers.
  func subscribe() -> RoomFeed? {
    let feed = RoomFeed(
      room: name, path: [], pool: sessions, localCapacity: Self.readerCapacity, logger: logger)
    let first = opening()
    return subscribers.withLock { subscribers in
      Self.prune(&subscribers)
      guard subscribers.count < Self.maximumReaders else { return nil }
      // Under the lock: no line published meanwhile comes before it.
      feed.appendLocal(first)
      subscribers.append((feed, .now))
      return feed
    }
  }

  var hasReaders: Bool { subscribers.withLock { !$0.isEmpty } }

  /// Appends `line` to every reader's feed.
  func publish(_ line: [UInt8]) {
    let feeds = subscribers.withLock { subscribers in
      Self.prune(&subscribers)
      return subscribers.map(\.feed)
    }
    for feed in feeds { feed.appendLocal(line) }
  }

  /// A feed not retained within this of being made was never opened (or closed at once).
  static let openGrace: Duration = .seconds(2)

  /// Drops readers that closed (a feed is retained by its open within a moment of being made).
  private static func prune(_ subscribers: inout [(feed: RoomFeed, since: ContinuousClock.Instant)])
  {
    let now = ContinuousClock.now
    subscribers.removeAll { entry in
      entry.feed.status.readers == 0 && entry.since.duration(to: now) > openGrace
    }
  }
}
