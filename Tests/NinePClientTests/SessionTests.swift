import Foundation
import NinePProtocol
import NinePTransport
import TestSupport
import XCTest

@testable import NinePClient

/// The session core against a scripted peer: negotiation, tags, flush, timeouts, validation
/// and the device wire discipline.
final class SessionTests: XCTestCase {
  func connect(
    profile: ServerProfile = .multiplex, msize: UInt32 = 8192,
    timeout: Duration? = .seconds(5),
    handler: @escaping @Sendable (ScriptedServer, Tag, Message) -> Void
  ) throws -> (Session, ScriptedServer) {
    let (client, server) = MemoryTransport.pair()
    let peer = ScriptedServer(transport: server, msize: msize, handler: handler)
    var configuration = SessionConfiguration(
      profile: profile, uname: "glenda", requestTimeout: timeout)
    configuration.parkGrace = .milliseconds(20)
    let session = try Session.connect(transport: client, configuration: configuration)
    addTeardownBlock { session.close() }
    return (session, peer)
  }

  func testNegotiatesMsizeAndAttaches() throws {
    let (session, peer) = try connect(msize: 4096) { _, _, _ in }
    XCTAssertEqual(session.msize, 4096)
    XCTAssertEqual(session.rootQid.path, 1)
    XCTAssertEqual(peer.requests.first?.tag, NineP.noTag)
    guard case .tattach(0, NineP.noFid, "glenda", "") = peer.requests[1].message else {
      return XCTFail("no attach: \(peer.requests)")
    }
  }

  func testAnHTTPServerIsNotNineP() throws {
    // A real socket, as the user meets it: a web server answers the handshake in text.
    let listener = try Listener(address: .tcp(host: "127.0.0.1", port: 0))
    addTeardownBlock { listener.close() }
    let thread = Thread {
      guard let peer = try? listener.accept() else { return }
      _ = try? peer.receiveRaw(maxBytes: 4096)
      try? peer.sendRaw(Array("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n".utf8))
      Thread.sleep(forTimeInterval: 1)
      peer.close()
    }
    thread.start()
    let transport = try SocketTransport.connect(to: listener.boundAddress)
    do {
      _ = try Session.connect(
        transport: transport,
        configuration: SessionConfiguration(profile: .multiplex, uname: "glenda"))
      XCTFail("a web server was taken for a 9P server")
    } catch {
      XCTAssertTrue(
        error.description.contains("not a 9P server") && error.description.contains("HTTP"),
        "\(error)")
      XCTAssertFalse(error.description.contains("msize"), "\(error)")
    }
  }

  /// Only `9P2000` itself is taken: `unknown`, the `.u` and `.L` dialects and `9P2000` with
  /// anything after it are refused.
  func testRefusesOtherDialects() throws {
    for answer in ["unknown", "9P2000.L", "9P2000.u", "9P2000<junk>", "9P2000 ", "9P200"] {
      let (client, server) = MemoryTransport.pair()
      let thread = Thread {
        guard let frame = server.receive(timeout: 5) else { return }
        _ = frame
        try? server.send(Message.rversion(msize: 8192, version: answer).encoded(tag: NineP.noTag))
      }
      thread.start()
      XCTAssertThrowsError(
        try Session.connect(
          transport: client, configuration: SessionConfiguration(profile: .multiplex, uname: "u"))
      ) { error in
        XCTAssertEqual(error as? NinePError, .versionNotSupported(serverSaid: answer))
        XCTAssertTrue("\(error)".contains("does not speak 9P2000"))
      }
    }
  }

  func testMultiplexPipelinesRequests() throws {
    let seen = Counter()
    let (session, peer) = try connect { server, tag, message in
      // Hold every stat until ten have arrived, then answer them all.
      let held = seen.add((tag, message))
      if held.count == 10 {
        for (tag, _) in held {
          server.reply(
            tag,
            .rstat(stat: Stat(qid: Qid(path: 2), mode: FileMode(permissions: 0o644), name: "x")))
        }
      }
    }
    let done = expectation(description: "all replies")
    done.expectedFulfillmentCount = 10
    for _ in 0..<10 {
      session.stat(0) { result in
        XCTAssertEqual((try? result.get())?.name, "x")
        done.fulfill()
      }
    }
    wait(for: [done], timeout: 5)
    XCTAssertEqual(Set(peer.requests.dropFirst(2).map(\.tag)).count, 10, "distinct tags")
  }

