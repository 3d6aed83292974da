import Foundation
import NinePClient
import Synchronization

/// `user-arrived` and `user-left` events, from `chat/users` read every ``interval`` — only
/// while someone reads `chat/events` (each read is a walk, open, read and clunk: about 0.4
/// requests a second that nobody would see otherwise), and never on a device board, whose
/// one-request-at-a-time sessions a listing every few seconds would hold up.
final class UserPresence: Sendable {
  private struct State {
    /// The names the last list had; nil before the first read since someone read events.
    var known: Set<String>?
    var stopped = false
  }

  private let read: @Sendable (@escaping @Sendable (Result<[UInt8], NinePError>) -> Void) -> Void
  private let events: EventLog
  private let interval: Duration
  private let state = Mutex(State())
  /// Names kept at most (a hostile server's endless list).
  static let maximumUsers = 4096

  /// - Parameter read: reads the board's `chat/users` once.
  init(
    events: EventLog, interval: Duration,
    read: @escaping @Sendable (@escaping @Sendable (Result<[UInt8], NinePError>) -> Void) -> Void
  ) {
    self.events = events
    self.interval = interval
    self.read = read
  }

  /// How often, without readers, it looks whether someone opened `chat/events` (no request):
  /// the first reader's list of users to compare with is read within this.
  static let readerCheck: Duration = .seconds(1)

  func start() { schedule(after: Self.readerCheck) }

  func stop() { state.withLock { $0.stopped = true } }

  private func schedule(after delay: Duration? = nil) {
    let delay = delay ?? interval
    DispatchQueue.global().asyncAfter(deadline: .now() + delay.timeInterval) { [weak self] in
      self?.poll()
    }
  }

  private func poll() {
    guard !state.withLock({ $0.stopped }) else { return }
    guard events.streams.hasReaders else {
      // Nobody to tell: start afresh when someone reads events again.
      state.withLock { $0.known = nil }
      return schedule(after: Self.readerCheck)
    }
    read { [self] result in
      if case .success(let bytes) = result { update(Self.names(bytes)) }
      schedule()
    }
  }

  /// The names of a users list: `NAME (idle: Ns)` per line.
  static func names(_ bytes: [UInt8]) -> Set<String> {
    var names = Set<String>()
    for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n") {
      guard names.count < maximumUsers else { break }
      let name = line.range(of: " (idle: ").map { line[..<$0.lowerBound] } ?? line
      if !name.isEmpty { names.insert(String(name)) }
    }
    return names
  }

  private func update(_ now: Set<String>) {
    let before: Set<String>? = state.withLock { state in
      defer { state.known = now }
      return state.known
    }
    guard let before else { return }
    for name in now.subtracting(before).sorted() { events.record(.userArrived(name)) }
    for name in before.subtracting(now).sorted() { events.record(.userLeft(name)) }
  }
}
