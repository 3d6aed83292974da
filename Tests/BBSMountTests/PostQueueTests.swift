import Foundation
import NinePClient
import XCTest

@testable import BBSMount

/// The rules of posting as a value (``PostQueue``): each event is fed by hand and the actions
/// it returns are checked. No socket, no disk, no clock; ``PostChannelTests`` drives the same
/// rules through a scripted board and a real outbox.
final class PostQueueTests: XCTestCase {
  private let date = Date(timeIntervalSince1970: 1_800_000_000)

  private func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

  private func entry(_ sequence: UInt64, _ text: String) -> Outbox.Entry {
    Outbox.Entry(sequence: sequence, chatDirectory: ["chat"], payload: bytes(text), queued: date)
  }

  private func write(
    _ queue: inout PostQueue, _ texts: [String], up: Bool = true
  ) -> (PostQueue.WriterID, [PostQueue.Action]) {
    queue.write(texts.map(bytes), directory: ["chat"], at: date, linkIsUp: up)
  }

  private func send(_ id: UInt64, _ text: String) -> PostQueue.Action {
    .send(id: id, payload: bytes(text), directory: ["chat"])
  }

  private func store(_ id: UInt64, _ text: String) -> PostQueue.Action {
    .store(id: id, payload: bytes(text), directory: ["chat"], queued: date)
  }

  /// One Twrite at a time, in the order written: the next goes only once the one before is
  /// answered, and each writer is answered when its last post is delivered.
  func testPostsGoOneAtATimeAndWritersAreAnsweredWhenTheirLastPostLands() {
    var queue = PostQueue(keepsPosts: true)
    let (first, written) = write(&queue, ["lobby:one", "lobby:two"])
    XCTAssertEqual(written, [.armPatience(through: 2), .pump])
    let (second, _) = write(&queue, ["lobby:three"])
    XCTAssertEqual(queue.nextSend(linkIsUp: true), [send(1, "lobby:one")])
    XCTAssertEqual(queue.nextSend(linkIsUp: true), [], "one on the wire at a time")
    XCTAssertEqual(queue.finished(1, .success(())), [.pump], "the writer has one more post")
    XCTAssertEqual(queue.nextSend(linkIsUp: true), [send(2, "lobby:two")])
    XCTAssertEqual(queue.finished(2, .success(())), [.answer(first, failure: nil), .pump])
    XCTAssertEqual(queue.nextSend(linkIsUp: true), [send(3, "lobby:three")])
    XCTAssertEqual(queue.finished(3, .success(())), [.answer(second, failure: nil), .pump])
    XCTAssertEqual(queue.nextSend(linkIsUp: true), [])
    XCTAssertTrue(queue.posts.isEmpty)
  }

  /// The patience runs out: the posts are stored one at a time in queue order (so the disk
  /// keeps the order), the writer answered once both are on disk; the late Rwrite takes the
  /// first off the disk again: delivered once.
  func testPostsOutwaitingThePatienceAreStoredInOrderAndALateAnswerTakesThemOff() {
    var queue = PostQueue(keepsPosts: true)
    let (writer, _) = write(&queue, ["lobby:one", "lobby:two"])
    XCTAssertEqual(queue.nextSend(linkIsUp: true), [send(1, "lobby:one")])
    let reason = "no answer from the server in 2 s"
    XCTAssertEqual(queue.patienceRanOut(through: 2, seconds: 2), [store(1, "lobby:one")])
    XCTAssertEqual(queue.patienceRanOut(through: 2, seconds: 2), [], "one store at a time")
    XCTAssertEqual(
      queue.stored(1, as: entry(1, "lobby:one")),
      [
        .log(.info, "post to lobby queued in the outbox (\(reason))"),
        .emit(.queued(room: "lobby", reason: reason)), store(2, "lobby:two"),
      ])
    XCTAssertEqual(
      queue.stored(2, as: entry(2, "lobby:two")),
      [
        .log(.info, "post to lobby queued in the outbox (\(reason))"),
        .emit(.queued(room: "lobby", reason: reason)), .answer(writer, failure: nil),
      ])
    XCTAssertEqual(queue.queuedPosts.map(\.attempts), [1, 0])
    XCTAssertEqual(
      queue.finished(1, .success(())),
      [
        .removeFromOutbox(entry(1, "lobby:one")),
        .log(.info, "sent a post to lobby from the outbox (1 left)"), .emit(.sent(room: "lobby")),
        .pump,
      ])
  }

  /// The board answers while the post is being written to disk: the writer is answered as
  /// delivered, and the file, once written, is removed rather than sent again.
  func testAPostDeliveredWhileItsStoreIsOutLeavesTheDisk() {
    var queue = PostQueue(keepsPosts: true)
    let (writer, _) = write(&queue, ["lobby:one"])
    _ = queue.nextSend(linkIsUp: true)
    XCTAssertEqual(queue.patienceRanOut(through: 1, seconds: 2), [store(1, "lobby:one")])
    XCTAssertEqual(queue.finished(1, .success(())), [.answer(writer, failure: nil), .pump])
    XCTAssertEqual(
      queue.stored(1, as: entry(7, "lobby:one")), [.removeFromOutbox(entry(7, "lobby:one"))])
    XCTAssertTrue(queue.posts.isEmpty)
  }