  /// The device profile never has two non-parked requests on the wire.
  func testDeviceSendsOneRequestAtATime() throws {
    let outstanding = Counter()
    let violations = Counter()
    let (session, _) = try connect(profile: .device) { server, tag, message in
      if outstanding.add((tag, message)).count > 1 { _ = violations.add((tag, message)) }
      DispatchQueue.global().asyncAfter(deadline: .now() + 0.005) {
        outstanding.removeAll()
        server.reply(tag, .rclunk)
      }
    }
    let done = expectation(description: "all replies")
    done.expectedFulfillmentCount = 20
    for _ in 0..<20 {
      session.send(.tclunk(fid: 5)) { _ in done.fulfill() }
    }
    wait(for: [done], timeout: 10)
    XCTAssertEqual(violations.count, 0)
  }

  /// An older parked read answered while a newer read is still in its grace period must not
  /// end that grace: the device may still be processing the newer read, and the next SDU
  /// would kill the channel.
  func testAnOlderParkedReadsReplyDoesNotEndANewerReadsGrace() throws {
    let times = TimeLog()
    let (client, server) = MemoryTransport.pair()
    let peer = ScriptedServer(transport: server, msize: 8192) { server, tag, message in
      switch message {
      case .tread(let fid, _, _) where fid == 7:
        times.record("A", tag: tag)  // parks
      case .tread(let fid, _, _) where fid == 8:
        times.record("B", tag: tag)  // parks; the older read is answered just after
        if let older = times.tag("A") {
          DispatchQueue.global().asyncAfter(deadline: .now() + 0.01) {
            server.reply(older, .rread(data: ArraySlice("line\n".utf8)))
          }
        }
      case .tstat:
        times.record("stat", tag: tag)
        server.reply(
          tag,
          .rstat(stat: Stat(qid: Qid(path: 3), mode: FileMode(permissions: 0o444), name: "motd")))
      default: server.reply(tag, .rerror(ename: "operation not supported"))
      }
    }
    _ = peer
    var configuration = SessionConfiguration(
      profile: .device, uname: "glenda", requestTimeout: .seconds(5))
    configuration.parkGrace = .milliseconds(300)
    let session = try Session.connect(transport: client, configuration: configuration)
    addTeardownBlock { session.close() }
    let answered = expectation(description: "older read answered")
    _ = session.read(7, offset: 0, count: 512, mayPark: true) { _ in answered.fulfill() }
    _ = session.read(8, offset: 0, count: 512, mayPark: true) { _ in }
    let statDone = expectation(description: "stat")
    session.stat(0) { _ in statDone.fulfill() }
    wait(for: [answered, statDone], timeout: 5)
    let newer = try XCTUnwrap(times.time("B"))
    let stat = try XCTUnwrap(times.time("stat"))
    XCTAssertGreaterThanOrEqual(
      stat - newer, 0.25, "the stat went out while the newer read was in its grace period")
  }

  /// A read that may park frees the device channel after the grace period, and its flush gets
  /// the device's "Rread(0) then Rflush" order with exactly one completion.
  func testDeviceParkedReadThenFlush() throws {
    let (session, peer) = try connect(profile: .device) { server, tag, message in
      switch message {
      case .tread: break  // parks
      case .tstat:
        server.reply(
          tag,
          .rstat(stat: Stat(qid: Qid(path: 3), mode: FileMode(permissions: 0o444), name: "motd")))
      case .tflush(let oldtag):
        server.reply(oldtag, .rread(data: []))
        server.reply(tag, .rflush)
      default: server.reply(tag, .rerror(ename: "operation not supported"))
      }
    }
    let completions = Counter()
    let readDone = expectation(description: "read completed")
    let handle = session.read(7, offset: 0, count: 512, mayPark: true) { result in
      _ = completions.add((0, .rflush))
      XCTAssertEqual(try? result.get(), [])
      readDone.fulfill()
    }
    let statDone = expectation(description: "stat while parked")
    session.stat(0) { result in
      XCTAssertEqual((try? result.get())?.name, "motd")
      statDone.fulfill()
    }
    wait(for: [statDone], timeout: 5)
    session.cancel(handle)
    wait(for: [readDone], timeout: 5)
    let types = peer.requests.dropFirst(2).map(\.message.type)
    XCTAssertEqual(types, [.tread, .tstat, .tflush])
    // A later request still works: the tags were freed.
    XCTAssertNil(session.closedReason)
    XCTAssertEqual(completions.count, 1)
  }

