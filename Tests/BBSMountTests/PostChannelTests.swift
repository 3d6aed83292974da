import Foundation
import Logging
import NinePClient
import NinePProtocol
import TestSupport
import XCTest

@testable import BBSMount

/// The post channel on a scripted board (``ScriptedPostBoard``): posts go one Twrite at a
/// time in the order written; a writer is answered once its posts are delivered or in the
/// outbox, within the patience; a late Rwrite takes its post out of the outbox; a post on the
/// wire when the link died is sent again, observed first. No mount, no sockets.
final class PostChannelTests: XCTestCase {
  private let logger = Logger(label: "test.posts")

  /// Sessions the channel posts on: the one the test gave last; the link up or down.
  private final class Link: @unchecked Sendable {
    // @unchecked: both vars only under `lock`.
    private let lock = NSLock()
    private var session: Session?
    private var up = true

    func use(_ session: Session) { lock.withLock { self.session = session } }
    func set(up: Bool) { lock.withLock { self.up = up } }
    var isUp: Bool { lock.withLock { up } }

    func provide(_ completion: @escaping @Sendable (Result<Session, NinePError>) -> Void) {
      guard let session = lock.withLock({ session }) else {
        return completion(.failure(.sessionClosed(reason: "no session")))
      }
      completion(.success(session))
    }
  }

  /// A board's `chat/post`: walks and opens succeed; Twrites answered at once, held for the
  /// test to answer, or refused.
  private final class ScriptedPostBoard: @unchecked Sendable {
    enum Answer { case now, hold, refuse(String) }
    // @unchecked: every var only under `lock`.
    private let lock = NSLock()
    private var answer: Answer
    private var held: [(ScriptedServer, Tag, Int)] = []
    private var written: [String] = []

    init(answer: Answer = .now) { self.answer = answer }

    func answer(with new: Answer) { lock.withLock { answer = new } }
    /// Payloads of the Twrites received, in order.
    var writes: [String] { lock.withLock { written } }
    var heldWrites: Int { lock.withLock { held.count } }

    /// Answers the held Twrites (Rwrite), oldest first.
    func answerHeld() {
      for (server, tag, count) in lock.withLock({
        defer { held.removeAll() }; return held
      }) {
        server.reply(tag, .rwrite(count: UInt32(count)))
      }
    }

    func handle(_ server: ScriptedServer, _ tag: Tag, _ message: Message) {
      switch message {
      case .twalk(_, _, let names):
        server.reply(tag, .rwalk(qids: names.indices.map { Qid(path: UInt64($0 + 2)) }))
      case .topen:
        server.reply(tag, .ropen(qid: Qid(path: 9), iounit: 0))
      case .twrite(_, _, let data):
        let given = lock.withLock { () -> Answer in
          written.append(String(decoding: data, as: UTF8.self))
          if case .hold = answer { held.append((server, tag, data.count)) }
          return answer
        }
        switch given {
        case .now: server.reply(tag, .rwrite(count: UInt32(data.count)))
        case .hold: break
        case .refuse(let ename): server.reply(tag, .rerror(ename: ename))
        }
      case .tclunk:
        server.reply(tag, .rclunk)
      case .tflush:
        server.reply(tag, .rflush)
      default:
        server.reply(tag, .rerror(ename: "operation not supported"))
      }
    }
  }

  /// A session on a scripted server playing `board`, and its server end (closed to kill the
  /// link).
  private func connect(to board: ScriptedPostBoard) throws -> (Session, MemoryTransport) {
    try connectScripted { board.handle($0, $1, $2) }
  }

  private func outbox() throws -> Outbox {
    let directory = NSTemporaryDirectory() + "postchannel-\(UUID().uuidString)"
    addTeardownBlock { try? FileManager.default.removeItem(atPath: directory) }
    return try Outbox(directory: directory)
  }

  /// Events and resends a channel reports, in order.
  private final class Observed: @unchecked Sendable {
    // @unchecked: both vars only under `lock`.
    private let lock = NSLock()
    private var eventList: [PostEvent] = []
    private var resendList: [String] = []
    var events: [PostEvent] { lock.withLock { eventList } }
    var resends: [String] { lock.withLock { resendList } }
    func add(_ event: PostEvent) { lock.withLock { eventList.append(event) } }
    func resent(_ payload: [UInt8]) {
      lock.withLock { resendList.append(String(decoding: payload, as: UTF8.self)) }
    }
  }

  private func channel(
    _ link: Link, outbox: Outbox? = nil, observed: Observed = Observed()
  ) -> PostChannel {
    let channel = PostChannel(
      sessions: { link.provide($0) }, outbox: outbox, linkIsUp: { link.isUp }, logger: logger)
    channel.observe { observed.add($0) }
    channel.observeResends { _, payload in observed.resent(payload) }
    return channel
  }

  private func send(
    _ channel: PostChannel, _ posts: [String]
  ) -> DeliveredValue<Result<Void, NinePError>> {
    let done = DeliveredValue<Result<Void, NinePError>>()
    channel.send(posts.map { Array($0.utf8) }, chatDirectory: ["chat"]) { done.set($0) }
    return done
  }

  /// Posts of several writers go out one Twrite at a time, in the order written: the next
  /// only once the board has answered the one before.
  func testPostsGoOneAtATimeInOrder() throws {
    let board = ScriptedPostBoard(answer: .hold)
    let link = Link()
    link.use(try connect(to: board).0)
    let channel = channel(link)
    let first = send(channel, ["lobby:one", "lobby:two"])
    let second = send(channel, ["tech:three"])
    XCTAssertTrue(waitUntil(timeout: 5) { board.heldWrites == 1 })
    XCTAssertEqual(board.writes, ["lobby:one"], "one on the wire")
    board.answer(with: .now)
    board.answerHeld()
    guard case .success = first.wait(timeout: 5), case .success = second.wait(timeout: 5) else {
      return XCTFail("not delivered")
    }
    XCTAssertEqual(board.writes, ["lobby:one", "lobby:two", "tech:three"])
  }