  /// Offline: a post is stored at once and nothing is sent; a post written while stored ones
  /// wait is stored too, behind them.
  func testOfflinePostsAreStoredAtOnceAndLaterOnesQueueBehindThem() {
    var queue = PostQueue(keepsPosts: true)
    let (first, written) = write(&queue, ["lobby:away"], up: false)
    XCTAssertEqual(written, [store(1, "lobby:away"), .armPatience(through: 1), .pump])
    XCTAssertEqual(queue.nextSend(linkIsUp: false), [])
    _ = queue.stored(1, as: entry(1, "lobby:away"))
    let (_, behind) = write(&queue, ["lobby:back"])
    XCTAssertEqual(behind, [store(2, "lobby:back"), .armPatience(through: 2), .pump])
    XCTAssertEqual(queue.nextSend(linkIsUp: true), [send(1, "lobby:away")])
    XCTAssertNotEqual(first, 0)
  }

  /// The link dies under a post: every post waiting is kept, a retry is scheduled, and the
  /// resend is announced before the post goes again.
  func testAPostTheLinkDiedUnderIsKeptAndAnnouncedBeforeItsResend() {
    var queue = PostQueue(keepsPosts: true)
    let (writer, _) = write(&queue, ["lobby:one"])
    _ = queue.nextSend(linkIsUp: true)
    let lost = NinePError.sessionClosed(reason: "eof")
    let actions = queue.finished(1, .failure(lost))
    XCTAssertEqual(actions.count, 3)
    XCTAssertEqual(Array(actions.dropFirst()), [store(1, "lobby:one"), .scheduleRetry(seconds: 2)])
    XCTAssertEqual(queue.stored(1, as: entry(1, "lobby:one")).last, .answer(writer, failure: nil))
    XCTAssertEqual(queue.retryDue(), [.pump])
    XCTAssertEqual(
      queue.nextSend(linkIsUp: true),
      [.announceResend(directory: ["chat"], payload: bytes("lobby:one")), send(1, "lobby:one")])
  }

  /// Without an outbox the link dying fails the post on the wire and every one behind it.
  func testWithoutAnOutboxALostLinkFailsEveryWaitingWriter() {
    var queue = PostQueue(keepsPosts: false)
    let (first, _) = write(&queue, ["lobby:one"])
    let (second, _) = write(&queue, ["lobby:two"])
    _ = queue.nextSend(linkIsUp: true)
    let lost = NinePError.sessionClosed(reason: "eof")
    XCTAssertEqual(
      queue.finished(1, .failure(lost)),
      [.answer(first, failure: lost), .answer(second, failure: lost), .pump])
    XCTAssertTrue(queue.posts.isEmpty)
    let (third, offline) = write(&queue, ["lobby:three"], up: false)
    XCTAssertEqual(offline, [.answer(third, failure: .sessionClosed(reason: "the link is down"))])
  }

  /// A post the board refuses as it is written fails its writer (whose later lines are
  /// dropped, as a failed write stops) and says why; the next writer's post goes on.
  func testARefusedPostFailsItsWriterAndDropsItsLaterLines() {
    var queue = PostQueue(keepsPosts: true)
    let (writer, _) = write(&queue, ["gone:one", "gone:two"])
    let (_, _) = write(&queue, ["lobby:three"])
    _ = queue.nextSend(linkIsUp: true)
    let refusal = NinePError.server(ename: "file does not exist", errno: ENOENT)
    let actions = queue.finished(1, .failure(refusal))
    XCTAssertEqual(actions.suffix(2), [.answer(writer, failure: refusal), .pump])
    XCTAssertTrue(
      actions.contains { if case .emit(.refused(room: "gone", _)) = $0 { true } else { false } })
    XCTAssertEqual(queue.posts.map(\.id), [3])
    XCTAssertEqual(queue.nextSend(linkIsUp: true), [send(3, "lobby:three")])
  }

  /// A post the outbox cannot take (a full disk) fails its writer with the errno, and the
  /// writer's posts not yet on disk go with it; the next store is not held up.
  func testAStoreThatFailsFailsItsWriter() {
    var queue = PostQueue(keepsPosts: true)
    let (writer, written) = write(&queue, ["lobby:one", "lobby:two"], up: false)
    XCTAssertEqual(written.first, store(1, "lobby:one"))
    let (other, _) = write(&queue, ["lobby:three"], up: false)
    let failure = Outbox.Failure(description: "write: no space left on device", code: ENOSPC)
    let actions = queue.storeFailed(1, failure)
    XCTAssertEqual(
      actions.suffix(2),
      [
        .answer(
          writer,
          failure: .server(
            ename: "cannot queue the post: write: no space left on device", errno: ENOSPC)),
        store(3, "lobby:three"),
      ])
    XCTAssertEqual(queue.posts.map(\.id), [3])
    XCTAssertEqual(queue.stored(3, as: entry(1, "lobby:three")).last, .answer(other, failure: nil))
  }

  /// Posts an earlier mount left on disk go first, each removed from disk when delivered.
  func testPostsLeftByAnEarlierMountGoFirst() {
    var queue = PostQueue(keepsPosts: true, left: [entry(4, "lobby:old")])
    XCTAssertEqual(queue.queuedPosts.map(\.lastError), ["left by an earlier mount"])
    let (_, written) = write(&queue, ["lobby:new"])
    XCTAssertEqual(written.first, store(2, "lobby:new"), "behind the stored post")
    XCTAssertEqual(queue.nextSend(linkIsUp: true), [send(1, "lobby:old")])
    XCTAssertEqual(queue.finished(1, .success(())).first, .removeFromOutbox(entry(4, "lobby:old")))
  }
}
