import Foundation
import FuseKit
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// A chat room open for reading: reads the room feed's transcript at its own offset.
final class RoomHandle: OpenHandle {
  let feed: RoomFeed
  /// The room file's inode.
  let inode: FuseInode
  let nonBlocking: Bool
  /// Opened with O_NOFOLLOW, as tree copiers (`cp -r`, `cp -a`, rsync, tar) open files: a read
  /// at the end is end-of-file, so a copy or a backup finishes.
  let endsAtEnd: Bool
  /// The thread that opened it: a follow-loop `fstat` comes from the same one (see
  /// ``RoomFollowing``).
  let opener: pid_t
  let poster: PostHandle?
  /// Reads by each opener, so a follow loop's pass right after input is told apart.
  let passes: FollowPasses
  /// Called with the offset read to when a read reaches the end of the transcript (the
  /// room's unread count resets).
  let readToEnd: (@Sendable (_ offset: UInt64) -> Void)?
  private let position = Mutex(Position())

  /// Where its reader is and what it was told.
  private struct Position {
    var readOffset: UInt64 = 0
    var reportedSize: UInt64?
    /// Told its size through lseek(SEEK_END) and not yet through a plain `fstat`.
    var seekedToEnd = false
    var pollHandle: FusePollHandle?
  }

  /// How long a copy's open of a room waits for the room's first line.
  static let copyOpenWait: Duration = .seconds(1)

  init(
    feed: RoomFeed, inode: FuseInode, nonBlocking: Bool, endsAtEnd: Bool, opener: pid_t,
    poster: PostHandle?, passes: FollowPasses = FollowPasses(),
    readToEnd: (@Sendable (_ offset: UInt64) -> Void)? = nil
  ) {
    self.passes = passes
    self.readToEnd = readToEnd
    self.feed = feed
    self.inode = inode
    self.nonBlocking = nonBlocking
    self.endsAtEnd = endsAtEnd
    self.opener = opener
    self.poster = poster
  }

  // MARK: Opening

  /// Opens the room `feed` reads for `request`, stored in `handles`: replies once the feed
  /// has read what the server kept for the user (bounded by ``RoomFeed/catchUpWait``) and
  /// the room has its first line.
  static func open(
    _ request: FuseRequest, feed: RoomFeed, inode: FuseInode, poster: PostHandle?,
    info: FuseFileInfo, handles: HandleTable, passes: FollowPasses,
    readToEnd: (@Sendable (_ offset: UInt64) -> Void)? = nil
  ) {
    feed.retain()
    let nonBlocking = info.flags & O_NONBLOCK != 0
    let endsAtEnd = info.flags & O_NOFOLLOW != 0
    let room = RoomHandle(
      feed: feed, inode: inode, nonBlocking: nonBlocking, endsAtEnd: endsAtEnd,
      opener: request.caller.pid, poster: poster, passes: passes, readToEnd: readToEnd)
    var info = info
    info.handle = handles.store(room)
    let handleID = info.handle
    if nonBlocking {
      request.replyOpen(info)
      return
    }
    let opened = info
    // First the lines the server kept for us (a room nobody had open, a remount: what the
    // mount has is stale), so `tail -n 5` shows the last five said, not the last five seen.
    // Then the room's first line, so `st_size` tells the truth: GNU tail reads a 0-byte file
    // to its end before printing anything, and a room never ends. A copy (O_NOFOLLOW) waits
    // only briefly: it takes what there is.
    let catchUp = WaiterBox()
    let firstLine = WaiterBox()
    let pending = PendingReply(request) { _ in
      if let id = catchUp.id { feed.cancelWait(id) }
      if let id = firstLine.id { feed.cancelWait(id) }
      handles.remove(handleID)
      feed.release()
    }
    guard !pending.isAnswered else { return }
    let caughtUp: @Sendable () -> Void = {
      guard !pending.isAnswered else { return }
      firstLine.id = feed.wait(beyond: 0) {
        pending.take()?.replyOpen(opened)
      }
      // Interrupted meanwhile: its cancel may have missed this waiter.
      if pending.isAnswered, let id = firstLine.id { feed.cancelWait(id) }
    }
    catchUp.id = feed.whenCaughtUp(within: RoomFeed.catchUpWait, caughtUp)
    if endsAtEnd {
      DispatchQueue.global().asyncAfter(deadline: .now() + copyOpenWait.timeInterval) {
        guard let request = pending.take() else { return }
        if let id = catchUp.id { feed.cancelWait(id) }
        if let id = firstLine.id { feed.cancelWait(id) }
        request.replyOpen(opened)
      }
    }
  }

  // MARK: Reading, writing, closing

