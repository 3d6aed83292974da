import Foundation
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

final class FileHandle: @unchecked Sendable {
  let session: Session
  let fid: Fid
  let iounit: UInt32
  let inode: FuseInode
  init(session: Session, fid: Fid, iounit: UInt32, inode: FuseInode) {
    self.session = session
    self.fid = fid
    self.iounit = iounit
    self.inode = inode
  }
}

final class RoomHandle: @unchecked Sendable {
  let feed: RoomFeed
  let nonBlocking: Bool
  let poster: PostHandle?
  private let lock = NSLock()
  private var readOffset: UInt64 = 0
  private var pollHandle: FusePollHandle?

  init(feed: RoomFeed, nonBlocking: Bool, poster: PostHandle?) {
    self.feed = feed
    self.nonBlocking = nonBlocking
    self.poster = poster
  }

  /// Where this handle's reader has got to, for poll readiness.
  func advance(to offset: UInt64) {
    lock.lock()
    readOffset = max(readOffset, offset)
    lock.unlock()
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

/// The mount's one way of posting: a `/chat/post` fid per chat directory, opened once on the
/// primary session, through which posts go one Twrite each, in order.
///
/// One fid for all writers saves a walk and an open per `echo` (two round trips on a radio
/// link), and sending one post at a time keeps every writer's lines in order.
final class PostChannel: @unchecked Sendable {
  private let lock = NSLock()
  private var fids: [[String]: Fid] = [:]
  private var queue:
    [(
      payloads: [[UInt8]], directory: [String],
      completion: @Sendable (Result<Void, NinePError>) -> Void
    )] = []
  private var busy = false
  private let session: @Sendable () -> Session?

  init(session: @escaping @Sendable () -> Session?) { self.session = session }

  func send(
    _ payloads: [[UInt8]], chatDirectory: [String],
    completion: @escaping @Sendable (Result<Void, NinePError>) -> Void
  ) {
    if payloads.isEmpty { return completion(.success(())) }
    lock.lock()
    queue.append((payloads, chatDirectory, completion))
    let start = !busy
    busy = true
    lock.unlock()
    if start { next() }
  }

  private func next() {
    lock.lock()
    guard !queue.isEmpty else {
      busy = false
      lock.unlock()
      return
    }
    let job = queue.removeFirst()
    lock.unlock()
    post(job.payloads[...], directory: job.directory, retried: false) { [self] result in
      job.completion(result)
      next()
    }
  }

  private func post(
    _ payloads: ArraySlice<[UInt8]>, directory: [String], retried: Bool,
    _ completion: @escaping @Sendable (Result<Void, NinePError>) -> Void
  ) {
    guard let payload = payloads.first else { return completion(.success(())) }
    guard let session = session() else {
      return completion(.failure(.sessionClosed(reason: "not connected")))
    }
    withFid(session, directory) { [self] opened in
      switch opened {
      case .failure(let error):
        completion(.failure(error))
      case .success(let fid):
        let chunk = Array(payload.prefix(session.maxWriteCount))
        session.write(fid, offset: 0, data: chunk) { [self] written in
          switch written {
          case .success:
            post(payloads.dropFirst(), directory: directory, retried: false, completion)
          case .failure(.server(let ename, let code)):
            completion(.failure(.server(ename: ename, errno: code)))
          case .failure(let error):
            // The fid may have died with its session: open a new one once.
            forget(directory, fid: fid)
            if retried { return completion(.failure(error)) }
            post(payloads, directory: directory, retried: true, completion)
          }
        }
      }
    }
  }

  private func forget(_ directory: [String], fid: Fid) {
    lock.lock()
    if fids[directory] == fid { fids[directory] = nil }
    lock.unlock()
  }

  private func withFid(
    _ session: Session, _ directory: [String],
    _ completion: @escaping @Sendable (Result<Fid, NinePError>) -> Void
  ) {
    lock.lock()
    if let fid = fids[directory] {
      lock.unlock()
      return completion(.success(fid))
    }
    lock.unlock()
    session.walk(directory + ["post"]) { [self] walked in
      switch walked {
      case .failure(let error):
        completion(.failure(error))
      case .success(let result):
        session.open(result.fid, mode: .write) { [self] opened in
          switch opened {
          case .failure(let error):
            session.clunk(result.fid)
            completion(.failure(error))
          case .success:
            lock.lock()
            fids[directory] = result.fid
            lock.unlock()
            completion(.success(result.fid))
          }
        }
      }
    }
  }
}
