import Foundation
import NinePClient
import NinePProtocol
import NinePTransport
import Synchronization
import TestSupport
import XCTest

#if canImport(Glibc)
  import Glibc
#endif

/// Chained sends from completions against a real `9bbsd --files DIR --files-rw`: every next
/// Twrite of a `writeAll` and every next Tread of a `readAll` is sent from the completion of
/// the one before, that is on the session's reader thread.
///
/// 9bbsd answers one request at a time per connection and writes each reply before it reads
/// the next request. A reader thread that waits for the socket to take a large Twrite while
/// a large Rread waits for that same reader stalls both ends: the server's stall watchdog
/// ends the connection after 30 s. Small socket buffers make the wait certain.
final class ChainedTransferTests: XCTestCase {
  /// A Unix-socket transport to `path` with send and receive buffers of about `buffer`
  /// bytes (the kernel's minimum is about 4 KiB), so a large frame waits for the peer.
  private func smallBufferedTransport(to path: String, buffer: Int32) throws -> SocketTransport {
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw HarnessError("socket: errno \(errno)") }
    var size = buffer
    for option in [SO_SNDBUF, SO_RCVBUF] {
      guard setsockopt(fd, SOL_SOCKET, option, &size, socklen_t(MemoryLayout<Int32>.size)) == 0
      else {
        close(fd)
        throw HarnessError("setsockopt: errno \(errno)")
      }
    }
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    let bytes = Array(path.utf8)
    guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
      close(fd)
      throw HarnessError("socket path too long: \(path)")
    }
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
      raw.copyBytes(from: bytes)
      raw[bytes.count] = 0
    }
    let connected = withUnsafePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
      }
    }
    guard connected == 0 else {
      close(fd)
      throw HarnessError("connect \(path): errno \(errno)")
    }
    return try SocketTransport.connect(to: .fd(read: fd, write: fd))
  }

  func testChainedWritesAndReadsFlowBothWaysAtOnce() throws {
    let root = try makeTemporaryDirectory("chained")
    addTeardownBlock { try? FileManager.default.removeItem(atPath: root) }
    let size = 8 << 20
    let source = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 12) }
    try Data(source).write(to: URL(fileURLWithPath: root + "/source.bin"))
    let payload = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 9) }

    let server = try ServerProcess(transport: "unix", extra: ["--files", root, "--files-rw"])
    addTeardownBlock { server.stop() }
    guard case .unix(let path) = try TransportAddress(parsing: server.address) else {
      return XCTFail("not a unix address: \(server.address)")
    }
    let transport = try smallBufferedTransport(to: path, buffer: 4096)
    let session = try Session.connect(
      transport: transport,
      configuration: SessionConfiguration(
        profile: .multiplex, uname: "dave", requestTimeout: .seconds(60)))
    addTeardownBlock { session.close() }

    let (readFid, readIOUnit) = try session.openPath("files/source.bin")
    let area = try awaitResult("walk files") { session.walk(["files"], completion: $0) }
    let created = try awaitResult("create copy.bin") {
      session.create(
        area.fid, name: "copy.bin", perm: FileMode(permissions: 0o644), mode: .write,
        completion: $0)
    }

    // Both chains start together and run on the one session.
    let read = Outcomes<[UInt8]>()
    let wrote = Outcomes<Int>()
    let started = ContinuousClock.now
    session.readAll(readFid, iounit: readIOUnit, completion: read.add)
    session.writeAll(
      area.fid, offset: 0, data: payload[...], iounit: created.iounit, completion: wrote.add)
    // On a free machine both finish in well under a second; the server gives up on a
    // stalled connection after 30 s.
    let finished = read.wait(timeout: 25) && wrote.wait(timeout: 25)
    let elapsed = started.duration(to: .now)
    XCTAssertTrue(
      finished,
      "chained transfers stalled: after \(elapsed), read results \(read.count), write results "
        + "\(wrote.count); session \(session.closedReason ?? "open")")
    guard finished else { return }
    let back = try XCTUnwrap(read.all.first).get()
    XCTAssertEqual(back.count, source.count)
    XCTAssertTrue(back == source, "the file read back differs")
    XCTAssertEqual(try XCTUnwrap(wrote.all.first).get(), payload.count)
    _ = try awaitResult("clunk") { session.clunk(area.fid, completion: $0) }
    _ = try awaitResult("clunk") { session.clunk(readFid, completion: $0) }
    let onDisk = try Data(contentsOf: URL(fileURLWithPath: root + "/copy.bin"))
    XCTAssertTrue(onDisk == Data(payload), "the file written differs on the server's disk")
    XCTAssertNil(session.closedReason)
  }

  /// The rule itself, against a scripted peer: nobody but the writer thread waits for the
  /// transport. A completion's request that finds the socket full (here: the transport says
  /// bytes are left) is flushed by the writer thread, and reaches the server.
  func testOnlyTheWriterThreadWaitsForTheTransport() throws {
    let (client, server) = MemoryTransport.pair()
    let stat = Stat(qid: Qid(path: 2), mode: FileMode(permissions: 0o644), name: "motd")
    let peer = ScriptedServer(transport: server) { server, tag, message in
      if case .tclunk = message {
        server.reply(tag, .rclunk)
      } else {
        server.reply(tag, .rstat(stat: stat))
      }
    }
    _ = peer
    let transport = FullSocketTransport(client, holding: .tclunk)
    let session = try Session.connect(
      transport: transport,
      configuration: SessionConfiguration(profile: .multiplex, uname: "glenda"))
    addTeardownBlock { session.close() }

    let chained = Outcomes<Message>()
    let completionThread = EventLog()
    session.send(.tstat(fid: 0)) { _ in
      completionThread.record("\(pthread_self())")
      session.send(.tclunk(fid: 0)) { chained.add($0) }
    }
    XCTAssertTrue(chained.wait(timeout: 10), "the held request never reached the server")
    let reader = try XCTUnwrap(completionThread.entries.first)
    // Tversion is sent (waiting) before the session starts its threads; after it, the only
    // wait is the flush, by a thread that is neither the reader nor this test's.
    let waits = transport.waits.entries
    XCTAssertEqual(waits.first?.hasSuffix(" send"), true, "\(waits)")
    XCTAssertEqual(waits.count, 2, "\(waits)")
    let flush = try XCTUnwrap(waits.last)
    XCTAssertTrue(flush.hasSuffix(" flush"), "\(waits)")
    let flusher = String(flush.prefix { $0 != " " })
    XCTAssertNotEqual(flusher, reader, "the reader thread waited for the transport")
    XCTAssertNotEqual(flusher, "\(pthread_self())")
  }
}

