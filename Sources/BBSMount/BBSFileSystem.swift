// The FUSE adapter: kernel file operations in, 9P requests out.
//
// Moving parts:
// - libfuse worker threads call the operations, one method per FUSE operation, kept by
//   what they serve: BBSFileSystem+Attributes (lookup, getattr, setattr, statfs),
//   +Directories (opendir, readdir, releasedir), +Entries (mkdir, mknod, unlink, rmdir,
//   rename, symlink, link), +Files (open, create, read, write, flush, release, fsync, poll)
//   and +ChatFiles (what open does for chat's files). Each finds the node or the open
//   handle, delegates and replies. None blocks: 9P requests go through the callback API of
//   NinePClient and are answered from the completion, on the session's reader thread, or the
//   request is parked (reads at the end of a room, a room's open, a follow-loop fstat).
// - Every operation that waits on the server answers an interrupt (the caller's Ctrl-C) with
//   EINTR at once, whatever the server does (see `answersInterrupts`); the 9P work runs on
//   to its end, so fids stay consistent, and what it made for a reply that was dropped (an
//   open handle) is released.
// - Tree/: InodeTable numbers nodes by path; ListingCache answers lookups and attributes from
//   the parent's listing; NodeKind decides behaviour by path (rooms, post, users);
//   NodeAttributes builds what the kernel is told; HandleTable holds the open handles, each
//   kind its own type (OpenHandle: read, write, flush, fsync, release, poll).
// - Remote/: every walk, open, create, remove and rename over 9P, and RemoteFile, a server
//   file on a fid that reopens after a reconnect and reads and writes in pipelined chunks;
//   WriteBehind answers a file's writes before they land (multiplex links), ReadAhead keeps
//   a sequential reader's next requests on the wire (multiplex links), PageCacheLedger
//   decides when a file's cached pages may be kept and when what was read ahead is stale.
// - Chat/: RoomFeeds runs one RoomFeed per open room on a stream session of the Pool, fanning
//   its lines out to every RoomHandle through an offset-addressed Transcript; RoomFollowing
//   holds tail -f's fstat until a room grows; PostHandle → PostChannel sends chat posts one
//   Twrite each, in order, with the Outbox when the link is down or does not answer.
// - Board/: DraftHandle keeps a new board message; BoardMessages sends it whole at close.

import Foundation
import FuseKit
import Logging
import NinePClient
import NinePProtocol
import NinePTransport
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// The mounted BBS.
public final class BBSFileSystem: FuseFileSystem, Sendable {
  let pool: Pool
  let options: MountOptions
  let classifier: PathClassifier
  let logger: Logger
  let inodes = InodeTable()
  let listings: ListingCache
  let remote: Remote
  let tree: MountTree
  let handles = HandleTable()
  /// The follow-loop `fstat`s held for GNU tail (see RoomFollowing.swift).
  let heldFstats = HeldFstats()
  let followPasses = FollowPasses()
  let feeds: RoomFeeds
  let nodes: NodeAttributes
  let posts: PostChannel
  let board: BoardMessages
  /// Watching, unread counts, mentions, notifications and events (Awareness/).
  let awareness: Awareness
  let notifier = NotifierBox()

