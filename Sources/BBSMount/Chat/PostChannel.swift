import Foundation
import Logging
import NinePClient
import NinePProtocol

/// What became of a post that went through the outbox: for `chat/events` and the log.
///
/// `queued` when a post is stored in the outbox (the link is down, a post ahead of it waits,
/// or the server did not answer within the patience); `sent` when a stored post reaches the
/// server; `failed` when the server refuses a stored post (kept aside in `rejected/`);
/// `refused` when it refuses one as it is written. A post the server takes at once raises
/// none of them.
enum PostEvent: Sendable, Equatable {
  case queued(room: String, reason: String)
  case sent(room: String)
  case failed(room: String, reason: String)
  /// The board refused a post as it was written (the writer's write failed); why, in words.
  case refused(room: String, reason: String)
}

/// A post waiting in the outbox, as `chat/outbox` lists it.
struct QueuedPost: Sendable, Equatable {
  let room: String
  let queued: Date
  /// Twrites sent for it so far (0 for a post stored while the link was down).
  let attempts: Int
  let lastError: String?
}

/// The mount's one way of posting: a `/chat/post` fid per chat directory, opened once on the
/// primary session, through which posts go one Twrite each, strictly in order.
///
/// One fid for all writers saves a walk and an open per `echo` (two round trips on a radio
/// link), and one post at a time keeps every writer's lines in order.
///
/// Never hanging. With an ``Outbox``, `write()` returns as soon as each of its posts is
/// delivered or stored: at once when the link is down or stored posts wait ahead of it,
/// after ``patience`` when the server does not answer. Posting goes on behind it: one sender
/// takes the queue (stored posts and those still in memory alike) in order, so a writer never
/// waits behind a replay of the outbox. Without an outbox a post that cannot go fails.
///
/// Delivery. A post stored while its Twrite is on the wire is removed from the outbox when the
/// Rwrite comes, however late (a frozen server that wakes up): delivered once. Twrites of posts
/// carry no timeout of their own: the pool's keepalive decides when a silent link is dead, so
/// a late answer is never flushed away. Only a post whose Twrite was on the wire when the
/// session died is uncertain: 9P has no way to ask whether it arrived, and a 9BBS post carries
/// no id the server could deduplicate by, so it is sent again: at least once. The mount's own
/// room readers drop such a repeat (``RepeatFilter``, told by ``observeResends(_:)``); other
/// clients may see the line twice.
///
/// `@unchecked Sendable`: every var is read and written under `lock` (an NSLock, not a
/// Mutex: its sections collect actions that run after the unlock, across several helpers).
final class PostChannel: @unchecked Sendable {
  typealias Completion = @Sendable (Result<Void, NinePError>) -> Void

  /// How long a writer waits for the server before its posts go to the outbox.
  static let defaultPatience: Duration = .seconds(2)

  /// The posts of one `write()`: the writer is answered once each is delivered or stored.
  private final class Writer {
    var completion: Completion?
    var waiting: Int
    init(_ completion: @escaping Completion, waiting: Int) {
      self.completion = completion
      self.waiting = waiting
    }
  }

  private struct Item {
    let id: UInt64
    let payload: [UInt8]
    let directory: [String]
    let queued: Date
    var attempts = 0
    var lastError: String?
    /// Its Twrite was on the wire when the link died: it may have landed.
    var uncertain = false
    /// Set once it is on disk.
    var entry: Outbox.Entry?
    /// Nil once the writer has been answered for this post.
    var writer: Writer?
    var room: String { PostChannel.room(of: payload) }
  }

  /// Guards every var below; `Writer`s and `Item`s are touched only under it too.
  private let lock = NSLock()
  /// Posts not yet acknowledged, in order; the first is on the wire while `sending`.
  private var queue: [Item] = []
  private var nextID: UInt64 = 1
  private var sending = false
  private var retryScheduled = false
  private var observers: [@Sendable (PostEvent) -> Void] = []
  private var resendObservers: [@Sendable (_ directory: [String], _ payload: [UInt8]) -> Void] = []
  private var sendObservers: [@Sendable (_ payloads: [[UInt8]]) -> Void] = []
  private let wire: PostWire
  private let linkIsUp: @Sendable () -> Bool
  let outbox: Outbox?
  let patience: Duration
  private let logger: Logger

  init(
    sessions: @escaping SessionProvider, outbox: Outbox? = nil,
    linkIsUp: @escaping @Sendable () -> Bool = { true },
    patience: Duration = PostChannel.defaultPatience,
    logger: Logger = Logger(label: "mount9bbs.post")
  ) {
    wire = PostWire(sessions: sessions, waitsForLateAnswers: outbox != nil)
    self.outbox = outbox
    self.linkIsUp = linkIsUp
    self.patience = patience
    self.logger = logger
    for entry in outbox?.all ?? [] {
      queue.append(
        Item(
          id: nextID, payload: entry.payload, directory: entry.chatDirectory,
          queued: entry.queued, lastError: "left by an earlier mount", entry: entry))
      nextID += 1
    }
  }

