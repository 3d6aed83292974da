import Foundation
import Glibc
import XCTest

@testable import NinePTransport

/// Large Rreads whose data the receiver takes in a pipe (Splice.swift): which messages go to a
/// pipe, that their bytes and the messages after them are intact, and the ways it falls back
/// to memory (a pipe too small, a link that cannot splice) or fails (end of stream, close).
final class SpliceTests: XCTestCase {
  private var directory = ""

  override func setUpWithError() throws {
    directory = try makeSocketDirectory()
  }

  override func tearDownWithError() throws {
    try? FileManager.default.removeItem(atPath: directory)
  }

  /// A connected pair, closed (with its listener) when the test ends.
  private func connectedPair(_ address: TransportAddress) throws -> (
    client: SocketTransport, server: SocketTransport
  ) {
    let (listener, client, server) = try NinePTransportTests.connectedPair(address)
    listener.close()
    addTeardownBlock {
      client.close()
      server.close()
    }
    return (client, server)
  }

  /// An Rread with `tag` carrying `data`.
  private func rread(tag: UInt16, _ data: [UInt8]) -> [UInt8] {
    let count = UInt32(data.count)
    return makeMessage(
      type: 117, tag: tag,
      payload: [
        UInt8(truncatingIfNeeded: count), UInt8(truncatingIfNeeded: count >> 8),
        UInt8(truncatingIfNeeded: count >> 16), UInt8(truncatingIfNeeded: count >> 24),
      ] + data)
  }

