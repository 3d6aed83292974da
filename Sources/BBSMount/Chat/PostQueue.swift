import Foundation
import Logging
import NinePClient

/// The posts of a ``PostChannel`` and what becomes of them, as a value: each event (a write,
/// an answer from the board, a post on disk, a timer) changes the queue and returns the
/// ``Action``s that follow, which the channel performs outside its lock. Nothing here touches
/// the wire, the disk or a clock, so the rules are tested without either.
///
/// The rules. Posts go one at a time in queue order (one `.send` until it is `finished`). A
/// writer is answered once each of its posts is delivered or stored. Posts are stored one at
/// a time in queue order too (one `.store` until it is `stored`), so the outbox keeps the order
/// on disk; a post is stored when the link is down, when stored posts wait ahead of it, when
/// the patience runs out, or when the link dies under it.
struct PostQueue: Sendable {
  /// Names the writer (one `write()`) a post belongs to; the channel keeps its completion.
  typealias WriterID = UInt64

  /// What the channel does after an event, in order.
  enum Action: Sendable, Equatable {
    /// Twrite this post; answer with ``PostQueue/finished(_:_:)``.
    case send(id: UInt64, payload: [UInt8], directory: [String])
    /// The post is sent again after the link died under it: tell the resend observers first.
    case announceResend(directory: [String], payload: [UInt8])
    /// Write this post to the outbox; answer with ``PostQueue/stored(_:as:)`` or
    /// ``PostQueue/storeFailed(_:_:)``.
    case store(id: UInt64, payload: [UInt8], directory: [String], queued: Date)
    /// Delete a delivered post from the outbox.
    case removeFromOutbox(Outbox.Entry)
    /// Move a post the board refused into the outbox's `rejected/`.
    case reject(Outbox.Entry)
    /// Answer a writer: done, or failed with this error.
    case answer(WriterID, failure: NinePError?)
    case emit(PostEvent)
    case log(Logger.Level, String)
    /// Call ``PostQueue/patienceRanOut(through:)`` with this id after the patience.
    case armPatience(through: UInt64)
    /// Call ``PostQueue/retryDue()`` after this many seconds.
    case scheduleRetry(seconds: Double)
    /// Try the next send: call ``PostQueue/nextSend(linkIsUp:)``.
    case pump
  }

  /// Where a post's bytes are kept.
  enum Storage: Sendable, Equatable {
    case memory
    /// To be written to disk, or its `.store` is out; why (for the log and chat/events).
    case storing(reason: String)
    case stored(Outbox.Entry)
  }

  struct Post: Sendable, Equatable {
    let id: UInt64
    let payload: [UInt8]
    let directory: [String]
    let queued: Date
    var attempts = 0
    var lastError: String?
    /// Its Twrite was on the wire when the link died: it may have landed.
    var uncertain = false
    var storage = Storage.memory
    /// Nil once the writer has been answered for this post.
    var writer: WriterID?
    /// Wanted on disk: its store is out or done.
    var kept: Bool { storage != .memory }
    var isStoring: Bool {
      if case .storing = storage { true } else { false }
    }
    var entry: Outbox.Entry? {
      if case .stored(let entry) = storage { entry } else { nil }
    }
    var room: String { PostQueue.room(of: payload) }
  }

  /// Whether posts that cannot go at once are kept on disk (an ``Outbox``).
  let keepsPosts: Bool
  /// Posts not yet acknowledged, in order; the first is on the wire while `sending`.
  private(set) var posts: [Post] = []
  private var nextID: UInt64 = 1
  private var nextWriter: WriterID = 1
  /// Posts of each unanswered writer not yet delivered or stored.
  private var writers: [WriterID: Int] = [:]
  private var sending = false
  private var storing = false
  private var retryScheduled = false

  /// A queue holding the posts an earlier mount left in the outbox, in order.
  init(keepsPosts: Bool, left: [Outbox.Entry] = []) {
    self.keepsPosts = keepsPosts
    for entry in left {
      posts.append(
        Post(
          id: nextID, payload: entry.payload, directory: entry.chatDirectory,
          queued: entry.queued, lastError: "left by an earlier mount", storage: .stored(entry)))
      nextID += 1
    }
  }

