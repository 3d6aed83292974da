import Foundation
import NinePProtocol
import NinePTransport
import Synchronization
import TestSupport
import XCTest

@testable import NinePClient

/// Large reads and writes split into several Treads/Twrites: how many go at once per profile,
/// how the pieces come back together (out of order, short, failed), and interrupts.
final class PipelineTests: XCTestCase {
  /// A scripted file of `size` bytes; byte i is `i % 251`.
  static func content(_ range: Range<Int>) -> [UInt8] { range.map { UInt8($0 % 251) } }

  func connect(
    profile: ServerProfile, msize: UInt32 = 8192 + 24,
    handler: @escaping @Sendable (ScriptedServer, Tag, Message) -> Void
  ) throws -> (Session, ScriptedServer) {
    let (client, server) = MemoryTransport.pair()
    let peer = ScriptedServer(transport: server, msize: msize, handler: handler)
    var configuration = SessionConfiguration(
      profile: profile, uname: "glenda", requestedMsize: msize, requestTimeout: .seconds(5))
    configuration.parkGrace = .milliseconds(20)
    let session = try Session.connect(transport: client, configuration: configuration)
    addTeardownBlock { session.close() }
    return (session, peer)
  }

  /// Answers Treads of a `size`-byte file, holding them until `hold` have arrived and then
  /// answering in reverse order; records the most ever outstanding.
  final class FileServer: @unchecked Sendable {
    let size: Int
    let hold: Int
    private let lock = NSLock()
    private var waiting: [(Tag, UInt64, UInt32)] = []
    private(set) var mostOutstanding = 0
    var failAtOffset: UInt64?

    init(size: Int, hold: Int) {
      self.size = size
      self.hold = hold
    }

    func handle(_ server: ScriptedServer, _ tag: Tag, _ message: Message) {
      guard case .tread(_, let offset, let count) = message else {
        if case .twrite(_, _, let data) = message {
          return server.reply(tag, .rwrite(count: UInt32(data.count)))
        }
        return server.reply(tag, .rclunk)
      }
      lock.lock()
      waiting.append((tag, offset, count))
      mostOutstanding = max(mostOutstanding, waiting.count)
      let batch = waiting.count >= hold ? waiting.reversed() : []
      if !batch.isEmpty { waiting.removeAll() }
      let failAt = failAtOffset
      lock.unlock()
      for (tag, offset, count) in batch {
        if offset == failAt {
          server.reply(tag, .rerror(ename: "i/o error"))
          continue
        }
        let start = min(Int(offset), size)
        let end = min(start + Int(count), size)
        server.reply(tag, .rread(data: PipelineTests.content(start..<end)[...]))
      }
    }
  }

  func read(
    _ session: Session, offset: UInt64, count: Int, chunk: UInt32 = 8192
  ) -> Result<[UInt8], NinePError>? {
    let box = Mutex<Result<[UInt8], NinePError>?>(nil)
    let done = expectation(description: "read")
    session.readPipelined(5, offset: offset, count: count, chunk: chunk) { result in
      box.withLock { $0 = result.map { Array($0.map { $0.contents() }.joined()) } }
      done.fulfill()
    }
    wait(for: [done], timeout: 10)
    return box.withLock { $0 }
  }

  /// A multiplexing server gets the whole window at once, answered out of order, and the
  /// bytes still come back in place.
  func testMultiplexSendsTheWindowAtOnceAndReassemblesInOrder() throws {
    let file = FileServer(size: 1 << 20, hold: 8)
    let (session, _) = try connect(profile: .multiplex) { file.handle($0, $1, $2) }
    XCTAssertEqual(session.pipelineWindow, 8)
    let result = read(session, offset: 1000, count: 16 * 8192)
    XCTAssertEqual(try result?.get(), Self.content(1000..<(1000 + 16 * 8192)))
    XCTAssertEqual(file.mostOutstanding, 8, "the window was not kept full")
  }

