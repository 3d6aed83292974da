import FuseKit
import Glibc

/// An open room as the follow decision sees it (``RoomHandle`` in the mount).
protocol FollowedRoom {
  /// The thread that opened it.
  var opener: pid_t { get }
  /// The room file's inode.
  var inode: FuseInode { get }
  /// Opened with O_NOFOLLOW (a copy): it ends at the end, nothing follows it.
  var endsAtEnd: Bool { get }
  /// Opened with O_NONBLOCK: its reader polls, it never loops on `fstat`.
  var nonBlocking: Bool { get }
  /// Its reader has seen the room's size and read up to it.
  var isCaughtUp: Bool { get }
}

/// What the mount can learn of the caller of a getattr, asked only when the decision needs
/// it (each answer reads `/proc`; ``startPass()`` counts a pass).
protocol FollowCaller {
  var pid: pid_t { get }
  /// Whether its standard output is a terminal (line-buffered: nothing waits for a flush).
  var writesToTerminal: Bool { get }
  /// Whether every regular file it has open is under `mountpoint`.
  func opensFilesOnlyUnder(_ mountpoint: String) -> Bool
  /// A new pass of its follow loop begins: whether the pass that ended read nothing.
  func startPass() -> Bool
}

/// The "is this `tail -f`?" policy of room getattrs (see RoomFollowing.swift): fed with the
/// open rooms and facts about the caller, it tells whether the getattr is answered now or
/// held until a followed room grows. It sends no reply and reads nothing itself.
struct FollowDecision {
  /// How the getattr is answered; handles are named by their ids.
  enum Reply: Equatable {
    /// Now, recording the size told to `updating`; `seeking` for a getattr with a handle
    /// (lseek(SEEK_END) and the like: the reader is now at that size).
    case answer(updating: [UInt64], seeking: Bool)
    /// Held until a room `followed` reads grows past what its reader was told, then
    /// answered, recording the size told to `here` (the rooms of this inode).
    case hold(here: [UInt64], followed: [UInt64])
  }

  let reply: Reply
  /// A `stat` of a room the caller does not have open: answered at once with what the mount
  /// has while the room catches up, so a `stat` a moment later (and the `tail -n` that
  /// opens it) shows what the server has.
  let catchesUp: Bool

  /// Decides for a getattr of `inode` by `caller`, with `fileHandle` when the kernel sent
  /// one, among the mount's open rooms `rooms` (by handle id), the mount at `mountpoint`.
  init<Room: FollowedRoom>(
    inode: FuseInode, fileHandle: UInt64?, caller: some FollowCaller,
    rooms: [(id: UInt64, room: Room)], mountpoint: String?
  ) {
    if let fileHandle {
      reply = .answer(updating: rooms.filter { $0.id == fileHandle }.map(\.id), seeking: true)
      catchesUp = false
      return
    }
    let pid = caller.pid
    // The rooms this thread follows: opened by it, neither a copy nor polled.
    let followed = rooms.filter {
      $0.room.opener == pid && !$0.room.endsAtEnd && !$0.room.nonBlocking
    }
    let here = followed.filter { $0.room.inode == inode }.map(\.id)
    catchesUp = !rooms.contains { $0.room.opener == pid && $0.room.inode == inode }
    // Held only when the caller reads every room it follows to its end, and only when that
    // is safe: a regular file open elsewhere (`tail -f room /var/log/syslog`) is polled too.
    guard !here.isEmpty, followed.allSatisfy(\.room.isCaughtUp), let mountpoint,
      caller.opensFilesOnlyUnder(mountpoint)
    else {
      reply = .answer(updating: here, seeking: false)
      return
    }
    if !caller.writesToTerminal {
      // Into a pipe: held only where a pass begins (the file tail opened first, which it
      // fstats first), and only after a pass that read nothing: tail has flushed and slept.
      let first = followed.min { $0.id < $1.id }?.id
      guard let first, here.contains(first), caller.startPass() else {
        reply = .answer(updating: here, seeking: false)
        return
      }
    }
    reply = .hold(here: here, followed: followed.map(\.id))
  }
}