  /// The posts on disk, oldest first.
  var queuedPosts: [QueuedPost] {
    posts.filter { $0.entry != nil }.map {
      QueuedPost(room: $0.room, queued: $0.queued, attempts: $0.attempts, lastError: $0.lastError)
    }
  }

  // MARK: Events

  /// A writer's posts (each `room:text`); `linkIsUp` as the pool sees it now. Returns the
  /// writer's id with what follows.
  mutating func write(
    _ payloads: [[UInt8]], directory: [String], at now: Date, linkIsUp: Bool
  ) -> (writer: WriterID, actions: [Action]) {
    let writer = nextWriter
    nextWriter += 1
    guard !payloads.isEmpty else { return (writer, [.answer(writer, failure: nil)]) }
    guard keepsPosts || linkIsUp else {
      // No outbox (`-o outbox=off`): an offline post fails at once.
      return (writer, [.answer(writer, failure: .sessionClosed(reason: "the link is down"))])
    }
    writers[writer] = payloads.count
    for payload in payloads {
      posts.append(Post(id: nextID, payload: payload, directory: directory, queued: now))
      posts[posts.count - 1].writer = writer
      nextID += 1
    }
    let last = nextID - 1
    var actions: [Action] = []
    if keepsPosts {
      let keptAhead = posts.contains { $0.kept }
      if !linkIsUp || keptAhead {
        // Nothing to wait for: the link is down, or stored posts go first.
        actions += keep(through: last, reason: linkIsUp ? "behind queued posts" : "link down")
      }
      actions.append(.armPatience(through: last))
    }
    return (writer, actions + [.pump])
  }

  /// The patience of the posts up to `last` ran out: those not answered yet are stored.
  mutating func patienceRanOut(through last: UInt64, seconds: Int) -> [Action] {
    keep(through: last, reason: "no answer from the server in \(seconds) s")
  }

  /// The sender is free: the first post goes unless one is on the wire or the link is down.
  mutating func nextSend(linkIsUp: Bool) -> [Action] {
    guard !sending, !posts.isEmpty, linkIsUp else { return [] }
    sending = true
    posts[0].attempts += 1
    let post = posts[0]
    let send = Action.send(id: post.id, payload: post.payload, directory: post.directory)
    return post.uncertain
      ? [.announceResend(directory: post.directory, payload: post.payload), send] : [send]
  }

  /// The board answered the post `id` (or the link died under it).
  mutating func finished(_ id: UInt64, _ result: Result<Void, NinePError>) -> [Action] {
    sending = false
    guard let index = posts.firstIndex(where: { $0.id == id }) else { return [.pump] }
    let post = posts[index]
    switch result {
    case .success:
      posts.remove(at: index)
      var actions: [Action] = []
      if let entry = post.entry {
        let left = posts.count(where: { $0.kept })
        actions += [
          .removeFromOutbox(entry),
          .log(.info, "sent a post to \(post.room) from the outbox (\(left) left)"),
          .emit(.sent(room: post.room)),
        ]
      }
      return actions + answer(post.writer, failure: nil) + [.pump]
    case .failure(let error) where error.isLinkFailure:
      return linkLost(at: index, error)
    case .failure(let error):
      posts.remove(at: index)
      var actions: [Action] = []
      if let entry = post.entry {
        actions += [
          .reject(entry),
          .log(
            .error,
            "the server refused a post to \(post.room) from the outbox (\(error)); kept in rejected/"
          ),
          .emit(.failed(room: post.room, reason: error.description)),
        ]
      } else {
        // Refused as it was written: the writer gets the errno, the log and chat/events why.
        let why = PostRefusal.explain(error, payload: post.payload)
        actions += [
          .log(.warning, "the board refused a post to \(post.room): \(why)"),
          .emit(.refused(room: post.room, reason: why)),
        ]
      }
      // A post refused while its store is out leaves the disk when `stored` comes.
      return actions + failWriter(post.writer, error) + [.pump]
    }
  }

  /// The post `id` is on disk as `entry`. Returns the next store, if any.
  mutating func stored(_ id: UInt64, as entry: Outbox.Entry) -> [Action] {
    storing = false
    guard let index = posts.firstIndex(where: { $0.id == id }) else {
      // Delivered (or refused, or its writer failed) while it was being written: not kept.
      return [.removeFromOutbox(entry)] + nextStore()
    }
    let reason = if case .storing(let reason) = posts[index].storage { reason } else { "stored" }
    posts[index].storage = .stored(entry)
    posts[index].lastError = posts[index].lastError ?? reason
    let post = posts[index]
    posts[index].writer = nil
    return [
      .log(.info, "post to \(post.room) queued in the outbox (\(reason))"),
      .emit(.queued(room: post.room, reason: reason)),
    ] + answer(post.writer, failure: nil) + nextStore()
  }

