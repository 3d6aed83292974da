import Foundation
import NinePClient
import NinePProtocol
import TestSupport
import XCTest

@testable import BBSMount

/// A 9BBS chat room on a ``ScriptedServer``: every walk and open succeeds, a read takes the
/// lines waiting for the user (whole lines that fit its count), and with none waiting is
/// parked until a line is said, or answered empty at once (`parks` false, a Gen-1 board).
/// A read can be made to fail. Remembers reads, flushes and clunks.
final class ScriptedRoom: @unchecked Sendable {
  // @unchecked: every var is read and written under `lock` (the server's thread and the
  // test's).
  private let lock = NSLock()
  private var waiting: [UInt8] = []
  private var parked: [(server: ScriptedServer, tag: Tag, count: Int)] = []
  private var parks: Bool
  private var failNextRead: String?
  private var readCounts: [Int] = []
  private var flushCount = 0
  private var clunkCount = 0

  init(waiting lines: [String] = [], parks: Bool = true) {
    waiting = Array(lines.joined().utf8)
    self.parks = parks
  }

  /// Reads received.
  var reads: Int { lock.withLock { readCounts.count } }
  /// Tflushes received.
  var flushes: Int { lock.withLock { flushCount } }
  /// Tclunks received.
  var clunks: Int { lock.withLock { clunkCount } }
  /// Reads parked now.
  var parkedReads: Int { lock.withLock { parked.count } }

  /// The next read is answered with this error.
  func failNextRead(with ename: String) { lock.withLock { failNextRead = ename } }

  /// A line said in the room: answers a parked read, or waits for the next.
  func say(_ line: String) {
    let answer = lock.withLock { () -> (ScriptedServer, Tag, [UInt8])? in
      waiting += Array(line.utf8)
      guard !parked.isEmpty else { return nil }
      let read = parked.removeFirst()
      return (read.server, read.tag, takeLocked(read.count))
    }
    if let (server, tag, data) = answer { server.reply(tag, .rread(data: data[...])) }
  }

  /// Whole lines of what waits, at most `count` bytes. Lock held.
  private func takeLocked(_ count: Int) -> [UInt8] {
    var end = 0
    var index = 0
    while index < waiting.count && index < count {
      if waiting[index] == UInt8(ascii: "\n") { end = index + 1 }
      index += 1
    }
    defer { waiting.removeFirst(end) }
    return Array(waiting[..<end])
  }

  func handle(_ server: ScriptedServer, _ tag: Tag, _ message: Message) {
    lock.lock()
    switch message {
    case .twalk(_, _, let names):
      lock.unlock()
      server.reply(tag, .rwalk(qids: names.indices.map { Qid(path: UInt64($0 + 2)) }))
    case .topen:
      lock.unlock()
      server.reply(tag, .ropen(qid: Qid(path: 9), iounit: 0))
    case .tread(_, _, let count):
      readCounts.append(Int(count))
      if let ename = failNextRead {
        failNextRead = nil
        lock.unlock()
        return server.reply(tag, .rerror(ename: ename))
      }
      let data = takeLocked(Int(count))
      if data.isEmpty && parks {
        parked.append((server, tag, Int(count)))
        return lock.unlock()
      }
      lock.unlock()
      server.reply(tag, .rread(data: data[...]))
    case .tflush(let oldtag):
      flushCount += 1
      // A flushed read is never answered (9P): only the Rflush comes.
      parked.removeAll { $0.server === server && $0.tag == oldtag }
      lock.unlock()
      server.reply(tag, .rflush)
    case .tclunk:
      clunkCount += 1
      lock.unlock()
      server.reply(tag, .rclunk)
    default:
      lock.unlock()
      server.reply(tag, .rerror(ename: "operation not supported"))
    }
  }
}

/// Stream sessions for a feed under test: each placement takes the next session the test
/// gave; placements and releases are counted.
final class ScriptedStreams: StreamSessions, @unchecked Sendable {
  // @unchecked: every var is read and written under `lock`.
  private let lock = NSLock()
  private var sessions: [Session] = []
  private var placed: [Session] = []
  private var released: [Session] = []
  private var waiting: [@Sendable (Result<Session, NinePError>) -> Void] = []

  /// Placements from now on go to `session` (until another is given).
  func offer(_ session: Session) {
    let waiters = lock.withLock {
      sessions.append(session)
      placed += waiting.map { _ in session }
      defer { waiting.removeAll() }
      return waiting
    }
    for waiter in waiters { waiter(.success(session)) }
  }

  /// Sessions handed out so far, in order.
  var placements: [Session] { lock.withLock { placed } }
  /// Sessions whose slot came back, in order.
  var releases: [Session] { lock.withLock { released } }

  func placeStream(
    quiet: Bool, _ completion: @escaping @Sendable (Result<Session, NinePError>) -> Void
  ) {
    let session = lock.withLock { () -> Session? in
      // A session the scripted server closed is no place for a stream.
      sessions.removeAll { $0.closedReason != nil }
      guard let session = sessions.last else {
        waiting.append(completion)
        return nil
      }
      placed.append(session)
      return session
    }
    if let session { completion(.success(session)) }
  }

  func releaseStream(on session: Session, quiet: Bool) {
    lock.withLock { released.append(session) }
  }
}

extension XCTestCase {
  /// A session on a scripted server playing `room`.
  func connect(to room: ScriptedRoom) throws -> Session {
    try connectScripted { room.handle($0, $1, $2) }.session
  }
}
