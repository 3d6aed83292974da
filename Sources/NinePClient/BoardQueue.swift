// A board's one worker, as its client sees it (docs/board-facts.md §3.2): the requests of every
// session of a board run one at a time, in the order they arrived, on a single work queue. A
// read that may park on one channel therefore waits behind the requests sent before it on the
// others, and the park grace after it (``WireDiscipline``) may only start once they are done.
// Counted from the read's own send, a slow request elsewhere (a loaded board, a busy radio)
// let the grace run out while the read still waited for the worker; the next SDU on its
// channel then arrived while the channel was busy, and the board dropped the channel.

import DequeModule
import Synchronization

/// The requests the sessions of one board have sent and the board may still be working on, in
/// the order they went out. Shared by the sessions of a device-profile ``Pool``; a leaf lock
/// (it calls nothing while holding it).
public final class BoardQueue: Sendable {
  /// One request's place in the queue.
  public struct Ticket: Hashable, Sendable {
    fileprivate let number: UInt64
  }

  private struct Entry {
    let number: UInt64
    let mayPark: Bool
    let sentAt: ContinuousClock.Instant
    /// Its reply, Rflush or timeout came, or its session closed.
    var finishedAt: ContinuousClock.Instant?
  }

  private struct State {
    var entries: Deque<Entry> = []
    var next: UInt64 = 0
    /// The worker was through with every request before the first entry by then (nil: no
    /// request has gone yet, or the first ones are still tracked).
    var clearSince: ContinuousClock.Instant?
    /// Reads that may park, folded away while still unanswered (they parked): when the worker
    /// was through with everything before each, for their own sessions' graces.
    var parkedClear: [UInt64: ContinuousClock.Instant?] = [:]
  }

  private let state = Mutex(State())

  public init() {}

  /// A request went out on one of the board's sessions at `now`.
  func arrived(mayPark: Bool, at now: ContinuousClock.Instant) -> Ticket {
    state.withLock { state in
      let ticket = Ticket(number: state.next)
      state.next += 1
      state.entries.append(Entry(number: ticket.number, mayPark: mayPark, sentAt: now))
      return ticket
    }
  }

  /// The board is done with the request (its reply or the Rflush of its flush came, it timed
  /// out, or its session closed). Idempotent.
  func finished(_ ticket: Ticket, at now: ContinuousClock.Instant) {
    state.withLock { state in
      if let index = state.entries.firstIndex(where: { $0.number == ticket.number }),
        state.entries[index].finishedAt == nil
      {
        state.entries[index].finishedAt = now
      }
      state.parkedClear[ticket.number] = nil
      Self.forgetSettled(&state, now: now)
    }
  }

  /// When the worker could take up the request `ticket`, sent at `sentAt`: once every
  /// request that went out before it on any session was done. Nil while one of them is
  /// still waiting for its reply.
  func workerFree(
    before ticket: Ticket, sentAt: ContinuousClock.Instant, now: ContinuousClock.Instant
  )
    -> ContinuousClock.Instant?
  {
    state.withLock { state in
      Self.forgetSettled(&state, now: now)
      if let folded = state.parkedClear[ticket.number] { return max(folded ?? sentAt, sentAt) }
      var clear = state.clearSince
      for entry in state.entries {
        guard entry.number < ticket.number else { break }
        guard let done = Self.release(of: entry, after: clear) else {
          return nil
        }
        clear = max(clear ?? done, done)
      }
      return max(clear ?? sentAt, sentAt)
    }
  }

  /// Requests still tracked (for tests).
  var trackedCount: Int { state.withLock { $0.entries.count + $0.parkedClear.count } }

  /// When the worker let `entry` go, given that it was through with everything before it at
  /// `clear`: at its reply; a read that may park, as soon as the worker took it up. Parking
  /// takes the worker a moment, which the park grace after the last read covers; charging each
  /// read a whole grace made reads queue behind each other (with 20 rooms followed on a device,
  /// `ls -l` of 1,000 files took 2.85 s instead of 1.55 s). Nil for a request still unanswered.
  private static func release(of entry: Entry, after clear: ContinuousClock.Instant?)
    -> ContinuousClock.Instant?
  {
    guard entry.mayPark else { return entry.finishedAt }
    return max(clear ?? entry.sentAt, entry.sentAt)
  }

  /// Folds the requests at the front that the worker is certainly through with by `now` into
  /// ``State/clearSince``, so the queue holds only what may still matter.
  private static func forgetSettled(_ state: inout State, now: ContinuousClock.Instant) {
    while let first = state.entries.first,
      let done = release(of: first, after: state.clearSince), done <= now
    {
      if first.mayPark && first.finishedAt == nil {
        state.parkedClear[first.number] = state.clearSince
      }
      state.clearSince = max(state.clearSince ?? done, done)
      state.entries.removeFirst()
    }
  }
}
