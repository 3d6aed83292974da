import Foundation
import NinePClient
import NinePProtocol
import NinePTransport
import TestSupport
import XCTest

#if canImport(Glibc)
  import Glibc
#endif

// Helpers for running NinePClient against a real `9bbsd` process: which transport and profiles
// to use, bounded waits on callback operations, and the end-of-run health check.

/// One way of reaching `9bbsd`: a transport plus a matching pair of server and client profiles.
struct Target: CustomStringConvertible, Sendable {
  var transport: String
  var device: Bool

  var description: String { "\(transport)/\(device ? "device" : "default")" }
  var serverProfile: String { device ? "device" : "default" }
  var clientProfile: ServerProfile { device ? .device : .multiplex }
  /// On seqpacket the device server holds every request 3 ms, so a client that sends an SDU
  /// before the previous request is answered (or has parked) is caught every time.
  var serverArguments: [String] {
    device && transport == "seqpacket" ? ["--processing-delay", "3"] : []
  }

  /// tcp, unix and seqpacket, each with the default server profile (client: multiplex) and
  /// with `--profile device` (client: device).
  static let all: [Target] = ["tcp", "unix", "seqpacket"].flatMap { transport in
    [false, true].map { Target(transport: transport, device: $0) }
  }
}

/// Collects the results of a callback operation; lets a test wait for them with a bound.
final class Outcomes<T: Sendable>: @unchecked Sendable {
  private let condition = NSCondition()
  private var results: [Result<T, NinePError>] = []

  func add(_ result: Result<T, NinePError>) {
    condition.lock()
    results.append(result)
    condition.broadcast()
    condition.unlock()
  }

  var all: [Result<T, NinePError>] {
    condition.lock()
    defer { condition.unlock() }
    return results
  }

  var count: Int { all.count }

  /// Waits until at least `count` results arrived; false on timeout.
  func wait(count: Int = 1, timeout: TimeInterval) -> Bool {
    let deadline = Date(timeIntervalSinceNow: timeout)
    condition.lock()
    defer { condition.unlock() }
    while results.count < count {
      if !condition.wait(until: deadline) { return results.count >= count }
    }
    return true
  }
}

/// Records the order in which events happen on different threads.
final class EventLog: @unchecked Sendable {
  private let lock = NSLock()
  private var events: [String] = []

  func record(_ event: String) {
    lock.lock()
    events.append(event)
    lock.unlock()
  }

  var entries: [String] {
    lock.lock()
    defer { lock.unlock() }
    return events
  }
}

/// Runs a callback-style operation and waits for its result, at most `timeout` seconds.
func awaitResult<T: Sendable>(
  _ what: String, timeout: TimeInterval = 15,
  _ start: (@escaping @Sendable (Result<T, NinePError>) -> Void) -> Void
) throws -> T {
  let outcomes = Outcomes<T>()
  start { outcomes.add($0) }
  guard outcomes.wait(timeout: timeout), let result = outcomes.all.first else {
    throw HarnessError("\(what): no answer within \(timeout) s")
  }
  return try result.get()
}

/// Runs a callback-style operation expected to fail and returns its error.
func awaitFailure<T: Sendable>(
  _ what: String, timeout: TimeInterval = 15,
  _ start: (@escaping @Sendable (Result<T, NinePError>) -> Void) -> Void
) throws -> NinePError {
  let outcomes = Outcomes<T>()
  start { outcomes.add($0) }
  guard outcomes.wait(timeout: timeout), let result = outcomes.all.first else {
    throw HarnessError("\(what): no answer within \(timeout) s")
  }
  switch result {
  case .success(let value): throw HarnessError("\(what): expected a failure, got \(value)")
  case .failure(let error): return error
  }
}

/// Log lines of `9bbsd` that say a client broke the device's wire rules or was dropped.
func wireRuleViolations(in log: String) -> [String] {
  log.split(separator: "\n").map(String.init).filter { line in
    let lower = line.lowercased()
    return lower.contains("disconnecting") || lower.contains("violation")
      || lower.contains("wire rule") || lower.contains("arrived while busy")
  }
}

/// A `9bbsd` process and the sessions a test opened to it.
final class BoardUnderTest: @unchecked Sendable {
  let target: Target
  let server: ServerProcess
  let motd = "Welcome to the integration board"
  private let lock = NSLock()
  private var sessions: [Session] = []
  private var pools: [Pool] = []

  /// Starts `9bbsd` for `target` (debug logging, so parked reads show in the log).
  init(_ target: Target, rooms: [String] = ["lobby", "tech"], extra: [String] = []) throws {
    self.target = target
    server = try ServerProcess(
      transport: target.transport, profile: target.serverProfile,
      extra: target.serverArguments + [
        "--rooms", rooms.joined(separator: ","), "--motd", motd, "--log-level", "debug",
      ] + extra)
  }

  var address: TransportAddress {
    get throws { try TransportAddress(parsing: server.address) }
  }

  var log: String { server.child.text }

