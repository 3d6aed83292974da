import Foundation
import NinePClient
import NinePProtocol
import TestSupport
import XCTest

/// A 9P tree on a ``ScriptedServer``: walks to the paths it has, refuses the opens, creates
/// and walks it is told to, and remembers every fid's path, every write and every clunk.
final class ScriptedTree: @unchecked Sendable {
  /// Paths that exist (directories and files alike), as "a/b/c".
  var paths: Set<String>
  /// Opens (by path) answered with this Rerror text.
  var refusedOpens: [String: String] = [:]
  /// Creates in these directories answered with this Rerror text.
  var refusedCreates: [String: String] = [:]
  /// Walks through this name answered with this Rerror text.
  var refusedWalks: [String: String] = [:]
  /// Reads answered with these bytes, by path.
  var contents: [String: [UInt8]] = [:]

  private let lock = NSLock()
  private var fids: [Fid: String] = [:]
  private(set) var writes: [(path: String, data: [UInt8])] = []
  private(set) var clunks: [(fid: Fid, path: String)] = []
  private(set) var creates: [(directory: String, name: String)] = []
  private(set) var opens: [String] = []
  private(set) var walkedFids: [Fid] = []
  /// Every Tread's path and offset, in arrival order.
  private(set) var reads: [(path: String, offset: UInt64)] = []
  /// Tflushes received.
  private(set) var flushes = 0

  init(paths: Set<String>) { self.paths = paths }

  private func path(_ fid: Fid) -> String { fids[fid] ?? "" }

  private static func join(_ base: String, _ names: [String]) -> String {
    (base.isEmpty ? names : [base] + names).joined(separator: "/")
  }

  func handle(_ server: ScriptedServer, _ tag: Tag, _ message: Message) {
    lock.lock()
    defer { lock.unlock() }
    switch message {
    case .twalk(let fid, let newfid, let names):
      if let refused = names.compactMap({ refusedWalks[$0] }).first {
        return server.reply(tag, .rerror(ename: refused))
      }
      var qids: [Qid] = []
      for index in names.indices {
        let prefix = Self.join(path(fid), Array(names[...index]))
        guard paths.contains(prefix) else { break }
        qids.append(Qid(path: UInt64(qids.count + 2)))
      }
      guard !qids.isEmpty || names.isEmpty else {
        return server.reply(tag, .rerror(ename: "file not found"))
      }
      if qids.count == names.count {
        fids[newfid] = Self.join(path(fid), names)
        walkedFids.append(newfid)
      }
      server.reply(tag, .rwalk(qids: qids))
    case .topen(let fid, _):
      opens.append(path(fid))
      if let refused = refusedOpens[path(fid)] { return server.reply(tag, .rerror(ename: refused)) }
      server.reply(tag, .ropen(qid: Qid(path: 9), iounit: 0))
    case .tcreate(let fid, let name, _, _):
      creates.append((path(fid), name))
      if let refused = refusedCreates[path(fid)] {
        return server.reply(tag, .rerror(ename: refused))
      }
      fids[fid] = Self.join(path(fid), [name])
      server.reply(tag, .rcreate(qid: Qid(path: 10), iounit: 0))
    case .tread(let fid, let offset, let count):
      reads.append((path(fid), offset))
      let data = contents[path(fid)] ?? []
      let start = Int(min(offset, UInt64(data.count)))
      server.reply(tag, .rread(data: ArraySlice(data[start..<min(data.count, start + Int(count))])))
    case .twrite(let fid, _, let data):
      writes.append((path(fid), Array(data)))
      server.reply(tag, .rwrite(count: UInt32(data.count)))
    case .tflush:
      flushes += 1
      server.reply(tag, .rflush)
    case .tclunk(let fid):
      clunks.append((fid, path(fid)))
      fids[fid] = nil
      server.reply(tag, .rclunk)
    default:
      server.reply(tag, .rerror(ename: "operation not supported"))
    }
  }

  /// What the tree recorded, read under its lock.
  func recorded<T>(_ body: (ScriptedTree) -> T) -> T {
    lock.lock()
    defer { lock.unlock() }
    return body(self)
  }

  /// Waits (bounded) until `condition` holds of what the tree recorded.
  func waitUntil(
    timeout: TimeInterval = 5, _ condition: (ScriptedTree) -> Bool
  ) -> Bool {
    TestSupport.waitUntil(timeout: timeout, interval: 0.002) { recorded(condition) }
  }
}

extension XCTestCase {
  /// A session on a scripted server serving `tree`.
  func connect(to tree: ScriptedTree, msize: UInt32 = 8192) throws -> Session {
    try connectScripted(msize: msize) { tree.handle($0, $1, $2) }.session
  }

  /// A session on a scripted server answering with `handle`, and the server's end of the link
  /// (closed to kill it); both go at teardown.
  func connectScripted(
    msize: UInt32 = 8192,
    _ handle: @escaping @Sendable (ScriptedServer, Tag, Message) -> Void
  ) throws -> (session: Session, server: MemoryTransport) {
    let (client, server) = MemoryTransport.pair()
    let peer = ScriptedServer(transport: server, msize: msize, handler: handle)
    let session = try Session.connect(
      transport: client,
      configuration: SessionConfiguration(
        profile: .multiplex, uname: "glenda", requestTimeout: .seconds(5)))
    addTeardownBlock {
      session.close()
      _ = peer
    }
    return (session, server)
  }

  /// Waits for a callback operation's result.
  func result<T: Sendable>(
    _ start: (@escaping @Sendable (T) -> Void) -> Void, timeout: TimeInterval = 5,
    file: StaticString = #filePath, line: UInt = #line
  ) -> T? {
    let box = DeliveredValue<T>()
    start { box.set($0) }
    return box.wait(timeout: timeout)
  }
}

/// One value delivered from a callback, waited for with a bound.
final class DeliveredValue<T: Sendable>: @unchecked Sendable {
  private let condition = NSCondition()
  private var value: T?

  func set(_ new: T) {
    condition.lock()
    value = new
    condition.broadcast()
    condition.unlock()
  }

  func wait(timeout: TimeInterval) -> T? {
    let deadline = Date(timeIntervalSinceNow: timeout)
    condition.lock()
    defer { condition.unlock() }
    while value == nil && condition.wait(until: deadline) {}
    return value
  }
}
