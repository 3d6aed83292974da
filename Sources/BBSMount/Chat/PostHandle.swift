import Foundation
import FuseKit
import NinePClient

/// The rooms of a chat directory now, for `/chat/post` lines that name their room.
typealias RoomLister =
  @Sendable (
    _ chatDirectory: [String], _ body: @escaping @Sendable (Set<String>) -> Void
  ) -> Void

/// A writer of chat posts (`/chat/post`, or a room opened for writing): composes lines and
/// sends them in order through the mount's ``PostChannel``.
final class PostHandle: OpenHandle, @unchecked Sendable {
  private let lock = NSLock()
  private var composer: PostComposer
  let channel: PostChannel
  let chatDirectory: [String]
  private let knownRooms: RoomLister

  init(
    room: String?, chatDirectory: [String], channel: PostChannel,
    knownRooms: @escaping RoomLister
  ) {
    composer = PostComposer(fixedRoom: room)
    self.chatDirectory = chatDirectory
    self.channel = channel
    self.knownRooms = knownRooms
  }

  /// Ctrl-C answers a write or close at once, whatever the server does; the post itself
  /// goes on (sent, or kept in the outbox if the link dies), as a post cannot be unsent.
  func write(_ request: FuseRequest, data: [UInt8], offset: UInt64) {
    request.onInterrupt { $0.replyError(EINTR) }
    knownRooms(chatDirectory) { [self] rooms in
      lock.lock()
      let posts = composer.append(data, knownRooms: rooms)
      lock.unlock()
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
    knownRooms(chatDirectory) { [self] rooms in
      lock.lock()
      let posts = composer.finish(knownRooms: rooms)
      lock.unlock()
      send(posts, completion)
    }
  }

  private func send(_ posts: [PostComposer.Post], _ completion: @escaping PostChannel.Completion) {
    channel.send(posts.map(\.payload), chatDirectory: chatDirectory, completion: completion)
  }
}
