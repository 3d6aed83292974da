// Awareness: what tells the user that something happened in chat without them watching.
//
// Lines arrive in the one RoomFeed per room (RoomFeeds calls ``Awareness`` as its
// RoomFeedObserver, on the feed's reply thread, in order). ``RoomWatcher`` keeps the watched
// rooms' feeds running; ``UnreadLedger`` counts lines per room until the room is read to its
// end (`chat/unread`); ``MentionMatcher`` picks the lines that name the user (`chat/mentions`);
// ``DesktopNotifier`` and ``NotifyCommand`` tell the user; ``EventLog`` writes `chat/events`.
// The two stream files are served by the room file machinery through ``StreamFanOut``.

import Foundation
import Logging
import NinePClient
import NinePProtocol
import Synchronization

/// The mount's watching, unread counts, mentions, notifications and events.
final class Awareness: RoomFeedObserver, Sendable {
  let options: AwarenessOptions
  let ledger: UnreadLedger
  let events: EventLog
  let mentionStreams: StreamFanOut
  let eventStreams: StreamFanOut
  let watcher: RoomWatcher
  /// Nil on a device board (see ``UserPresence``).
  private let presence: UserPresence?
  private let feeds: RoomFeeds
  /// The user's names, given and learned: lines by them are neither unread nor mentions.
  let ownNames: OwnNames
  /// The rooms the member reads or posts to (`watch=mine`).
  let memberRooms: MemberRooms
  private let desktop: DesktopNotifier?
  private let command: NotifyCommand?
  private let logger: Logger
  private let feedLines = Mutex(FeedLines(longestLine: Awareness.longestLine))
  /// A line longer than this is cut (a hostile server's endless line).
  static let longestLine = 64 << 10

  /// Reads a server file once (the users list).
  typealias ReadOnce =
    @Sendable ([String], @escaping @Sendable (Result<[UInt8], NinePError>) -> Void) -> Void
  /// Stats a server file.
  typealias StatFile =
    @Sendable ([String], @escaping @Sendable (Result<Stat, NinePError>) -> Void) -> Void

  /// - Parameters:
  ///   - names: the user's names (user name, nickname, identity and its short form).
  ///   - stateDirectory: where unread counts and learned names are kept between mounts (nil:
  ///     not kept).
  ///   - readOnce: reads a server file once (the users list).
  ///   - stat: stats a server file (is the chat directory a 9BBS board's?).
  init(
    options: AwarenessOptions, pool: Pool, feeds: RoomFeeds, listings: ListingCache,
    names: [String], stateDirectory: String?, logger: Logger, readOnce: @escaping ReadOnce,
    stat: @escaping StatFile
  ) {
    self.options = options
    self.feeds = feeds
    self.logger = logger
    let ledger = UnreadLedger(directory: stateDirectory, logger: logger)
    self.ledger = ledger
    let ownNames = OwnNames(
      names: names, highlights: options.highlights, directory: stateDirectory, logger: logger)
    self.ownNames = ownNames
    let memberRooms = MemberRooms(directory: stateDirectory, logger: logger)
    self.memberRooms = memberRooms
    mentionStreams = Self.mentionStream(naming: ownNames, sessions: pool, logger: logger)
    let eventStreams = Self.eventStream(of: pool, logger: logger)
    self.eventStreams = eventStreams
    let events = EventLog(streams: eventStreams)
    self.events = events
    desktop =
      options.notify == .off ? nil : DesktopNotifier(board: options.board, logger: logger)
    command = options.notifyCommand.flatMap {
      NotifyCommand(command: $0, board: options.board, logger: logger)
    }
    let watcher = Self.watcher(
      options: options, pool: pool, feeds: feeds, listings: listings, mine: memberRooms,
      stat: stat, logger: logger
    ) { added, removed in
      Self.report(added, removed, to: events)
      for room in removed { ledger.forget(room) }
    }
    self.watcher = watcher
    presence =
      pool.configuration.profile == .device
      ? nil
      : UserPresence(
        events: events,
        interval: options.watchInterval ?? AwarenessOptions.defaultInterval(device: false)
      ) { done in
        // Not watching, the watcher has not looked for the chat directory: the usual one.
        readOnce((watcher.chatDirectoryFound ?? ["chat"]) + ["users"], done)
      }
    feeds.observe(with: self)
    Self.recordLinkChanges(of: pool, to: events)
  }