  /// - Parameters:
  ///   - outboxDirectory: where posts wait while the link is down (see ``Outbox``); nil makes
  ///     offline posts fail at once.
  ///   - historyDirectory: where rooms' lines are kept between mounts (see ``RoomHistory``);
  ///     nil keeps none.
  public init(
    pool: Pool, options: MountOptions, outboxDirectory: String? = nil,
    historyDirectory: String? = nil, logger: Logger = Logger(label: "mount9bbs.mount")
  ) throws(MountSetupError) {
    self.pool = pool
    self.options = options
    self.logger = logger
    classifier = PathClassifier(streamGlobs: options.streamGlobs)
    let sessions: SessionProvider = { [pool] in pool.session(for: .ordinary, completion: $0) }
    remote = Remote(sessions: sessions)
    listings = Self.listingCache(pool: pool, options: options, sessions: sessions, logger: logger)
    feeds = RoomFeeds(
      pool: pool, historyDirectory: historyDirectory, rawText: options.rawText, logger: logger)
    pool.observeStreamRoom { [weak feeds] crowded in feeds?.move(off: crowded) }
    pool.observeStall { [listings] stalled in
      if stalled { listings.answerWaitersFromWhatWasSeen() }
    }
    nodes = NodeAttributes(
      options: options, classifier: classifier, feeds: feeds, started: Date())
    tree = MountTree(
      inodes: inodes, listings: listings, attributes: nodes, remote: remote, logger: logger)
    board = Self.boardMessages(
      remote: remote, listings: listings, inodes: inodes, notifier: notifier, logger: logger)
    posts = PostChannel(
      sessions: sessions, outbox: try Self.outbox(in: outboxDirectory),
      linkIsUp: { [pool] in pool.linkState == .up }, logger: logger)
    awareness = Self.awareness(
      pool: pool, options: options, feeds: feeds, listings: listings, remote: remote,
      stateDirectory: historyDirectory, logger: logger)
    connectPosts()
    sendOutbox()
  }

  // MARK: - Set-up steps

  /// A board has 32 fids for everything; a server that pipelines has plenty.
  private static func listingCache(
    pool: Pool, options: MountOptions, sessions: @escaping SessionProvider, logger: Logger
  ) -> ListingCache {
    ListingCache(
      lifetime: options.listingLifetime,
      keptDirectories: pool.configuration.profile == .device ? 4 : 16, sessions: sessions,
      // Stalled counts as down here: what the mount last saw answers, as it does once down.
      linkIsUp: { [pool] in pool.linkState == .up && !pool.isStalled }, logger: logger)
  }

  /// Board messages; a message sent drops its room's listing and the kernel's entry for it.
  private static func boardMessages(
    remote: Remote, listings: ListingCache, inodes: InodeTable, notifier: NotifierBox,
    logger: Logger
  ) -> BoardMessages {
    BoardMessages(remote: remote, logger: logger) { roomPath, name in
      listings.invalidate(roomPath)
      if let parent = inodes.inode(for: roomPath) {
        _ = notifier.value?.invalidateEntry(parent: parent, name: name)
      }
    }
  }

  /// The outbox kept in `directory`, or none without a directory.
  private static func outbox(in directory: String?) throws(MountSetupError) -> Outbox? {
    guard let directory else { return nil }
    do {
      return try Outbox(directory: directory)
    } catch {
      throw MountSetupError(description: error.description)
    }
  }

  /// Awareness, which knows the user by the pool's uname and the identity's name (whole and
  /// as its first 8 characters).
  private static func awareness(
    pool: Pool, options: MountOptions, feeds: RoomFeeds, listings: ListingCache, remote: Remote,
    stateDirectory: String?, logger: Logger
  ) -> Awareness {
    let identity = pool.configuration.authentication?.identity
    return Awareness(
      options: options.awareness, pool: pool, feeds: feeds, listings: listings,
      names: [pool.configuration.uname] + (identity.map { [$0, String($0.prefix(8))] } ?? []),
      stateDirectory: stateDirectory, logger: logger,
      readOnce: { [remote] path, done in remote.readOnce(path, done) },
      stat: { [remote] path, done in remote.stat(path, done) })
  }

  /// Tells the feeds, awareness and chat/events what the post channel does, and drains the
  /// outbox whenever the link comes up.
  private func connectPosts() {
    // A post sent again after the link died under it may land twice: the room shows it once.
    posts.observeResends { [feeds] directory, payload in
      let room = PostQueue.room(of: payload)
      guard !room.isEmpty, let feed = feeds.existing(directory + [room]) else { return }
      var text = payload.drop { $0 != UInt8(ascii: ":") }.dropFirst()
      while text.last == UInt8(ascii: "\n") { text = text.dropLast() }
      feed.expectRepeat(of: Array(text))
    }
    posts.observeSends { [awareness] in awareness.posted($0) }
    // What became of posts that went through the outbox, for chat/events.
    posts.observe { [events = awareness.events] event in
      switch event {
      case .queued(let room, let reason):
        events.record(.post(state: "queued", room: room, reason: reason))
      case .sent(let room): events.record(.post(state: "sent", room: room, reason: "-"))
      case .failed(let room, let reason):
        events.record(.post(state: "failed", room: room, reason: reason))
      case .refused(let room, let reason):
        events.record(.post(state: "refused", room: room, reason: reason))
      }
    }
    pool.observe { [posts] state in
      if state == .up { posts.drain() }
    }
  }

