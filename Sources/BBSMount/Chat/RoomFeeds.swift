// Chat: the rooms of `/chat`, read through one feed each, and the posts written to them.
//
// Threads. A ``RoomFeed`` runs one server-side read per open room on a stream session of the
// pool; its replies arrive on that session's reader thread, go into the room's ``Transcript``
// (and ``RoomHistory`` on disk) and wake the readers waiting at the end: ``RoomHandle`` reads
// parked by libfuse worker threads, open waits and the `tail -f` follow waits of
// ``RoomFollowing``. ``RoomFeeds`` makes one feed per room, on the first open (called from
// BBSFileSystem), and stops them all at unmount. Writes to post files go through
// ``PostHandle`` → ``PostComposer`` (lines into `room:text` posts) → ``PostChannel`` (one
// Twrite each, in order, on the primary session) → ``Outbox`` while the link is down.

import Foundation
import Logging
import NinePClient
import Synchronization

/// What watches every room's feed (Awareness/): told of lines as the server's reads add them.
protocol RoomFeedObserver: AnyObject, Sendable {
  /// `data` came into `feed`'s transcript, ending at offset `end`.
  func feed(_ feed: RoomFeed, received data: [UInt8], endingAt end: UInt64)
  func backlogIncomplete(_ feed: RoomFeed)
  /// A read of `feed` showed how the board answers caught-up reads: it parks them, or
  /// (`parks` false) answers at once.
  func feed(_ feed: RoomFeed, learnedTheBoardParksReads parks: Bool)
}

/// The mount's room feeds, one per room path, made on the first open.
final class RoomFeeds: Sendable {
  private let sessions: any StreamSessions
  private let historyDirectory: String?
  /// Other users' control characters reach readers raw (`-o rawtext`).
  private let rawText: Bool
  private let logger: Logger
  private let feeds = Mutex<[[String]: RoomFeed]>([:])
  /// Told of every room's lines and incomplete backlogs (the watcher of Awareness/).
  private let observer = Mutex<(any RoomFeedObserver)?>(nil)

  init(
    pool sessions: any StreamSessions, historyDirectory: String?, rawText: Bool = false,
    logger: Logger
  ) {
    self.sessions = sessions
    self.historyDirectory = historyDirectory
    self.rawText = rawText
    self.logger = logger
  }

  /// The feed of the room at `path`, made if it has none yet.
  func feed(for path: [String], room: String) -> RoomFeed {
    if let existing = feeds.withLock({ $0[path] }) { return existing }
    // Reading the room's history from disk happens outside the lock every request takes.
    let history = historyDirectory.flatMap {
      RoomHistory(directory: $0, room: path.joined(separator: "."), logger: logger)
    }
    let feed = RoomFeed(
      room: room, path: path, sessions: sessions, history: history, rawText: rawText, logger: logger
    )
    feed.onLines = { [weak self, weak feed] data, end in
      guard let feed, let observer = self?.currentObserver else { return }
      observer.feed(feed, received: data, endingAt: end)
    }
    feed.onBacklogIncomplete = { [weak self, weak feed] in
      guard let feed, let observer = self?.currentObserver else { return }
      observer.backlogIncomplete(feed)
    }
    feed.onParking = { [weak self, weak feed] parks in
      guard let feed, let observer = self?.currentObserver else { return }
      observer.feed(feed, learnedTheBoardParksReads: parks)
    }
    return feeds.withLock { feeds in
      // Another open of the same room may have made its feed meanwhile: one feed per room.
      if let existing = feeds[path] { return existing }
      feeds[path] = feed
      return feed
    }
  }

  /// Places again the feeds that read on `crowded`: a stream session has room for them now.
  func move(off crowded: Session) {
    for feed in feeds.withLock({ Array($0.values) }) { feed.move(off: crowded) }
  }

  /// Tells `observer` of every feed's lines from now on.
  func observe(with observer: any RoomFeedObserver) {
    self.observer.withLock { $0 = observer }
  }

  private var currentObserver: (any RoomFeedObserver)? { observer.withLock { $0 } }

  /// The feed of the room at `path`, if it has one.
  func existing(_ path: [String]) -> RoomFeed? {
    feeds.withLock { $0[path] }
  }

  /// Room feeds, for status output.
  var status: [(path: String, readers: Int, watched: Bool, lines: Int, lastMessage: Date)] {
    let all = feeds.withLock { $0 }
    return all.map { path, feed in
      let status = feed.status
      return (
        "/" + path.joined(separator: "/"), status.readers, status.watched, status.lines,
        status.lastMessage
      )
    }.sorted { $0.path < $1.path }
  }

  /// Wakes every parked reader and stops the feeds (unmount).
  func shutdown() {
    let all = feeds.withLock { feeds in
      defer { feeds.removeAll() }
      return Array(feeds.values)
    }
    for feed in all { feed.shutdown() }
  }
}