  /// `chat/mentions`: each open starts with what it looks for, as a line of room "-".
  private static func mentionStream(
    naming ownNames: OwnNames, sessions: any StreamSessions, logger: Logger
  ) -> StreamFanOut {
    StreamFanOut(name: "mentions", sessions: sessions, logger: logger) {
      let time = EventLog.timestamp(Date()).dropFirst(11).prefix(8)
      let words = ownNames.words.map(EventLog.escaped).joined(separator: ", ")
      return Array("- [\(time)] mount9bbs: mentions of \(words)\n".utf8)
    }
  }

  /// `chat/events`: each open starts with the link's state then.
  private static func eventStream(of pool: Pool, logger: Logger) -> StreamFanOut {
    StreamFanOut(name: "events", sessions: pool, logger: logger) { [weak pool] in
      let event: AwarenessEvent =
        switch pool?.linkState ?? .closed {
        case .up where pool?.isStalled == true:
          .link(state: "stalled", reason: BBSFileSystem.stalledReason)
        case .up: .link(state: "up", reason: "-")
        case .down(let reason): .link(state: "down", reason: reason)
        case .closed: .link(state: "closed", reason: "-")
        }
      return Array(EventLog.line(event, at: Date()).utf8)
    }
  }

  /// The watcher of the rooms `options` names, or of the profile's default ones.
  private static func watcher(
    options: AwarenessOptions, pool: Pool, feeds: RoomFeeds, listings: ListingCache,
    mine: MemberRooms, stat: @escaping StatFile, logger: Logger,
    changed: @escaping @Sendable ([String], [String]) -> Void
  ) -> RoomWatcher {
    let device = pool.configuration.profile == .device
    return RoomWatcher(
      feeds: feeds, listings: listings,
      watch: options.watch ?? (device ? .mine : nil), mine: mine,
      mineCount: AwarenessOptions.mineWatched(
        maxParkedReads: pool.configuration.maxParkedReads),
      decideWatch: { directory, decided in
        // A 9BBS board behind a gateway (its walks call the chat files directories, as a
        // device's do) shares its sessions and parking slots with its other users, and an
        // older one (Gen-1) one read position per room: only the member's rooms.
        stat(directory + ["users"]) { result in
          if case .success(let entry) = result, entry.qid.isDirectory {
            logger.info(
              "watch: the server is a 9BBS board; only the rooms you read are watched (-o watch=all to watch every room)"
            )
            decided(.mine)
          } else {
            decided(.all)
          }
        }
      },
      interval: options.watchInterval ?? AwarenessOptions.defaultInterval(device: device),
      logger: logger, changed: changed)
  }

  /// `link` events as the pool's link goes down, reconnects and comes back.
  private static func recordLinkChanges(of pool: Pool, to events: EventLog) {
    // Stalled, then answering again (a link that goes down says so itself).
    pool.observeStall { [weak pool] stalled in
      guard pool?.linkState == .up else { return }
      events.record(
        stalled
          ? .link(state: "stalled", reason: BBSFileSystem.stalledReason)
          : .link(state: "up", reason: "-"))
    }
    let reconnects = pool.policy.enabled
    pool.observe { state in
      switch state {
      case .up: events.record(.link(state: "up", reason: "-"))
      case .down(let reason):
        events.record(.link(state: "down", reason: reason))
        if reconnects { events.record(.link(state: "reconnecting", reason: reason)) }
      case .closed: break
      }
    }
  }

  /// Room events reported one by one per listing change at most; the rest are counted in one
  /// `rooms-added`/`rooms-removed` line (a board replacing thousands of rooms).
  static let maximumRoomEvents = 100