  /// Sends what an earlier mount left in the outbox.
  private func sendOutbox() {
    if let outbox = posts.outbox, !outbox.isEmpty {
      logger.notice("\(outbox.count) post(s) left in the outbox from before; sending them")
    }
    posts.drain()
  }

  /// Lists the root before the mount appears, so the first `ls` or `cd` on a slow link does
  /// not start with it. Waits at most `timeout`; a failure only means it happens later.
  public func prefetchRoot(timeout: Duration) {
    let done = DispatchSemaphore(value: 0)
    listings.listing([], complete: true) { _ in done.signal() }
    _ = done.wait(timeout: .now() + timeout.timeInterval)
  }

  /// Posts waiting in the outbox, or nil without one.
  var outboxCount: Int? { posts.outbox?.count }

  // MARK: - Set-up

  public func initialize(_ connection: inout FuseConnection, notifier: FuseNotifier) {
    self.notifier.value = notifier
    connection.want.insert(.readdirplus)
    connection.want.insert(.atomicOTrunc)
    connection.want.insert(.asyncRead)
    // No writeback cache. With it the kernel keeps a regular file's size and mtime itself and
    // ignores the server's (fuse_get_cache_mask), so a file another client replaced or grew
    // keeps its old size here for as long as the inode is cached, and the kernel reads pages
    // through descriptors opened write-only, which a 9P fid opened OWRITE refuses. Measured
    // (tcp, debug build, 64 MiB cp three times): 214/160/241 MiB/s with it, 228/187/291
    // without; fsx passed both ways; LargeFileTests' file changed on the server and
    // `echo >> f` of a file made elsewhere failed with it. Sizes and times follow the mount's
    // own writes without it (LocalChange), and WriteBehind already keeps writes in flight.
    connection.want.remove(.writebackCache)
    // Kept pages (keep_cache) are dropped when a refreshed size or mtime differs.
    connection.want.insert(.autoInvalidateData)
    // Large reads answer from the pipes their data was spliced into (Splice.swift).
    if SplicedBytes.isAvailable { connection.want.insert(.spliceWrite) }
    connection.maxBackground = 64
    awareness.start()
  }

  public func destroy() {
    shutdown()
  }

  /// Wakes every parked reader and stops the feeds (unmount).
  public func shutdown() {
    awareness.shutdown()
    feeds.shutdown()
  }

  // MARK: - Helpers

  /// Lets an interrupt (the caller's signal) answer `request` with EINTR at once, however
  /// long the server takes. The work goes on to its end and its own reply is then dropped
  /// (a request is answered once): a walk still clunks what it made. Call it before the
  /// request is handed to anything that may reply.
  func answersInterrupts(_ request: FuseRequest) {
    request.onInterrupt { $0.replyError(EINTR) }
  }

  /// Answers `request` with the error `code` (0: success with no data).
  func reply(_ request: FuseRequest, _ code: Int32) {
    request.replyError(code)
  }
}

/// Why the mount could not be set up.
public struct MountSetupError: Error, CustomStringConvertible {
  public let description: String
}

/// The notifier libfuse hands over at init, for the threads that invalidate entries later.
final class NotifierBox: Sendable {
  private let notifier = Mutex<FuseNotifier?>(nil)
  var value: FuseNotifier? {
    get { notifier.withLock { $0 } }
    set { notifier.withLock { $0 = newValue } }
  }
}
