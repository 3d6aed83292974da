import Foundation
import FuseKit
import Logging
import NinePClient
import Synchronization

/// The rooms of a chat directory now, for `/chat/post` lines that name their room; an error
/// when they cannot be known (never an empty set that would send `tech:hi` to the lobby).
typealias RoomLister =
  @Sendable (
    _ chatDirectory: [String],
    _ body: @escaping @Sendable (Result<Set<String>, NinePError>) -> Void
  ) -> Void

/// A writer of chat posts (`/chat/post`, or a room opened for writing): composes lines and
/// sends them in order through the mount's ``PostChannel``.
final class PostHandle: OpenHandle {
  /// Lines written so far and not yet posted (a write may end mid-line).
  private let composer: Mutex<PostComposer>
  let channel: PostChannel
  let chatDirectory: [String]
  private let knownRooms: RoomLister
  private let logger: Logger

  init(
    room: String?, chatDirectory: [String], channel: PostChannel,
    logger: Logger = Logger(label: "mount9bbs.post"), knownRooms: @escaping RoomLister
  ) {
    composer = Mutex(PostComposer(fixedRoom: room))
    self.chatDirectory = chatDirectory
    self.channel = channel
    self.logger = logger
    self.knownRooms = knownRooms
  }

  /// Ctrl-C answers a write or close at once, whatever the server does; the post itself
  /// goes on (sent, or kept in the outbox if the link dies), as a post cannot be unsent.
  /// Lines that may name a room wait for the room list; if it cannot be had, the write fails
  /// whole (nothing of it is posted) rather than guess.
  func write(_ request: FuseRequest, data: [UInt8], offset: UInt64) {
    request.onInterrupt { $0.replyError(EINTR) }
    let needsRooms = composer.withLock { $0.mayNameRoom(adding: data, finishing: false) }
    rooms(needsRooms) { [self] listed in
      guard case .success(let rooms) = listed else {
        request.replyError(refusal(listed))
        return
      }
      let posts = composer.withLock { $0.append(data, knownRooms: rooms) }
      send(posts) { result in
        switch result {
        case .success: request.replyWrite(data.count)
        case .failure(let error): request.replyError(error.errno)
        }
      }
    }
  }

  /// A partial line goes out at close; close(2) reports its fate.
  func flush(_ request: FuseRequest) {
    request.onInterrupt { $0.replyError(EINTR) }
    finish { result in request.replyError(result.errnoValue) }
  }

  func release() {
    finish { _ in }
  }

  private func finish(_ completion: @escaping PostChannel.Completion) {
    let needsRooms = composer.withLock { $0.mayNameRoom(adding: [], finishing: true) }
    rooms(needsRooms) { [self] listed in
      guard case .success(let rooms) = listed else {
        composer.withLock { _ = $0.finish(knownRooms: []) }
        return completion(listed.map { _ in () })
      }
      let posts = composer.withLock { $0.finish(knownRooms: rooms) }
      send(posts, completion)
    }
  }

  /// The rooms, when a line may name one; else no need to ask (a frozen server's listing
  /// must not hold `echo hi > chat/post`).
  private func rooms(
    _ needed: Bool, _ body: @escaping @Sendable (Result<Set<String>, NinePError>) -> Void
  ) {
    guard needed else { return body(.success([])) }
    knownRooms(chatDirectory, body)
  }

  /// The errno for a write refused because the rooms could not be listed, said in the log.
  private func refusal(_ listed: Result<Set<String>, NinePError>) -> Int32 {
    guard case .failure(let error) = listed else { return 0 }
    logger.notice(
      "a post naming its room (room:text) was refused: the rooms of /\(chatDirectory.joined(separator: "/")) could not be listed (\(error))"
    )
    return error.errno
  }

  private func send(_ posts: [PostComposer.Post], _ completion: @escaping PostChannel.Completion) {
    channel.send(posts.map(\.payload), chatDirectory: chatDirectory, completion: completion)
  }
}
