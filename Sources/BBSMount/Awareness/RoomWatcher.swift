import Foundation
import Logging

/// Reads the watched rooms in the background (`-o watch=`), so unread counts, mentions and
/// events exist without a reader open.
///
/// Watching a room is holding it open: the room's one ``RoomFeed`` runs (no second read of the
/// room), parked on the server while the room is quiet, so an idle watched room costs no
/// requests on a server that parks reads. The chat listing is read again every
/// ``interval`` to see rooms come and go (one Twalk, Topen, Tread(s), Tclunk).
final class RoomWatcher: @unchecked Sendable {
  private let feeds: RoomFeeds
  private let listings: ListingCache
  private let watch: AwarenessOptions.Watch
  private let interval: Duration
  private let logger: Logger
  private let lock = NSLock()
  /// The chat directory, once found.
  private var chatDirectory: [String]?
  private var rooms: Set<String>?
  private var held: [String: RoomFeed] = [:]
  private var stopped = false
  private let changed: @Sendable (_ added: [String], _ removed: [String]) -> Void
  /// Names in `chat/` that are not rooms.
  static let notRooms = Set(["post", "users"]).union(AwarenessFile.allNames)
  /// Rooms watched at most: a listing of thousands of rooms must not open thousands of reads.
  static let maximumWatched = 64

  init(
    feeds: RoomFeeds, listings: ListingCache, watch: AwarenessOptions.Watch, interval: Duration,
    logger: Logger, changed: @escaping @Sendable ([String], [String]) -> Void
  ) {
    self.feeds = feeds
    self.listings = listings
    self.watch = watch
    self.interval = interval
    self.logger = logger
    self.changed = changed
  }

  /// The rooms the last listing had (empty before the first).
  var knownRooms: Set<String> { lock.withLock { rooms ?? [] } }

  /// The rooms being watched.
  var watchedRooms: Set<String> { lock.withLock { Set(held.keys) } }

  func start() {
    find(among: [["chat"], ["srv", "bbs", "chat"]])
  }

  func stop() {
    let feeds = lock.withLock {
      stopped = true
      defer { held.removeAll() }
      return Array(held.values)
    }
    for feed in feeds { feed.release() }
  }

  private func find(among candidates: [[String]]) {
    guard let candidate = candidates.first else {
      logger.info("watch: no chat directory found; rooms are not watched")
      return
    }
    listings.listing(candidate, maxAge: .zero, complete: true) { [self] listed in
      guard case .success(let listing) = listed else {
        return find(among: Array(candidates.dropFirst()))
      }
      lock.withLock { chatDirectory = candidate }
      update(listing.stats.map(\.name))
    }
  }

  private func poll() {
    guard let directory = lock.withLock({ stopped ? nil : chatDirectory }) else { return }
    listings.listing(directory, maxAge: .zero, complete: true) { [self] listed in
      if case .success(let listing) = listed {
        update(listing.stats.map(\.name))
      } else {
        schedule()
      }
    }
  }

  private func schedule() {
    DispatchQueue.global().asyncAfter(deadline: .now() + interval.timeInterval) { [weak self] in
      self?.poll()
    }
  }

  private func update(_ names: [String]) {
    let now = Set(names).subtracting(Self.notRooms)
    var start: [(String, RoomFeed)] = []
    var stop: [RoomFeed] = []
    let (added, removed): ([String], [String]) = lock.withLock {
      guard !stopped, let directory = chatDirectory else { return ([], []) }
      let before = rooms
      rooms = now
      for name in now.sorted() where watch.includes(name) && held[name] == nil {
        guard held.count < Self.maximumWatched else { break }
        let feed = feeds.feed(for: directory + [name], room: name)
        held[name] = feed
        start.append((name, feed))
      }
      for (name, feed) in held where !now.contains(name) {
        held[name] = nil
        stop.append(feed)
      }
      guard let before else { return ([], []) }
      return (now.subtracting(before).sorted(), before.subtracting(now).sorted())
    }
    for (name, feed) in start {
      logger.debug("watch: watching \(name)")
      feed.retain()
    }
    for feed in stop { feed.release() }
    if !added.isEmpty || !removed.isEmpty { changed(added, removed) }
    schedule()
  }
}