  /// A device gets one Tread at a time (its channel serves one request).
  func testDeviceReadsOneChunkAtATime() throws {
    let file = FileServer(size: 100_000, hold: 1)
    let (session, _) = try connect(profile: .device) { file.handle($0, $1, $2) }
    XCTAssertEqual(session.pipelineWindow, 1)
    let result = read(session, offset: 0, count: 65_536)
    XCTAssertEqual(try result?.get(), Self.content(0..<65_536))
    XCTAssertEqual(file.mostOutstanding, 1)
  }

  /// End of file inside the window: the bytes up to it, nothing after, even though later
  /// chunks (empty) were answered first.
  func testShortReadEndsTheResult() throws {
    let size = 3 * 8192 + 77
    let file = FileServer(size: size, hold: 6)
    let (session, _) = try connect(profile: .multiplex) { file.handle($0, $1, $2) }
    let result = read(session, offset: 0, count: 6 * 8192)
    XCTAssertEqual(try result?.get(), Self.content(0..<size))
  }

  /// An error in the middle keeps what came before it; an error on the first chunk is the
  /// read's error.
  func testErrorsKeepTheBytesBeforeThem() throws {
    let file = FileServer(size: 1 << 20, hold: 4)
    file.failAtOffset = 2 * 8192
    let (session, _) = try connect(profile: .multiplex) { file.handle($0, $1, $2) }
    let partial = read(session, offset: 0, count: 4 * 8192)
    XCTAssertEqual(try partial?.get(), Self.content(0..<(2 * 8192)))
    let failed = read(session, offset: 2 * 8192, count: 4 * 8192)
    guard case .failure(.server(let ename, _)) = failed else {
      return XCTFail("expected the server's error, got \(String(describing: failed))")
    }
    XCTAssertEqual(ename, "i/o error")
  }

  /// Cancelling the group flushes every Tread on the wire and the read ends.
  func testCancelWithdrawsEveryChunk() throws {
    let flushes = Mutex(0)
    let (session, _) = try connect(profile: .multiplex) { server, tag, message in
      // Reads are never answered; flushes are.
      if case .tflush = message {
        flushes.withLock { $0 += 1 }
        server.reply(tag, .rflush)
      }
    }
    let group = RequestGroup()
    let done = expectation(description: "read ends")
    session.readPipelined(5, offset: 0, count: 4 * 8192, chunk: 8192, group: group) { result in
      if case .success(let pieces) = result { XCTAssertEqual(pieces.count, 0) }
      done.fulfill()
    }
    XCTAssertTrue(waitUntil(timeout: 5) { session.statistics.requestsInFlight == 4 })
    group.cancelAll(on: session)
    wait(for: [done], timeout: 10)
    XCTAssertEqual(flushes.withLock { $0 }, 4)
  }

  /// A write larger than one message goes as several Twrites at once, each at its offset with
  /// its own bytes.
  func testWritesArePipelinedAtTheirOffsets() throws {
    let writes = Mutex<[UInt64: [UInt8]]>([:])
    let (session, _) = try connect(profile: .multiplex) { server, tag, message in
      guard case .twrite(_, let offset, let data) = message else { return }
      writes.withLock { $0[offset] = Array(data) }
      server.reply(tag, .rwrite(count: UInt32(data.count)))
    }
    let data = Self.content(0..<(5 * 8192 + 10))
    let written = Mutex<Result<Int, NinePError>?>(nil)
    let done = expectation(description: "write")
    session.writePipelined(5, offset: 100, data: data[...], chunk: 8192) { result in
      written.withLock { $0 = result }
      done.fulfill()
    }
    wait(for: [done], timeout: 10)
    XCTAssertEqual(try written.withLock { $0 }?.get(), data.count)
    let pieces = writes.withLock { $0 }
    XCTAssertEqual(pieces.keys.sorted(), (0..<6).map { 100 + UInt64($0 * 8192) })
    XCTAssertEqual(pieces.keys.sorted().flatMap { pieces[$0] ?? [] }, data)
  }
}
