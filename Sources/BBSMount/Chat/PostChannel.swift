import Foundation
import Logging
import NinePClient
import NinePProtocol
import Synchronization

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
/// The rules live in ``PostQueue``, a value; this class holds it under a lock and performs the
/// actions its events return after the unlock: Twrites, outbox files and their fsyncs,
/// answers to writers, events and timers. Nothing is called out while the lock is held.
///
final class PostChannel: Sendable {
  typealias Completion = @Sendable (Result<Void, NinePError>) -> Void

  /// How long a writer waits for the server before its posts go to the outbox.
  static let defaultPatience: Duration = .seconds(2)

  private struct State {
    var queue: PostQueue
    /// The completion of each writer ``PostQueue`` has not answered yet.
    var writers: [PostQueue.WriterID: Completion] = [:]
  }

  private struct Observers {
    var events: [@Sendable (PostEvent) -> Void] = []
    var resends: [@Sendable (_ directory: [String], _ payload: [UInt8]) -> Void] = []
    var sends: [@Sendable (_ payloads: [[UInt8]]) -> Void] = []
  }

  private let state: Mutex<State>
  private let observers = Mutex(Observers())
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
    state = Mutex(State(queue: PostQueue(keepsPosts: outbox != nil, left: outbox?.all ?? [])))
  }

  /// Calls `observer` for every ``PostEvent`` (on the thread that caused it, outside locks).
  func observe(_ observer: @escaping @Sendable (PostEvent) -> Void) {
    observers.withLock { $0.events.append(observer) }
  }

  /// Calls `observer` with a post's chat directory and `room:text` payload just before it is
  /// sent again after the link died under its send (it may be on the server already).
  func observeResends(
    _ observer: @escaping @Sendable (_ directory: [String], _ payload: [UInt8]) -> Void
  ) {
    observers.withLock { $0.resends.append(observer) }
  }

  /// Calls `observer` with the `room:text` payloads of every ``send(_:chatDirectory:completion:)``
  /// (Awareness/ learns the user's name from their echo).
  func observeSends(_ observer: @escaping @Sendable (_ payloads: [[UInt8]]) -> Void) {
    observers.withLock { $0.sends.append(observer) }
  }

  /// The posts in the outbox, oldest first.
  var queuedPosts: [QueuedPost] { state.withLock { $0.queue.queuedPosts } }

  /// Sends posts (each `room:text`) in order; completes when the server has them, or when
  /// they are safe in the outbox.
  func send(_ payloads: [[UInt8]], chatDirectory: [String], completion: @escaping Completion) {
    if !payloads.isEmpty {
      for observer in observers.withLock({ $0.sends }) { observer(payloads) }
    }
    let up = linkIsUp()
    let actions = state.withLock { state in
      let (writer, actions) = state.queue.write(
        payloads, directory: chatDirectory, at: Date(), linkIsUp: up)
      state.writers[writer] = completion
      return actions
    }
    perform(actions)
  }

  /// Sends what waits in the outbox (the link came back, or the mount started).
  func drain() {
    perform([.pump])
  }

  // MARK: Performing actions

  /// Performs `actions` in order, and those that follow from them (a store's next store, a
  /// send's next send when the wire answers at once), without recursing.
  private func perform(_ actions: [PostQueue.Action]) {
    var work = actions[...]
    while let action = work.popFirst() {
      let next = perform(action)
      if !next.isEmpty { work = (next + work)[...] }
    }
  }

  /// Performs one action; returns the actions of the event it caused, if any.
  private func perform(_ action: PostQueue.Action) -> [PostQueue.Action] {
    switch action {
    case .pump:
      let up = linkIsUp()
      return state.withLock { $0.queue.nextSend(linkIsUp: up) }
    case .send(let id, let payload, let directory):
      wire.post(payload, directory: directory) { [self] result in
        perform(state.withLock { $0.queue.finished(id, result) })
      }
    case .announceResend(let directory, let payload):
      for observer in observers.withLock({ $0.resends }) { observer(directory, payload) }
    case .store(let id, let payload, let directory, let queued):
      guard let outbox else { return [] }
      do {
        let entry = try outbox.append(payload, chatDirectory: directory, queued: queued)
        return state.withLock { $0.queue.stored(id, as: entry) }
      } catch {
        return state.withLock { $0.queue.storeFailed(id, error) }
      }
    case .removeFromOutbox(let entry):
      outbox?.remove(entry)
    case .reject(let entry):
      outbox?.reject(entry)
    case .answer(let writer, let failure):
      let completion = state.withLock { $0.writers.removeValue(forKey: writer) }
      completion?(failure.map { .failure($0) } ?? .success(()))
    case .emit(let event):
      for observer in observers.withLock({ $0.events }) { observer(event) }
    case .log(let level, let message):
      logger.log(level: level, "\(message)")
    case .armPatience(let last):
      let seconds = Int(patience.timeInterval.rounded())
      DispatchQueue.global().asyncAfter(deadline: .now() + patience.timeInterval) { [self] in
        perform(state.withLock { $0.queue.patienceRanOut(through: last, seconds: seconds) })
      }
    case .scheduleRetry(let seconds):
      DispatchQueue.global().asyncAfter(deadline: .now() + seconds) { [self] in
        perform(state.withLock { $0.queue.retryDue() })
      }
    }
    return []
  }
}