  func testFlushBeforeReplyGivesFlushed() throws {
    let (session, peer) = try connect { server, tag, message in
      if case .tflush = message { server.reply(tag, .rflush) }
    }
    let done = expectation(description: "flushed")
    let handle = session.read(3, offset: 0, count: 100, mayPark: true) { result in
      guard case .failure(.flushed) = result else { return XCTFail("\(result)") }
      done.fulfill()
    }
    XCTAssertTrue(waitUntil(timeout: 5) { peer.requests.contains { $0.message.type == .tread } })
    session.cancel(handle)
    wait(for: [done], timeout: 5)
  }

  func testTimeoutFlushesAndReportsTimedOut() throws {
    let (session, peer) = try connect(timeout: .milliseconds(100)) { server, tag, message in
      if case .tflush = message { server.reply(tag, .rflush) }
    }
    let done = expectation(description: "timed out")
    session.stat(0) { result in
      XCTAssertEqual(result.map(\.name), .failure(.timedOut))
      done.fulfill()
    }
    wait(for: [done], timeout: 5)
    XCTAssertTrue(waitUntil(timeout: 5) { peer.requests.contains { $0.message.type == .tflush } })
  }

  func testRerrorMapsToErrno() throws {
    let (session, _) = try connect { server, tag, _ in
      server.reply(tag, .rerror(ename: "file not found"))
    }
    let done = expectation(description: "error")
    session.stat(0) { result in
      XCTAssertEqual(result.map(\.name), .failure(.server(ename: "file not found", errno: ENOENT)))
      done.fulfill()
    }
    wait(for: [done], timeout: 5)
  }

  func assertResets(_ hostile: @escaping @Sendable (ScriptedServer, Tag) -> Void, _ what: String)
    throws
  {
    let (session, _) = try connect { server, tag, _ in hostile(server, tag) }
    let done = expectation(description: what)
    session.read(1, offset: 0, count: 16) { result in
      guard case .failure(.sessionClosed(let reason)) = result else {
        return XCTFail("\(what): \(result)")
      }
      XCTAssertFalse(reason.isEmpty)
      done.fulfill()
    }
    wait(for: [done], timeout: 5)
    XCTAssertNotNil(session.closedReason, what)
  }

  func testHostileRepliesResetTheSession() throws {
    try assertResets(
      { server, tag in server.reply(tag, .rread(data: ArraySlice(repeating: 0, count: 17))) },
      "Rread over count")
    try assertResets({ server, tag in server.reply(tag &+ 1, .rread(data: [])) }, "unknown tag")
    try assertResets({ server, tag in server.reply(tag, .rwrite(count: 0)) }, "wrong reply type")
    try assertResets(
      { server, _ in server.sendRaw([9, 0, 0, 0, 117, 1, 0, 0, 0]) }, "truncated frame")
    try assertResets(
      { server, tag in server.reply(tag, .rread(data: ArraySlice(repeating: 0, count: 9000))) },
      "frame over buffer")
  }

  func testLongWalksAreChunkedFromTheRoot() throws {
    let (session, peer) = try connect { server, tag, message in
      switch message {
      case .twalk(_, _, let names):
        server.reply(tag, .rwalk(qids: names.map { _ in Qid(type: .directory, path: 9) }))
      case .tclunk: server.reply(tag, .rclunk)
      default: server.reply(tag, .rerror(ename: "unexpected"))
      }
    }
    let path = (0..<20).map { "d\($0)" }
    let done = expectation(description: "walked")
    session.walk(path) { result in
      XCTAssertNotNil(try? result.get())
      done.fulfill()
    }
    wait(for: [done], timeout: 5)
    let walks = peer.requests.compactMap { request -> (Fid, Fid, Int)? in
      if case .twalk(let fid, let newfid, let names) = request.message {
        return (fid, newfid, names.count)
      }
      return nil
    }
    XCTAssertEqual(walks.map(\.2), [16, 4])
    XCTAssertEqual(walks[0].0, 0, "first walk from the attach fid")
    XCTAssertEqual(walks[1].0, walks[0].1, "second walk continues from the first")
    XCTAssertTrue(walks.allSatisfy { $0.0 != $0.1 }, "never newfid == fid")
  }

  func testPartialWalkIsNotFoundAndFidIsFree() throws {
    let (session, _) = try connect { server, tag, message in
      if case .twalk = message { server.reply(tag, .rwalk(qids: [Qid(type: .directory, path: 2)])) }
    }
    let done = expectation(description: "walked")
    session.walk(["chat", "nope"]) { result in
      guard case .failure(.notFound(let path)) = result else { return XCTFail("\(result)") }
      XCTAssertEqual(path, "/chat/nope")
      done.fulfill()
    }
    wait(for: [done], timeout: 5)
  }

