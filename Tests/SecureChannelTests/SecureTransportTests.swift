import Foundation
import Glibc
import NinePProtocol
import NinePTransport
import XCTest

@testable import SecureChannel

/// 9P messages through the channel over a real socket pair: asked for, set up, carried whole
/// whatever their size, and a record altered on the way ends the connection.
final class SecureTransportTests: XCTestCase {
  /// Both ends of a socket pair, the client's raw descriptor kept for tampering.
  private func socketPair() throws -> (client: SocketTransport, board: SocketTransport, fd: Int32) {
    var fds: [Int32] = [0, 0]
    XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds), 0)
    let client = try SocketTransport.connect(to: .fd(read: fds[0], write: fds[0]))
    let board = try SocketTransport.connect(to: .fd(read: fds[1], write: fds[1]))
    addTeardownBlock {
      client.close()
      board.close()
    }
    return (client, board, fds[0])
  }

  /// The channel set up between the two ends: the board's side on a thread of its own.
  private func channel(payload: [UInt8] = []) throws -> (
    client: SecureTransport, board: SecureTransport, fd: Int32
  ) {
    let (client, board, fd) = try socketPair()
    let boardSide = Result<SecureTransport, SecureChannelError>.Box()
    let thread = Thread {
      boardSide.set {
        guard let request = try? board.receive(limit: 8192),
          let tag = SecureChannel.request(in: request)
        else { throw SecureChannelError.notNineP("no request") }
        return try SecureChannel.accept(
          over: board, tag: tag, timeout: .seconds(5), boardKey: nil, proof: { _ in payload })
      }
    }
    thread.start()
    var received: [UInt8]?
    guard
      case .secure(let secure) = try SecureChannel.ask(
        over: client, timeout: .seconds(5),
        accept: { payload, _ in
          received = payload
          return nil
        })
    else { throw SecureChannelError.notNineP("plain") }
    XCTAssertEqual(received, payload)
    let boardTransport = try boardSide.get()
    XCTAssertEqual(secure.security?.binding, boardTransport.security?.binding)
    return (secure, boardTransport, fd)
  }

  func testMessagesOfEverySizeArriveWhole() throws {
    let (client, board, _) = try channel(payload: Array("proof".utf8))
    for size in [
      24, 100, SecureTransport.maxRecordPlaintext, SecureTransport.maxRecordPlaintext + 1, 1 << 20,
    ] {
      let message = Message.twrite(
        fid: 1, offset: 0, data: [UInt8](repeating: UInt8(size % 251), count: size - 23)[...]
      ).encoded(tag: 1)
      let sender = Thread { try? client.send(message) }
      sender.start()
      XCTAssertEqual(try board.receive(limit: 2 << 20), message, "a \(size)-byte message")
    }
    try board.send(Message.rflush.encoded(tag: 9))
    XCTAssertEqual(try client.receive(limit: 8192), Message.rflush.encoded(tag: 9))
  }

  /// A file region goes out a record at a time, and arrives as the one message it is.
  func testAFileRegionArrivesAsOneMessage() throws {
    let (client, board, _) = try channel()
    let path = NSTemporaryDirectory() + "secure-region-\(getpid())"
    let contents = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
    XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(contents)))
    defer { unlink(path) }
    let descriptor = open(path, O_RDONLY)
    defer { close(descriptor) }
    let count = 200_001
    let header = Message.rreadHeader(tag: 3, count: count)
    let sender = Thread {
      try? board.send(
        header: header, file: FileRegion(descriptor: descriptor, offset: 1000, count: count))
    }
    sender.start()
    XCTAssertEqual(try client.receive(limit: 1 << 20), header + contents[1000..<1000 + count])
  }

  /// Records are cut as the sender likes: ours start each message in a record of its own, but
  /// a peer may end a large message mid-record and go on with the next, or send a message in
  /// many small records. Each message still arrives whole, in order.
  func testRecordsCutAnywhereStillGiveWholeMessages() throws {
    let (_, board, fd) = try socketPair()
    let key = [UInt8](repeating: 7, count: 32)
    let receiver = SecureTransport(
      over: board, send: NoiseCipherState(key: [UInt8](repeating: 8, count: 32)),
      receive: NoiseCipherState(key: key), security: ChannelSecurity(binding: [], boardKey: nil))
    let large = Message.twrite(
      fid: 1, offset: 0, data: (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 13) }[...]
    ).encoded(tag: 1)
    let small = Message.tclunk(fid: 3).encoded(tag: 3)
    let stream = large + small + large
    // Three full records and one that holds the first message's end, all of the second and the
    // start of the third; then the rest in records of 999 bytes.
    var cuts = [65_519, 65_519, 65_519, 5_000]
    var cut = cuts.reduce(0, +)
    while cut < stream.count {
      cuts.append(min(999, stream.count - cut))
      cut += cuts.last ?? 0
    }
    var sender = NoiseCipherState(key: key)
    var wire: [UInt8] = []
    var offset = 0
    for count in cuts {
      wire += try SecureTransport.record(count, with: &sender) { text in
        SecureTransport.copy(stream[offset..<offset + count], to: text)
      }
      offset += count
    }
    let bytes = wire
    let writer = Thread {
      var written = 0
      while written < bytes.count {
        let n = bytes[written...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard n > 0 else { return }
        written += n
      }
    }
    writer.start()
    XCTAssertEqual(try receiver.receive(limit: 1 << 20), large)
    XCTAssertEqual(try receiver.receive(limit: 1 << 20), small)
    XCTAssertEqual(try receiver.receive(limit: 1 << 20), large)
  }

  func testAnAlteredRecordEndsTheConnection() throws {
    let (_, board, fd) = try channel()
    // A record of the right size with a ciphertext the board's key did not make.
    let forged = SecureTransport.record([UInt8](repeating: 0x41, count: 40))
    XCTAssertEqual(forged.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }, forged.count)
    XCTAssertThrowsError(try board.receive(limit: 8192)) {
      guard case .secureChannel = $0 as? TransportError else { return XCTFail("\($0)") }
    }
  }

  /// A server that hangs up when asked, or answers with something that is not 9P, is reported,
  /// not waited for.
  func testAServerThatHangsUpOrAnswersNonsenseIsReported() throws {
    let (client, board, _) = try socketPair()
    let thread = Thread {
      _ = try? board.receive(limit: 8192)
      try? board.sendRaw([0xFF, 0xFF, 0xFF, 0x7F, 1, 2, 3, 4])
    }
    thread.start()
    XCTAssertThrowsError(
      try SecureChannel.ask(over: client, timeout: .seconds(5), accept: { _, _ in nil })
    ) {
      guard case .notNineP = $0 as? SecureChannelError else { return XCTFail("\($0)") }
    }
  }

  func testASilentServerTimesOut() throws {
    let (client, _, _) = try socketPair()
    let start = Date()
    XCTAssertThrowsError(
      try SecureChannel.ask(over: client, timeout: .milliseconds(300), accept: { _, _ in nil })
    ) {
      XCTAssertEqual($0 as? SecureChannelError, .timedOut)
    }
    XCTAssertLessThan(Date().timeIntervalSince(start), 5)
  }
}

extension Result where Failure == SecureChannelError {
  /// A result set by one thread and awaited by another.
  final class Box: @unchecked Sendable {
    // @unchecked: `value` is read and written only with `condition` locked.
    private let condition = NSCondition()
    private var value: Result?

    func set(_ body: () throws -> Success) {
      let result: Result
      do {
        result = .success(try body())
      } catch let error as SecureChannelError {
        result = .failure(error)
      } catch {
        result = .failure(.notNineP("\(error)"))
      }
      condition.lock()
      value = result
      condition.broadcast()
      condition.unlock()
    }

    func get() throws -> Success {
      condition.lock()
      defer { condition.unlock() }
      while value == nil {
        guard condition.wait(until: Date(timeIntervalSinceNow: 10)) else {
          throw SecureChannelError.timedOut
        }
      }
      return try value!.get()
    }
  }
}
