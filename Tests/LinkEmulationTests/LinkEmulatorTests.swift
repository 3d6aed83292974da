import Foundation
import Glibc
import TestSupport
import XCTest

@testable import LinkEmulation
@testable import NinePTransport

/// The emulator between a real client socket and a real server socket. Timing is asserted with
/// loose lower bounds only (the machine is shared): what the emulator must impose, never how
/// fast it is.
final class LinkEmulatorTests: XCTestCase {
  private var directory = ""

  override func setUp() {
    directory = NSTemporaryDirectory() + "link-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
  }

  override func tearDown() {
    try? FileManager.default.removeItem(atPath: directory)
  }

  /// A 9P-shaped frame: size[4] (little-endian, counts itself) then `count - 4` bytes of `fill`.
  private func frame(_ count: Int, fill: UInt8 = 0xAB) -> [UInt8] {
    precondition(count >= 7)
    let size = UInt32(count)
    return [
      UInt8(size & 0xFF), UInt8(size >> 8 & 0xFF), UInt8(size >> 16 & 0xFF), UInt8(size >> 24),
    ]
      + [UInt8](repeating: fill, count: count - 4)
  }

  /// A server on `serverAddress`, an emulator in front of it, and a client connected through it.
  private struct Rig: Sendable {
    let listener: Listener
    let emulator: LinkEmulator
    let client: SocketTransport
    let server: SocketTransport
  }

  private var rigs = 0

  private func makeRig(profile: LinkProfile, serverKind: String = "seqpacket") throws -> Rig {
    // Each rig its own socket names: a closed emulator of an earlier rig may still be letting
    // go of its listener.
    rigs += 1
    let directory = self.directory + "/rig\(rigs)"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let serverAddress: TransportAddress =
      serverKind == "unix"
      ? .unix(path: directory + "/server.sock")
      : .seqpacket(path: directory + "/server.sock", sduLimit: 65536)
    let listener = try Listener(address: serverAddress)
    let emulator = try LinkEmulator(
      listen: .seqpacket(path: directory + "/link.sock", sduLimit: profile.sduSize),
      server: serverAddress, profile: profile)
    emulator.start()
    let accepted = Accepted()
    Thread.detachNewThread { accepted.set(try? listener.accept()) }
    let client = try SocketTransport.connect(
      to: .seqpacket(path: directory + "/link.sock", sduLimit: 65536))
    guard let server = accepted.wait(seconds: 10) else {
      throw HarnessFailure("the emulator never connected to the server")
    }
    return Rig(listener: listener, emulator: emulator, client: client, server: server)
  }

  private func tearDownRig(_ rig: Rig) {
    rig.client.close()
    rig.server.close()
    rig.emulator.close()
    rig.listener.close()
  }

  /// Receives SDUs on `transport` until `bytes` have arrived (or 20 s pass).
  private func receiveSDUs(_ transport: SocketTransport, bytes: Int) -> [[UInt8]] {
    let box = Accepted.Box<[[UInt8]]>()
    Thread.detachNewThread {
      var sdus: [[UInt8]] = []
      var total = 0
      while total < bytes, let sdu = try? transport.receiveRaw(maxBytes: 65536) {
        sdus.append(sdu)
        total += sdu.count
      }
      box.set(sdus)
    }
    return box.wait(seconds: 20) ?? []
  }