  func testFailedRemoveIsClunked() throws {
    let (session, peer) = try connect { server, tag, message in
      switch message {
      case .tremove: server.reply(tag, .rerror(ename: "remove failed"))
      case .tclunk: server.reply(tag, .rclunk)
      default: break
      }
    }
    let done = expectation(description: "removed")
    session.remove(4) { result in
      XCTAssertEqual(result.map { 0 }, .failure(.server(ename: "remove failed", errno: EIO)))
      done.fulfill()
    }
    wait(for: [done], timeout: 5)
    XCTAssertTrue(
      waitUntil(timeout: 5) { peer.requests.contains { $0.message == .tclunk(fid: 4) } })
  }

  func testDirectoryReadsDeduplicate() throws {
    let lobby = Stat(qid: Qid(path: 1), mode: FileMode(permissions: 0o444), name: "lobby")
    let post = Stat(qid: Qid(path: 2), mode: FileMode(permissions: 0o200), name: "post")
    let (session, _) = try connect { server, tag, message in
      guard case .tread(_, let offset, _) = message else { return }
      // A union-style server: the same entry again at a later offset, then the end.
      switch offset {
      case 0: server.reply(tag, .rread(data: (lobby.encoded() + post.encoded())[...]))
      case UInt64(lobby.wireSize + post.wireSize):
        server.reply(tag, .rread(data: post.encoded()[...]))
      default: server.reply(tag, .rread(data: []))
      }
    }
    let done = expectation(description: "listed")
    session.readDirectory(9) { result in
      XCTAssertEqual((try? result.get())?.map(\.name), ["lobby", "post"])
      done.fulfill()
    }
    wait(for: [done], timeout: 5)
  }

  func testEndlessDirectoryIsCutAtItsLimitsKeepingWhatWasRead() throws {
    let reads = Counter()
    let (session, _) = try connect { server, tag, message in
      guard case .tread(_, let offset, _) = message else { return }
      _ = reads.add((tag, message))
      // Two new names at every offset: the directory never ends.
      let entries = (0..<2).map {
        Stat(
          qid: Qid(path: offset + UInt64($0)), mode: FileMode(permissions: 0o644),
          name: "\(offset)-\($0)")
      }
      server.reply(tag, .rread(data: entries.flatMap { $0.encoded() }[...]))
    }
    let done = expectation(description: "listed")
    session.readDirectory(9, limits: DirectoryLimits(rounds: 50)) { result in
      XCTAssertEqual((try? result.get())?.count, 100)
      done.fulfill()
    }
    wait(for: [done], timeout: 10)
    XCTAssertEqual(reads.count, 50)
  }

  func testUndecodableEntriesAreLeftOut() throws {
    let good = Stat(qid: Qid(path: 1), mode: FileMode(permissions: 0o644), name: "good")
    var bad = Stat(qid: Qid(path: 2), mode: FileMode(permissions: 0o644), name: "XX").encoded()
    // The name's first byte (after size, type, dev, qid, mode, times, length and its count).
    bad[2 + 2 + 4 + Qid.wireSize + 4 + 4 + 4 + 8 + 2] = 0xFF
    let listing = bad + good.encoded()
    let (session, _) = try connect { server, tag, message in
      guard case .tread(_, let offset, _) = message else { return }
      server.reply(tag, .rread(data: offset == 0 ? listing[...] : []))
    }
    let done = expectation(description: "listed")
    session.readDirectory(9) { result in
      XCTAssertEqual((try? result.get())?.map(\.name), ["good"])
      done.fulfill()
    }
    wait(for: [done], timeout: 5)
  }

  func testSessionCloseFailsPendingRequests() throws {
    let (session, _) = try connect { _, _, _ in }
    let done = expectation(description: "failed")
    session.read(1, offset: 0, count: 10, mayPark: true) { result in
      guard case .failure(.sessionClosed) = result else { return XCTFail("\(result)") }
      done.fulfill()
    }
    session.close(reason: "test")
    wait(for: [done], timeout: 5)
  }
}

/// A locked list for handlers running on other threads.
/// When the scripted peer saw each named request, and its tag.
final class TimeLog: @unchecked Sendable {
  private let lock = NSLock()
  private var entries: [String: (tag: Tag, at: Double)] = [:]
  func record(_ name: String, tag: Tag) {
    lock.withLock { entries[name] = (tag, ProcessInfo.processInfo.systemUptime) }
  }
  func tag(_ name: String) -> Tag? { lock.withLock { entries[name]?.tag } }
  func time(_ name: String) -> Double? { lock.withLock { entries[name]?.at } }
}

