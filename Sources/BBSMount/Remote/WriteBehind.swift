import DequeModule
import Dispatch
import FuseKit
import NinePClient
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// Write-behind for one open server file: a `write(2)` is answered once its bytes are taken
/// here, so `cp` hands over the next megabyte while the link still carries the last one, and
/// a program appending small records is not held to one round trip per record.
///
/// - **Bounded.** At most `limit` bytes are taken and not yet landed, at most `window` sends
///   are on their way and as many wait to be sent; a write that finds no room waits (the writer is slowed, never
///   answered early), and Ctrl-C withdraws it unwritten.
/// - **Coalesced.** A write that continues the last one still waiting to be sent joins it, up
///   to `batch` bytes, so a thousand 4-byte appends made while one Twrite is on the wire go
///   out as one Twrite, not a thousand requests queued behind each other.
/// - **In order.** Taken writes go out in the order they were taken; one overlapping a send
///   still on its way waits for it to land.
/// - **Never silent.** A send that fails (or is short) fails the handle: the writes not yet
///   sent are dropped, writes waiting for room fail, and every later write, `fsync` and `close`
///   of the handle reports the error (as NFS does), so a program never goes on after a hole.
///
/// With `limit` 0 (a device link, an append-only file) every write is answered only once the
/// server has it, with the server's own answer.
final class WriteBehind: Sendable {
  /// An errno as an error, for ``write(data:offset:reply:)``.
  struct Errno: Error, Equatable {
    var errno: Int32
    init(_ errno: Int32) { self.errno = errno }
  }

  /// Sends bytes at an offset; completes with the bytes the server took.
  typealias Send =
    @Sendable ([UInt8], UInt64, @escaping @Sendable (Result<Int, NinePError>) -> Void) -> Void
  typealias Reply = @Sendable (Result<Int, Errno>) -> Void

  /// What the handle hears of the writes it makes, outside every lock: `taken(end)` for each
  /// write taken (before its reply: the file is at least `end` long from now on), and
  /// `settled(n)` when `n` taken writes have landed, failed or been dropped.
  struct Hooks: Sendable {
    var taken: @Sendable (_ end: UInt64) -> Void = { _ in }
    var settled: @Sendable (_ writes: Int) -> Void = { _ in }
  }

  /// A withdrawable place in the queue of writes waiting for room.
  final class Ticket: Sendable {}

  /// A write not yet taken: it waits for room.
  private struct Waiting {
    var ticket: Ticket
    var data: [UInt8]
    var offset: UInt64
    var reply: Reply
  }

  /// Taken writes not yet sent: consecutive ones joined.
  private struct Batch {
    var offset: UInt64
    var data: [UInt8]
    var writes: Int
    var range: Range<UInt64> { offset..<offset + UInt64(data.count) }
  }

  private struct State {
    var waiting: Deque<Waiting> = []
    var queued: Deque<Batch> = []
    var inFlight: [Range<UInt64>] = []
    /// Taken and not yet landed (queued and in flight).
    var bytes = 0
    /// The first failure; once set, every later write and drain reports it.
    var failure: Int32?
    var drained: [@Sendable (Int32) -> Void] = []

    var isIdle: Bool { waiting.isEmpty && queued.isEmpty && inFlight.isEmpty }
  }

  /// What to do after a transition, in order, outside the lock.
  private enum Action {
    case taken(end: UInt64)
    case reply(Reply, Result<Int, Errno>)
    case send(Batch)
    case settled(Int)
    case drained([@Sendable (Int32) -> Void], Int32)
  }

  private let limit: Int
  private let batch: Int
  private let window: Int
  private let sender: Send
  private let hooks: Hooks
  private let state = Mutex(State())

  /// - Parameters:
  ///   - limit: bytes that may be taken and not landed; 0 answers every write only once the
  ///     server has it.
  ///   - batch: the most bytes consecutive writes are joined into.
  ///   - window: sends that may be on their way at once.
  init(
    limit: Int, batch: Int = 64 << 10, window: Int = 64, hooks: Hooks = Hooks(),
    send: @escaping Send
  ) {
    self.limit = limit
    self.batch = max(1, batch)
    self.window = max(1, window)
    self.hooks = hooks
    sender = send
  }

  /// Writes `data` at `offset` and answers `request`: once taken, or with the handle's error.
  /// An interrupt while it waits for room answers `EINTR`, and nothing of it is written.
  func write(_ request: FuseRequest, data: [UInt8], offset: UInt64) {
    let ticket = Ticket()
    request.onInterrupt { [self] interrupted in
      // Without write-behind the write waits for the server, which may never answer; its
      // Twrite may still land.
      if limit == 0 || withdraw(ticket) { interrupted.replyError(EINTR) }
    }
    write(data: data, offset: offset, ticket: ticket) { answer in
      switch answer {
      case .success(let count): request.replyWrite(count)
      case .failure(let error): request.replyError(error.errno)
      }
    }
  }

  /// The same, answering through `reply` (the count, or an errno); `ticket` lets
  /// ``withdraw(_:)`` take it back while it waits for room.
  func write(data: [UInt8], offset: UInt64, ticket: Ticket = Ticket(), reply: @escaping Reply) {
    if limit == 0 { return writeThrough(data: data, offset: offset, reply: reply) }
    let actions = state.withLock { s -> [Action] in
      if let failure = s.failure { return [.reply(reply, .failure(Errno(failure)))] }
      s.waiting.append(Waiting(ticket: ticket, data: data, offset: offset, reply: reply))
      return advance(&s)
    }
    run(actions)
  }

