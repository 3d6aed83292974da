import Foundation
import Synchronization
import XCTest

@testable import NinePTransport

#if canImport(Glibc)
  import Glibc
#endif

/// `sendWithoutWaiting` and `flushPending`: a client's reader thread may send, so a send must
/// never wait for the peer, and what it leaves must go out later whole and in order.
final class NonWaitingSendTests: XCTestCase {
  private var directory = ""

  override func setUpWithError() throws {
    directory = try makeSocketDirectory()
  }

  override func tearDown() {
    try? FileManager.default.removeItem(atPath: directory)
  }

  /// With nobody reading the peer, sends far beyond the socket buffers all return; the rest
  /// waits in the backlog until a flush, and arrives whole and in order.
  func testSendsNeverWaitAndAFlushDeliversTheRestInOrder() throws {
    for (address, size, count) in [
      (TransportAddress.unix(path: directory + "/u"), 60_000, 64),
      (.seqpacket(path: directory + "/s", sduLimit: 245), 3_000, 400),
    ] {
      let (listener, client, server) = try connectedPair(address)
      defer {
        client.close()
        server.close()
        listener.close()
      }
      let messages = (0..<count).map {
        patternMessage(tag: UInt16($0), length: size + $0 % 7)
      }
      // Each message goes as header and payload, as the client sends a Twrite.
      let sending = Background { () -> Int in
        var owed = 0
        for message in messages
        where try client.sendWithoutWaiting(header: Array(message[..<7]), payload: message[7...]) {
          owed += 1
        }
        return owed
      }
      let owed = try sending.value(within: 10)
      XCTAssertGreaterThan(owed, 0, "\(address): the peer took everything; the test proves nothing")
      XCTAssertGreaterThan(client.pendingByteCount, 0, "\(address)")

      let receiving = Background { () -> [[UInt8]] in
        try (0..<count).map { _ in try server.receive(limit: 1 << 20) ?? [] }
      }
      let flushing = Background { try client.flushPending() }
      try flushing.value(within: 20)
      let received = try receiving.value(within: 20)
      XCTAssertEqual(client.pendingByteCount, 0, "\(address)")
      XCTAssertEqual(received.count, messages.count, "\(address)")
      for (index, message) in received.enumerated() where message != messages[index] {
        return XCTFail("\(address): message \(index) arrived damaged or out of order")
      }
    }
  }

  /// Threads sending at once, each flushing when told it owes one, while the peer reads
  /// slowly: every message arrives whole, and each thread's messages in the order it sent
  /// them (SDUs of two messages never mix on seqpacket either).
  func testConcurrentSendersNeverInterleave() throws {
    for address in [
      TransportAddress.unix(path: directory + "/u"),
      .seqpacket(path: directory + "/s", sduLimit: 245),
    ] {
      let (listener, client, server) = try connectedPair(address)
      defer {
        client.close()
        server.close()
        listener.close()
      }
      let senders = 4
      let perSender = 150
      let sending = (0..<senders).map { sender in
        Background { () -> Void in
          for sequence in 0..<perSender {
            // Tag: the sender in the top bits, its sequence number below.
            let tag = UInt16(sender << 12 | sequence)
            let length = (sequence * 7919 + sender * 104_729) % 20_000
            let message = patternMessage(tag: tag, length: length)
            if try client.sendWithoutWaiting(
              header: Array(message[..<7]), payload: message[7...])
            {
              try client.flushPending()
            }
          }
        }
      }
      var next = [Int](repeating: 0, count: senders)
      for _ in 0..<(senders * perSender) {
        guard let message = try server.receive(limit: 1 << 20) else {
          return XCTFail("\(address): the connection ended early")
        }
        let tag = Int(message[5]) | Int(message[6]) << 8
        let (sender, sequence) = (tag >> 12, tag & 0xfff)
        XCTAssertEqual(sequence, next[sender], "\(address): sender \(sender) out of order")
        next[sender] = sequence + 1
        let length = (sequence * 7919 + sender * 104_729) % 20_000
        XCTAssertEqual(
          message, patternMessage(tag: UInt16(tag), length: length),
          "\(address): message \(tag) damaged")
        if message.count > 8_000 { usleep(200) }  // a slow reader, so the sockets fill
      }
      for background in sending { try background.value(within: 20) }
      XCTAssertEqual(client.pendingByteCount, 0)
    }
  }

  /// A send that fails ends sending: it and every later send throw, and nothing waits.
  func testAFailedSendFailsEveryLaterOne() throws {
    var fds: [Int32] = [-1, -1]
    XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds), 0)
    let client = try SocketTransport.connect(to: .fd(read: fds[0], write: fds[0]))
    defer { client.close() }
    Glibc.close(fds[1])
    let message = patternMessage(tag: 1, length: 100)
    for _ in 0..<2 {
      XCTAssertThrowsError(
        try client.sendWithoutWaiting(header: Array(message[..<7]), payload: message[7...])
      ) { error in
        XCTAssertEqual(error as? TransportError, .io(operation: "send", errno: EPIPE))
      }
    }
    XCTAssertThrowsError(try client.flushPending())
  }

  /// Closing the transport wakes a flush waiting for room.
  func testCloseWakesAWaitingFlush() throws {
    var fds: [Int32] = [-1, -1]
    XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds), 0)
    let client = try SocketTransport.connect(to: .fd(read: fds[0], write: fds[0]))
    defer { Glibc.close(fds[1]) }
    let huge = patternMessage(tag: 1, length: 16 << 20)
    XCTAssertTrue(try client.sendWithoutWaiting(header: Array(huge[..<7]), payload: huge[7...]))
    let flushing = Background { try client.flushPending() }
    XCTAssertTrue(flushing.isStillRunning(after: 0.05), "the flush did not wait for room")
    client.close()
    XCTAssertThrowsError(try flushing.value(within: 2)) { error in
      XCTAssertEqual(error as? TransportError, .closed)
    }
  }

  // MARK: The backlog value

  func testBacklogConsumesAcrossHeaderAndPayload() {
    var backlog = SendBacklog()
    backlog.append(SendBacklog.Entry(header: [1, 2, 3][...], payload: [4, 5, 6, 7][...]))
    backlog.append(SendBacklog.Entry(header: [8][...], payload: [][...]))
    XCTAssertEqual(backlog.byteCount, 8)
    backlog.consumeFirst(2)
    XCTAssertEqual(backlog.first.map { Array($0.pieces.joined()) }, [3, 4, 5, 6, 7])
    backlog.consumeFirst(3)
    XCTAssertEqual(backlog.first.map { Array($0.pieces.joined()) }, [6, 7])
    backlog.consumeFirst(2)
    XCTAssertEqual(backlog.first.map { Array($0.pieces.joined()) }, [8])
    backlog.putBackFirst(SendBacklog.Entry(header: [9][...], payload: [][...]))
    XCTAssertEqual(backlog.first.map { Array($0.pieces.joined()) }, [9])
    backlog.consumeFirst(1)
    backlog.consumeFirst(1)
    XCTAssertTrue(backlog.isEmpty)
  }

  func testBacklogSendsPacketsWhole() {
    var backlog = SendBacklog()
    backlog.append(SendBacklog.Entry(packets: [[1, 2][...], [3][...]]))
    backlog.consumeFirst(2)
    XCTAssertEqual(backlog.first.map { Array($0.pieces.joined()) }, [3])
    backlog.consumeFirst(1)
    XCTAssertTrue(backlog.isEmpty)
  }
}
