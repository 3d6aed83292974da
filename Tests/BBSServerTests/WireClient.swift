import Foundation
import NinePProtocol
import NinePTransport
import XCTest

@testable import BBSServer

/// A raw 9P test client: sends T-messages and awaits R-messages by tag, over a real socket.
/// A reader thread collects every reply in arrival order.
final class WireClient: @unchecked Sendable {
  let transport: any MessageTransport
  private let condition = NSCondition()
  private var pending: [(tag: Tag, message: Message)] = []
  private var arrivals: [(tag: Tag, message: Message)] = []
  private var ended = false
  private let done = DispatchSemaphore(value: 0)

  static let timeout: TimeInterval = 5

  init(_ dial: String, options: DialOptions = DialOptions()) throws {
    transport = try NinePTransport.dial(TransportAddress(parsing: dial), options: options)
    startReader()
  }

  /// A client over `transport`, already set up (the secure channel, say).
  init(transport: any MessageTransport) {
    self.transport = transport
    startReader()
  }

  /// A client of `127.0.0.1:port` from `source`, another address of 127/8 (the server sees
  /// another client address).
  init(port: Int, source: String) throws {
    let fd = try RawSocket.connected(port: port, source: source)
    transport = try SocketTransport.connect(to: .fd(read: fd, write: fd))
    startReader()
  }

  private func startReader() {
    let thread = Thread { [self] in readLoop() }
    thread.name = "test.reader"
    thread.start()
  }

  deinit { transport.close() }

  private func readLoop() {
    defer {
      condition.lock()
      ended = true
      condition.broadcast()
      condition.unlock()
      done.signal()
    }
    while true {
      guard let frame = try? transport.receive(limit: 1 << 21),
        let decoded = try? Message.decode(frame, limits: .unbounded)
      else { return }
      condition.lock()
      pending.append(decoded)
      arrivals.append(decoded)
      condition.broadcast()
      condition.unlock()
    }
  }

  /// The raw socket, for SDU-level tests.
  var socket: SocketTransport? { transport as? SocketTransport }

  func send(_ message: Message, tag: Tag) throws {
    try transport.send(message.encoded(tag: tag))
  }

  /// The next reply with `tag`; fails the test on timeout.
  func reply(
    tag: Tag, timeout: TimeInterval = WireClient.timeout, file: StaticString = #filePath,
    line: UInt = #line
  ) throws -> Message {
    let deadline = Date().addingTimeInterval(timeout)
    condition.lock()
    defer { condition.unlock() }
    while true {
      if let index = pending.firstIndex(where: { $0.tag == tag }) {
        return pending.remove(at: index).message
      }
      if ended {
        XCTFail("connection closed while waiting for tag \(tag)", file: file, line: line)
        throw TestError.closed
      }
      if !condition.wait(until: deadline) {
        XCTFail("no reply for tag \(tag) within \(timeout) s", file: file, line: line)
        throw TestError.timeout
      }
    }
  }

  /// The next reply with `tag` if one arrives within `timeout`, else nil; never fails the test
  /// (for checking that a reply does not come).
  func reply(tag: Tag, ifWithin timeout: TimeInterval) -> Message? {
    let deadline = Date().addingTimeInterval(timeout)
    condition.lock()
    defer { condition.unlock() }
    while true {
      if let index = pending.firstIndex(where: { $0.tag == tag }) {
        return pending.remove(at: index).message
      }
      if ended || !condition.wait(until: deadline) { return nil }
    }
  }

  /// Sends and awaits the reply.
  @discardableResult
  func rpc(
    _ message: Message, tag: Tag = 1, file: StaticString = #filePath, line: UInt = #line
  ) throws -> Message {
    try send(message, tag: tag)
    return try reply(tag: tag, file: file, line: line)
  }

  /// Whether a reply with `tag` has arrived and not been consumed.
  func hasReply(tag: Tag) -> Bool {
    condition.lock()
    defer { condition.unlock() }
    return pending.contains { $0.tag == tag }
  }

  /// Every reply so far, in arrival order.
  var arrivalOrder: [(tag: Tag, message: Message)] {
    condition.lock()
    defer { condition.unlock() }
    return arrivals
  }

  /// Waits until the server closes the connection.
  func waitForDisconnect(timeout: TimeInterval = WireClient.timeout) -> Bool {
    done.wait(timeout: .now() + timeout) == .success
  }

  func close() { transport.close() }

  // MARK: Conveniences

  /// Tversion + Tattach on fid 0.
  @discardableResult
  func handshake(uname: String = "alice", aname: String = "", msize: UInt32 = 8192) throws -> Qid {
    guard case .rversion = try rpc(.tversion(msize: msize, version: "9P2000"), tag: NineP.noTag)
    else { throw TestError.unexpected("Rversion") }
    let reply = try rpc(.tattach(fid: 0, afid: NineP.noFid, uname: uname, aname: aname))
    guard case .rattach(let qid) = reply else { throw TestError.unexpected("\(reply)") }
    return qid
  }

  /// Walks `path` from fid 0 to `fid` and opens it.
  func open(_ path: String, fid: Fid, mode: OpenMode = .read) throws -> Message {
    let names = path.split(separator: "/").map(String.init)
    let walk = try rpc(.twalk(fid: 0, newfid: fid, names: names))
    guard case .rwalk(let qids) = walk, qids.count == names.count else { return walk }
    return try rpc(.topen(fid: fid, mode: mode))
  }

  /// Reads a whole small file (one Tread at offset 0).
  func readFile(_ path: String, fid: Fid = 90, count: UInt32 = 4096) throws -> String {
    _ = try open(path, fid: fid)
    defer { _ = try? rpc(.tclunk(fid: fid)) }
    let reply = try rpc(.tread(fid: fid, offset: 0, count: count))
    guard case .rread(let data) = reply else { throw TestError.unexpected("\(reply)") }
    return String(decoding: data, as: UTF8.self)
  }

  /// Posts `payload` through /chat/post.
  func post(_ payload: String, fid: Fid = 91) throws -> Message {
    _ = try open("chat/post", fid: fid, mode: .write)
    defer { _ = try? rpc(.tclunk(fid: fid)) }
    return try rpc(.twrite(fid: fid, offset: 0, data: ArraySlice(payload.utf8)))
  }
}

enum TestError: Error {
  case closed, timeout
  case unexpected(String)
}

/// A fresh temporary directory, removed by the returned cleanup.
func makeTemporaryDirectory(_ prefix: String) throws -> String {
  let path = FileManager.default.temporaryDirectory
    .appendingPathComponent("\(prefix)-\(UUID().uuidString.prefix(8))").path
  try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
  return path
}
