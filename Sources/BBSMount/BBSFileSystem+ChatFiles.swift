// What open does for the chat wing's files (Chat/, Awareness/): `chat/post` and a room give a
// PostHandle to write and a RoomHandle to read, `chat/log/` a RoomLogHandle, `chat/outbox` a
// snapshot, `chat/unread` a snapshot once the rooms caught up, `chat/mentions` and
// `chat/events` a stream from now on.

import FuseKit
import Logging

#if canImport(Glibc)
  import Glibc
#endif

extension BBSFileSystem {
  /// `chat/post`: write only (mode 0222), each write a post to the room it names.
  func openPost(
    _ request: FuseRequest, _ node: InodeTable.Node, access: Int32, info: FuseFileInfo
  ) {
    var info = info
    if access == O_RDONLY && request.caller.uid == 0 {
      // Mode 0222, and root reads what others may not (as on a local disk): empty, so
      // `cp -r` of the mount as root copies it without an error.
      info.handle = handles.store(SnapshotHandle([]))
      request.replyOpen(info)
      return
    }
    guard access == O_WRONLY else { return reply(request, EACCES) }
    info.handle = handles.store(poster(room: nil, Array(node.path.dropLast())))
    request.replyOpen(info)
  }

  /// A room: written only, a poster; read (and written), a reader of its feed.
  func openRoom(
    _ request: FuseRequest, _ node: InodeTable.Node, _ room: String, access: Int32,
    info: FuseFileInfo
  ) {
    let poster = access != O_RDONLY ? poster(room: room, Array(node.path.dropLast())) : nil
    if access == O_WRONLY, let poster {
      var info = info
      info.handle = handles.store(poster)
      request.replyOpen(info)
      return
    }
    let feed = feeds.feed(for: node.path, room: room)
    RoomHandle.open(
      request, feed: feed, inode: node.inode, poster: poster, info: info, handles: handles,
      passes: followPasses
    ) { [awareness] offset in awareness.roomRead(room, through: offset, of: feed) }
  }

  /// A transcript in `chat/log/`: read only, whoever asks (mode 0444 and root alike).
  func openRoomLog(
    _ request: FuseRequest, _ node: InodeTable.Node, _ room: String, writes: Bool,
    info: FuseFileInfo
  ) {
    guard !writes else { return reply(request, EACCES) }
    RoomLogHandle.open(
      request, feed: feeds.feed(for: RoomLogs.roomPath(of: node.path), room: room),
      inode: node.inode, info: info, handles: handles)
  }

  /// `chat/outbox`: the posts waiting to be sent, rendered now.
  func openOutbox(_ request: FuseRequest, writes: Bool, info: FuseFileInfo) {
    guard !writes else {
      logger.notice("chat/outbox is read-only: it lists the posts waiting to be sent")
      return reply(request, EACCES)
    }
    var info = info
    info.handle = handles.store(SnapshotHandle(OutboxFile.render(posts.queuedPosts)))
    request.replyOpen(info)
  }

  /// Opens `chat/unread` (rendered now) or a stream of Awareness/ (from now on).
  func openAwareness(
    _ request: FuseRequest, _ node: InodeTable.Node, _ local: AwarenessFile, info: FuseFileInfo,
    writes: Bool
  ) {
    guard !writes else { return reply(request, EACCES) }
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
}
