import NinePClient
import NinePProtocol
import Synchronization

/// Reads ahead of a sequential reader of one open file, so the server is never idle while the
/// kernel takes what it asked for.
///
/// The kernel's FUSE readahead sends one request at a time here: it asks for the next
/// megabyte only once the last one is answered, and a direct-I/O reader waits for each read
/// anyway. Each request then costs a whole round trip to the server (and the server's disk),
/// and the link idles in between. Once two reads come in order, this keeps the next few
/// requests of the same size on the wire before they are asked for; a request that matches the
/// first of them takes its reply, or waits for it. A read elsewhere drops what was read ahead.
///
/// What was read ahead is used only while the mount has not written the file (``generation``
/// changes on every write) and only if it came back whole: a short reply is read again when
/// asked for, so a file that grows is never cut at an old end.
final class ReadAhead: Sendable {
  typealias Result = Swift.Result<[ReadData], NinePError>
  typealias Completion = @Sendable (Result) -> Void

  /// One request read ahead.
  private struct Chunk {
    let offset: UInt64
    let length: Int
    let generation: UInt64
    let group: RequestGroup
    var result: Result?
  }

  private struct State {
    /// Where the next read in order starts.
    var expected: UInt64?
    /// Requests read ahead and not yet asked for, in order.
    var chunks: [Chunk] = []
    /// Requests read ahead that a read now waits for, by their group.
    var claimed: [ObjectIdentifier: Completion] = [:]
    var closed = false
  }

  private enum Plan {
    case ready(Result)
    case wait
    case fetch
  }

  /// What a sequential reader has on the wire ahead of it: four megabyte-sized requests.
  static let defaultDepth = 4 << 20

  private let file: RemoteFile
  private let depth: Int
  private let size: UInt64?
  private let generation: @Sendable () -> UInt64
  private let state = Mutex(State())

  /// - Parameters:
  ///   - depth: how many bytes to keep read ahead (at least two requests, at most eight).
  ///   - size: the file's size when opened: nothing is read ahead past it (nor at all when
  ///     unknown).
  ///   - generation: a number that changes whenever the mount writes the file.
  init(
    file: RemoteFile, depth: Int, size: UInt64?, generation: @escaping @Sendable () -> UInt64
  ) {
    self.file = file
    self.depth = depth
    self.size = size
    self.generation = generation
  }

  /// Reads `length` bytes at `offset`: from a request read ahead when one matches, else from
  /// the server (with `group` holding its Treads, for an interrupt).
  func read(
    size length: Int, offset: UInt64, group: RequestGroup, _ completion: @escaping Completion
  ) {
    let now = generation()
    var dropped: [RequestGroup] = []
    var started: [Chunk] = []
    let plan = state.withLock { s -> Plan in
      if s.closed || length <= 0 { return .fetch }
      // Two reads in order before reading ahead: `head` or `file` on a big file reads its
      // first request only, and on a slow link what was read ahead for nothing holds it up.
      let inOrder = s.expected == offset
      s.expected = offset + UInt64(length)
      var plan = Plan.fetch
      if let first = s.chunks.first, first.offset == offset, first.length == length,
        first.generation == now
      {
        let chunk = s.chunks.removeFirst()
        if let result = chunk.result {
          // Only a whole reply stands for the server now; a short one is asked again.
          if case .success(let pieces) = result, pieces.reduce(0, { $0 + $1.count }) == length {
            plan = .ready(result)
          }
        } else {
          s.claimed[ObjectIdentifier(chunk.group)] = completion
          plan = .wait
        }
      } else {
        dropped = s.chunks.map(\.group)
        s.chunks.removeAll()
      }
      guard inOrder else { return plan }
      // Keep the requests after this one on the wire, up to the depth.
      var next = s.chunks.last.map { $0.offset + UInt64($0.length) } ?? offset + UInt64(length)
      while s.chunks.count < max(2, min(8, depth / length)) {
        guard let size, next < size else { break }
        let chunk = Chunk(offset: next, length: length, generation: now, group: RequestGroup())
        s.chunks.append(chunk)
        started.append(chunk)
        next += UInt64(length)
      }
      return plan
    }
    for group in dropped { file.cancel(group) }
    for chunk in started { fetch(chunk) }
    switch plan {
    case .ready(let result): completion(result)
    case .wait: break
    case .fetch: file.read(size: length, offset: offset, group: group, completion)
    }
  }

  /// Drops everything read ahead (the file is closed).
  func close() {
    let groups = state.withLock { s -> [RequestGroup] in
      s.closed = true
      defer { s.chunks.removeAll() }
      return s.chunks.map(\.group)
    }
    for group in groups { file.cancel(group) }
  }

  private func fetch(_ chunk: Chunk) {
    let group = chunk.group
    file.read(size: chunk.length, offset: chunk.offset, group: group) { [self] result in
      let waiter = state.withLock { s -> Completion? in
        if let waiter = s.claimed.removeValue(forKey: ObjectIdentifier(group)) { return waiter }
        if let index = s.chunks.firstIndex(where: { $0.group === group }) {
          s.chunks[index].result = result
        }
        return nil
      }
      waiter?(result)
    }
  }
}
