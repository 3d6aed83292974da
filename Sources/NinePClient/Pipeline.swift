// Large reads and writes as several Treads or Twrites on the wire at once.
//
// One FUSE request may ask for a megabyte while one 9P message carries at most msize. Sent one
// after the other, the chunks leave the link idle for a round trip each; sent together, they
// keep it full. How many go at once is the session's ``Session/pipelineWindow``: 1 on a device
// (one request at a time per channel, so nothing queues ahead of an `ls`), several on a server
// that multiplexes. The wire discipline still has the last word on every message.
//
// A ``ChunkPipeline`` keeps the window full, stops sending at the first short reply or error
// (end of file, a full disk) and completes once every chunk on the wire has answered. Results
// count only the chunks before the first short or failed one, so a caller never sees a hole.

import NinePProtocol
import Synchronization

/// Handles of the requests a pipelined read or write has on the wire, so an interrupt can
/// withdraw all of them (``cancelAll(on:)``); a request sent after the cancel is withdrawn at
/// once.
public final class RequestGroup: Sendable {
  private struct State {
    var handles: Set<RequestHandle> = []
    var cancelled: Session?
  }
  private let state = Mutex(State())

  public init() {}

  /// Whether ``cancelAll(on:)`` ran.
  public var isCancelled: Bool { state.withLock { $0.cancelled != nil } }

  func track(_ handle: RequestHandle, on session: Session) {
    let cancelled = state.withLock { s -> Bool in
      if s.cancelled != nil { return true }
      s.handles.insert(handle)
      return false
    }
    if cancelled { session.cancel(handle) }
  }

  /// Withdraws every request of the group on `session` (Tflush for those on the wire).
  public func cancelAll(on session: Session) {
    let handles = state.withLock { s -> Set<RequestHandle> in
      s.cancelled = session
      defer { s.handles = [] }
      return s.handles
    }
    for handle in handles { session.cancel(handle) }
  }
}

extension Session {
  /// How many Treads or Twrites of one large read or write may be on the wire at once: 1 on a
  /// device (its channel serves one request at a time), 8 on a multiplexing server (enough
  /// to keep a loopback link busy; more only adds memory).
  public var pipelineWindow: Int {
    switch configuration.profile {
    case .device: 1
    case .multiplex: max(1, min(8, configuration.maxTags / 4))
    }
  }

  /// Reads up to `count` bytes from `offset` in Treads of at most `chunk` bytes (and msize),
  /// ``pipelineWindow`` of them at once. Completes with the replies' data in order (no empty
  /// piece; joined, they are the bytes up to the first short read), or the first chunk's
  /// error when no byte came. The pieces stay apart, each a view into its reply (or, when
  /// `splicing`, maybe the pipe it was spliced into), so a caller can hand them on uncopied.
  public func readPipelined(
    _ fid: Fid, offset: UInt64, count: Int, chunk: UInt32, splicing: Bool = false,
    group: RequestGroup = RequestGroup(),
    completion: @escaping @Sendable (Result<[ReadData], NinePError>) -> Void
  ) {
    let chunk = Int(max(1, min(chunk, maxReadCount)))
    let pipeline = ChunkPipeline<ReadData>(
      total: count, chunk: chunk, window: pipelineWindow
    ) {
      pieces in
      if case .failure(let error) = pieces.first?.result { return completion(.failure(error)) }
      var data: [ReadData] = []
      for piece in pieces {
        guard case .success(let bytes) = piece.result else { break }
        if bytes.count > 0 { data.append(bytes) }
        if bytes.count < piece.length { break }
      }
      completion(.success(data))
    }
    pipeline.run(
      isShort: { result, length in (try? result.get())?.count ?? 0 < length }
    ) { [self] start, length, done in
      let handle = readData(
        fid, offset: offset + UInt64(start), count: UInt32(length), splicing: splicing,
        completion: done)
      group.track(handle, on: self)
    }
  }

