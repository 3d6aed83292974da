import Foundation
import NinePClient
import Synchronization
import XCTest

@testable import BBSMount

/// Write-behind on its own, with a server whose answers the test hands out: what is answered
/// at once, what waits (no room, an overlap), how consecutive writes join, in which order
/// writes go out, and how a failure that comes later ends the handle's writes.
final class WriteBehindTests: XCTestCase {
  /// Sends recorded, answered when the test says.
  final class FakeServer: Sendable {
    struct Sent {
      var offset: UInt64
      var data: [UInt8]
      var done: @Sendable (Result<Int, NinePError>) -> Void
    }
    let sent = Mutex<[Sent]>([])
    let replies = Mutex<[(offset: UInt64, answer: Result<Int, WriteBehind.Errno>)]>([])
    /// Writes taken and settled, as the hooks told them.
    let taken = Mutex<[UInt64]>([])
    let settled = Mutex(0)

    func behind(limit: Int, batch: Int = 64 << 10, window: Int = 64) -> WriteBehind {
      WriteBehind(
        limit: limit, batch: batch, window: window,
        hooks: .init(
          taken: { [self] end in taken.withLock { $0.append(end) } },
          settled: { [self] writes in settled.withLock { $0 += writes } })
      ) { [self] data, offset, done in
        sent.withLock { $0.append(Sent(offset: offset, data: data, done: done)) }
      }
    }

    @discardableResult
    func write(
      _ behind: WriteBehind, offset: UInt64, count: Int, byte: UInt8 = 1
    ) -> WriteBehind.Ticket {
      let ticket = WriteBehind.Ticket()
      behind.write(
        data: [UInt8](repeating: byte, count: count), offset: offset, ticket: ticket
      ) { [self] answer in
        replies.withLock { $0.append((offset, answer)) }
      }
      return ticket
    }

    var sentOffsets: [UInt64] { sent.withLock { $0.map(\.offset) } }
    var sentCounts: [Int] { sent.withLock { $0.map(\.data.count) } }
    var repliedOffsets: [UInt64] { replies.withLock { $0.map(\.offset) } }
    var answers: [Result<Int, WriteBehind.Errno>] { replies.withLock { $0.map(\.answer) } }

    /// Answers the sent write at `offset` with `result` (its full count by default).
    func land(_ offset: UInt64, _ result: Result<Int, NinePError>? = nil) {
      let found = sent.withLock { list -> Sent? in
        guard let index = list.firstIndex(where: { $0.offset == offset }) else { return nil }
        return list.remove(at: index)
      }
      guard let found else { return XCTFail("no write in flight at \(offset)") }
      found.done(result ?? .success(found.data.count))
    }
  }

  func testWritesAreAnsweredBeforeTheyLandUpToTheLimit() {
    let server = FakeServer()
    let behind = server.behind(limit: 300)
    server.write(behind, offset: 0, count: 100)
    server.write(behind, offset: 100, count: 100)
    server.write(behind, offset: 200, count: 100)
    server.write(behind, offset: 300, count: 100)  // over the limit: waits, unanswered
    XCTAssertEqual(server.sentOffsets, [0, 100, 200])
    XCTAssertEqual(server.repliedOffsets, [0, 100, 200])
    server.land(100)
    XCTAssertEqual(server.sentOffsets, [0, 200, 300])
    XCTAssertEqual(server.repliedOffsets, [0, 100, 200, 300])
  }

  func testAnOverlappingWriteGoesOutOnlyAfterTheOneInFlight() {
    let server = FakeServer()
    let behind = server.behind(limit: 1 << 20)
    server.write(behind, offset: 0, count: 100)
    server.write(behind, offset: 50, count: 100)  // overlaps: must not pass the first
    server.write(behind, offset: 1000, count: 10)  // after a waiting write: waits too (order)
    XCTAssertEqual(server.sentOffsets, [0])
    XCTAssertEqual(server.repliedOffsets, [0, 50, 1000])
    server.land(0)
    XCTAssertEqual(server.sentOffsets, [50, 1000])
  }

