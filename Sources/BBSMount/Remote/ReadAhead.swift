import NinePClient
import NinePProtocol
import Synchronization

/// Reads ahead of a sequential reader of one open file, so the server is never idle while the
/// kernel takes what it asked for.
///
/// The kernel's FUSE readahead asks for the next window only once the last one is answered,
/// and a direct-I/O reader waits for each read anyway. Each window then costs a whole round
/// trip to the server (and the server's disk), and the link idles in between. Once two reads
/// come in order, this keeps the next few requests of the same size on the wire before they
/// are asked for; a request that matches one of them takes its reply, or waits for it. The
/// requests of one window may arrive in any order (the kernel sends them together and
/// libfuse's threads race), so a read just behind the furthest one still counts as in order.
/// A read elsewhere (a seek) drops what was read ahead.
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

    var end: UInt64 { offset + UInt64(length) }
  }

  private struct State {
    /// Where the latest reads ended: a read starting at one of them continues a sequential
    /// reader.
    var recentEnds: [UInt64] = []
    /// The end of the furthest read so far.
    var furthest: UInt64 = 0
    /// Requests read ahead and not yet asked for, by offset.
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

  /// What a sequential reader has on the wire ahead of it: four megabytes of requests.
  static let defaultDepth = 4 << 20
  /// How many read ends count as recent (a window's requests, reordered).
  private static let recentLimit = 8

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
      let end = offset + UInt64(length)
      let match = s.chunks.firstIndex {
        $0.offset == offset && $0.length == length && $0.generation == now
      }
      // Two reads in order before reading ahead: `head` or `file` on a big file reads its
      // first request only, and on a slow link what was read ahead for nothing holds it up.
      let inOrder = match != nil || s.recentEnds.contains(offset)
      // A read that jumps ahead, or far back (reading the file again), starts afresh. One
      // a little behind fills in a request the kernel sent late (it may skip one while
      // congested and ask for it when the reader reaches it): what is ahead stays.
      let moved =
        match == nil && !inOrder
        && (offset >= s.furthest || s.furthest - offset > 4 * UInt64(depth))
      s.recentEnds.append(end)
      if s.recentEnds.count > Self.recentLimit { s.recentEnds.removeFirst() }
      s.furthest = moved ? end : max(s.furthest, end)
      let plan = match.map { Self.take(at: $0, from: &s, length: length, completion) } ?? .fetch
      // Nothing is worth keeping after a move; otherwise what a written file or another
      // request size made useless goes, and what the reader left far behind.
      let furthest = s.furthest
      let keep: (Chunk) -> Bool = { [depth] in
        !moved && $0.length == length && $0.generation == now
          && $0.end + 4 * UInt64(depth) > furthest
      }
      dropped = s.chunks.filter { !keep($0) }.map(\.group)
      s.chunks.removeAll { !keep($0) }
      guard inOrder, let size else { return plan }
      started = keepAhead(in: &s, length: length, generation: now, size: size)
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

  /// Takes the chunk read ahead at `index` for a read of `length`: its reply if whole (a
  /// short one is asked again), else the read waits for it.
  private static func take(
    at index: Int, from s: inout State, length: Int, _ completion: @escaping Completion
  ) -> Plan {
    let chunk = s.chunks.remove(at: index)
    guard let result = chunk.result else {
      s.claimed[ObjectIdentifier(chunk.group)] = completion
      return .wait
    }
    // Only a whole reply stands for the server now; a short one is asked again.
    if case .success(let pieces) = result, pieces.reduce(0, { $0 + $1.count }) == length {
      return .ready(result)
    }
    return .fetch
  }

  /// Keeps the requests after the furthest read on the wire, up to the depth; returns the
  /// chunks to fetch now.
  private func keepAhead(
    in s: inout State, length: Int, generation: UInt64, size: UInt64
  ) -> [Chunk] {
    var started: [Chunk] = []
    var ahead = s.chunks.count { $0.offset >= s.furthest }
    var next = max(s.furthest, s.chunks.last?.end ?? 0)
    while ahead < max(2, min(8, depth / length)), next < size {
      let chunk = Chunk(
        offset: next, length: length, generation: generation, group: RequestGroup())
      s.chunks.append(chunk)
      started.append(chunk)
      next += UInt64(length)
      ahead += 1
    }
    return started
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