  /// A board that does not answer: the writer is answered within the patience (2 s), the post
  /// kept in the outbox; the late Rwrite takes it out again: delivered once, never sent twice.
  func testAnUnansweredPostIsQueuedWithinThePatienceAndALateRwriteDeliversIt() throws {
    let board = ScriptedPostBoard(answer: .hold)
    let link = Link()
    link.use(try connect(to: board).0)
    let outbox = try outbox()
    let observed = Observed()
    let channel = channel(link, outbox: outbox, observed: observed)
    XCTAssertEqual(channel.patience, .seconds(2))
    let started = ContinuousClock.now
    let done = send(channel, ["lobby:hello"])
    guard case .success = done.wait(timeout: 10) else { return XCTFail("writer not answered") }
    let waited = started.duration(to: .now)
    XCTAssertGreaterThanOrEqual(waited, .milliseconds(1900), "waited for the board first")
    XCTAssertLessThan(waited, .seconds(4), "answered within the patience")
    XCTAssertEqual(outbox.count, 1)
    XCTAssertEqual(channel.queuedPosts.map(\.room), ["lobby"])
    XCTAssertEqual(channel.queuedPosts.first?.attempts, 1)
    XCTAssertEqual(
      observed.events.first, .queued(room: "lobby", reason: "no answer from the server in 2 s"))
    board.answerHeld()
    XCTAssertTrue(waitUntil(timeout: 5) { outbox.isEmpty })
    XCTAssertTrue(waitUntil(timeout: 5) { observed.events.last == .sent(room: "lobby") })
    XCTAssertEqual(board.writes, ["lobby:hello"], "sent once")
    XCTAssertTrue(channel.queuedPosts.isEmpty)
  }

  /// A post answered at once never touches the outbox and raises no event.
  func testAPostAnsweredAtOnceSkipsTheOutbox() throws {
    let board = ScriptedPostBoard()
    let link = Link()
    link.use(try connect(to: board).0)
    let outbox = try outbox()
    let observed = Observed()
    let channel = channel(link, outbox: outbox, observed: observed)
    guard case .success = send(channel, ["lobby:hi"]).wait(timeout: 5) else {
      return XCTFail("not delivered")
    }
    XCTAssertTrue(outbox.isEmpty)
    XCTAssertEqual(observed.events, [])
  }

  /// The link dies under a post on the wire: it is kept, and when the link is back it is sent
  /// again, the resend observed first (the room's reader then drops a second copy).
  func testAPostTheLinkDiedUnderIsSentAgainAndObserved() throws {
    let board = ScriptedPostBoard(answer: .hold)
    let link = Link()
    let (session, server) = try connect(to: board)
    link.use(session)
    let outbox = try outbox()
    let observed = Observed()
    let channel = channel(link, outbox: outbox, observed: observed)
    let done = send(channel, ["lobby:are you there"])
    XCTAssertTrue(waitUntil(timeout: 5) { board.heldWrites == 1 })
    link.set(up: false)
    server.close()
    guard case .success = done.wait(timeout: 5) else { return XCTFail("writer not answered") }
    XCTAssertEqual(outbox.count, 1, "kept for the link's return")
    XCTAssertEqual(observed.resends, [])
    let restarted = ScriptedPostBoard()
    link.use(try connect(to: restarted).0)
    link.set(up: true)
    channel.drain()
    XCTAssertTrue(waitUntil(timeout: 5) { outbox.isEmpty })
    XCTAssertEqual(observed.resends, ["lobby:are you there"])
    XCTAssertEqual(restarted.writes, ["lobby:are you there"])
    // The outbox entry goes under the channel's lock; the event is raised after it.
    XCTAssertTrue(waitUntil(timeout: 5) { observed.events.last == .sent(room: "lobby") })
  }

  /// While the link is down a post is stored at once, and posts written after it wait behind
  /// it even once the link is back: the outbox goes first, in order.
  func testOfflinePostsAreStoredAtOnceAndGoFirst() throws {
    let board = ScriptedPostBoard()
    let link = Link()
    link.use(try connect(to: board).0)
    link.set(up: false)
    let outbox = try outbox()
    let channel = channel(link, outbox: outbox)
    guard case .success = send(channel, ["lobby:first"]).wait(timeout: 1) else {
      return XCTFail("not stored at once")
    }
    XCTAssertEqual(outbox.count, 1)
    link.set(up: true)
    guard case .success = send(channel, ["lobby:second"]).wait(timeout: 5) else {
      return XCTFail("not answered")
    }
    XCTAssertTrue(waitUntil(timeout: 5) { board.writes.count == 2 && outbox.isEmpty })
    XCTAssertEqual(board.writes, ["lobby:first", "lobby:second"])
  }

  /// Without an outbox an offline post fails at once; a post the board refuses fails its
  /// writer with the board's error.
  func testWithoutAnOutboxFailuresReachTheWriter() throws {
    let board = ScriptedPostBoard(answer: .refuse("no such room"))
    let link = Link()
    link.use(try connect(to: board).0)
    let channel = channel(link)
    guard case .failure(.server(let ename, _)) = send(channel, ["nowhere:hi"]).wait(timeout: 5)
    else { return XCTFail("a refused post succeeded") }
    XCTAssertEqual(ename, "no such room")
    link.set(up: false)
    guard case .failure(.sessionClosed) = send(channel, ["lobby:hi"]).wait(timeout: 1) else {
      return XCTFail("an offline post without an outbox did not fail at once")
    }
  }
}