  func testDelayIsImposedEachWay() throws {
    let profile = LinkProfile(roundTrip: .milliseconds(200), bytesPerSecond: 0, sduSize: 245)
    let rig = try makeRig(profile: profile)
    defer { tearDownRig(rig) }
    // Echo on the server.
    Thread.detachNewThread {
      while let sdu = try? rig.server.receiveRaw(maxBytes: 65536) { try? rig.server.sendRaw(sdu) }
    }
    for _ in 0..<3 {
      let start = monotonicNanoseconds()
      try rig.client.sendRaw(frame(20))
      let echoed = receiveSDUs(rig.client, bytes: 20)
      let elapsed = monotonicNanoseconds() - start
      XCTAssertEqual(echoed.flatMap { $0 }, frame(20))
      XCTAssertGreaterThanOrEqual(elapsed, 180_000_000, "round trip \(elapsed) ns")
    }
    // The emulator counts a message once it has passed it on: the last may be counted just
    // after the client has it.
    XCTAssertTrue(
      waitUntil(timeout: 5) {
        let stats = rig.emulator.statistics()
        return stats.downstream.messages == 3 && stats.roundTrips == 3
      })
    let stats = rig.emulator.statistics()
    XCTAssertEqual(stats.upstream.messages, 3)
    XCTAssertEqual(stats.downstream.messages, 3)
    XCTAssertEqual(stats.roundTrips, 3)
  }

  func testRateIsImposedAndCounted() throws {
    // 100 KB at 200 KB/s takes at least 0.5 s.
    let profile = LinkProfile(
      roundTrip: .zero, bytesPerSecond: 200_000, sduSize: 1000, queueLimitBytes: 8192)
    let rig = try makeRig(profile: profile)
    defer { tearDownRig(rig) }
    let before = rig.emulator.statistics()
    let start = monotonicNanoseconds()
    let message = frame(10_000)
    Thread.detachNewThread {
      for _ in 0..<10 { try? rig.client.sendRaw(message) }
    }
    let received = receiveSDUs(rig.server, bytes: 100_000)
    let elapsed = monotonicNanoseconds() - start
    XCTAssertEqual(received.reduce(0) { $0 + $1.count }, 100_000)
    XCTAssertGreaterThanOrEqual(elapsed, 450_000_000, "100 KB took \(elapsed) ns")
    // The emulator counts an SDU once it has passed it on: the last may be counted just after
    // the server has it (a CI run read 99 of 100).
    XCTAssertTrue(
      waitUntil(timeout: 5) { rig.emulator.statistics().since(before).upstream.sdus == 100 })
    let window = rig.emulator.statistics().since(before)
    XCTAssertEqual(window.upstream.bytes, 100_000)
    XCTAssertEqual(window.upstream.sdus, 100)
    XCTAssertEqual(window.upstream.messages, 10)
    // Charged link time is the configured rate's: 0.5 s.
    XCTAssertEqual(Double(window.upstream.busyNanoseconds), 5e8, accuracy: 1e6)
    let utilisation = window.utilisation(\.upstream, elapsedNanoseconds: elapsed)
    XCTAssertGreaterThan(utilisation, 0.3)
    XCTAssertLessThanOrEqual(utilisation, 1.05)
  }

  func testSDULimitAndMessageBoundaries() throws {
    let profile = LinkProfile(roundTrip: .zero, bytesPerSecond: 0, sduSize: 100)
    let rig = try makeRig(profile: profile)
    defer { tearDownRig(rig) }
    // Sent as single big SDUs, and one message split over two SDUs at an odd place.
    let sizes = [7, 250, 100, 101, 300, 9]
    for (index, size) in sizes.enumerated() where index != 4 {
      try rig.client.sendRaw(frame(size, fill: UInt8(index)))
    }
    let split = frame(300, fill: 4)
    _ = sizes
    try rig.client.sendRaw(Array(split[0..<33]))
    try rig.client.sendRaw(Array(split[33...]))
    // Order is as sent: index 4 went after index 5.
    let order = [0, 1, 2, 3, 5, 4]
    let total = sizes.reduce(0, +)
    let sdus = receiveSDUs(rig.server, bytes: total)
    XCTAssertEqual(sdus.reduce(0) { $0 + $1.count }, total)
    XCTAssertTrue(sdus.allSatisfy { $0.count <= 100 }, "SDU sizes \(sdus.map(\.count))")
    // Walk the SDUs message by message: every SDU lies within one message.
    var iterator = sdus.makeIterator()
    for index in order {
      var remaining = sizes[index]
      var bytes: [UInt8] = []
      while remaining > 0, let sdu = iterator.next() {
        XCTAssertLessThanOrEqual(sdu.count, remaining, "an SDU crosses the end of message \(index)")
        remaining -= sdu.count
        bytes += sdu
      }
      XCTAssertEqual(bytes, frame(sizes[index], fill: UInt8(index)))
    }
  }