final class Counter: @unchecked Sendable {
  private let lock = NSLock()
  private var items: [(Tag, Message)] = []
  func add(_ item: (Tag, Message)) -> [(Tag, Message)] {
    lock.lock()
    defer { lock.unlock() }
    items.append(item)
    return items
  }
  func removeAll() {
    lock.lock()
    items.removeAll()
    lock.unlock()
  }
  var count: Int {
    lock.lock()
    defer { lock.unlock() }
    return items.count
  }
  var first: (Tag, Message)? {
    lock.lock()
    defer { lock.unlock() }
    return items.first
  }
}

/// 9P's flush rule: a tag whose request was flushed is reusable only after Rflush, even when
/// the reply crossed the flush.
final class FlushTagReuseTests: XCTestCase {
  func testTagOfAFlushedRequestWaitsForRflush() throws {
    let (client, server) = MemoryTransport.pair()
    let held = Counter()
    let peer = ScriptedServer(transport: server) { server, tag, message in
      switch message {
      case .tflush(let oldtag):
        // The reply crosses the flush; Rflush comes later, after the test sent more.
        server.reply(oldtag, .rread(data: ArraySlice("late".utf8)))
        _ = held.add((tag, message))
      case .tstat:
        server.reply(
          tag, .rstat(stat: Stat(qid: Qid(path: 1), mode: FileMode(permissions: 0o444), name: "x")))
      default:
        break
      }
    }
    var configuration = SessionConfiguration(profile: .multiplex, uname: "u")
    configuration.maxTags = 2
    let session = try Session.connect(transport: client, configuration: configuration)
    defer { session.close() }
    let read = expectation(description: "read answered with the crossing reply")
    let handle = session.read(1, offset: 0, count: 10, mayPark: true) { result in
      XCTAssertEqual((try? result.get()).map { Array($0) }, Array("late".utf8))
      read.fulfill()
    }
    XCTAssertTrue(waitUntil(timeout: 5) { peer.requests.contains { $0.message.type == .tread } })
    session.cancel(handle)
    wait(for: [read], timeout: 5)
    XCTAssertTrue(waitUntil(timeout: 5) { held.count == 1 })
    // Two tags: the read's (reserved until Rflush) and the flush's (in flight). A stat must
    // wait for a tag, and must not reuse the read's.
    let stat = expectation(description: "stat after Rflush")
    session.stat(0) { result in
      XCTAssertEqual((try? result.get())?.name, "x")
      stat.fulfill()
    }
    // An idle period is the point: the stat must not go out during it.
    Thread.sleep(forTimeInterval: 0.1)
    let readTag = peer.requests.first { $0.message.type == .tread }?.tag
    XCTAssertFalse(peer.requests.contains { $0.message.type == .tstat }, "stat sent before Rflush")
    guard let flushTag = held.first?.0 else { return XCTFail("no Tflush") }
    peer.reply(flushTag, .rflush)
    wait(for: [stat], timeout: 5)
    let statTag = peer.requests.first { $0.message.type == .tstat }?.tag
    XCTAssertNotNil(statTag)
    XCTAssertNotNil(readTag)
  }
}

/// A quiet parked read must not keep its slot from a read that waits for one.
final class ParkingRotationTests: XCTestCase {
  func testParkedReadGivesUpItsSlotAfterATurn() throws {
    let (client, server) = MemoryTransport.pair()
    let peer = ScriptedServer(transport: server) { server, tag, message in
      if case .tflush = message { server.reply(tag, .rflush) }
    }
    var configuration = SessionConfiguration(profile: .multiplex, uname: "u")
    configuration.maxParkedReads = 1
    configuration.parkingTurn = .milliseconds(100)
    let session = try Session.connect(transport: client, configuration: configuration)
    defer { session.close() }
    let first = expectation(description: "first read flushed")
    session.read(1, offset: 0, count: 10, mayPark: true) { result in
      guard case .failure(.flushed) = result else { return XCTFail("\(result)") }
      first.fulfill()
    }
    session.read(2, offset: 0, count: 10, mayPark: true) { _ in }
    wait(for: [first], timeout: 5)
    XCTAssertTrue(
      waitUntil(timeout: 5) {
        peer.requests.contains { if case .tread(2, _, _) = $0.message { true } else { false } }
      }, "the waiting read never got the slot")
    // No rotation without contention: the second read keeps its slot through an idle period
    // three turns long.
    Thread.sleep(forTimeInterval: 0.3)
    XCTAssertEqual(peer.requests.filter { $0.message.type == .tflush }.count, 1)
  }
}
