// The getattrs of a room file and of its transcript (`chat/log/ROOM`). A room's may be held
// while it is `tail -f`'s follow-loop `fstat`: Chat/RoomFollowing.swift says why and when
// (FollowDecision decides); a transcript's tells its opener the size of its open
// (Chat/RoomLog.swift).

import Foundation
import FuseKit
import Glibc

extension BBSFileSystem {
  /// Answers a getattr of a room file, holding it while it is a follow-loop `fstat` (see the
  /// file comment and ``FollowDecision``).
  func getattrRoom(_ request: FuseRequest, _ node: InodeTable.Node, file: FuseFileInfo?) {
    let all = handles.all(RoomHandle.self)
    let decision = FollowDecision(
      inode: node.inode, fileHandle: file?.handle,
      caller: FollowingCaller(
        process: CallerProcess(pid: request.caller.pid), passes: followPasses),
      rooms: all.map { ($0.id, $0.handle) }, mountpoint: options.mountpoint)
    if decision.catchesUp, case .room(let room) = node.kind {
      // An `ls -l` stats every room: waiting for each room's backlog took seconds on a board
      // and `timeout=` per room on a frozen server.
      let feed = feeds.feed(for: node.path, room: room)
      if !feed.isCaughtUp { feed.catchUpForStat {} }
    }
    let byID = Dictionary(all.map { ($0.id, $0.handle) }, uniquingKeysWith: { first, _ in first })
    switch decision.reply {
    case .answer(let updating, let seeking):
      answer(request, node, updating: updating.compactMap { byID[$0] }, seeking: seeking)
    case .hold(let here, let followed):
      hold(
        request, node, answering: here.compactMap { byID[$0] },
        until: followed.compactMap { byID[$0] })
    }
  }

  /// Replies with the node's attributes now and records the size each handle was told.
  private func answer(
    _ request: FuseRequest, _ node: InodeTable.Node, updating handles: [RoomHandle],
    seeking: Bool = false
  ) {
    var attributes = nodes.attributes(for: node)
    if case .awareness = node.kind, let stream = handles.first?.feed {
      // A stream of Awareness/ is its reader's own feed, from the open on.
      attributes.st_size = Int(clamping: stream.length)
    }
    for handle in handles { handle.reported(UInt64(attributes.st_size), seeking: seeking) }
    request.replyAttr(attributes, timeout: 0)
  }

  /// Holds `request` until a room of `followed` grows past the size its reader was told, the
  /// wait limit passes, an interrupt comes or the mount shuts down; then answers it.
  private func hold(
    _ request: FuseRequest, _ node: InodeTable.Node, answering here: [RoomHandle],
    until followed: [RoomHandle]
  ) {
    let waits = FollowWaits()
    let held = heldFstats
    let holdID = held.reserve()
    let pending = PendingReply(
      request,
      onCancel: { _ in
        held.forget(holdID)
        waits.cancelAll()
      },
      answerInterrupt: { [self] interrupted in answer(interrupted, node, updating: here) })
    guard !pending.isAnswered else { return held.forget(holdID) }
    let wake: @Sendable () -> Void = { [self] in
      guard let request = pending.take() else { return }
      held.forget(holdID)
      waits.cancelAll()
      answer(request, node, updating: here)
    }
    var feeds: [ObjectIdentifier: (RoomFeed, UInt64)] = [:]
    for handle in followed {
      let key = ObjectIdentifier(handle.feed)
      feeds[key] = (handle.feed, min(feeds[key]?.1 ?? .max, handle.lastReported))
    }
    for (feed, size) in feeds.values {
      guard let id = feed.wait(beyond: size, wake) else { return }
      waits.add(feed, id)
      if pending.isAnswered { return waits.cancelAll() }
    }
    held.arm(holdID, after: RoomFollowing.longestWait, wake)
    // Answered meanwhile (growth, an interrupt): nothing to expire.
    if pending.isAnswered { held.forget(holdID) }
  }
}

extension BBSFileSystem {
  /// Answers a getattr of `chat/log/ROOM`: to a thread that has it open, the size of its
  /// open; to anyone else what the mount has now, setting the room catching up meanwhile
  /// (as a `stat` of the room does).
  func getattrRoomLog(_ request: FuseRequest, _ node: InodeTable.Node, file: FuseFileInfo?) {
    guard case .roomLog(let room) = node.kind else {
      request.replyError(EINVAL)
      return
    }
    let pid = request.caller.pid
    let open = handles.all(RoomLogHandle.self).filter { entry in
      if let file { return entry.id == file.handle }
      return entry.handle.opener == pid && entry.handle.inode == node.inode
    }.max { $0.id < $1.id }?.handle
    if open == nil {
      let feed = feeds.feed(for: RoomLogs.roomPath(of: node.path), room: room)
      if !feed.isCaughtUp { feed.catchUpForStat {} }
    }
    var attributes = nodes.attributes(for: node)
    if let open {
      attributes.st_size = Int(clamping: open.size)
      attributes.st_blocks = (attributes.st_size + 511) / 512
      let seconds = open.modified.timeIntervalSince1970
      let time = timespec(
        tv_sec: Int(seconds), tv_nsec: Int(seconds.truncatingRemainder(dividingBy: 1) * 1e9))
      attributes.st_mtim = time
      attributes.st_ctim = time
      attributes.st_atim = time
    }
    request.replyAttr(attributes, timeout: 0)
  }
}
