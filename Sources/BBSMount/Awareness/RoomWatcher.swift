import Foundation
import Logging
import Synchronization

/// Reads the watched rooms in the background (`-o watch=`), so unread counts, mentions and
/// events exist without a reader open.
///
/// Watching a room is holding it open: the room's one ``RoomFeed`` runs (no second read of the
/// room), parked on the server while the room is quiet, so an idle watched room costs no
/// requests on a server that parks reads. The chat listing is read again every
/// ``interval`` to see rooms come and go (one Twalk, Topen, Tread(s), Tclunk).
final class RoomWatcher: Sendable {
  private struct State {
    /// Nil until decided (see ``decideWatch``).
    var watch: AwarenessOptions.Watch?
    /// The chat directory, once found.
    var chatDirectory: [String]?
    var rooms: Set<String>?
    var held: [String: RoomFeed] = [:]
    var stopped = false
    /// Set once the first listing was taken (or none will be): what is watched is known.
    var settled = false
    var settledWaiters: [@Sendable () -> Void] = []
    /// The board answers caught-up reads at once (Gen-1): watching would poll every room
    /// about three times a second, so it is given up (rooms still count while someone has
    /// them open).
    var pollingBoard = false
    /// The chat directory is being looked for (or was found).
    var looking = false
  }

  private let feeds: RoomFeeds
  private let listings: ListingCache
  /// The member's rooms (`watch=mine`).
  private let mine: MemberRooms?
  /// How many of them are watched.
  private let mineCount: Int
  /// Decides what to watch when the user did not say, once the chat directory is found.
  private let decideWatch:
    (@Sendable ([String], @escaping @Sendable (AwarenessOptions.Watch) -> Void) -> Void)?
  private let interval: Duration
  private let logger: Logger
  private let state: Mutex<State>
  private let changed: @Sendable (_ added: [String], _ removed: [String]) -> Void
  /// Names in `chat/` that are not rooms.
  static let notRooms = Set(["post", "users"]).union(AwarenessFile.allNames)
  /// Rooms watched at most: a listing of thousands of rooms must not open thousands of reads.
  static let maximumWatched = 64

  /// - Parameters:
  ///   - mine: the member's rooms, which `watch=mine` watches the `mineCount` most recent of.
  ///   - decideWatch: with `watch` nil, told the chat directory, answers what to watch.
  init(
    feeds: RoomFeeds, listings: ListingCache, watch: AwarenessOptions.Watch?,
    mine: MemberRooms? = nil, mineCount: Int = 3,
    decideWatch: (
      @Sendable ([String], @escaping @Sendable (AwarenessOptions.Watch) -> Void) -> Void
    )? = nil,
    interval: Duration, logger: Logger,
    changed: @escaping @Sendable ([String], [String]) -> Void
  ) {
    self.feeds = feeds
    self.listings = listings
    self.mine = mine
    self.mineCount = mineCount
    state = Mutex(State(watch: watch))
    self.decideWatch = decideWatch
    self.interval = interval
    self.logger = logger
    self.changed = changed
  }

  /// The rooms the last listing had (empty before the first).
  var knownRooms: Set<String> { state.withLock { $0.rooms ?? [] } }

  /// The chat directory, once the first listing found it.
  var chatDirectoryFound: [String]? { state.withLock { $0.chatDirectory } }

  /// The rooms being watched.
  var watchedRooms: Set<String> { state.withLock { Set($0.held.keys) } }

  /// The feeds of the rooms being watched.
  var watchedFeeds: [RoomFeed] { state.withLock { Array($0.held.values) } }

  /// Calls `callback` once what is watched is known (the first listing was taken, or none
  /// will be), at once if it is; or after `limit`, whichever comes first.
  func whenSettled(within limit: Duration, _ callback: @escaping @Sendable () -> Void) {
    let once = FirstAnswer<Void> { _ in callback() }
    let waiting = state.withLock { state in
      if !state.settled { state.settledWaiters.append { once(()) } }
      return !state.settled
    }
    guard waiting else { return once(()) }
    DispatchQueue.global().asyncAfter(deadline: .now() + limit.timeInterval) { once(()) }
  }

  /// Marks what is watched as known and wakes those waiting for it.
  private func settle() {
    let waiters = state.withLock { state in
      state.settled = true
      defer { state.settledWaiters.removeAll() }
      return state.settledWaiters
    }
    for waiter in waiters { waiter() }
  }

  /// Starts watching. With `watch=none` (a device board's default) it sends nothing at all:
  /// no listing holds up a board's one-request-at-a-time session, and rooms coming and going
  /// are not reported.
  func start() {
    let idle = state.withLock { state in
      // `watch=mine` before the member has read a room sends nothing either.
      let idle =
        state.watch == AwarenessOptions.Watch.none
        || (state.watch == .mine && (mine?.recent(mineCount).isEmpty ?? true))
      if !idle { state.looking = true }
      return idle
    }
    if idle { return settle() }
    find(among: [["chat"], ["srv", "bbs", "chat"]])
  }