  /// The post `id` could not be written to the outbox: its writer fails.
  mutating func storeFailed(_ id: UInt64, _ error: Outbox.Failure) -> [Action] {
    storing = false
    guard let index = posts.firstIndex(where: { $0.id == id }) else { return nextStore() }
    posts[index].storage = .memory
    let post = posts[index]
    return [.log(.error, "cannot queue a post to \(post.room): \(error)")]
      + failWriter(
        post.writer, .server(ename: "cannot queue the post: \(error)", errno: error.code))
      + nextStore()
  }

  /// The retry timer fired: try sending again.
  mutating func retryDue() -> [Action] {
    retryScheduled = false
    return [.pump]
  }

  // MARK: Rules

  /// The link died under the post at `index` (it may have landed): without an outbox it and
  /// every post behind it fail; with one, all are kept for the link's return.
  private mutating func linkLost(at index: Int, _ error: NinePError) -> [Action] {
    posts[index].lastError = error.description
    posts[index].uncertain = true
    let post = posts[index]
    guard keepsPosts else {
      // Nowhere to keep them: this post and every one waiting behind it fail now.
      let writers = posts.compactMap(\.writer)
      posts.removeAll()
      return writers.flatMap { failWriter($0, error) } + [.pump]
    }
    var actions: [Action] = [
      .log(
        .notice,
        """
        link lost while sending a post to \(post.room) (\(error)); kept in the outbox, sent \
        again when the link is back
        """)
    ]
    // Down: everything waiting is kept, and sent when the link is back.
    actions += keep(through: posts.last?.id ?? post.id, reason: error.description)
    if !retryScheduled {
      // The pool's next "up" drains; this covers a link that never counted as down.
      retryScheduled = true
      actions.append(.scheduleRetry(seconds: min(30, pow(2, Double(min(post.attempts, 5))))))
    }
    return actions
  }

  /// Marks every post up to `last` not kept yet to be stored, and starts the store if none
  /// is out.
  private mutating func keep(through last: UInt64, reason: String) -> [Action] {
    guard keepsPosts else { return [] }
    for index in posts.indices where posts[index].id <= last && !posts[index].kept {
      posts[index].storage = .storing(reason: reason)
    }
    return nextStore()
  }

  /// The first post waiting to be written to disk, unless a write is out.
  private mutating func nextStore() -> [Action] {
    guard !storing, let post = posts.first(where: \.isStoring) else { return [] }
    storing = true
    return [
      .store(id: post.id, payload: post.payload, directory: post.directory, queued: post.queued)
    ]
  }

  /// Counts one post of `writer` as done; answers it when it was the last.
  private mutating func answer(_ writer: WriterID?, failure: NinePError?) -> [Action] {
    guard let writer, let waiting = writers[writer] else { return [] }
    guard waiting <= 1 else {
      writers[writer] = waiting - 1
      return []
    }
    writers[writer] = nil
    return [.answer(writer, failure: failure)]
  }

  /// Answers `writer` with `error` and drops its posts that have neither gone nor reached the
  /// disk (as a failed `write()` of several lines stops at the first that fails); one whose
  /// store is out leaves the disk when `stored` comes.
  private mutating func failWriter(_ writer: WriterID?, _ error: NinePError) -> [Action] {
    guard let writer, writers.removeValue(forKey: writer) != nil else { return [] }
    let onTheWire = sending ? posts.first?.id : nil
    let dropped = posts.filter { $0.writer == writer && $0.entry == nil && $0.id != onTheWire }
    posts.removeAll { post in dropped.contains { $0.id == post.id } }
    for index in posts.indices where posts[index].writer == writer { posts[index].writer = nil }
    return [.answer(writer, failure: error)]
  }

  /// The room of a `room:text` payload.
  static func room(of payload: [UInt8]) -> String {
    let name = payload.firstIndex(of: UInt8(ascii: ":")).map { payload[..<$0] } ?? []
    return String(decoding: name, as: UTF8.self)
  }
}