  /// Writes `data` from `offset` in Twrites of at most `chunk` bytes (and msize),
  /// ``pipelineWindow`` of them at once. Completes with the bytes written up to the first
  /// short write, or the first chunk's error when none was written.
  public func writePipelined(
    _ fid: Fid, offset: UInt64, data: ArraySlice<UInt8>, chunk: Int,
    completion: @escaping @Sendable (Result<Int, NinePError>) -> Void
  ) {
    let chunk = max(1, min(chunk, maxWriteCount))
    let pipeline = ChunkPipeline<UInt32>(total: data.count, chunk: chunk, window: pipelineWindow) {
      pieces in
      if case .failure(let error) = pieces.first?.result { return completion(.failure(error)) }
      var written = 0
      for piece in pieces {
        guard case .success(let count) = piece.result else { break }
        written += Int(count)
        if Int(count) < piece.length { break }
      }
      completion(.success(written))
    }
    pipeline.run(
      isShort: { result, length in Int((try? result.get()) ?? 0) < length }
    ) { [self] start, length, done in
      // A slice, not a copy: the transport sends it from `data` itself.
      let piece = data[(data.startIndex + start)..<(data.startIndex + start + length)]
      _ = send(.twrite(fid: fid, offset: offset + UInt64(start), data: piece)) { result in
        done(
          result.flatMap {
            guard case .rwrite(let count) = $0 else {
              return .failure(.protocolViolation("Twrite answered with \($0.type)"))
            }
            return .success(count)
          })
      }
    }
  }
}

/// Sends the chunks of `total` bytes, `window` at a time, and collects their results in order.
final class ChunkPipeline<Value: Sendable>: Sendable {
  /// One chunk's place and outcome.
  struct Piece: Sendable {
    var length: Int
    var result: Result<Value, NinePError>
  }

  private struct State {
    var next = 0
    var inFlight = 0
    var stopped = false
    var finished = false
    var pieces: [Int: Piece] = [:]
  }

  private let total: Int
  private let chunk: Int
  private let window: Int
  private let state = Mutex(State())
  private let completion: @Sendable ([Piece]) -> Void

  init(
    total: Int, chunk: Int, window: Int, completion: @escaping @Sendable ([Piece]) -> Void
  ) {
    self.total = max(0, total)
    self.chunk = chunk
    self.window = max(1, window)
    self.completion = completion
  }

  typealias Done = @Sendable (Result<Value, NinePError>) -> Void

  /// Starts sending. `send(start, length, done)` puts one chunk on the wire; `done` may run
  /// before `send` returns. `isShort(result, length)` says whether a chunk ends the transfer.
  func run(
    isShort: @escaping @Sendable (Result<Value, NinePError>, Int) -> Bool,
    send: @escaping @Sendable (Int, Int, @escaping Done) -> Void
  ) {
    if total == 0 { return completion([]) }
    pump(isShort: isShort, send: send)
  }

  private func pump(
    isShort: @escaping @Sendable (Result<Value, NinePError>, Int) -> Bool,
    send: @escaping @Sendable (Int, Int, @escaping Done) -> Void
  ) {
    // Claim chunks under the lock, send them outside it: a completion may run inline.
    let claimed = state.withLock { s -> [(index: Int, start: Int, length: Int)] in
      var out: [(Int, Int, Int)] = []
      while !s.stopped, s.inFlight < window, s.next * chunk < total {
        let start = s.next * chunk
        out.append((s.next, start, min(chunk, total - start)))
        s.next += 1
        s.inFlight += 1
      }
      return out
    }
    for (index, start, length) in claimed {
      send(start, length) { [self] result in
        let short = isShort(result, length)
        let done = state.withLock { s -> [Piece]? in
          s.pieces[index] = Piece(length: length, result: result)
          s.inFlight -= 1
          if short { s.stopped = true }
          let allSent = s.stopped || s.next * chunk >= total
          guard allSent, s.inFlight == 0, !s.finished else { return nil }
          s.finished = true
          return (0..<s.next).compactMap { s.pieces[$0] }
        }
        if let done { return completion(done) }
        pump(isShort: isShort, send: send)
      }
    }
  }
}