  private static func report(_ added: [String], _ removed: [String], to events: EventLog) {
    for room in added.prefix(maximumRoomEvents) { events.record(.roomAdded(room)) }
    if added.count > maximumRoomEvents {
      events.record(.roomsAdded(more: added.count - maximumRoomEvents))
    }
    for room in removed.prefix(maximumRoomEvents) { events.record(.roomRemoved(room)) }
    if removed.count > maximumRoomEvents {
      events.record(.roomsRemoved(more: removed.count - maximumRoomEvents))
    }
  }

  func start() {
    watcher.start()
    presence?.start()
  }

  func shutdown() {
    presence?.stop()
    watcher.stop()
    ledger.flush()
    ownNames.flush()
    memberRooms.flush()
  }

  /// `chat/unread`'s text now: the watched rooms and the rooms someone has open.
  func renderUnread() -> [UInt8] {
    let open = feeds.status.filter { $0.readers > 0 }.compactMap {
      $0.path.split(separator: "/").last.map(String.init)
    }
    return ledger.render(rooms: watcher.watchedRooms.union(open))
  }

  /// Calls `callback` once the watched rooms have caught up with what the server kept for
  /// the user (so `chat/unread` counts what was said while the mount was away), or after
  /// `limit` in all, as opening a room waits for its backlog.
  func whenUnreadSettled(within limit: Duration, _ callback: @escaping @Sendable () -> Void) {
    let deadline = ContinuousClock.now + limit
    watcher.whenSettled(within: limit) { [watcher] in
      let group = DispatchGroup()
      let left = max(.zero, ContinuousClock.now.duration(to: deadline))
      for feed in watcher.watchedFeeds {
        group.enter()
        _ = feed.whenCaughtUp(within: left) { group.leave() }
      }
      group.notify(queue: .global(), execute: callback)
    }
  }

  /// A reader read `room` to its end, offset `offset` of `feed`'s transcript.
  func roomRead(_ room: String, through offset: UInt64, of feed: RoomFeed) {
    ledger.read(room, through: UnreadLedger.Place(feed: ObjectIdentifier(feed), offset: offset))
    if memberRooms.note(room) { watcher.memberRoomsChanged() }
  }

  /// This mount sent posts (each `room:text`): their echoes tell what the board calls the user.
  func posted(_ payloads: [[UInt8]]) {
    for payload in payloads { ownNames.sent(payload) }
  }

  // MARK: RoomFeedObserver

  func backlogIncomplete(_ feed: RoomFeed) {
    events.record(.backlogIncomplete(room: feed.room))
  }

  func feed(_ feed: RoomFeed, learnedTheBoardParksReads parks: Bool) {
    if memberRooms.learned(boardParksReads: parks) { watcher.memberRoomsChanged() }
  }

  func feed(_ feed: RoomFeed, received data: [UInt8], endingAt end: UInt64) {
    let lines = feedLines.withLock { $0.lines(in: data, from: ObjectIdentifier(feed)) }
    var unread = 0
    for bytes in lines {
      let line = String(decoding: bytes.prefix(Self.longestLine), as: UTF8.self)
      let parsed = RoomLine(line)
      events.record(.message(room: feed.room, author: parsed.author))
      guard !ownNames.received(room: feed.room, author: parsed.author, text: parsed.text) else {
        continue
      }
      unread += 1
      let mentioned = ownNames.mentions(parsed.text)
      if mentioned {
        mentionStreams.publish(Array("\(EventLog.roomField(feed.room)) \(line)\n".utf8))
        events.record(.mention(room: feed.room, author: parsed.author))
        command?.run(room: feed.room, author: parsed.author, text: String(parsed.text))
      }
      if mentioned || options.notify == .all {
        desktop?.notify(room: feed.room, author: parsed.author, text: String(parsed.text))
      }
    }
    // Readers may have read these lines to their end already (they reach the transcript
    // before this call): then they are not unread.
    if unread > 0 {
      ledger.add(
        unread, to: feed.room,
        endingAt: UnreadLedger.Place(feed: ObjectIdentifier(feed), offset: end))
    }
  }
}
