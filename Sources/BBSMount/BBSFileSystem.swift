// The FUSE adapter: kernel file operations in, 9P requests out.
//
// Moving parts:
// - libfuse worker threads call the operations below (the op table is the list of methods
//   in this file, one per FUSE operation). None blocks: each sends 9P requests through the
//   callback API of NinePClient and replies from the completion, on the session's reader
//   thread, or parks the request (reads at the end of a room).
// - InodeTable numbers nodes by path; ListingCache answers lookups and attributes from the
//   parent's listing; NodeKind decides behaviour by path (rooms, post, users).
// - RoomFeed runs one server-side reader per open room on a stream session of the Pool and
//   fans its lines out to every handle through an offset-addressed Transcript.
// - PostChannel sends chat posts one Twrite each, in order, on one fid per chat directory.

import Foundation
import FuseKit
import Logging
import NinePClient
import NinePProtocol

#if canImport(Glibc)
  import Glibc
#endif

/// The mounted BBS.
public final class BBSFileSystem: FuseFileSystem, @unchecked Sendable {
  let pool: Pool
  let options: MountOptions
  let classifier: PathClassifier
  let logger: Logger
  let inodes = InodeTable()
  let listings: ListingCache
  let posts: PostChannel
  let lock = NSLock()
  private var handles: [UInt64: OpenHandle] = [:]
  private var nextHandle: UInt64 = 1
  private var feeds: [[String]: RoomFeed] = [:]
  private var notifier: FuseNotifier?
  private let started = Date()
  private let historyDirectory: String?

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
    self.historyDirectory = historyDirectory
    self.options = options
    self.logger = logger
    classifier = PathClassifier(streamGlobs: options.streamGlobs)
    let sessions: SessionProvider = { [pool] in pool.session(for: .ordinary, completion: $0) }
    // A board has 32 fids for everything; a server that pipelines has plenty.
    listings = ListingCache(
      lifetime: options.listingLifetime,
      keptDirectories: pool.configuration.profile == .device ? 4 : 16, sessions: sessions,
      linkIsUp: { [pool] in pool.linkState == .up })
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
    self.notifier = notifier
    connection.want.insert(.readdirplus)
    connection.want.insert(.atomicOTrunc)
    connection.want.insert(.asyncRead)
    connection.want.remove(.writebackCache)
    connection.maxBackground = 64
  }

  public func destroy() {
    shutdown()
  }

  /// Wakes every parked reader and stops the feeds (unmount).
  public func shutdown() {
    lock.lock()
    let all = Array(feeds.values)
    feeds.removeAll()
    lock.unlock()
    for feed in all { feed.shutdown() }
  }

  // MARK: - Names and attributes

  public func lookup(_ request: FuseRequest, parent: FuseInode, name: String) {
    guard let directory = inodes.node(parent) else { return reply(request, ENOENT) }
    let path = directory.path + [name]
    listings.listing(directory.path) { [self] listed in
      // Not in a listing still being confirmed: ask for the whole one before saying no.
      if case .success(let stats) = listed, !stats.contains(where: { $0.name == name }),
        !listings.isComplete(directory.path)
      {
        return listings.listing(directory.path, complete: true) { [self] whole in
          answerLookup(request, path, whole)
        }
      }
      answerLookup(request, path, listed)
    }
  }

  /// Answers a lookup of `path` from its parent's listing.
  private func answerLookup(
    _ request: FuseRequest, _ path: [String], _ listed: Result<[Stat], NinePError>
  ) {
    guard let name = path.last else { return reply(request, ENOENT) }
    switch listed {
    case .success(let stats):
      guard let stat = stats.first(where: { $0.name == name }) else {
        return reply(request, ENOENT)
      }
      let node = inodes.record(path: path, kind: kind(of: path, stat: stat), stat: stat)
      request.replyEntry(entry(for: node))
    case .failure(let error) where error.isLinkFailure:
      // Link down: a node the mount has seen before is still the best answer.
      if let known = inodes.inode(for: path), let node = inodes.node(known) {
        request.replyEntry(entry(for: node))
      } else {
        reply(request, error.errno)
      }
    case .failure(let error):
      // An unreadable parent (or a server whose listings are not stat entries): walk.
      logger.debug(
        "listing of /\(path.dropLast().joined(separator: "/")) failed (\(error)); walking")
      statByWalk(path) { [self] result in
        switch result {
        case .success(let stat):
          let node = inodes.record(path: path, kind: kind(of: path, stat: stat), stat: stat)
          request.replyEntry(entry(for: node))
        case .failure(let error):
          reply(request, error.errno)
        }
      }
    }
  }

  public func getattr(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo?) {
    guard let node = inodes.node(inode) else { return reply(request, ENOENT) }
    if let file, case .draft(let draft) = handle(file.handle) {
      var attributes = attributes(for: node)
      attributes.st_size = Int(draft.size)
      request.replyAttr(attributes, timeout: 0)
      return
    }
    if case .room = node.kind { return getattrRoom(request, node, file: file) }
    if node.inode == .root || node.fetched.duration(to: .now) < options.attributeTimeout
      || isLocal(node.kind)
    {
      request.replyAttr(attributes(for: node), timeout: timeout(for: node))
      return
    }
    refresh(node) { [self] result in
      switch result {
      case .success(let fresh):
        request.replyAttr(attributes(for: fresh), timeout: timeout(for: fresh))
      case .failure(let error) where error.isLinkFailure:
        // Link down: what the mount knows beats an error.
        request.replyAttr(attributes(for: node), timeout: timeout(for: node))
      case .failure(let error): reply(request, error.errno)
      }
    }
  }

  public func setattr(
    _ request: FuseRequest, inode: FuseInode, attributes: stat, changes: FuseSetAttributes,
    file: FuseFileInfo?
  ) {
    guard let node = inodes.node(inode) else { return reply(request, ENOENT) }
    // Streams, posts and drafts have no server-side size or times to change: `echo > post`
    // truncates first, and that must not fail.
    if isLocal(node.kind)
      || (file.map { if case .draft = handle($0.handle) { true } else { false } } ?? false)
    {
      _ = request.replyAttr(self.attributes(for: node), timeout: 0)
      return
    }
    if options.readOnly { return reply(request, EROFS) }
    var wanted = Stat.unchanged
    var asks = false
    if changes.contains(.size) {
      wanted.length = UInt64(max(0, attributes.st_size))
      asks = true
    }
    if changes.contains(.mode) {
      wanted.mode = FileMode(
        rawValue: (node.stat?.mode.rawValue ?? 0) & ~0o777 | UInt32(attributes.st_mode) & 0o777)
      asks = true
    }
    if !asks {
      // Times only: 9BBS servers cannot set them and `touch` must still work.
      _ = request.replyAttr(self.attributes(for: node), timeout: timeout(for: node))
      return
    }
    let change = wanted
    withWalk(node.path, request) { [self] session, fid in
      session.wstat(fid, change) { [self] result in
        session.clunk(fid)
        switch result {
        case .success:
          inodes.invalidate(inode)
          listings.invalidate(Array(node.path.dropLast()))
          refresh(node) { [self] fresh in
            switch fresh {
            case .success(let updated): request.replyAttr(self.attributes(for: updated), timeout: 0)
            case .failure(let error): reply(request, error.errno)
            }
          }
        case .failure(let error):
          // "wstat not supported": a truncate that cannot be done is a permission matter.
          reply(request, error.errno == EIO ? EPERM : error.errno)
        }
      }
    }
  }

  public func statfs(_ request: FuseRequest, inode: FuseInode) {
    var info = statvfs()
    info.f_bsize = 4096
    info.f_frsize = 4096
    info.f_namemax = 255
    info.f_files = UInt(inodes.count)
    request.replyStatfs(info)
  }

  // MARK: - Directories

  public func opendir(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo) {
    guard let node = inodes.node(inode) else { return reply(request, ENOENT) }
    // A fresh listing for each `ls`; lookups in between use it.
    listings.listing(node.path, maxAge: .zero) { [self] listed in
      switch listed {
      case .failure(let error):
        reply(request, error.errno)
      case .success(let stats):
        // `.` and `..` as a local file system lists them (readdirplus links neither).
        let parent = inodes.inode(for: Array(node.path.dropLast())) ?? .root
        var entries = [
          DirectoryEntry(name: ".", inode: node.inode, mode: S_IFDIR),
          DirectoryEntry(name: "..", inode: parent, mode: S_IFDIR),
        ]
        for stat in stats {
          let path = node.path + [stat.name]
          let child = inodes.record(path: path, kind: kind(of: path, stat: stat), stat: stat)
          entries.append(DirectoryEntry(name: stat.name, entry: entry(for: child)))
        }
        var info = file
        info.handle = store(.directory(entries))
        request.replyOpen(info)
      }
    }
  }

  public func readdir(
    _ request: FuseRequest, inode: FuseInode, size: Int, offset: Int64, file: FuseFileInfo
  ) {
    list(request, size: size, offset: offset, file: file, plus: false)
  }

  public func readdirplus(
    _ request: FuseRequest, inode: FuseInode, size: Int, offset: Int64, file: FuseFileInfo
  ) {
    list(request, size: size, offset: offset, file: file, plus: true)
  }

  private func list(
    _ request: FuseRequest, size: Int, offset: Int64, file: FuseFileInfo, plus: Bool
  ) {
    guard case .directory(let entries) = handle(file.handle) else { return reply(request, EBADF) }
    var buffer = DirectoryBuffer(request: request, size: size, plus: plus)
    var index = Int(max(0, offset))
    while index < entries.count, buffer.add(entries[index], nextOffset: Int64(index + 1)) {
      index += 1
    }
    request.replyDirectory(buffer)
  }

  public func releasedir(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo) {
    remove(file.handle)
    request.replyError(0)
  }

  public func mkdir(_ request: FuseRequest, parent: FuseInode, name: String, mode: mode_t) {
    guard !options.readOnly else { return reply(request, EROFS) }
    guard let directory = inodes.node(parent) else { return reply(request, ENOENT) }
    withWalk(directory.path, request) { [self] session, fid in
      let perm = FileMode(permissions: UInt32(mode) & 0o777, .directory)
      session.create(fid, name: name, perm: perm, mode: .read) { [self] created in
        session.clunk(fid)
        listings.invalidate(directory.path)
        switch created {
        case .success(let opened):
          let stat = Stat(qid: opened.qid, mode: perm, name: name)
          let node = inodes.record(path: directory.path + [name], kind: .directory, stat: stat)
          request.replyEntry(entry(for: node))
        case .failure(let error):
          reply(request, error.errno)
        }
      }
    }
  }

  public func unlink(_ request: FuseRequest, parent: FuseInode, name: String) {
    removeEntry(request, parent: parent, name: name)
  }

  public func rmdir(_ request: FuseRequest, parent: FuseInode, name: String) {
    removeEntry(request, parent: parent, name: name)
  }

  private func removeEntry(_ request: FuseRequest, parent: FuseInode, name: String) {
    guard !options.readOnly else { return reply(request, EROFS) }
    guard let directory = inodes.node(parent) else { return reply(request, ENOENT) }
    withWalk(directory.path + [name], request) { [self] session, fid in
      session.remove(fid) { [self] result in
        listings.invalidate(directory.path)
        listings.forgetSubtree(directory.path + [name])
        reply(request, result.errnoValue)
      }
    }
  }

  public func rename(
    _ request: FuseRequest, parent: FuseInode, name: String, newParent: FuseInode,
    newName: String, flags: FuseRenameFlags
  ) {
    guard !options.readOnly else { return reply(request, EROFS) }
    // 9P renames only within a directory (Twstat of the name).
    guard parent == newParent else { return reply(request, EXDEV) }
    guard flags.isEmpty else { return reply(request, EINVAL) }
    guard let directory = inodes.node(parent) else { return reply(request, ENOENT) }
    withWalk(directory.path + [name], request) { [self] session, fid in
      var wanted = Stat.unchanged
      wanted.name = newName
      session.wstat(fid, wanted) { [self] result in
        session.clunk(fid)
        listings.invalidate(directory.path)
        listings.forgetSubtree(directory.path + [name])
        listings.forgetSubtree(directory.path + [newName])
        switch result {
        case .success:
          inodes.move(from: directory.path + [name], to: directory.path + [newName])
          reply(request, 0)
        case .failure(let error):
          reply(request, error.errno == EIO ? EPERM : error.errno)
        }
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
    switch node.kind {
    case .directory:
      reply(request, EISDIR)
    case .post:
      if access == O_RDONLY && request.caller.uid == 0 {
        // Mode 0222, and root reads what others may not (as on a local disk): empty, so
        // `cp -r` of the mount as root copies it without an error.
        info.handle = store(.snapshot([]))
        request.replyOpen(info)
        return
      }
      guard access == O_WRONLY else { return reply(request, EACCES) }
      let poster = PostHandle(room: nil, chatDirectory: Array(node.path.dropLast()), channel: posts)
      info.handle = store(.poster(poster))
      request.replyOpen(info)
    case .room(let room):
      let poster =
        writes
        ? PostHandle(room: room, chatDirectory: Array(node.path.dropLast()), channel: posts) : nil
      if access == O_WRONLY, let poster {
        info.handle = store(.poster(poster))
        _ = request.replyOpen(info)
        return
      }
      openRoom(request, node: node, room: room, poster: poster, info: info)
      return
    case .users:
      readSnapshot(request, node: node, info: info)
    case .file:
      openFile(request, node: node, info: info)
    }
  }

  private func openRoom(
    _ request: FuseRequest, node: InodeTable.Node, room: String, poster: PostHandle?,
    info: FuseFileInfo
  ) {
    let feed = feed(for: node, room: room)
    feed.retain()
    let nonBlocking = info.flags & O_NONBLOCK != 0
    let endsAtEnd = info.flags & O_NOFOLLOW != 0
    let roomHandle = RoomHandle(
      feed: feed, inode: node.inode, nonBlocking: nonBlocking, endsAtEnd: endsAtEnd,
      opener: request.caller.pid, poster: poster)
    var info = info
    info.handle = store(.room(roomHandle))
    let handleID = info.handle
    if nonBlocking {
      request.replyOpen(info)
      return
    }
    let opened = info
    // Wait for the room's first line so `st_size` tells the truth: GNU tail reads a 0-byte
    // file to its end before printing anything, and a room never ends. A copy (O_NOFOLLOW)
    // waits only briefly: it takes what there is.
    let waiter = WaiterBox()
    let pending = PendingReply(request) { [self] _ in
      if let id = waiter.id { feed.cancelWait(id) }
      remove(handleID)
      feed.release()
    }
    guard !pending.isAnswered else { return }
    waiter.id = feed.wait(beyond: 0) {
      pending.take()?.replyOpen(opened)
    }
    if endsAtEnd {
      DispatchQueue.global().asyncAfter(deadline: .now() + Self.copyOpenWait.timeInterval) {
        guard let request = pending.take() else { return }
        if let id = waiter.id { feed.cancelWait(id) }
        request.replyOpen(opened)
      }
    }
  }

  /// How long a copy's open of a room waits for the room's first line.
  static let copyOpenWait: Duration = .seconds(1)

  private func readSnapshot(_ request: FuseRequest, node: InodeTable.Node, info: FuseFileInfo) {
    // The users list ignores the offset: read it once, so `cat` ends.
    withWalk(node.path, request) { [self] session, fid in
      session.open(fid, mode: .read) { [self] opened in
        if case .failure(let error) = opened {
          session.clunk(fid)
          return reply(request, error.errno)
        }
        session.read(fid, offset: 0, count: session.maxReadCount) { [self] result in
          session.clunk(fid)
          switch result {
          case .success(let data):
            var info = info
            info.handle = store(.snapshot(data))
            request.replyOpen(info)
          case .failure(let error):
            reply(request, error.errno)
          }
        }
      }
    }
  }

  private func openFile(_ request: FuseRequest, node: InodeTable.Node, info: FuseFileInfo) {
    var mode: OpenMode =
      switch info.flags & O_ACCMODE {
      case O_WRONLY: .write
      case O_RDWR: .readWrite
      default: .read
      }
    if info.flags & O_TRUNC != 0 && mode.allowsWriting { mode = mode.truncating }
    let openMode = mode
    withWalk(node.path, request) { [self] session, fid in
      session.open(fid, mode: openMode) { [self] opened in
        switch opened {
        case .failure(let error):
          session.clunk(fid)
          reply(request, error.errno)
        case .success(let result):
          var info = info
          // Sizes of 9BBS files are 0 or the body only: bypass the page cache unless the
          // server gives a real size. A board message's listed size is its body alone, while
          // reading it gives headers, body and signature: through the page cache `cat` would
          // stop at the body's length, cutting the message short.
          let length = node.stat?.length ?? 0
          info.directIO =
            length == 0 || classifier.isBoardRoom(Array(node.path.dropLast()))
          info.keepCache = false
          info.handle = store(
            .file(
              FileHandle(
                path: node.path, mode: openMode, session: session, fid: fid,
                iounit: result.iounit, inode: node.inode)))
          if openMode.allowsWriting { inodes.invalidate(node.inode) }
          request.replyOpen(info)
        }
      }
    }
  }

  public func create(
    _ request: FuseRequest, parent: FuseInode, name: String, mode: mode_t, file: FuseFileInfo
  ) {
    guard !options.readOnly else { return reply(request, EROFS) }
    guard let directory = inodes.node(parent) else { return reply(request, ENOENT) }
    let path = directory.path + [name]
    var info = file
    if classifier.isChatDirectory(directory.path) {
      // Every room is listed and clients cannot make one (the server refuses Tcreate with
      // EPERM): `echo hi > chat/nosuchroom` writes to a room that does not exist.
      return reply(request, ENOENT)
    }
    if classifier.isBoardRoom(directory.path) {
      // A board message: the device corrupts messages written in several Twrites, so the body
      // is kept here and sent whole at close as Tcreate <ms-timestamp> + one Twrite.
      let node = inodes.record(path: path, kind: .file, stat: nil)
      info.handle = store(.draft(DraftHandle(roomPath: directory.path, name: name)))
      info.directIO = true
      var entry = entry(for: node)
      entry.attributeTimeout = 0
      entry.entryTimeout = 0
      request.replyCreate(entry, info)
      return
    }
    var openMode: OpenMode =
      switch file.flags & O_ACCMODE {
      case O_WRONLY: .write
      case O_RDWR: .readWrite
      default: .read
      }
    if file.flags & O_TRUNC != 0 { openMode = openMode.truncating }
    let createMode = openMode
    let createInfo = info
    withWalk(directory.path, request) { [self] session, fid in
      let perm = FileMode(permissions: UInt32(mode) & 0o777)
      session.create(fid, name: name, perm: perm, mode: createMode) { [self] created in
        listings.invalidate(directory.path)
        switch created {
        case .failure(let error):
          session.clunk(fid)
          reply(request, error.errno)
        case .success(let opened):
          let stat = Stat(qid: opened.qid, mode: perm, name: name)
          let node = inodes.record(path: path, kind: .file, stat: stat)
          var info = createInfo
          info.handle = store(
            .file(
              FileHandle(
                path: path, mode: createMode, session: session, fid: fid,
                iounit: opened.iounit, inode: node.inode)))
          info.directIO = true
          request.replyCreate(entry(for: node), info)
        }
      }
    }
  }

  public func read(
    _ request: FuseRequest, inode: FuseInode, size: Int, offset: Int64, file: FuseFileInfo
  ) {
    let offset = UInt64(max(0, offset))
    switch handle(file.handle) {
    case .file(let opened):
      readFile(request, opened, size: size, offset: offset)
    case .room(let room):
      readRoom(request, room, size: size, offset: offset)
    case .snapshot(let data):
      let start = Int(min(offset, UInt64(data.count)))
      request.replyData(Array(data[start..<min(data.count, start + size)]))
    case .draft, .poster:
      reply(request, EBADF)
    case .directory:
      reply(request, EISDIR)
    case nil:
      reply(request, EBADF)
    }
  }

  private func readFile(_ request: FuseRequest, _ opened: FileHandle, size: Int, offset: UInt64) {
    let requestHandle = HandleBox()
    let pending = PendingReply(request) { _ in
      if let handle = requestHandle.handle { opened.current.session.cancel(handle) }
    }
    guard !pending.isAnswered else { return }
    readFile(opened, size: size, offset: offset, box: requestHandle, retried: false) { result in
      guard let request = pending.take() else { return }
      switch result {
      case .success(let data): request.replyData(data)
      case .failure(let error): request.replyError(error.errno)
      }
    }
  }

  /// Reads on a live fid; a read is idempotent, so one that died with the link is tried again
  /// once on the reconnected session.
  private func readFile(
    _ opened: FileHandle, size: Int, offset: UInt64, box: HandleBox, retried: Bool,
    _ completion: @escaping @Sendable (Result<[UInt8], NinePError>) -> Void
  ) {
    opened.live(pool) { [self] live in
      guard case .success(let (session, fid)) = live else {
        if case .failure(let error) = live { completion(.failure(error)) }
        return
      }
      var count = min(UInt32(clamping: size), session.maxReadCount)
      if opened.iounit > 0 { count = min(count, opened.iounit) }
      readChunks(
        session, fid, offset: offset, wanted: size, chunk: count, into: [], box: box
      ) { [self] result in
        if case .failure(let error) = result, error.isLinkFailure, !retried {
          return readFile(
            opened, size: size, offset: offset, box: box, retried: true, completion)
        }
        completion(result)
      }
    }
  }

  /// Reads until `wanted` bytes or a short read: the kernel asks for more than one message.
  private func readChunks(
    _ session: Session, _ fid: Fid, offset: UInt64, wanted: Int, chunk: UInt32,
    into buffer: [UInt8], box: HandleBox,
    _ completion: @escaping @Sendable (Result<[UInt8], NinePError>) -> Void
  ) {
    let count = min(chunk, UInt32(clamping: wanted - buffer.count))
    box.handle = session.read(fid, offset: offset, count: count) { [self] result in
      switch result {
      case .success(let data):
        let total = buffer + data
        if data.count < Int(count) || total.count >= wanted {
          completion(.success(total))
        } else {
          readChunks(
            session, fid, offset: offset + UInt64(data.count), wanted: wanted, chunk: chunk,
            into: total, box: box, completion)
        }
      case .failure(let error):
        completion(buffer.isEmpty ? .failure(error) : .success(buffer))
      }
    }
  }

  private func readRoom(_ request: FuseRequest, _ room: RoomHandle, size: Int, offset: UInt64) {
    let data = room.feed.read(at: offset, count: size)
    if !data.isEmpty {
      room.advance(to: offset + UInt64(data.count))
      request.replyData(data)
      return
    }
    if room.endsAtEnd { request.replyData([UInt8]()); return }
    if room.nonBlocking { return reply(request, EAGAIN) }
    // At the end: wait for the next line. An interrupt answers EINTR at once; the feed runs on.
    let waiter = WaiterBox()
    let pending = PendingReply(request) { _ in
      if let id = waiter.id { room.feed.cancelWait(id) }
    }
    guard !pending.isAnswered else { return }
    waiter.id = room.feed.wait(beyond: offset) {
      guard let request = pending.take() else { return }
      let data = room.feed.read(at: offset, count: size)
      room.advance(to: offset + UInt64(data.count))
      request.replyData(data)
    }
  }

  public func write(
    _ request: FuseRequest, inode: FuseInode, data: [UInt8], offset: Int64, file: FuseFileInfo
  ) {
    let open = handle(file.handle)
    if let poster = open?.poster {
      knownRooms(poster.chatDirectory) { rooms in
        poster.write(data, knownRooms: rooms) { result in
          switch result {
          case .success: request.replyWrite(data.count)
          case .failure(let error): request.replyError(error.errno)
          }
        }
      }
      return
    }
    switch open {
    case .file(let opened):
      // Writes are not idempotent: one lost with the link fails; the next one reopens.
      opened.live(pool) { [self] live in
        guard case .success(let (session, fid)) = live else {
          if case .failure(let error) = live { request.replyError(error.errno) }
          return
        }
        session.writeAll(fid, offset: UInt64(max(0, offset)), data: data, iounit: opened.iounit) {
          [self] result in
          inodes.invalidate(opened.inode)
          switch result {
          case .success(let count): request.replyWrite(count)
          case .failure(let error): request.replyError(error.errno)
          }
        }
      }
    case .draft(let draft):
      draft.write(data, at: Int(max(0, offset)))
      request.replyWrite(data.count)
    default:
      reply(request, EBADF)
    }
  }

  public func flush(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo) {
    let open = handle(file.handle)
    if let poster = open?.poster {
      // A partial line goes out at close; close(2) reports its fate.
      knownRooms(poster.chatDirectory) { rooms in
        poster.finish(knownRooms: rooms) { result in request.replyError(result.errnoValue) }
      }
      return
    }
    switch open {
    case .draft(let draft):
      sendDraft(draft) { code in request.replyError(code) }
    default:
      request.replyError(0)
    }
  }

  public func release(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo) {
    let closing = remove(file.handle)
    switch closing {
    case .file(let opened):
      opened.close()
    case .room(let room):
      room.feed.release()
      if let poster = room.poster {
        knownRooms(poster.chatDirectory) { rooms in poster.finish(knownRooms: rooms) { _ in } }
      }
    case .draft(let draft):
      sendDraft(draft) { _ in }
    case .poster(let poster):
      knownRooms(poster.chatDirectory) { rooms in poster.finish(knownRooms: rooms) { _ in } }
    default:
      break
    }
    request.replyError(0)
  }

  public func fsync(_ request: FuseRequest, inode: FuseInode, dataOnly: Bool, file: FuseFileInfo) {
    request.replyError(0)
  }

  public func poll(
    _ request: FuseRequest, inode: FuseInode, file: FuseFileInfo, handle: FusePollHandle?
  ) {
    let ready = Int32(POLLIN | POLLRDNORM)
    switch self.handle(file.handle) {
    case .room(let room):
      if let handle { room.keep(handle) }
      request.replyPoll(room.isReadable ? ready : 0)
    default:
      request.replyPoll(ready | Int32(POLLOUT | POLLWRNORM))
    }
  }

  // MARK: - Helpers

  private func feed(for node: InodeTable.Node, room: String) -> RoomFeed {
    lock.lock()
    if let existing = feeds[node.path] {
      lock.unlock()
      return existing
    }
    lock.unlock()
    // Reading the room's history from disk happens outside the lock every request takes.
    let history = historyDirectory.flatMap {
      RoomHistory(directory: $0, room: node.path.joined(separator: "."), logger: logger)
    }
    let feed = RoomFeed(room: room, path: node.path, pool: pool, history: history, logger: logger)
    feed.onGrowth = { [weak self, weak feed] in
      guard let self, let feed else { return }
      self.notifyPolls(of: feed)
    }
    lock.lock()
    defer { lock.unlock() }
    // Another open of the same room may have made its feed meanwhile: one feed per room.
    if let existing = feeds[node.path] { return existing }
    feeds[node.path] = feed
    return feed
  }

  private func notifyPolls(of feed: RoomFeed) {
    lock.lock()
    let rooms = handles.values.compactMap { handle -> RoomHandle? in
      if case .room(let room) = handle, room.feed === feed { return room }
      return nil
    }
    lock.unlock()
    for room in rooms { room.notifyPoll() }
  }

  /// Room feeds, for status output.
  public var feedStatus: [(path: String, readers: Int, lines: Int, lastMessage: Date)] {
    lock.lock()
    let all = feeds
    lock.unlock()
    return all.map { path, feed in
      let status = feed.status
      return ("/" + path.joined(separator: "/"), status.readers, status.lines, status.lastMessage)
    }.sorted { $0.path < $1.path }
  }

  private func knownRooms(
    _ chatDirectory: [String], _ body: @escaping @Sendable (Set<String>) -> Void
  ) {
    listings.listing(chatDirectory) { listed in
      let names = (try? listed.get())?.map(\.name) ?? []
      body(Set(names).subtracting(["post", "users"]))
    }
  }

  private func sendDraft(_ draft: DraftHandle, _ completion: @escaping @Sendable (Int32) -> Void) {
    guard let body = draft.takeUnsent() else { return completion(0) }
    pool.session(for: .ordinary) { [self] placed in
      switch placed {
      case .failure(let error): completion(error.errno)
      case .success(let session): sendDraft(draft, body: body, on: session, completion)
      }
    }
  }

  private func sendDraft(
    _ draft: DraftHandle, body: [UInt8], on session: Session,
    _ completion: @escaping @Sendable (Int32) -> Void
  ) {
    let name = String(UInt64(Date().timeIntervalSince1970 * 1000))
    session.walk(draft.roomPath) { [self] walked in
      guard case .success(let result) = walked else {
        return completion((try? walked.get()).map { _ in 0 } ?? EIO)
      }
      session.create(result.fid, name: name, perm: FileMode(permissions: 0o644), mode: .write) {
        [self] created in
        if case .failure(let error) = created {
          session.clunk(result.fid)
          logger.error(
            "posting a message to /\(draft.roomPath.joined(separator: "/")) failed: \(error)")
          return completion(error.errno)
        }
        // One Twrite: the device re-parses the whole body on every write.
        let data = Array(body.prefix(session.maxWriteCount))
        if data.count < body.count {
          logger.warning(
            "message of \(body.count) bytes cut to \(data.count): one Twrite is all a board takes")
        }
        session.write(result.fid, offset: 0, data: data) { [self] written in
          session.clunk(result.fid)
          listings.invalidate(draft.roomPath)
          if let parent = inodes.inode(for: draft.roomPath) {
            _ = notifier?.invalidateEntry(parent: parent, name: draft.name)
          }
          completion(written.errnoValue)
        }
      }
    }
  }

  /// Walks `path` on the primary session and hands over the fid, or answers the request.
  private func withWalk(
    _ path: [String], _ request: FuseRequest,
    _ body: @escaping @Sendable (Session, Fid) -> Void
  ) {
    pool.session(for: .ordinary) { [self] placed in
      guard case .success(let session) = placed else {
        if case .failure(let error) = placed { reply(request, error.errno) }
        return
      }
      session.walk(path) { [self] walked in
        switch walked {
        case .success(let result): body(session, result.fid)
        case .failure(let error): reply(request, error.errno)
        }
      }
    }
  }

  private func statByWalk(
    _ path: [String], _ completion: @escaping @Sendable (Result<Stat, NinePError>) -> Void
  ) {
    pool.session(for: .ordinary) { placed in
      switch placed {
      case .failure(let error): completion(.failure(error))
      case .success(let session): Self.statByWalk(path, on: session, completion)
      }
    }
  }

  private static func statByWalk(
    _ path: [String], on session: Session,
    _ completion: @escaping @Sendable (Result<Stat, NinePError>) -> Void
  ) {
    session.walk(path) { walked in
      switch walked {
      case .failure(let error):
        completion(.failure(error))
      case .success(let result):
        session.stat(result.fid) { stat in
          session.clunk(result.fid)
          // Keep the walk's verdict on directory-ness: device stats lack DMDIR.
          completion(
            stat.map {
              var stat = $0; stat.qid.type = result.qid.type; return stat
            })
        }
      }
    }
  }

  /// Fresh attributes for a node, from its parent's listing (or a walk for the root's kids
  /// of an unlistable parent).
  private func refresh(
    _ node: InodeTable.Node,
    _ completion: @escaping @Sendable (Result<InodeTable.Node, NinePError>) -> Void
  ) {
    let parent = Array(node.path.dropLast())
    guard let name = node.path.last else { return completion(.success(node)) }
    listings.listing(parent) { [self] listed in
      switch listed {
      case .success(let stats):
        guard let stat = stats.first(where: { $0.name == name }) else {
          return completion(.failure(.notFound(path: "/" + node.path.joined(separator: "/"))))
        }
        completion(.success(inodes.record(path: node.path, kind: node.kind, stat: stat)))
      case .failure:
        statByWalk(node.path) { [self] result in
          completion(result.map { inodes.record(path: node.path, kind: node.kind, stat: $0) })
        }
      }
    }
  }

  /// The kind of a node: by path for the 9BBS files, else from the server's entry.
  func kind(of path: [String], stat: Stat) -> NodeKind {
    if let known = classifier.kind(of: path) {
      // A listing that says directory overrides a stream guess (a real dir named like a room).
      if stat.mode.isDirectory && stat.qid.isDirectory { return .directory }
      return known
    }
    return stat.qid.isDirectory || stat.mode.isDirectory ? .directory : .file
  }

  private func isLocal(_ kind: NodeKind) -> Bool {
    switch kind {
    case .room, .post, .users: true
    case .directory, .file: false
    }
  }

  private func timeout(for node: InodeTable.Node) -> Double {
    // Rooms grow all the time: no attribute caching, so fstat sees growth at once.
    isLocal(node.kind) ? 0 : options.attributeTimeout.timeInterval
  }

  func entry(for node: InodeTable.Node) -> FuseEntry {
    let timeout = timeout(for: node)
    return FuseEntry(
      inode: node.inode, attributes: attributes(for: node), attributeTimeout: timeout,
      entryTimeout: options.attributeTimeout.timeInterval)
  }

  func attributes(for node: InodeTable.Node) -> stat {
    var attributes = stat()
    attributes.st_ino = UInt(node.inode)
    attributes.st_uid = options.uid
    attributes.st_gid = options.gid
    attributes.st_blksize = 4096
    var mtime = started
    let permissions = node.stat?.mode.permissions ?? 0o755
    switch node.kind {
    case .directory:
      attributes.st_mode = S_IFDIR | mode_t(permissions | 0o500)
      attributes.st_nlink = 2
    case .file:
      attributes.st_mode = S_IFREG | mode_t(permissions)
      attributes.st_nlink = 1
      attributes.st_size = Int(clamping: node.stat?.length ?? 0)
    case .room:
      attributes.st_mode = S_IFREG | (options.readOnly ? 0o444 : 0o644)
      attributes.st_nlink = 1
      lock.lock()
      let feed = feeds[node.path]
      lock.unlock()
      if let feed {
        attributes.st_size = Int(clamping: feed.length)
        mtime = feed.modified
      }
    case .post:
      attributes.st_mode = S_IFREG | 0o222
      attributes.st_nlink = 1
    case .users:
      attributes.st_mode = S_IFREG | 0o444
      attributes.st_nlink = 1
    }
    if let server = node.stat?.mtime, server != 0, case .file = node.kind {
      mtime = Date(timeIntervalSince1970: TimeInterval(server))
    }
    attributes.st_blocks = (attributes.st_size + 511) / 512
    let spec = timespec(
      tv_sec: Int(mtime.timeIntervalSince1970),
      tv_nsec: Int((mtime.timeIntervalSince1970.truncatingRemainder(dividingBy: 1)) * 1e9))
    attributes.st_mtim = spec
    attributes.st_ctim = spec
    attributes.st_atim = spec
    return attributes
  }

  private func store(_ handle: OpenHandle) -> UInt64 {
    lock.lock()
    defer { lock.unlock() }
    let id = nextHandle
    nextHandle += 1
    handles[id] = handle
    return id
  }

  /// Every open room handle, with its FUSE file handle.
  func roomHandles() -> [(id: UInt64, room: RoomHandle)] {
    lock.lock()
    defer { lock.unlock() }
    return handles.compactMap { id, handle in
      if case .room(let room) = handle { (id, room) } else { nil }
    }
  }

  private func handle(_ id: UInt64) -> OpenHandle? {
    lock.lock()
    defer { lock.unlock() }
    return handles[id]
  }

  @discardableResult
  private func remove(_ id: UInt64) -> OpenHandle? {
    lock.lock()
    defer { lock.unlock() }
    return handles.removeValue(forKey: id)
  }

  private func reply(_ request: FuseRequest, _ code: Int32) {
    request.replyError(code)
  }
}

/// Why the mount could not be set up.
public struct MountSetupError: Error, CustomStringConvertible {
  public let description: String
}

/// Holds a waiter id set after registration, read by an interrupt handler.
final class WaiterBox: @unchecked Sendable {
  private let lock = NSLock()
  private var value: UInt64?
  var id: UInt64? {
    get { lock.withLock { value } }
    set { lock.withLock { value = newValue } }
  }
}

/// Holds the request handle of the read on the wire, for an interrupt's Tflush.
final class HandleBox: @unchecked Sendable {
  private let lock = NSLock()
  private var value: RequestHandle?
  var handle: RequestHandle? {
    get { lock.withLock { value } }
    set { lock.withLock { value = newValue } }
  }
}

extension Result where Failure == NinePError {
  /// 0 on success, else the error's errno: what a FUSE reply wants.
  var errnoValue: Int32 {
    switch self {
    case .success: 0
    case .failure(let error): error.errno
    }
  }
}
