import Foundation
import NinePClient
import Synchronization
import XCTest

@testable import BBSMount

/// Write-behind on its own, with a server whose answers the test hands out: what is answered
/// at once, what waits (no room, an overlap), in which order writes go out, and how a failure
/// that comes later is reported.
final class WriteBehindTests: XCTestCase {
  /// Sends recorded, answered when the test says.
  final class FakeServer: Sendable {
    struct Sent {
      var offset: UInt64
      var count: Int
      var done: @Sendable (Result<Int, NinePError>) -> Void
    }
    let sent = Mutex<[Sent]>([])
    let replies = Mutex<[(offset: UInt64, answer: Result<Int, WriteBehind.Errno>)]>([])

    func write(_ behind: WriteBehind, offset: UInt64, count: Int) {
      behind.write(data: [UInt8](repeating: 1, count: count), offset: offset) {
        [self] data, offset, done in
        sent.withLock { $0.append(Sent(offset: offset, count: data.count, done: done)) }
      } reply: { [self] answer in
        replies.withLock { $0.append((offset, answer)) }
      }
    }

    var sentOffsets: [UInt64] { sent.withLock { $0.map(\.offset) } }
    var repliedOffsets: [UInt64] { replies.withLock { $0.map(\.offset) } }

    /// Answers the sent write at `offset` with `result` (its full count by default).
    func land(_ offset: UInt64, _ result: Result<Int, NinePError>? = nil) {
      let found = sent.withLock { list -> Sent? in
        guard let index = list.firstIndex(where: { $0.offset == offset }) else { return nil }
        return list.remove(at: index)
      }
      guard let found else { return XCTFail("no write in flight at \(offset)") }
      found.done(result ?? .success(found.count))
    }
  }

  func testWritesAreAnsweredBeforeTheyLandUpToTheLimit() {
    let behind = WriteBehind(limit: 300)
    let server = FakeServer()
    server.write(behind, offset: 0, count: 100)
    server.write(behind, offset: 100, count: 100)
    server.write(behind, offset: 200, count: 100)
    server.write(behind, offset: 300, count: 100)  // over the limit: waits
    XCTAssertEqual(server.sentOffsets, [0, 100, 200])
    XCTAssertEqual(server.repliedOffsets, [0, 100, 200])
    server.land(100)
    XCTAssertEqual(server.sentOffsets, [0, 200, 300])
    XCTAssertEqual(server.repliedOffsets, [0, 100, 200, 300])
  }

  func testAnOverlappingWriteWaitsForTheOneInFlight() {
    let behind = WriteBehind(limit: 1 << 20)
    let server = FakeServer()
    server.write(behind, offset: 0, count: 100)
    server.write(behind, offset: 50, count: 100)  // overlaps: must not pass the first
    server.write(behind, offset: 1000, count: 10)  // after a waiting write: waits too (order)
    XCTAssertEqual(server.sentOffsets, [0])
    XCTAssertEqual(server.repliedOffsets, [0])
    server.land(0)
    XCTAssertEqual(server.sentOffsets, [50, 1000])
    XCTAssertEqual(server.repliedOffsets, [0, 50, 1000])
  }

  func testAFailureIsReportedByTheNextWriteOrTheDrain() {
    let behind = WriteBehind(limit: 1 << 20)
    let server = FakeServer()
    server.write(behind, offset: 0, count: 100)
    server.land(0, .success(40))  // short: the disk is full
    server.write(behind, offset: 100, count: 100)
    XCTAssertEqual(server.replies.withLock { $0.last?.answer }, .failure(.init(ENOSPC)))
    server.write(behind, offset: 100, count: 100)
    server.land(100, .failure(.server(ename: "i/o error", errno: EIO)))
    let reported = Mutex<[Int32]>([])
    behind.drain(reporting: false) { code in reported.withLock { $0.append(code) } }
    behind.drain { code in reported.withLock { $0.append(code) } }
    behind.drain { code in reported.withLock { $0.append(code) } }
    XCTAssertEqual(reported.withLock { $0 }, [EIO, EIO, 0])
  }

  func testDrainWaitsForEveryWrite() {
    let behind = WriteBehind(limit: 1 << 20)
    let server = FakeServer()
    server.write(behind, offset: 0, count: 100)
    server.write(behind, offset: 100, count: 100)
    let drained = Mutex(false)
    behind.drain { _ in drained.withLock { $0 = true } }
    server.land(0)
    XCTAssertFalse(drained.withLock { $0 })
    server.land(100)
    XCTAssertTrue(drained.withLock { $0 })
  }

  func testWithoutALimitEveryWriteWaitsForTheServer() {
    let behind = WriteBehind(limit: 0)
    let server = FakeServer()
    server.write(behind, offset: 0, count: 100)
    XCTAssertEqual(server.repliedOffsets, [])
    server.land(0, .success(60))
    XCTAssertEqual(server.replies.withLock { $0.first?.answer }, .success(60))
  }
}