  func stop() {
    let feeds = state.withLock { state in
      state.stopped = true
      defer { state.held.removeAll() }
      return Array(state.held.values)
    }
    for feed in feeds { feed.release(watching: true) }
  }

  /// The member read a room, or how the board answers reads was learned: with `watch=mine`
  /// the room may now be watched (and the one read longest ago no longer).
  func memberRoomsChanged() {
    enum Next { case none, find, apply(Set<String>) }
    let next = state.withLock { state -> Next in
      guard state.watch == .mine, !state.stopped else { return .none }
      if let rooms = state.rooms { return .apply(rooms) }
      guard !state.looking else { return .none }
      // The first room the member read: the chat listing is looked for now.
      state.looking = true
      return .find
    }
    switch next {
    case .none: break
    case .find: find(among: [["chat"], ["srv", "bbs", "chat"]])
    case .apply(let rooms): apply(rooms)
    }
  }

  /// Whether `room` is to be watched now.
  private func wanted(_ room: String, by watch: AwarenessOptions.Watch?, mine: Set<String>)
    -> Bool
  {
    watch == .mine ? mine.contains(room) : watch?.includes(room) == true
  }

  private func find(among candidates: [[String]]) {
    guard let candidate = candidates.first else {
      logger.info("watch: no chat directory found; rooms are not watched")
      return settle()
    }
    listings.listing(candidate, maxAge: .zero, complete: true) { [self] listed in
      guard case .success(let listing) = listed else {
        return find(among: Array(candidates.dropFirst()))
      }
      let undecided = state.withLock { state in
        state.chatDirectory = candidate
        return state.watch == nil
      }
      guard undecided, let decideWatch else { return update(listing.stats.map(\.name)) }
      decideWatch(candidate) { [self] decided in
        state.withLock { $0.watch = decided }
        update(listing.stats.map(\.name))
      }
    }
  }

  private func poll() {
    guard let directory = state.withLock({ $0.stopped ? nil : $0.chatDirectory }) else { return }
    if givesUpOnAPollingBoard() { return }
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
    let (added, removed) = apply(Set(names).subtracting(Self.notRooms))
    settle()
    if !added.isEmpty || !removed.isEmpty { changed(added, removed) }
    schedule()
  }

  /// Holds the feeds of the rooms of listing `now` that are wanted and releases the others:
  /// the rooms added and removed since the last listing.
  @discardableResult
  private func apply(_ now: Set<String>) -> (added: [String], removed: [String]) {
    let mineNow = Set(mine?.recent(mineCount) ?? [])
    var start: [(String, RoomFeed)] = []
    var stop: [(String, RoomFeed)] = []
    let (added, removed): ([String], [String]) = state.withLock { state in
      guard !state.stopped, let directory = state.chatDirectory else { return ([], []) }
      let before = state.rooms
      state.rooms = now
      for name in now.sorted()
      where wanted(name, by: state.watch, mine: mineNow) && state.held[name] == nil
        && !state.pollingBoard
      {
        guard state.held.count < Self.maximumWatched else { break }
        let feed = feeds.feed(for: directory + [name], room: name)
        state.held[name] = feed
        start.append((name, feed))
      }
      for (name, feed) in state.held
      where !now.contains(name) || !wanted(name, by: state.watch, mine: mineNow) {
        state.held[name] = nil
        stop.append((name, feed))
      }
      guard let before else { return ([], []) }
      return (now.subtracting(before).sorted(), before.subtracting(now).sorted())
    }
    for (name, feed) in start {
      logger.debug("watch: watching \(name)")
      feed.retain(watching: true)
    }
    for (name, feed) in stop {
      logger.debug("watch: no longer watching \(name)")
      feed.release(watching: true)
    }
    if !start.isEmpty {
      // A room's first reads tell whether the board parks them.
      DispatchQueue.global().asyncAfter(deadline: .now() + 2) { [weak self] in
        _ = self?.givesUpOnAPollingBoard()
      }
    }
    return (added, removed)
  }

  /// Stops watching if a watched room's feed found the board answering reads at once.
  /// Returns whether watching is off for that reason.
  private func givesUpOnAPollingBoard() -> Bool {
    let released: [RoomFeed]? = state.withLock { state in
      guard !state.pollingBoard else { return [] }
      guard state.held.values.contains(where: \.answersAtOnce) else { return nil }
      state.pollingBoard = true
      defer { state.held.removeAll() }
      return Array(state.held.values)
    }
    guard let released else { return false }
    if !released.isEmpty {
      logger.notice(
        "watch: the board answers chat reads at once (it does not park them); watching would poll each room 3 times a second, so rooms are not watched"
      )
    }
    for feed in released { feed.release(watching: true) }
    return true
  }
}