  /// A write answered only by the server (`limit` 0).
  private func writeThrough(data: [UInt8], offset: UInt64, reply: @escaping Reply) {
    hooks.taken(offset + UInt64(data.count))
    sender(data, offset) { [hooks] result in
      hooks.settled(1)
      reply(result.mapError { Errno($0.errno) })
    }
  }

  /// Takes back a write still waiting for room; false when it was taken (or answered) already.
  /// Safe in an interrupt handler: what the withdrawal lets go on (writes behind it that fit
  /// now, drains of a handle now idle) runs on another thread.
  func withdraw(_ ticket: Ticket) -> Bool {
    let found = state.withLock { s -> Bool in
      guard let index = s.waiting.firstIndex(where: { $0.ticket === ticket }) else { return false }
      s.waiting.remove(at: index)
      return true
    }
    if found {
      DispatchQueue.global().async { [self] in
        run(state.withLock { s in advance(&s) + drainedIfIdle(&s) })
      }
    }
    return found
  }

  /// Calls `done` with 0, or the errno of the failure that ended this handle's writes, once
  /// every write so far has landed (or been dropped).
  func drain(_ done: @escaping @Sendable (Int32) -> Void) {
    let now = state.withLock { s -> Int32? in
      if s.isIdle { return s.failure ?? 0 }
      s.drained.append(done)
      return nil
    }
    if let now { done(now) }
  }

  // MARK: - Transitions (under the lock; they return what to do after it)

  /// Sends what may go, takes what fits then, and sends again (a send that left makes room in
  /// the queue for a waiting write, which may go at once).
  private func advance(_ s: inout State) -> [Action] {
    let sent = pump(&s)
    let taken = admit(&s)
    return sent + taken + pump(&s)
  }

  /// Takes waiting writes in order while there is room: each joins the last queued batch when
  /// it continues it, else starts one.
  private func admit(_ s: inout State) -> [Action] {
    var actions: [Action] = []
    while let next = s.waiting.first {
      let joins =
        s.queued.last.map {
          $0.range.upperBound == next.offset && $0.data.count + next.data.count <= batch
        } ?? false
      // Room in bytes, and in sends: writes that cannot join (another writer's appends to a
      // shared file fall between them) must not queue a request each without end.
      let room =
        s.bytes == 0 || (s.bytes + next.data.count <= limit && (joins || s.queued.count < window))
      guard room else { break }
      s.waiting.removeFirst()
      s.bytes += next.data.count
      let end = next.offset + UInt64(next.data.count)
      if joins {
        s.queued[s.queued.count - 1].data += next.data
        s.queued[s.queued.count - 1].writes += 1
      } else {
        s.queued.append(Batch(offset: next.offset, data: next.data, writes: 1))
      }
      actions.append(.taken(end: end))
      actions.append(.reply(next.reply, .success(next.data.count)))
    }
    return actions
  }

  /// Starts queued batches in order while the window has room and the next one overlaps
  /// nothing on its way.
  private func pump(_ s: inout State) -> [Action] {
    var actions: [Action] = []
    while s.inFlight.count < window, let next = s.queued.first,
      !s.inFlight.contains(where: { $0.overlaps(next.range) })
    {
      s.queued.removeFirst()
      s.inFlight.append(next.range)
      actions.append(.send(next))
    }
    return actions
  }

  private func drainedIfIdle(_ s: inout State) -> [Action] {
    guard s.isIdle, !s.drained.isEmpty else { return [] }
    defer { s.drained = [] }
    return [.drained(s.drained, s.failure ?? 0)]
  }

  private func landed(_ sent: Batch, _ result: Result<Int, NinePError>) {
    let actions = state.withLock { s -> [Action] in
      s.bytes -= sent.data.count
      if let index = s.inFlight.firstIndex(of: sent.range) { s.inFlight.remove(at: index) }
      var actions: [Action] = [.settled(sent.writes)]
      let failure: Int32? =
        switch result {
        case .success(let count) where count < sent.data.count: ENOSPC
        case .success: nil
        case .failure(let error): error.errno
        }
      if let failure {
        if s.failure == nil { s.failure = failure }
        // Nothing after a hole is sent; nothing waiting is taken.
        let dropped = s.queued.reduce(0) { $0 + $1.writes }
        s.bytes -= s.queued.reduce(0) { $0 + $1.data.count }
        s.queued.removeAll()
        if dropped > 0 { actions.append(.settled(dropped)) }
        for waiting in s.waiting {
          actions.append(.reply(waiting.reply, .failure(Errno(s.failure ?? failure))))
        }
        s.waiting.removeAll()
      }
      return actions + advance(&s) + drainedIfIdle(&s)
    }
    run(actions)
  }

  private func run(_ actions: [Action]) {
    for action in actions {
      switch action {
      case .taken(let end): hooks.taken(end)
      case .reply(let reply, let result): reply(result)
      case .send(let batch): sender(batch.data, batch.offset) { [self] in landed(batch, $0) }
      case .settled(let writes): hooks.settled(writes)
      case .drained(let callbacks, let code): for done in callbacks { done(code) }
      }
    }
  }
}