/// A transport that finds the socket "full" for one kind of request: a non-waiting send of it
/// is held (and reported as left) until `flushPending`; it notes the thread of every call that
/// may wait.
private final class FullSocketTransport: MessageTransport, Sendable {
  let inner: MemoryTransport
  let holding: MessageType
  let held = Mutex<[[UInt8]]>([])
  let waits = EventLog()
  var address: TransportAddress { inner.address }
  var sendSDULimit: Int? { inner.sendSDULimit }

  init(_ inner: MemoryTransport, holding: MessageType) {
    self.inner = inner
    self.holding = holding
  }

  func send(_ message: [UInt8]) throws(TransportError) {
    waits.record("\(pthread_self()) send")
    try inner.send(message)
  }

  func sendWithoutWaiting(header: [UInt8], payload: ArraySlice<UInt8>) throws(TransportError)
    -> Bool
  {
    let message = header + payload
    guard message.count > 4, message[4] == holding.rawValue else {
      try inner.send(message)
      return false
    }
    held.withLock { $0.append(message) }
    return true
  }

  func flushPending() throws(TransportError) {
    waits.record("\(pthread_self()) flush")
    for message in held.withLock({ held in
      defer { held = [] }; return held
    }) {
      try inner.send(message)
    }
  }

  func receive(limit: Int) throws(TransportError) -> [UInt8]? {
    try inner.receive(limit: limit)
  }

  func close() { inner.close() }
}