  func testPacketFramingNeverMergesPackets() throws {
    let profile = LinkProfile(
      roundTrip: .milliseconds(20), bytesPerSecond: 0, sduSize: 50, framing: .packets)
    let rig = try makeRig(profile: profile)
    defer { tearDownRig(rig) }
    let packets: [[UInt8]] = [[1], [2, 2], [UInt8](repeating: 3, count: 120), [4, 4, 4]]
    for packet in packets { try rig.client.sendRaw(packet) }
    let sdus = receiveSDUs(rig.server, bytes: packets.reduce(0) { $0 + $1.count })
    XCTAssertEqual(
      sdus,
      [
        [1], [2, 2], [UInt8](repeating: 3, count: 50),
        [UInt8](repeating: 3, count: 50), [UInt8](repeating: 3, count: 20), [4, 4, 4],
      ])
  }

  func testStreamServerIsFramedIntoSDUs() throws {
    let profile = LinkProfile(roundTrip: .zero, bytesPerSecond: 0, sduSize: 64)
    let rig = try makeRig(profile: profile, serverKind: "unix")
    defer { tearDownRig(rig) }
    // Two messages in one stream write: they must reach the client in separate SDUs.
    try rig.server.sendRaw(frame(100, fill: 1) + frame(30, fill: 2))
    let sdus = receiveSDUs(rig.client, bytes: 130)
    XCTAssertEqual(sdus.map(\.count), [64, 36, 30])
    XCTAssertEqual(sdus.flatMap { $0 }, frame(100, fill: 1) + frame(30, fill: 2))
  }

  func testClosePropagatesBothWays() throws {
    let profile = LinkProfile(roundTrip: .milliseconds(10), bytesPerSecond: 0)
    let first = try makeRig(profile: profile)
    // Client hangs up: the server sees end of stream.
    try first.client.sendRaw(frame(10))
    first.client.close()
    let seen = Accepted.Box<Bool>()
    Thread.detachNewThread {
      var sawData = false
      while let sdu = try? first.server.receiveRaw(maxBytes: 65536) {
        sawData = sawData || !sdu.isEmpty
      }
      seen.set(sawData)
    }
    XCTAssertEqual(seen.wait(seconds: 10), true, "the server never saw data then end of stream")
    tearDownRig(first)

    // Server hangs up: the client sees end of stream.
    let rig = try makeRig(profile: profile)
    defer { tearDownRig(rig) }
    rig.server.close()
    let ended = Accepted.Box<Bool>()
    Thread.detachNewThread {
      while (try? rig.client.receiveRaw(maxBytes: 65536)) != nil {}
      ended.set(true)
    }
    XCTAssertEqual(ended.wait(seconds: 10), true, "the client never saw end of stream")
    XCTAssertTrue(waitUntil(timeout: 5) { rig.emulator.statistics().connectionsOpen == 0 })
  }
}

struct HarnessFailure: Error, CustomStringConvertible {
  let description: String
  init(_ description: String) { self.description = description }
}

/// A one-shot value handed from a helper thread, waited for with a bound.
final class Accepted: @unchecked Sendable {
  private let box = Box<SocketTransport>()
  func set(_ value: SocketTransport?) { box.set(value) }
  func wait(seconds: Double) -> SocketTransport? { box.wait(seconds: seconds) }

  final class Box<T>: @unchecked Sendable {
    private let condition = NSCondition()
    private var value: T?
    private var done = false

    func set(_ value: T?) {
      condition.lock()
      self.value = value
      done = true
      condition.broadcast()
      condition.unlock()
    }

    func wait(seconds: Double) -> T? {
      condition.lock()
      defer { condition.unlock() }
      let deadline = Date(timeIntervalSinceNow: seconds)
      while !done { if !condition.wait(until: deadline) { break } }
      return value
    }
  }
}