  private func bytes(_ count: Int, seed: Int) -> [UInt8] {
    (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 9 &+ seed) }
  }

  /// Accepts tag 1 only.
  private func rule(expecting: Bool) -> SpliceRule {
    SpliceRule(isExpecting: { expecting }, accepts: { $0 == 1 })
  }

  /// The message as one array, whichever way it came; and whether it came in a pipe.
  private func flatten(_ received: ReceivedMessage?) throws -> (bytes: [UInt8], spliced: Bool) {
    switch try XCTUnwrap(received) {
    case .frame(let frame): return (frame, false)
    case .splicedRead(let header, let data):
      XCTAssertEqual(header.count, 11)
      let contents = data.contents()
      XCTAssertEqual(contents.count, data.count)
      return (header + contents, true)
    }
  }

  /// Only a large Rread with an accepted tag comes in a pipe; everything arrives intact and in
  /// order, whether headers are read alone (a splice expected) or in the same read as data.
  func testOnlyLargeAcceptedRreadsComeInPipes() throws {
    let largest = max(SplicedBytes.largestSpliced, 512 << 10)
    let messages: [(message: [UInt8], spliced: Bool)] = [
      (rread(tag: 1, bytes(300_000, seed: 1)), true),
      (rread(tag: 1, bytes(4_000, seed: 2)), false),  // small: copied
      (rread(tag: 2, bytes(200_000, seed: 3)), false),  // not accepted
      (makeMessage(type: 119, tag: 1, payload: bytes(150_000, seed: 4)), false),  // not Rread
      (rread(tag: 1, bytes(largest, seed: 5)), true),
      (rread(tag: 1, bytes(largest + 1, seed: 6)), false),  // larger than a pipe takes
      (rread(tag: 1, bytes(65_536, seed: 7)), true),
      (patternMessage(tag: 3, length: 10), false),
    ]
    for expecting in [true, false] {
      let (client, server) = try connectedPair(.tcp(host: "127.0.0.1", port: 0))
      let sender = Background {
        for (message, _) in messages { try server.send(message) }
      }
      for (index, (message, spliced)) in messages.enumerated() {
        let got = try flatten(
          try client.receive(limit: 4 << 20, splicing: rule(expecting: expecting)))
        XCTAssertEqual(got.bytes, message, "message \(index), expecting \(expecting)")
        XCTAssertEqual(
          got.spliced, spliced && SplicedBytes.isAvailable,
          "message \(index), expecting \(expecting)")
      }
      try sender.value()
    }
  }

  /// Data that `sendfile(2)` sends (9bbsd's file replies) splices like any other.
  func testFileRegionRepliesSplice() throws {
    let path = directory + "/file"
    let content = bytes(400_000, seed: 9)
    try Data(content).write(to: URL(fileURLWithPath: path))
    let fd = open(path, O_RDONLY)
    XCTAssertGreaterThanOrEqual(fd, 0)
    defer { close(fd) }
    let (client, server) = try connectedPair(.tcp(host: "127.0.0.1", port: 0))
    let header = Array(rread(tag: 1, bytes(300_000, seed: 0))[0..<11])
    let sender = Background {
      try server.send(
        header: header, file: FileRegion(descriptor: fd, offset: 100_000, count: 300_000))
      try server.send(patternMessage(tag: 4, length: 3))
    }
    let got = try flatten(try client.receive(limit: 1 << 20, splicing: rule(expecting: true)))
    XCTAssertEqual(got.spliced, SplicedBytes.isAvailable)
    XCTAssertEqual(Array(got.bytes[11...]), Array(content[100_000...]))
    XCTAssertEqual(try client.receive(limit: 1024), patternMessage(tag: 4, length: 3))
    try sender.value()
  }

  /// A reply whose pieces overflow its pipe is finished in memory, intact, and the link stops
  /// splicing (its pieces would overflow again).
  func testOverflowingPipeFallsBackToMemoryAndSplicingStops() throws {
    // Linux allows any process pipes of 1 MiB unless fs.pipe-max-size was lowered.
    XCTAssertTrue(SplicedBytes.isAvailable)
    let (client, server) = try connectedPair(.tcp(host: "127.0.0.1", port: 0))
    client.splicePipeSize.store(64 << 10, ordering: .relaxed)
    let first = rread(tag: 1, bytes(300_000, seed: 11))
    let second = rread(tag: 1, bytes(200_000, seed: 12))
    let sender = Background {
      try server.send(first)
      try server.send(second)
    }
    let got = try flatten(try client.receive(limit: 1 << 20, splicing: rule(expecting: true)))
    XCTAssertEqual(got.bytes, first)
    XCTAssertFalse(got.spliced)
    XCTAssertTrue(client.spliceOverflowed.load(ordering: .relaxed))
    let next = try flatten(try client.receive(limit: 1 << 20, splicing: rule(expecting: true)))
    XCTAssertEqual(next.bytes, second)
    XCTAssertFalse(next.spliced)
    try sender.value()
  }

  /// Unix stream sockets splice too; packet links never do (their SDUs are reassembled).
  func testUnixSocketsSpliceAndPacketLinksDoNot() throws {
    for (address, splices) in [
      (TransportAddress.unix(path: directory + "/u"), true),
      (.seqpacket(path: directory + "/s", sduLimit: 4096), false),
    ] {
      let (client, server) = try connectedPair(address)
      let message = rread(tag: 1, bytes(100_000, seed: 13))
      let sender = Background { try server.send(message) }
      let got = try flatten(try client.receive(limit: 1 << 20, splicing: rule(expecting: true)))
      XCTAssertEqual(got.bytes, message, "\(address)")
      XCTAssertEqual(got.spliced, splices && SplicedBytes.isAvailable, "\(address)")
      try sender.value()
    }
  }

  /// A peer that hangs up in the middle of a spliced reply: truncated, not a short pipe.
  func testEndOfStreamMidSpliceIsTruncated() throws {
    let (client, server) = try connectedPair(.tcp(host: "127.0.0.1", port: 0))
    let message = rread(tag: 1, bytes(300_000, seed: 14))
    try server.sendRaw(Array(message[0..<150_000]))
    server.close()
    XCTAssertThrowsError(try client.receive(limit: 1 << 20, splicing: rule(expecting: true))) {
      guard case .truncatedMessage = $0 as? TransportError else {
        return XCTFail("expected truncatedMessage, got \($0)")
      }
    }
  }

  /// close() wakes a receiver waiting for the rest of a spliced reply.
  func testCloseWakesReceiverMidSplice() throws {
    let (client, server) = try connectedPair(.tcp(host: "127.0.0.1", port: 0))
    let message = rread(tag: 1, bytes(300_000, seed: 15))
    try server.sendRaw(Array(message[0..<100_000]))
    let rule = rule(expecting: true)
    let receiver = Background { try client.receive(limit: 1 << 20, splicing: rule) }
    XCTAssertTrue(receiver.isStillRunning(after: 0.2))
    client.close()
    XCTAssertThrowsError(try receiver.value()) {
      XCTAssertEqual($0 as? TransportError, .closed)
    }
  }
}