  /// Small appends made while the window is full go out as few sends, in order; a write that
  /// cannot join waits once as many sends wait as the window holds; the hooks count every
  /// write taken and settled.
  func testConsecutiveWritesWaitingToBeSentJoinUpToTheBatch() {
    let server = FakeServer()
    let behind = server.behind(limit: 1 << 20, batch: 12, window: 2)
    for index in 0..<9 {
      server.write(behind, offset: UInt64(index * 4), count: 4, byte: UInt8(index))
    }
    // 0 and 4 on their way; 8-20 joined, 20-32 joined (both full); 32 would be a third send
    // waiting: it waits for room.
    XCTAssertEqual(server.sentOffsets, [0, 4])
    XCTAssertEqual(server.taken.withLock { $0 }, (1...8).map { UInt64($0 * 4) })
    XCTAssertEqual(server.repliedOffsets.count, 8)
    server.land(0)
    XCTAssertEqual(server.sentOffsets, [4, 8])
    XCTAssertEqual(server.sentCounts, [4, 12])
    XCTAssertEqual(
      server.sent.withLock { $0[1].data }, (2...4).flatMap { [UInt8](repeating: $0, count: 4) })
    XCTAssertEqual(server.repliedOffsets.count, 9)  // room for the last write now
    server.land(4)
    XCTAssertEqual(server.sentOffsets, [8, 20])
    XCTAssertEqual(server.sentCounts, [12, 12])
    server.land(8)
    XCTAssertEqual(server.sentOffsets, [20, 32])
    server.land(20)
    server.land(32)
    XCTAssertEqual(server.sentOffsets, [])
    XCTAssertEqual(server.settled.withLock { $0 }, 9)
  }

  /// A failure ends the handle's writes: what was not sent is dropped, what waits for room
  /// fails, and every later write and drain reports it, so nothing lands after a hole.
  func testAFailureEndsEveryLaterWriteAndIsReportedEveryTime() {
    let server = FakeServer()
    let behind = server.behind(limit: 8, window: 1)
    server.write(behind, offset: 0, count: 4)  // sent
    server.write(behind, offset: 4, count: 4)  // taken, queued
    server.write(behind, offset: 8, count: 4)  // no room: waits
    XCTAssertEqual(server.repliedOffsets, [0, 4])
    server.land(0, .failure(.server(ename: "i/o error", errno: EIO)))
    XCTAssertEqual(server.sentOffsets, [])  // the queued write is not sent after the hole
    XCTAssertEqual(server.answers.last, .failure(.init(EIO)))
    server.write(behind, offset: 12, count: 4)
    XCTAssertEqual(server.answers.last, .failure(.init(EIO)))
    let reported = Mutex<[Int32]>([])
    behind.drain { code in reported.withLock { $0.append(code) } }
    behind.drain { code in reported.withLock { $0.append(code) } }
    XCTAssertEqual(reported.withLock { $0 }, [EIO, EIO])
    XCTAssertEqual(server.settled.withLock { $0 }, 2)
    XCTAssertEqual(server.taken.withLock { $0.count }, 2)
  }

  func testAShortWriteIsAFullDisk() {
    let server = FakeServer()
    let behind = server.behind(limit: 1 << 20)
    server.write(behind, offset: 0, count: 100)
    server.land(0, .success(40))
    server.write(behind, offset: 100, count: 100)
    XCTAssertEqual(server.answers.last, .failure(.init(ENOSPC)))
  }

  func testDrainWaitsForEveryWrite() {
    let server = FakeServer()
    let behind = server.behind(limit: 1 << 20)
    server.write(behind, offset: 0, count: 100)
    server.write(behind, offset: 100, count: 100)
    let drained = Mutex<Int32?>(nil)
    behind.drain { code in drained.withLock { $0 = code } }
    server.land(0)
    XCTAssertNil(drained.withLock { $0 })
    server.land(100)
    XCTAssertEqual(drained.withLock { $0 }, 0)
  }

  /// Ctrl-C on a write waiting for room takes it back unwritten; one already taken stays.
  func testAWithdrawnWriteIsNeverSentNorAnswered() {
    let server = FakeServer()
    let behind = server.behind(limit: 100)
    let first = server.write(behind, offset: 0, count: 100)
    let second = server.write(behind, offset: 100, count: 100)
    XCTAssertFalse(behind.withdraw(first))
    XCTAssertTrue(behind.withdraw(second))
    XCTAssertFalse(behind.withdraw(second))
    let drained = expectation(description: "drained")
    behind.drain { code in
      XCTAssertEqual(code, 0)
      drained.fulfill()
    }
    server.land(0)
    wait(for: [drained], timeout: 5)
    XCTAssertEqual(server.sentOffsets, [])
    XCTAssertEqual(server.repliedOffsets, [0])
    XCTAssertEqual(server.taken.withLock { $0 }, [100])
  }

  func testWithoutALimitEveryWriteWaitsForTheServer() {
    let server = FakeServer()
    let behind = server.behind(limit: 0)
    server.write(behind, offset: 0, count: 100)
    XCTAssertEqual(server.repliedOffsets, [])
    server.land(0, .success(60))
    XCTAssertEqual(server.answers.first, .success(60))
    XCTAssertEqual(server.settled.withLock { $0 }, 1)
  }
}
