import Dispatch
import Foundation
import Glibc
import NinePClient
import NinePProtocol
import NinePTransport
import Synchronization

enum Stats {
  static func median(_ values: [Double]) -> Double? {
    guard !values.isEmpty else { return nil }
    let sorted = values.sorted()
    let middle = sorted.count / 2
    return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
  }

  /// Nearest-rank percentile.
  static func percentile(_ values: [Double], _ p: Double) -> Double? {
    guard !values.isEmpty else { return nil }
    let sorted = values.sorted()
    let rank = Int((p / 100 * Double(sorted.count)).rounded(.up))
    return sorted[min(max(rank, 1), sorted.count) - 1]
  }

  static func ratio(_ a: Double?, _ b: Double?) -> Double? {
    guard let a, let b, b != 0 else { return nil }
    return a / b
  }
}

/// Waits for a callback-style 9P operation.
func blocking<T: Sendable>(
  _ body: (@escaping @Sendable (Result<T, NinePError>) -> Void) -> Void
) throws -> T {
  let box = Box<Result<T, NinePError>>()
  body { box.set($0) }
  guard let result = box.wait(seconds: 60) else { throw BenchError("9P request timed out") }
  return try result.get()
}

/// A one-shot value handed between threads.
///
/// `@unchecked Sendable`: `value` is read and written only under `condition`, which a waiter
/// needs (Mutex cannot wait).
final class Box<T: Sendable>: @unchecked Sendable {
  private let condition = NSCondition()
  private var value: T?

  func set(_ value: T) {
    condition.lock()
    self.value = value
    condition.broadcast()
    condition.unlock()
  }

  func wait(seconds: Double) -> T? {
    condition.lock()
    defer { condition.unlock() }
    let deadline = Date(timeIntervalSinceNow: seconds)
    while value == nil { if !condition.wait(until: deadline) { break } }
    return value
  }
}

/// A 9P client session straight to the server (no FUSE).
struct DirectClient {
  let session: Session

  init(address: TransportAddress, profile: ServerProfile, uname: String) throws {
    let transport = try dial(address)
    session = try Session.connect(
      transport: transport,
      configuration: SessionConfiguration(profile: profile, uname: uname))
  }

  func openFile(_ path: String, mode: OpenMode) throws -> Fid {
    let walked: WalkResult = try blocking { session.walk(Session.components(path), completion: $0) }
    _ = try blocking { session.open(walked.fid, mode: mode, completion: $0) }
    return walked.fid
  }

  /// Posts `payload` on an open /chat/post fid.
  func post(_ fid: Fid, _ text: String) throws {
    _ = try blocking { session.write(fid, offset: 0, data: Array(text.utf8), completion: $0) }
  }

  /// Reads `size` bytes from offset 0 with `depth` Treads in flight; returns bytes read.
  func read(_ fid: Fid, size: Int, depth: Int) throws -> Int {
    let count = session.maxReadCount
    let state = PipelineState()
    let done = Box<Result<Int, NinePError>>()
    let session = self.session
    @Sendable func issue(_ offset: Int) {
      session.read(fid, offset: UInt64(offset), count: count) { result in
        let next = state.complete(result, size: size, chunk: Int(count))
        switch next {
        case .issue(let offset): issue(offset)
        case .finished(let result): done.set(result)
        case .wait: break
        }
      }
    }
    for offset in state.start(size: size, chunk: Int(count), depth: depth) { issue(offset) }
    guard let result = done.wait(seconds: 300) else { throw BenchError("read timed out") }
    return try result.get()
  }

  func close() { session.close() }
}

/// Bookkeeping of a pipelined read.
final class PipelineState: Sendable {
  enum Next {
    case issue(Int)
    case wait
    case finished(Result<Int, NinePError>)
  }

  private struct Bookkeeping {
    var nextOffset = 0
    var inFlight = 0
    var total = 0
    var failure: NinePError?
  }

  private let bookkeeping = Mutex(Bookkeeping())

  func start(size: Int, chunk: Int, depth: Int) -> [Int] {
    bookkeeping.withLock { state in
      var offsets: [Int] = []
      while offsets.count < depth && state.nextOffset < size {
        offsets.append(state.nextOffset)
        state.nextOffset += chunk
      }
      state.inFlight = offsets.count
      return offsets
    }
  }

  func complete(_ result: Result<ArraySlice<UInt8>, NinePError>, size: Int, chunk: Int) -> Next {
    bookkeeping.withLock { state in
      state.inFlight -= 1
      switch result {
      case .success(let data): state.total += data.count
      case .failure(let error): state.failure = error
      }
      if state.failure == nil && state.nextOffset < size {
        let offset = state.nextOffset
        state.nextOffset += chunk
        state.inFlight += 1
        return .issue(offset)
      }
      if state.inFlight == 0 {
        if let failure = state.failure { return .finished(.failure(failure)) }
        return .finished(.success(state.total))
      }
      return .wait
    }
  }
}

extension DescriptorFollower {
  /// A reader blocked in read() at the end of a room file of a mount: opened on its own
  /// thread (opening a room can wait for the server), read with pread() from the size fstat
  /// gave; it ends after the line with `#bEND#`. ``arrival(of:seconds:)`` tells when the line
  /// with a `#b<seq>#` token arrived.
  static func roomReader(_ path: String) -> DescriptorFollower {
    DescriptorFollower(.file(path, fromItsEnd: true), endsAfter: { $0.contains("#bEND#") })
  }

  /// When the line with `#b<seq>#` arrived, waiting up to `seconds`.
  func arrival(of seq: Int, seconds: Double) -> Int64? {
    line(where: { $0.contains("#b\(seq)#") }, until: Clock.now + Int64(seconds * 1e9))
  }
}

/// Loopback TCP bulk transfer rate, MB/s.
func loopbackTCPRate(bytes: Int) -> Double? {
  let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
  defer { Glibc.close(listener) }
  var address = sockaddr_in()
  address.sin_family = sa_family_t(AF_INET)
  address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
  var length = socklen_t(MemoryLayout<sockaddr_in>.size)
  let ok = withUnsafeMutablePointer(to: &address) {
    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
      bind(listener, $0, length) == 0 && listen(listener, 1) == 0
        && getsockname(listener, $0, &length) == 0
    }
  }
  guard ok else { return nil }
  let target = address
  let start = Clock.now
  Thread.detachNewThread {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { Glibc.close(fd) }
    var peer = target
    let connected = withUnsafePointer(to: &peer) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
      }
    }
    guard connected else { return }
    let chunk = [UInt8](repeating: 0x5A, count: 256 * 1024)
    var sent = 0
    while sent < bytes {
      let count = chunk.withUnsafeBytes { send(fd, $0.baseAddress, min($0.count, bytes - sent), 0) }
      if count <= 0 { return }
      sent += count
    }
  }
  let fd = accept(listener, nil, nil)
  guard fd >= 0 else { return nil }
  defer { Glibc.close(fd) }
  var buffer = [UInt8](repeating: 0, count: 256 * 1024)
  var received = 0
  while received < bytes {
    let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
    if count <= 0 { break }
    received += count
  }
  return Double(received) / Clock.seconds(since: start) / 1e6
}

/// stat() latencies in ms over `paths`, cycling.
func statLatencies(_ paths: [String], samples: Int) -> [Double] {
  var result: [Double] = []
  result.reserveCapacity(samples)
  var info = stat()
  for index in 0..<samples {
    let start = Clock.now
    _ = stat(paths[index % paths.count], &info)
    result.append(Double(Clock.now - start) / 1e6)
  }
  return result
}
