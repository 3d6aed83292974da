import FuseKit
import NinePClient
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// Write-behind for one open server file: a `write(2)` is answered as soon as its Twrites are
/// on their way, so `cp` hands over the next megabyte while the link still carries the last
/// one, up to `limit` bytes in flight. As on NFS, a write that fails later is reported by the
/// next write, `fsync` or `close` of the file (``drain(_:)``).
///
/// Order is kept where it matters: a write overlapping one in flight waits for it, and writes
/// that wait go in arrival order. With `limit` 0 (a device link, an append-only file) every
/// write is answered only once the server has it, as before.
final class WriteBehind: Sendable {
  /// An errno as an error, for ``write(data:offset:send:reply:)``.
  struct Errno: Error, Equatable {
    var errno: Int32
    init(_ errno: Int32) { self.errno = errno }
  }

  /// A write waiting for room or for an overlapping write to land.
  private struct Waiting {
    var range: Range<UInt64>
    var start: @Sendable () -> Void
  }

  private struct State {
    var bytesInFlight = 0
    var inFlight: [Range<UInt64>] = []
    var waiting: [Waiting] = []
    /// The first failure since the last report (errno).
    var failure: Int32?
    var drained: [@Sendable () -> Void] = []
  }

  private let limit: Int
  private let state = Mutex(State())

  init(limit: Int) {
    self.limit = limit
  }

  /// Writes `data` at `offset` with `send`, which completes with the bytes the server took,
  /// and answers `request`: at once when there is room, else once there is.
  func write(
    _ request: FuseRequest, data: [UInt8], offset: UInt64,
    send:
      @escaping @Sendable ([UInt8], UInt64, @escaping @Sendable (Result<Int, NinePError>) -> Void)
      -> Void
  ) {
    write(data: data, offset: offset, send: send) { answer in
      switch answer {
      case .success(let count): request.replyWrite(count)
      case .failure(let error): request.replyError(error.errno)
      }
    }
  }

  /// The same, answering through `reply` (the count, or an errno).
  func write(
    data: [UInt8], offset: UInt64,
    send:
      @escaping @Sendable ([UInt8], UInt64, @escaping @Sendable (Result<Int, NinePError>) -> Void)
      -> Void,
    reply: @escaping @Sendable (Result<Int, Errno>) -> Void
  ) {
    if limit == 0 {
      return send(data, offset) { result in reply(result.mapError { Errno($0.errno) }) }
    }
    let range = offset..<offset + UInt64(data.count)
    let start: @Sendable () -> Void = { [self] in
      send(data, offset) { [self] result in landed(range, result) }
      reply(.success(data.count))
    }
    enum Decision { case start, wait, fail(Int32) }
    let decision = state.withLock { s -> Decision in
      if let failure = s.failure {
        s.failure = nil
        return .fail(failure)
      }
      let overlaps = s.inFlight.contains { $0.overlaps(range) }
      let room = s.bytesInFlight == 0 || s.bytesInFlight + data.count <= limit
      if !s.waiting.isEmpty || overlaps || !room {
        s.waiting.append(Waiting(range: range, start: start))
        return .wait
      }
      s.bytesInFlight += data.count
      s.inFlight.append(range)
      return .start
    }
    switch decision {
    case .start: start()
    case .wait: break
    case .fail(let failure): reply(.failure(Errno(failure)))
    }
  }

  private func landed(_ range: Range<UInt64>, _ result: Result<Int, NinePError>) {
    let (ready, drained) = state.withLock { s -> ([@Sendable () -> Void], [@Sendable () -> Void]) in
      s.bytesInFlight -= range.count
      if let index = s.inFlight.firstIndex(of: range) { s.inFlight.remove(at: index) }
      switch result {
      case .success(let count) where count < range.count:
        if s.failure == nil { s.failure = ENOSPC }
      case .failure(let error):
        if s.failure == nil { s.failure = error.errno }
      case .success:
        break
      }
      var ready: [@Sendable () -> Void] = []
      while let next = s.waiting.first {
        let overlaps = s.inFlight.contains { $0.overlaps(next.range) }
        let room = s.bytesInFlight == 0 || s.bytesInFlight + next.range.count <= limit
        guard !overlaps, room else { break }
        s.waiting.removeFirst()
        s.bytesInFlight += next.range.count
        s.inFlight.append(next.range)
        ready.append(next.start)
      }
      guard s.inFlight.isEmpty, s.waiting.isEmpty else { return (ready, []) }
      defer { s.drained = [] }
      return (ready, s.drained)
    }
    for start in ready { start() }
    for done in drained { done() }
  }

  /// Calls `done` with 0, or the errno of a write that failed since the last report, once
  /// every write so far has landed. `reporting` false leaves the failure for a later report
  /// (a read waits, but tells nothing).
  func drain(reporting: Bool = true, _ done: @escaping @Sendable (Int32) -> Void) {
    let report: @Sendable () -> Void = { [self] in
      let failure = state.withLock { s -> Int32 in
        defer { if reporting { s.failure = nil } }
        return s.failure ?? 0
      }
      done(failure)
    }
    let now = state.withLock { s -> Bool in
      if s.inFlight.isEmpty && s.waiting.isEmpty { return true }
      s.drained.append(report)
      return false
    }
    if now { report() }
  }
}
