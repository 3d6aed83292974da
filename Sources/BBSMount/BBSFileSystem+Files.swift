// The FUSE operations on files: open picks the handle by the node's kind (NodeKind, Tree/),
// create makes a server file or a board draft (Board/), and read, write, flush, release, fsync
// and poll go to the open handle (OpenHandle, Tree/), whatever its kind. What open does for
// chat's own files is in BBSFileSystem+ChatFiles.

import Foundation
import FuseKit
import NinePClient

#if canImport(Glibc)
  import Glibc
#endif

extension BBSFileSystem {
  public func open(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo) {
    guard let node = inodes.node(inode) else { return reply(request, ENOENT) }
    let access = file.flags & O_ACCMODE
    let writes = access != O_RDONLY
    if writes && options.readOnly { return reply(request, EROFS) }
    var info = file
    info.directIO = true
    info.keepCache = false
    switch node.kind {
    case .directory, .roomLogs:
      request.replyError(EISDIR)
    case .post:
      openPost(request, node, access: access, info: info)
    case .room(let room):
      openRoom(request, node, room, access: access, info: info)
    case .awareness(let local):
      openAwareness(request, node, local, info: info, writes: writes)
    case .users:
      openUsers(request, node, info: info)
    case .roomLog(let room):
      openRoomLog(request, node, room, writes: writes, info: info)
    case .outbox:
      openOutbox(request, writes: writes, info: info)
    case .file:
      answersInterrupts(request)
      if access == O_RDONLY, let stat = node.stat,
        let seen = remote.seenFiles.bytes(of: node.path, at: .init(stat))
      {
        if !linkAnswers { return answer(request, with: seen, info: info) }
        answerIfTheLinkStops(request, with: seen, info: info)
      }
      RemoteFileHandle.open(
        request, node: node, info: info, tree: tree, remote: remote, handles: handles
      ) { [notifier] inode in
        // Attributes only (offset -1): dropping pages here could wait on a page another
        // reader has locked until a reply this session's thread has yet to deliver.
        _ = notifier.value?.invalidateInode(inode, offset: -1)
      }
    }
  }

  /// The link is up and not stalled (no request on the primary has waited ``Pool/stallAfter``,
  /// looked at now rather than at the keepalive's next look): what the board says is worth
  /// waiting for.
  private var linkAnswers: Bool {
    let overdue = pool.current?.waitingSince.map { $0.duration(to: .now) >= Pool.stallAfter }
    return pool.linkState == .up && !pool.isStalled && overdue != true
  }

  /// Answers an open with `bytes`, what the mount last read of the file.
  private func answer(_ request: FuseRequest, with bytes: [UInt8], info: FuseFileInfo) {
    var info = info
    info.directIO = true
    info.keepCache = false
    info.handle = handles.store(SnapshotHandle(bytes))
    // The board's own answer may come later: it finds the open answered and closes its fid.
    request.allowLateReplies()
    if !request.replyOpen(info) { handles.remove(info.handle) }
  }

  /// While the open waits for the board, looks at the link every quarter second for
  /// ``seenFilePatience``: once it is stalled or down, the open is answered with what the
  /// mount last read of the file (the board's late answer then finds it answered and closes
  /// its fid). A request unanswered for 2 s is a stall, so a frozen board's `cat` answers in
  /// about that.
  private func answerIfTheLinkStops(
    _ request: FuseRequest, with bytes: [UInt8], info: FuseFileInfo,
    waited: Duration = .zero
  ) {
    let step = Duration.milliseconds(250)
    DispatchQueue.global().asyncAfter(deadline: .now() + step.timeInterval) {
      [weak self] in
      guard let self, request.isOutstanding else { return }
      if !linkAnswers { return answer(request, with: bytes, info: info) }
      guard waited + step < Self.seenFilePatience else { return }
      answerIfTheLinkStops(request, with: bytes, info: info, waited: waited + step)
    }
  }

  /// How long an open of a file already seen looks for the link stopping; after that it
  /// waits for the board, within `timeout=`, as any open does.
  static let seenFilePatience: Duration = .seconds(4)

  /// The users list ignores the offset: it is read once, at open, so `cat` ends.
  private func openUsers(_ request: FuseRequest, _ node: InodeTable.Node, info: FuseFileInfo) {
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
}
