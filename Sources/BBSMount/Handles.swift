import Foundation
import FuseKit
import NinePClient
import NinePProtocol

/// An open file or directory of the mount, by FUSE file handle.
enum OpenHandle {
  /// A server file opened on a fid of the primary session.
  case file(FileHandle)
  /// A chat room opened for reading (and maybe writing).
  case room(RoomHandle)
  /// A post file (`/chat/post`, or a room opened write-only).
  case poster(PostHandle)
  /// `/chat/users`, read once at open.
  case snapshot([UInt8])
  /// A new board message, sent whole at close.
  case draft(DraftHandle)
  /// A directory listing taken at opendir.
  case directory([DirectoryEntry])

  /// The post writer behind this handle, if writes to it are chat posts.
  var poster: PostHandle? {
    switch self {
    case .poster(let poster): poster
    case .room(let room): room.poster
    default: nil
    }
  }
}

/// A server file open on a fid. The fid belongs to one session: after a reconnect the
/// handle walks its path and opens it again on the new session before its next request.
final class FileHandle: @unchecked Sendable {
  let path: [String]
  /// The open mode for reopening (never with OTRUNC: that happened the first time).
  let mode: OpenMode
  let inode: FuseInode
  private let lock = NSLock()
  private var session: Session
  private var fid: Fid
  private(set) var iounit: UInt32

  init(path: [String], mode: OpenMode, session: Session, fid: Fid, iounit: UInt32, inode: FuseInode)
  {
    self.path = path
    self.mode = OpenMode(rawValue: mode.rawValue & ~OpenMode.truncateFlag)
    self.session = session
    self.fid = fid
    self.iounit = iounit
    self.inode = inode
  }

  /// The session and fid as they are now (maybe dead).
  var current: (session: Session, fid: Fid) {
    lock.lock()
    defer { lock.unlock() }
    return (session, fid)
  }

  /// A live session and fid: the current ones, or new ones after a reconnect.
  func live(
    _ pool: Pool,
    _ completion: @escaping @Sendable (Result<(session: Session, fid: Fid), NinePError>) -> Void
  ) {
    let now = current
    if now.session.closedReason == nil { return completion(.success(now)) }
    pool.session(for: .ordinary) { [self] placed in
      switch placed {
      case .failure(let error):
        completion(.failure(error))
      case .success(let session):
        session.walk(path) { [self] walked in
          switch walked {
          case .failure(let error):
            completion(.failure(error))
          case .success(let result):
            session.open(result.fid, mode: mode) { [self] opened in
              switch opened {
              case .failure(let error):
                session.clunk(result.fid)
                completion(.failure(error))
              case .success(let info):
                lock.lock()
                self.session = session
                fid = result.fid
                iounit = info.iounit
                lock.unlock()
                completion(.success((session, result.fid)))
              }
            }
          }
        }
      }
    }
  }

  func close() {
    let now = current
    if now.session.closedReason == nil { now.session.clunk(now.fid) }
  }
}

/// A chat room open for reading: reads the room feed's transcript at its own offset.
final class RoomHandle: @unchecked Sendable {
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
  private let lock = NSLock()
  private var readOffset: UInt64 = 0
  private var reportedSize: UInt64?
  /// Told its size through lseek(SEEK_END) and not yet through a plain `fstat`.
  private var seekedToEnd = false
  private var pollHandle: FusePollHandle?

  init(
    feed: RoomFeed, inode: FuseInode, nonBlocking: Bool, endsAtEnd: Bool, opener: pid_t,
    poster: PostHandle?
  ) {
    self.feed = feed
    self.inode = inode
    self.nonBlocking = nonBlocking
    self.endsAtEnd = endsAtEnd
    self.opener = opener
    self.poster = poster
  }

  /// Where this handle's reader has got to, for poll readiness and follow waits.
  func advance(to offset: UInt64) {
    lock.lock()
    readOffset = max(readOffset, offset)
    lock.unlock()
  }

  /// The size a getattr of its opener last reported; `seeking` when it came with the file
  /// handle (lseek to the end), not from `fstat`.
  func reported(_ size: UInt64, seeking: Bool) {
    lock.lock()
    reportedSize = size
    seekedToEnd = seeking
    lock.unlock()
  }

  /// Whether its reader has seen the room's size and read up to it: what GNU tail's follow
  /// loop has done when it `fstat`s again. Not right after an lseek to the end: that `fstat`
  /// is tail's start-up, done for one file before it opens the next.
  var isCaughtUp: Bool {
    let length = feed.length
    lock.lock()
    defer { lock.unlock() }
    return reportedSize == length && readOffset >= length && !seekedToEnd
  }

  /// The size last reported, or 0.
  var lastReported: UInt64 {
    lock.lock()
    defer { lock.unlock() }
    return reportedSize ?? 0
  }

  var isReadable: Bool {
    lock.lock()
    defer { lock.unlock() }
    return feed.length > readOffset
  }

  func keep(_ handle: FusePollHandle) {
    lock.lock()
    pollHandle = handle
    lock.unlock()
  }

  func notifyPoll() {
    lock.lock()
    let handle = pollHandle
    lock.unlock()
    _ = handle?.notify()
  }
}

/// A writer of chat posts: composes lines and sends them in order through the mount's
/// ``PostChannel``.
final class PostHandle: @unchecked Sendable {
  private let lock = NSLock()
  private var composer: PostComposer
  let channel: PostChannel
  let chatDirectory: [String]

  init(room: String?, chatDirectory: [String], channel: PostChannel) {
    composer = PostComposer(fixedRoom: room)
    self.chatDirectory = chatDirectory
    self.channel = channel
  }

  func write(
    _ data: [UInt8], knownRooms: Set<String>,
    completion: @escaping @Sendable (Result<Void, NinePError>) -> Void
  ) {
    lock.lock()
    let posts = composer.append(data, knownRooms: knownRooms)
    lock.unlock()
    channel.send(posts.map(\.payload), chatDirectory: chatDirectory, completion: completion)
  }

  func finish(
    knownRooms: Set<String>, completion: @escaping @Sendable (Result<Void, NinePError>) -> Void
  ) {
    lock.lock()
    let posts = composer.finish(knownRooms: knownRooms)
    lock.unlock()
    channel.send(posts.map(\.payload), chatDirectory: chatDirectory, completion: completion)
  }
}

final class DraftHandle: @unchecked Sendable {
  let roomPath: [String]
  let name: String
  private let lock = NSLock()
  private var body: [UInt8] = []
  private var sent = true

  init(roomPath: [String], name: String) {
    self.roomPath = roomPath
    self.name = name
  }

  func write(_ data: [UInt8], at offset: Int) {
    lock.lock()
    defer { lock.unlock() }
    if body.count < offset { body += [UInt8](repeating: 0, count: offset - body.count) }
    let end = offset + data.count
    if body.count < end { body += [UInt8](repeating: 0, count: end - body.count) }
    body.replaceSubrange(offset..<end, with: data)
    sent = false
  }

  /// The body if it still has to go out; marks it sent.
  func takeUnsent() -> [UInt8]? {
    lock.lock()
    defer { lock.unlock() }
    if sent { return nil }
    sent = true
    return body
  }

  var size: Int {
    lock.lock()
    defer { lock.unlock() }
    return body.count
  }
}
