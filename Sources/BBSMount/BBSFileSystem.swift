// The FUSE adapter: kernel file operations in, 9P requests out.
//
// Moving parts:
// - libfuse worker threads call the operations below (the op table is the list of methods
//   in this file, one per FUSE operation). Each finds the node or the open handle, delegates
//   and replies. None blocks: 9P requests go through the callback API of NinePClient and are
//   answered from the completion, on the session's reader thread, or the request is parked
//   (reads at the end of a room, a room's open, a follow-loop fstat).
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
  private let notifier = NotifierBox()

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
    // A board has 32 fids for everything; a server that pipelines has plenty.
    let listings = ListingCache(
      lifetime: options.listingLifetime,
      keptDirectories: pool.configuration.profile == .device ? 4 : 16, sessions: sessions,
      linkIsUp: { [pool] in pool.linkState == .up }, logger: logger)
    self.listings = listings
    feeds = RoomFeeds(
      pool: pool, historyDirectory: historyDirectory, rawText: options.rawText, logger: logger
    ) {
      [handles] feed in
      for (_, room) in handles.all(RoomHandle.self) where room.feed === feed { room.notifyPoll() }
    }
    nodes = NodeAttributes(
      options: options, classifier: classifier, feeds: feeds, started: Date())
    tree = MountTree(
      inodes: inodes, listings: listings, attributes: nodes, remote: remote, logger: logger)
    let inodes = inodes
    let notifier = notifier
    board = BoardMessages(remote: remote, logger: logger) { roomPath, name in
      listings.invalidate(roomPath)
      if let parent = inodes.inode(for: roomPath) {
        _ = notifier.value?.invalidateEntry(parent: parent, name: name)
      }
    }
    var outbox: Outbox?
    if let outboxDirectory {
      do {
        outbox = try Outbox(directory: outboxDirectory)
      } catch {
        throw MountSetupError(description: error.description)
      }
    }
    let posts = PostChannel(
      sessions: sessions, outbox: outbox, linkIsUp: { [pool] in pool.linkState == .up },
      logger: logger)
    self.posts = posts
    // A post sent again after the link died under it may land twice: the room shows it once.
    posts.observeResends { [feeds] directory, payload in
      let room = PostChannel.room(of: payload)
      guard !room.isEmpty, let feed = feeds.existing(directory + [room]) else { return }
      var text = payload.drop { $0 != UInt8(ascii: ":") }.dropFirst()
      while text.last == UInt8(ascii: "\n") { text = text.dropLast() }
      feed.expectRepeat(of: Array(text))
    }
    let identity = pool.configuration.authentication?.identity
    awareness = Awareness(
      options: options.awareness, pool: pool, feeds: feeds, listings: listings,
      names: [pool.configuration.uname] + (identity.map { [$0, String($0.prefix(8))] } ?? []),
      stateDirectory: historyDirectory, logger: logger,
      readOnce: { [remote] path, done in remote.readOnce(path, done) },
      stat: { [remote] path, done in remote.stat(path, done) })
    posts.observeSends { [awareness] in awareness.posted($0) }
    // What became of posts that went through the outbox, for chat/events.
    posts.observe { [events = awareness.events] event in
      switch event {
      case .queued(let room, let reason):
        events.record(.post(state: "queued", room: room, reason: reason))
      case .sent(let room): events.record(.post(state: "sent", room: room, reason: "-"))
      case .failed(let room, let reason):
        events.record(.post(state: "failed", room: room, reason: reason))
      }
    }
    pool.observe { state in
      if state == .up { posts.drain() }
    }
    if let outbox, !outbox.isEmpty {
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

  // MARK: - Names and attributes

  public func lookup(_ request: FuseRequest, parent: FuseInode, name: String) {
    guard let directory = inodes.node(parent) else { return reply(request, ENOENT) }
    guard name.utf8.count <= ListingCache.maxNameLength else { return reply(request, ENAMETOOLONG) }
    answersInterrupts(request)
    tree.lookup(directory.path, name) { [self] found in
      switch found {
      case .success(let node): request.replyEntry(nodes.entry(for: node))
      case .failure(let error): request.replyError(error.errno)
      }
    }
  }

  public func getattr(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo?) {
    guard let node = inodes.node(inode) else { return reply(request, ENOENT) }
    if let file, let draft = handles[file.handle] as? DraftHandle {
      var attributes = nodes.attributes(for: node)
      attributes.st_size = Int(draft.size)
      request.replyAttr(attributes, timeout: 0)
      return
    }
    if case .room = node.kind { return getattrRoom(request, node, file: file) }
    if case .roomLog = node.kind { return getattrRoomLog(request, node, file: file) }
    if case .awareness(let local) = node.kind, local.isStream {
      return getattrRoom(request, node, file: file)
    }
    // An unlinked node (fstat of a file removed while open) has only what the mount knows.
    if node.inode == .root || node.unlinked
      || node.fetched.duration(to: .now) < options.attributeTimeout || nodes.isLocal(node.kind)
    {
      request.replyAttr(nodes.attributes(for: node), timeout: nodes.timeout(for: node))
      return
    }
    answersInterrupts(request)
    tree.refresh(node) { [self] result in
      switch result {
      case .success(let fresh):
        request.replyAttr(nodes.attributes(for: fresh), timeout: nodes.timeout(for: fresh))
      case .failure(let error) where error.isLinkFailure || file != nil:
        // Link down, or an open file gone from the server (fstat): what the mount knows
        // beats an error.
        let known = inodes.node(inode) ?? node
        request.replyAttr(nodes.attributes(for: known), timeout: nodes.timeout(for: known))
      case .failure(let error): request.replyError(error.errno)
      }
    }
  }

  public func setattr(
    _ request: FuseRequest, inode: FuseInode, attributes: stat, changes: FuseSetAttributes,
    file: FuseFileInfo?
  ) {
    guard let node = inodes.node(inode) else { return reply(request, ENOENT) }
    // A transcript (chat/log) is read only, for root too: a truncate or touch is refused.
    if case .roomLog = node.kind { return reply(request, EACCES) }
    // Writes still on their way (write-behind) land first: a truncate or a touch must not be
    // overtaken by them.
    whenWritesLanded(inode) { [self] in
      changeAttributes(request, node: node, attributes: attributes, changes: changes, file: file)
    }
  }

  /// Calls `body` once every write answered ahead of the server on `inode` has landed (at
  /// once, on this thread, when none is on its way).
  private func whenWritesLanded(_ inode: FuseInode, _ body: @escaping @Sendable () -> Void) {
    let writers = handles.all(RemoteFileHandle.self).map(\.handle).filter { $0.inode == inode }
    guard !writers.isEmpty else { return body() }
    let left = Mutex(writers.count)
    for writer in writers {
      writer.whenWritesLanded {
        if left.withLock({
          $0 -= 1; return $0
        }) == 0 {
          body()
        }
      }
    }
  }

  /// `df` and `statfs(2)`. 9P2000 has no request for a server's size or free space, so the
  /// mount reports a fixed, large, empty file system: 1 TiB of blocks and 2³² inodes, all
  /// free. Counts of 0 read as "no space" to programs that check before writing (installers,
  /// databases, `cp` of a sparse file), and a full server still answers a write ENOSPC, which
  /// reaches the writer. The numbers are a stand-in, not the server's disk.
  public func statfs(_ request: FuseRequest, inode: FuseInode) {
    var info = statvfs()
    info.f_bsize = 4096
    info.f_frsize = 4096
    info.f_blocks = 1 << 28
    info.f_bfree = info.f_blocks
    info.f_bavail = info.f_blocks
    info.f_files = 1 << 32
    info.f_ffree = info.f_files
    info.f_favail = info.f_files
    info.f_namemax = UInt(nameLimit)
    if options.readOnly { info.f_flag |= UInt(ST_RDONLY) }
    request.replyStatfs(info)
  }

  /// The longest name a new entry may have: a board's walk takes names of at most 63 bytes
  /// (docs/board-facts.md §1.7), other servers what Linux allows (NAME_MAX).
  private var nameLimit: Int {
    pool.configuration.profile == .device ? 63 : ListingCache.maxNameLength
  }

  // MARK: - Directories

  public func opendir(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo) {
    guard let node = inodes.node(inode) else { return reply(request, ENOENT) }
    // A fresh listing for each `ls`; lookups in between use it.
    answersInterrupts(request)
    tree.entries(of: node) { [self] listed in
      switch listed {
      case .failure(let error):
        request.replyError(error.errno)
      case .success(let entries):
        var info = file
        info.handle = handles.store(DirectoryHandle(entries))
        // Interrupted meanwhile: nobody will release this handle.
        if !request.replyOpen(info) { handles.remove(info.handle) }
      }
    }
  }

  public func readdir(
    _ request: FuseRequest, inode: FuseInode, size: Int, offset: Int64, file: FuseFileInfo
  ) {
    list(request, inode: inode, size: size, offset: offset, file: file, plus: false)
  }

  public func readdirplus(
    _ request: FuseRequest, inode: FuseInode, size: Int, offset: Int64, file: FuseFileInfo
  ) {
    list(request, inode: inode, size: size, offset: offset, file: file, plus: true)
  }

  private func list(
    _ request: FuseRequest, inode: FuseInode, size: Int, offset: Int64, file: FuseFileInfo,
    plus: Bool
  ) {
    guard let directory = handles[file.handle] as? DirectoryHandle else {
      return reply(request, EBADF)
    }
    let node = inodes.node(inode)
    let (entries, stale) = directory.entries(at: offset, changed: node?.local?.landed)
    guard stale, let node else {
      return serve(request, entries, size: size, offset: offset, plus: plus)
    }
    // rewinddir, or a listing from before the mount's own change: list the directory again
    // (what was listed is the answer if that fails).
    answersInterrupts(request)
    tree.entries(of: node) { [self] listed in
      var fresh = entries
      if case .success(let again) = listed {
        directory.replace(again)
        fresh = again
      }
      serve(request, fresh, size: size, offset: offset, plus: plus)
    }
  }

  private func serve(
    _ request: FuseRequest, _ entries: [DirectoryEntry], size: Int, offset: Int64, plus: Bool
  ) {
    var buffer = DirectoryBuffer(request: request, size: size, plus: plus)
    var index = Int(max(0, offset))
    while index < entries.count, buffer.add(entries[index], nextOffset: Int64(index + 1)) {
      index += 1
    }
    if index < entries.count && buffer.count == 0 {
      // Not even one entry fits: an empty reply would end the listing early, silently.
      logger.warning("readdir buffer of \(size) bytes holds no entry; answering EINVAL")
      return reply(request, EINVAL)
    }
    request.replyDirectory(buffer)
  }

  public func releasedir(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo) {
    handles.remove(file.handle)
    request.replyError(0)
  }

  public func mkdir(_ request: FuseRequest, parent: FuseInode, name: String, mode: mode_t) {
    guard name.utf8.count <= nameLimit else { return reply(request, ENAMETOOLONG) }
    guard !options.readOnly else { return reply(request, EROFS) }
    guard let directory = inodes.node(parent) else { return reply(request, ENOENT) }
    guard !isRoomLogs(directory, name) else { return reply(request, EACCES) }
    answersInterrupts(request)
    remote.makeDirectory(in: directory.path, name: name, permissions: UInt32(mode)) {
      [self] made in
      listings.invalidate(directory.path)
      switch made {
      case .success(let stat):
        inodes.entriesChanged(directory.inode)
        inodes.subdirectoriesChanged(directory.inode, by: 1)
        var node = inodes.record(path: directory.path + [name], kind: .directory, stat: stat)
        // Made just now, so empty: its link count is known without a listing.
        inodes.listed(node.path, subdirectories: 0, asOf: .now)
        node.subdirectories = 0
        request.replyEntry(nodes.entry(for: node))
      case .failure(let error):
        request.replyError(error.errno)
      }
    }
  }

  /// Whether the mount knows `path` as a directory.
  private func isDirectory(_ path: [String]) -> Bool {
    inodes.inode(for: path).flatMap { inodes.node($0) }?.kind == .directory
  }

  public func unlink(_ request: FuseRequest, parent: FuseInode, name: String) {
    removeEntry(request, parent: parent, name: name)
  }

  public func rmdir(_ request: FuseRequest, parent: FuseInode, name: String) {
    removeEntry(request, parent: parent, name: name)
  }

  private func removeEntry(_ request: FuseRequest, parent: FuseInode, name: String) {
    guard name.utf8.count <= ListingCache.maxNameLength else {
      return reply(request, ENAMETOOLONG)
    }
    guard !options.readOnly else { return reply(request, EROFS) }
    guard let directory = inodes.node(parent) else { return reply(request, ENOENT) }
    guard !isRoomLogs(directory, name) else { return reply(request, EACCES) }
    let removesDirectory = isDirectory(directory.path + [name])
    answersInterrupts(request)
    remote.remove(directory.path + [name]) { [self] result in
      listings.invalidate(directory.path)
      listings.forgetSubtree(directory.path + [name])
      if case .success = result {
        inodes.unlink(directory.path + [name])
        inodes.entriesChanged(directory.inode)
        if removesDirectory { inodes.subdirectoriesChanged(directory.inode, by: -1) }
      }
      request.replyError(result.errnoValue)
    }
  }

  public func rename(
    _ request: FuseRequest, parent: FuseInode, name: String, newParent: FuseInode,
    newName: String, flags: FuseRenameFlags
  ) {
    guard name.utf8.count <= ListingCache.maxNameLength, newName.utf8.count <= nameLimit else {
      return reply(request, ENAMETOOLONG)
    }
    guard !options.readOnly else { return reply(request, EROFS) }
    // 9P renames only within a directory (Twstat of the name).
    guard parent == newParent else { return reply(request, EXDEV) }
    guard flags.isEmpty else { return reply(request, EINVAL) }
    guard let directory = inodes.node(parent) else { return reply(request, ENOENT) }
    guard !isRoomLogs(directory, name), !isRoomLogs(directory, newName) else {
      return reply(request, EACCES)
    }
    // A directory renamed over another takes its place: one subdirectory fewer.
    let replacesDirectory =
      name != newName && isDirectory(directory.path + [name])
      && isDirectory(directory.path + [newName])
    answersInterrupts(request)
    remote.rename(in: directory.path, name, to: newName) { [self] result in
      listings.invalidate(directory.path)
      listings.forgetSubtree(directory.path + [name])
      listings.forgetSubtree(directory.path + [newName])
      switch result {
      case .success:
        inodes.move(from: directory.path + [name], to: directory.path + [newName])
        inodes.entriesChanged(directory.inode)
        if replacesDirectory { inodes.subdirectoriesChanged(directory.inode, by: -1) }
        request.replyError(0)
      case .failure(let error):
        request.replyError(error.errno == EIO ? EPERM : error.errno)
      }
    }
  }

  // MARK: - Files

  public func open(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo) {
    guard let node = inodes.node(inode) else { return reply(request, ENOENT) }
    let access = file.flags & O_ACCMODE
    let writes = access != O_RDONLY
    if writes && options.readOnly { return reply(request, EROFS) }
    var info = file
    info.directIO = true
    info.keepCache = false
    let chatDirectory = Array(node.path.dropLast())
    switch node.kind {
    case .directory:
      request.replyError(EISDIR)
    case .post:
      if access == O_RDONLY && request.caller.uid == 0 {
        // Mode 0222, and root reads what others may not (as on a local disk): empty, so
        // `cp -r` of the mount as root copies it without an error.
        info.handle = handles.store(SnapshotHandle([]))
        request.replyOpen(info)
        return
      }
      guard access == O_WRONLY else { return reply(request, EACCES) }
      info.handle = handles.store(poster(room: nil, chatDirectory))
      request.replyOpen(info)
    case .room(let room):
      let poster = writes ? poster(room: room, chatDirectory) : nil
      if access == O_WRONLY, let poster {
        info.handle = handles.store(poster)
        request.replyOpen(info)
        return
      }
      RoomHandle.open(
        request, feed: feeds.feed(for: node.path, room: room), inode: node.inode, poster: poster,
        info: info, handles: handles, passes: followPasses
      ) { [awareness] in awareness.roomRead(room) }
    case .awareness(let local):
      openAwareness(request, node, local, info: info, writes: writes)
    case .users:
      // The users list ignores the offset: read it once, so `cat` ends.
      answersInterrupts(request)
      remote.readOnce(node.path) { [self, info] result in
        switch result {
        case .success(let data):
          var info = info
          info.handle = handles.store(SnapshotHandle(data))
          if !request.replyOpen(info) { handles.remove(info.handle) }
        case .failure(let error):
          request.replyError(error.errno)
        }
      }
    case .roomLogs:
      request.replyError(EISDIR)
    case .roomLog(let room):
      // A transcript: read only, whoever asks (mode 0444 and root alike).
      guard !writes else { return reply(request, EACCES) }
      RoomLogHandle.open(
        request, feed: feeds.feed(for: RoomLogs.roomPath(of: node.path), room: room),
        inode: node.inode, info: info, handles: handles)
    case .outbox:
      guard !writes else {
        logger.notice("chat/outbox is read-only: it lists the posts waiting to be sent")
        return reply(request, EACCES)
      }
      info.handle = handles.store(SnapshotHandle(OutboxFile.render(posts.queuedPosts)))
      request.replyOpen(info)
    case .file:
      answersInterrupts(request)
      RemoteFileHandle.open(
        request, node: node, info: info, tree: tree, remote: remote, handles: handles)
    }
  }

  public func create(
    _ request: FuseRequest, parent: FuseInode, name: String, mode: mode_t, file: FuseFileInfo
  ) {
    guard name.utf8.count <= nameLimit else { return reply(request, ENAMETOOLONG) }
    guard !options.readOnly else { return reply(request, EROFS) }
    guard let directory = inodes.node(parent) else { return reply(request, ENOENT) }
    guard !isRoomLogs(directory, name) else { return reply(request, EACCES) }
    let path = directory.path + [name]
    var info = file
    info.directIO = true
    if classifier.isChatDirectory(directory.path) {
      // Every room is listed and clients cannot make one (the server refuses Tcreate with
      // EPERM): `echo hi > chat/nosuchroom` writes to a room that does not exist.
      return reply(request, ENOENT)
    }
    if classifier.isBoardRoom(directory.path) {
      // A board message: the device corrupts messages written in several Twrites, so the body
      // is kept here and sent whole at close as Tcreate <ms-timestamp> + one Twrite.
      let node = inodes.record(path: path, kind: .file, stat: nil)
      info.handle = handles.store(DraftHandle(roomPath: directory.path, name: name, board: board))
      var entry = nodes.entry(for: node)
      entry.attributeTimeout = 0
      entry.entryTimeout = 0
      request.replyCreate(entry, info)
      return
    }
    answersInterrupts(request)
    RemoteFileHandle.create(
      request, in: directory.path, name: name, permissions: UInt32(mode), info: info, tree: tree,
      remote: remote, handles: handles)
  }

  /// `mknod`: a regular file is made as `create` makes one, then closed. 9P2000 has no
  /// FIFOs, sockets or device nodes: EPERM, as Linux file systems that cannot hold them say
  /// (a socket's `bind` comes here too).
  public func mknod(
    _ request: FuseRequest, parent: FuseInode, name: String, mode: mode_t, device: dev_t
  ) {
    guard name.utf8.count <= nameLimit else { return reply(request, ENAMETOOLONG) }
    guard !options.readOnly else { return reply(request, EROFS) }
    guard let directory = inodes.node(parent) else { return reply(request, ENOENT) }
    guard !isRoomLogs(directory, name) else { return reply(request, EACCES) }
    guard mode & S_IFMT == S_IFREG, !classifier.isBoardRoom(directory.path),
      !classifier.isChatDirectory(directory.path)
    else { return reply(request, EPERM) }
    answersInterrupts(request)
    remote.create(
      in: directory.path, name: name, permissions: UInt32(mode) & 0o777, mode: .read
    ) { [self] created in
      listings.invalidate(directory.path)
      switch created {
      case .failure(let error):
        request.replyError(error.errno)
      case .success(let (file, stat)):
        file.close()
        inodes.entriesChanged(directory.inode)
        let node = inodes.record(path: directory.path + [name], kind: .file, stat: stat)
        request.replyEntry(nodes.entry(for: node))
      }
    }
  }

  /// 9P2000 has no symbolic links: EPERM, as `ln -s` hears from a Linux file system without.
  public func symlink(_ request: FuseRequest, target: String, parent: FuseInode, name: String) {
    guard name.utf8.count <= nameLimit else { return reply(request, ENAMETOOLONG) }
    reply(request, options.readOnly ? EROFS : EPERM)
  }

  /// 9P2000 has no hard links: EPERM, as `link(2)` says where a file system has none.
  public func link(
    _ request: FuseRequest, inode: FuseInode, newParent: FuseInode, newName: String
  ) {
    guard newName.utf8.count <= nameLimit else { return reply(request, ENAMETOOLONG) }
    reply(request, options.readOnly ? EROFS : EPERM)
  }

  public func read(
    _ request: FuseRequest, inode: FuseInode, size: Int, offset: Int64, file: FuseFileInfo
  ) {
    guard let handle = handles[file.handle] else { return reply(request, EBADF) }
    handle.read(request, size: size, offset: UInt64(max(0, offset)))
  }

  public func write(
    _ request: FuseRequest, inode: FuseInode, data: [UInt8], offset: Int64, file: FuseFileInfo
  ) {
    guard let handle = handles[file.handle] else { return reply(request, EBADF) }
    handle.write(request, data: data, offset: UInt64(max(0, offset)))
  }

  public func flush(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo) {
    guard let handle = handles[file.handle] else { return reply(request, 0) }
    handle.flush(request)
  }

  public func release(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo) {
    handles.remove(file.handle)?.release()
    request.replyError(0)
  }

  public func fsync(_ request: FuseRequest, inode: FuseInode, dataOnly: Bool, file: FuseFileInfo) {
    guard let handle = handles[file.handle] else { return reply(request, 0) }
    handle.fsync(request)
  }

  public func poll(
    _ request: FuseRequest, inode: FuseInode, file: FuseFileInfo, handle: FusePollHandle?
  ) {
    let ready = Int32(POLLIN | POLLRDNORM | POLLOUT | POLLWRNORM)
    request.replyPoll(handles[file.handle]?.poll(handle) ?? ready)
  }

  // MARK: - Helpers

  /// Whether `name` in `directory` is `chat/log` or in it: the mount's own, read only.
  private func isRoomLogs(_ directory: InodeTable.Node, _ name: String) -> Bool {
    directory.kind == .roomLogs || classifier.kind(of: directory.path + [name]) == .roomLogs
  }

  /// Opens `chat/unread` (rendered now) or a stream of Awareness/ (from now on).
  private func openAwareness(
    _ request: FuseRequest, _ node: InodeTable.Node, _ local: AwarenessFile, info: FuseFileInfo,
    writes: Bool
  ) {
    guard !writes else { return reply(request, EACCES) }
    var info = info
    let streams: StreamFanOut
    switch local {
    case .unread:
      // Rendered once the watched rooms caught up (bounded, as a room's open is), so the
      // first read after a remount counts what was said while away.
      let opened = info
      awareness.whenUnreadSettled(within: RoomFeed.catchUpWait) {
        [awareness, handles] in
        var info = opened
        info.handle = handles.store(SnapshotHandle(awareness.renderUnread()))
        request.replyOpen(info)
      }
      return
    case .mentions: streams = awareness.mentionStreams
    case .events: streams = awareness.eventStreams
    }
    guard let feed = streams.subscribe() else { return reply(request, EMFILE) }
    RoomHandle.open(
      request, feed: feed, inode: node.inode, poster: nil, info: info, handles: handles,
      passes: followPasses)
  }

  /// A post writer for a room (or for `/chat/post` with `room` nil).
  private func poster(room: String?, _ chatDirectory: [String]) -> PostHandle {
    PostHandle(room: room, chatDirectory: chatDirectory, channel: posts, logger: logger) {
      [tree] in tree.knownRooms($0, within: MountTree.chatPatience, $1)
    }
  }

  /// Lets an interrupt (the caller's signal) answer `request` with EINTR at once, however
  /// long the server takes. The work goes on to its end and its own reply is then dropped
  /// (a request is answered once): a walk still clunks what it made. Call it before the
  /// request is handed to anything that may reply.
  func answersInterrupts(_ request: FuseRequest) {
    request.onInterrupt { $0.replyError(EINTR) }
  }

  private func reply(_ request: FuseRequest, _ code: Int32) {
    request.replyError(code)
  }
}

/// Why the mount could not be set up.
public struct MountSetupError: Error, CustomStringConvertible {
  public let description: String
}

/// The notifier libfuse hands over at init, for the threads that invalidate entries later.
private final class NotifierBox: Sendable {
  private let notifier = Mutex<FuseNotifier?>(nil)
  var value: FuseNotifier? {
    get { notifier.withLock { $0 } }
    set { notifier.withLock { $0 = newValue } }
  }
}