  func read(_ request: FuseRequest, size: Int, offset: UInt64) {
    let data = feed.read(at: offset, count: size)
    if !data.isEmpty {
      passes.read(by: opener)
      advance(to: offset + UInt64(data.count))
      reachedEnd(offset + UInt64(data.count))
      request.replyData(data)
      return
    }
    reachedEnd(offset)
    if endsAtEnd { request.replyData([UInt8]()); return }
    if nonBlocking {
      request.replyError(EAGAIN)
      return
    }
    // At the end: wait for the next line. An interrupt answers EINTR at once; the feed runs on.
    let waiter = WaiterBox()
    let pending = PendingReply(request) { [feed] _ in
      if let id = waiter.id { feed.cancelWait(id) }
    }
    guard !pending.isAnswered else { return }
    waiter.id = feed.wait(beyond: offset) { [self] in
      guard let request = pending.take() else { return }
      let data = feed.read(at: offset, count: size)
      passes.read(by: opener)
      advance(to: offset + UInt64(data.count))
      reachedEnd(offset + UInt64(data.count))
      request.replyData(data)
    }
  }

  /// Tells the unread ledger when a read got to the end of what the room has.
  private func reachedEnd(_ offset: UInt64) {
    if let readToEnd, offset >= feed.length { readToEnd(offset) }
  }

  func write(_ request: FuseRequest, data: [UInt8], offset: UInt64) {
    guard let poster else {
      request.replyError(EBADF)
      return
    }
    poster.write(request, data: data, offset: offset)
  }

  func flush(_ request: FuseRequest) {
    guard let poster else {
      request.replyError(0)
      return
    }
    poster.flush(request)
  }

  func release() {
    feed.stopNotifying(self)
    feed.release()
    poster?.release()
  }

  func poll(_ handle: FusePollHandle?) -> Int32 {
    if let handle { keep(handle) }
    return isReadable ? Int32(POLLIN | POLLRDNORM) : 0
  }

  // MARK: Where its reader is

  /// Where this handle's reader has got to, for poll readiness and follow waits.
  func advance(to offset: UInt64) {
    position.withLock { $0.readOffset = max($0.readOffset, offset) }
  }

  /// The size a getattr of its opener last reported; `seeking` when it came with the file
  /// handle (lseek to the end), not from `fstat`.
  func reported(_ size: UInt64, seeking: Bool) {
    position.withLock {
      $0.reportedSize = size
      $0.seekedToEnd = seeking
      // lseek(SEEK_END) puts the reader at that size: `tail -n 0 -f` reads nothing before it
      // follows.
      if seeking { $0.readOffset = max($0.readOffset, size) }
    }
  }

  /// Whether its reader has seen the room's size and read up to it: what GNU tail's follow
  /// loop has done when it `fstat`s again. Not right after an lseek to the end: that `fstat`
  /// is tail's start-up, done for one file before it opens the next.
  var isCaughtUp: Bool {
    let length = feed.length
    return position.withLock {
      $0.reportedSize == length && $0.readOffset >= length && !$0.seekedToEnd
    }
  }

  /// The size last reported, or 0.
  var lastReported: UInt64 {
    position.withLock { $0.reportedSize ?? 0 }
  }

  var isReadable: Bool {
    let length = feed.length
    return position.withLock { length > $0.readOffset }
  }

  func keep(_ handle: FusePollHandle) {
    let first = position.withLock { position in
      defer { position.pollHandle = handle }
      return position.pollHandle == nil
    }
    if first { feed.notifyOnGrowth(self) { [weak self] in self?.notifyPoll() } }
  }

  func notifyPoll() {
    let handle = position.withLock { $0.pollHandle }
    _ = handle?.notify()
  }
}

/// Holds a waiter id set after registration, read by an interrupt handler.
final class WaiterBox: Sendable {
  private let value = Mutex<UInt64?>(nil)
  var id: UInt64? {
    get { value.withLock { $0 } }
    set { value.withLock { $0 = newValue } }
  }
}

/// The passes of each process's follow loop: whether the pass that just ended read anything.
/// GNU tail fstats its files in the same order every pass and flushes a pipe only after a
/// pass with no input (see ``RoomFollowing``).
final class FollowPasses: Sendable {
  private struct Loop {
    var readInPass = true
  }

  private let loops = Mutex<[pid_t: Loop]>([:])

  func read(by pid: pid_t) {
    loops.withLock { loops in
      // Bounded: forgetting every loop costs at most one fstat answered at once.
      if loops.count > 4096 && loops[pid] == nil { loops.removeAll() }
      loops[pid, default: Loop()].readInPass = true
    }
  }

  /// A new pass of `pid`'s loop begins: whether the one that ended read nothing.
  func startPass(of pid: pid_t) -> Bool {
    loops.withLock { loops in
      let quiet = !(loops[pid]?.readInPass ?? true)
      loops[pid, default: Loop()].readInPass = false
      return quiet
    }
  }
}