  /// Calls `observer` for every ``PostEvent`` (on the thread that caused it, outside locks).
  func observe(_ observer: @escaping @Sendable (PostEvent) -> Void) {
    lock.withLock { observers.append(observer) }
  }

  /// Calls `observer` with a post's chat directory and `room:text` payload just before it is
  /// sent again after the link died under its send (it may be on the server already).
  func observeResends(
    _ observer: @escaping @Sendable (_ directory: [String], _ payload: [UInt8]) -> Void
  ) {
    lock.withLock { resendObservers.append(observer) }
  }

  /// Calls `observer` with the `room:text` payloads of every ``send(_:chatDirectory:completion:)``
  /// (Awareness/ learns the user's name from their echo).
  func observeSends(_ observer: @escaping @Sendable (_ payloads: [[UInt8]]) -> Void) {
    lock.withLock { sendObservers.append(observer) }
  }

  /// The posts in the outbox, oldest first.
  var queuedPosts: [QueuedPost] {
    lock.withLock {
      queue.filter { $0.entry != nil }.map {
        QueuedPost(room: $0.room, queued: $0.queued, attempts: $0.attempts, lastError: $0.lastError)
      }
    }
  }

  /// Sends posts (each `room:text`) in order; completes when the server has them, or when
  /// they are safe in the outbox.
  func send(_ payloads: [[UInt8]], chatDirectory: [String], completion: @escaping Completion) {
    if payloads.isEmpty { return completion(.success(())) }
    for observer in lock.withLock({ sendObservers }) { observer(payloads) }
    let up = linkIsUp()
    guard outbox != nil || up else {
      // No outbox (`-o outbox=off`): an offline post fails at once.
      return completion(.failure(.sessionClosed(reason: "the link is down")))
    }
    let writer = Writer(completion, waiting: payloads.count)
    var deferred: [() -> Void] = []
    lock.lock()
    for payload in payloads {
      queue.append(
        Item(
          id: nextID, payload: payload, directory: chatDirectory, queued: Date(), writer: writer))
      nextID += 1
    }
    let last = nextID - 1
    let storedAhead = queue.contains { $0.entry != nil }
    if outbox != nil && (!up || storedAhead) {
      // Nothing to wait for: the link is down, or stored posts go first.
      deferred = storeLocked(through: last, reason: up ? "behind queued posts" : "link down")
    }
    lock.unlock()
    for action in deferred { action() }
    if outbox != nil {
      DispatchQueue.global().asyncAfter(deadline: .now() + patience.timeInterval) { [self] in
        let seconds = Int(patience.timeInterval.rounded())
        let actions = lock.withLock {
          storeLocked(through: last, reason: "no answer from the server in \(seconds) s")
        }
        for action in actions { action() }
      }
    }
    pump()
  }

  /// Sends what waits in the outbox (the link came back, or the mount started).
  func drain() {
    pump()
  }

  // MARK: The sender

  /// Sends the first post of the queue unless one is on the wire or the link is down.
  private func pump() {
    lock.lock()
    guard !sending, !queue.isEmpty, linkIsUp() else { return lock.unlock() }
    sending = true
    queue[0].attempts += 1
    let (id, payload, directory) = (queue[0].id, queue[0].payload, queue[0].directory)
    let resend = queue[0].uncertain ? resendObservers : []
    lock.unlock()
    for observer in resend { observer(directory, payload) }
    wire.post(payload, directory: directory) { [self] result in finished(id, result) }
  }

  private func finished(_ id: UInt64, _ result: Result<Void, NinePError>) {
    var deferred: [() -> Void] = []
    var again = true
    lock.lock()
    sending = false
    guard let index = queue.firstIndex(where: { $0.id == id }) else {
      lock.unlock()
      return pump()
    }
    let item = queue[index]
    switch result {
    case .success:
      queue.remove(at: index)
      if let entry = item.entry {
        outbox?.remove(entry)
        let left = queue.count(where: { $0.entry != nil })
        let room = item.room
        deferred.append { [self] in
          logger.info("sent a post to \(room) from the outbox (\(left) left)")
          emit(.sent(room: room))
        }
      }
      deferred += answerLocked(item.writer, .success(()))
    case .failure(let error) where error.isLinkFailure:
      let kept = linkLostLocked(at: index, error)
      deferred += kept.actions
      again = kept.sendNext
    case .failure(let error):
      queue.remove(at: index)
      if item.entry == nil {
        // Refused as it was written: the writer gets the errno, the log and chat/events why.
        let room = item.room
        let why = PostRefusal.explain(error, payload: item.payload)
        deferred.append { [self] in
          logger.warning("the board refused a post to \(room): \(why)")
          emit(.refused(room: room, reason: why))
        }
      }
      if let entry = item.entry {
        outbox?.reject(entry)
        let room = item.room
        let directory = outbox?.directory ?? ""
        deferred.append { [self] in
          logger.error(
            "the server refused a post to \(room) from the outbox (\(error)); kept in \(directory)/rejected"
          )
          emit(.failed(room: room, reason: error.description))
        }
      }
      deferred += failWriterLocked(item.writer, error)
    }
    lock.unlock()
    for action in deferred { action() }
    if again { pump() }
  }