  func configuration(uname: String, msize: UInt32? = nil) -> SessionConfiguration {
    SessionConfiguration(
      profile: target.clientProfile, uname: uname, requestedMsize: msize,
      requestTimeout: .seconds(10))
  }

  /// A session of its own (not pooled).
  func connect(uname: String = "glenda", msize: UInt32? = nil) throws -> Session {
    let transport = try dial(try address)
    let session = try Session.connect(
      transport: transport, configuration: configuration(uname: uname, msize: msize))
    lock.lock()
    sessions.append(session)
    lock.unlock()
    return session
  }

  /// A started pool.
  func pool(uname: String = "glenda", maxSessions: Int) throws -> Pool {
    let pool = Pool(
      address: try address, configuration: configuration(uname: uname), maxSessions: maxSessions)
    lock.lock()
    pools.append(pool)
    lock.unlock()
    try pool.start()
    return pool
  }

  /// Every session opened so far, pooled or not.
  var allSessions: [Session] {
    lock.lock()
    defer { lock.unlock() }
    return sessions + pools.flatMap(\.sessions)
  }

  /// The end-of-run check: every session is still open and answers a Tstat, and the server
  /// logged no wire-rule violation or forced disconnect.
  func assertHealthy(file: StaticString = #filePath, line: UInt = #line) {
    for session in allSessions {
      XCTAssertNil(
        session.closedReason, "\(target): a session was closed: \(session.closedReason ?? "")",
        file: file, line: line)
      do {
        _ = try awaitResult("final Tstat on \(target)") {
          session.stat(session.rootFid, completion: $0)
        }
      } catch {
        XCTFail("\(target): session no longer answers: \(error)", file: file, line: line)
      }
    }
    let violations = wireRuleViolations(in: log)
    XCTAssertEqual(
      violations, [], "\(target): 9bbsd logged violations or disconnects", file: file, line: line)
  }

  /// Closes every session and stops the server. Idempotent.
  func stop() {
    lock.lock()
    let (all, allPools) = (sessions, pools)
    sessions.removeAll()
    pools.removeAll()
    lock.unlock()
    for pool in allPools { pool.close() }
    for session in all { session.close() }
    server.stop()
  }
}

extension Session {
  /// Walks and opens `path`; returns the open fid.
  func openPath(_ path: String, mode: OpenMode = .read) throws -> (fid: Fid, iounit: UInt32) {
    let walked = try awaitResult("walk \(path)") { walk(Session.components(path), completion: $0) }
    do {
      let opened = try awaitResult("open \(path)") { open(walked.fid, mode: mode, completion: $0) }
      return (walked.fid, opened.iounit)
    } catch {
      clunk(walked.fid)
      throw error
    }
  }

  /// Reads a whole (non-stream) file.
  func contents(_ path: String) throws -> String {
    let (fid, iounit) = try openPath(path)
    defer { clunk(fid) }
    let bytes = try awaitResult("read \(path)") { readAll(fid, iounit: iounit, completion: $0) }
    return String(decoding: bytes, as: UTF8.self)
  }

  /// Lists a directory.
  func list(_ path: String) throws -> [Stat] {
    let (fid, _) = try openPath(path)
    defer { clunk(fid) }
    return try awaitResult("list \(path)") { readDirectory(fid, completion: $0) }
  }

  /// Posts one chat line through /chat/post; returns the Rwrite count.
  @discardableResult
  func post(_ text: String) throws -> UInt32 {
    let (fid, _) = try openPath("chat/post", mode: .write)
    defer { clunk(fid) }
    return try awaitResult("post \(text)") {
      write(fid, offset: 0, data: Array(text.utf8), completion: $0)
    }
  }

  /// Sends one raw message and waits for the reply.
  func rpc(_ message: Message) throws -> Message {
    try awaitResult("\(message.type)") { send(message, completion: $0) }
  }

  /// The Pool placement for a request kind, waited for.
  static func placed(_ pool: Pool, _ placement: Placement) throws -> Session {
    try awaitResult("pool placement") { pool.session(for: placement, completion: $0) }
  }
}

extension XCTestCase {
  /// Runs `body` once per target against a fresh `9bbsd`, then checks the board's health.
  /// A failure in one target is reported with the target's name and the others still run.
  func forEachTarget(
    _ targets: [Target] = Target.all, rooms: [String] = ["lobby", "tech"],
    extra: @escaping (Target) throws -> [String] = { _ in [] },
    file: StaticString = #filePath, line: UInt = #line,
    _ body: (BoardUnderTest) throws -> Void
  ) {
    for target in targets {
      let board: BoardUnderTest
      do {
        board = try BoardUnderTest(target, rooms: rooms, extra: try extra(target))
      } catch {
        XCTFail("\(target): cannot start 9bbsd: \(error)", file: file, line: line)
        continue
      }
      addTeardownBlock { board.stop() }
      do {
        try body(board)
        board.assertHealthy(file: file, line: line)
      } catch {
        XCTFail(
          "\(target): \(error)\n--- 9bbsd log (tail) ---\n\(board.log.suffix(4000))", file: file,
          line: line)
      }
      board.stop()
    }
  }
}