  /// The link died under the post at `index` (it may have landed): without an outbox it and
  /// every post behind it fail; with one, all are kept for the link's return. Lock held.
  private func linkLostLocked(
    at index: Int, _ error: NinePError
  ) -> (actions: [() -> Void], sendNext: Bool) {
    queue[index].lastError = error.description
    queue[index].uncertain = true
    let item = queue[index]
    var deferred: [() -> Void] = []
    guard outbox != nil else {
      // Nowhere to keep them: this post and every one waiting behind it fail now.
      let writers = queue.compactMap(\.writer)
      queue.removeAll()
      for writer in writers { deferred += failWriterLocked(writer, error) }
      return (deferred, true)
    }
    let room = item.room
    deferred.append { [self] in
      logger.notice(
        """
        link lost while sending a post to \(room) (\(error)); kept in the outbox, sent \
        again when the link is back
        """)
    }
    // Down: everything waiting is kept, and sent when the link is back.
    deferred += storeLocked(through: queue.last?.id ?? item.id, reason: error.description)
    if !retryScheduled {
      // The pool's next "up" drains; this covers a link that never counted as down.
      retryScheduled = true
      let delay = min(30, pow(2, Double(min(item.attempts, 5))))
      DispatchQueue.global().asyncAfter(deadline: .now() + delay) { [self] in
        lock.withLock { retryScheduled = false }
        pump()
      }
    }
    return (deferred, false)
  }

  // MARK: Answering writers, storing posts

  /// Counts one post of `writer` as done; answers it with `result` when it was the last.
  private func answerLocked(_ writer: Writer?, _ result: Result<Void, NinePError>) -> [() -> Void] {
    guard let writer, let completion = writer.completion else { return [] }
    writer.waiting -= 1
    guard writer.waiting <= 0 else { return [] }
    writer.completion = nil
    return [{ completion(result) }]
  }

  /// Answers `writer` with `error` and drops its posts that have neither gone nor been stored
  /// (as a failed `write()` of several lines stops at the first that fails).
  private func failWriterLocked(_ writer: Writer?, _ error: NinePError) -> [() -> Void] {
    guard let writer, let completion = writer.completion else { return [] }
    writer.completion = nil
    let onTheWire = sending ? queue.first?.id : nil
    queue.removeAll { $0.writer === writer && $0.entry == nil && $0.id != onTheWire }
    for index in queue.indices where queue[index].writer === writer { queue[index].writer = nil }
    return [{ completion(.failure(error)) }]
  }

  /// Stores every post up to `last` (in queue order, so the disk keeps the order) not stored
  /// yet, answering the writers whose posts are now all delivered or stored.
  private func storeLocked(through last: UInt64, reason: String) -> [() -> Void] {
    guard let outbox else { return [] }
    var deferred: [() -> Void] = []
    let waiting = queue.filter { $0.id <= last && $0.entry == nil }.map(\.id)
    for id in waiting {
      // A failed store drops the rest of its writer's posts: look each one up again.
      guard let index = queue.firstIndex(where: { $0.id == id }) else { continue }
      let item = queue[index]
      do {
        let entry = try outbox.append(
          item.payload, chatDirectory: item.directory, queued: item.queued)
        queue[index].entry = entry
        queue[index].lastError = item.lastError ?? reason
        queue[index].writer = nil
        let room = item.room
        deferred.append { [self] in
          logger.info("post to \(room) queued in the outbox (\(reason))")
          emit(.queued(room: room, reason: reason))
        }
        deferred += answerLocked(item.writer, .success(()))
      } catch {
        deferred.append { [logger] in logger.error("cannot queue a post to \(item.room): \(error)")
        }
        deferred += failWriterLocked(
          item.writer, .server(ename: "cannot queue the post: \(error)", errno: error.code))
      }
    }
    return deferred
  }

  private func emit(_ event: PostEvent) {
    for observer in lock.withLock({ observers }) { observer(event) }
  }

  /// The room of a `room:text` payload.
  static func room(of payload: [UInt8]) -> String {
    let name = payload.firstIndex(of: UInt8(ascii: ":")).map { payload[..<$0] } ?? []
    return String(decoding: name, as: UTF8.self)
  }
}
