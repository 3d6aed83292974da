import Foundation
import NinePProtocol
import NinePTransport
import TestSupport
import XCTest

@testable import BBSServer

/// `--profile gen1` over TCP: the Gen-1 board (9p4z's 9BBS at 9aa8a00) and its quirks.
final class Gen1ProfileTests: ServerTestCase {
  private func startServer(_ configure: (inout BBSServerConfiguration) -> Void = { _ in }) throws {
    var configuration = BBSServerConfiguration(
      listen: ["tcp!127.0.0.1!0"], profile: .gen1, rooms: ["lobby", "tech"])
    configure(&configuration)
    let server = try BBSServer(configuration: configuration)
    try start(server)
  }

  /// One Tread on `fid`, which must come back (as anything) within `timeout`.
  private func read(
    _ client: WireClient, fid: Fid, count: UInt32 = 8000, tag: Tag = 5,
    timeout: TimeInterval = WireClient.timeout, file: StaticString = #filePath, line: UInt = #line
  ) throws -> String {
    try client.send(.tread(fid: fid, offset: 0, count: count), tag: tag)
    let reply = try client.reply(tag: tag, timeout: timeout, file: file, line: line)
    guard case .rread(let data) = reply else { throw TestError.unexpected("\(reply)") }
    return String(decoding: data, as: UTF8.self)
  }

  private func texts(_ lines: String) -> [String] {
    lines.split(separator: "\n").map { line in
      // "[HH:MM:SS] author: text"
      String(line.split(separator: " ", maxSplits: 1).last ?? "")
    }
  }

  // MARK: Chat

  func testEmptyAndCaughtUpReadsAnswerZeroBytesAtOnce() throws {
    try startServer()
    let client = try connect()
    guard case .ropen(_, let iounit) = try client.open("chat/lobby", fid: 1) else {
      return XCTFail("open failed")
    }
    XCTAssertEqual(iounit, 0, "Gen-1 always says 0")
    // The default profile would park these; here they must come back well within a second.
    XCTAssertEqual(try read(client, fid: 1, timeout: 1), "", "empty room")
    XCTAssertEqual(try client.post("lobby:hello"), .rwrite(count: 11))
    XCTAssertEqual(texts(try read(client, fid: 1, timeout: 1)), ["alice: hello"])
    XCTAssertEqual(try read(client, fid: 1, timeout: 1), "", "caught-up reader")
    XCTAssertEqual(server?.board.chat.waiterCount, 0, "nothing parked")
  }

  func testRingKeepsTheLast49Lines() throws {
    try startServer()
    let client = try connect()
    _ = try client.open("chat/post", fid: 2, mode: .write)
    for index in 1...50 {
      _ = try client.rpc(.twrite(fid: 2, offset: 0, data: ArraySlice("lobby:line \(index)".utf8)))
    }
    _ = try client.open("chat/lobby", fid: 1)
    let lines = texts(try read(client, fid: 1))
    XCTAssertEqual(lines.count, 49)
    XCTAssertEqual(lines.first, "alice: line 2", "the oldest line was evicted silently")
    XCTAssertEqual(lines.last, "alice: line 50")
  }

  func testEveryChatReadUsesTheLastWritersCursor() throws {
    try startServer()
    let alice = try connect("alice")
    let bob = try connect("bob")
    XCTAssertEqual(try alice.post("lobby:one"), .rwrite(count: 9))
    XCTAssertEqual(try alice.post("lobby:two"), .rwrite(count: 9))
    _ = try alice.open("chat/lobby", fid: 1)
    _ = try bob.open("chat/lobby", fid: 1)
    // Bob never wrote: his read uses alice's cursor, and so takes her lines.
    XCTAssertEqual(texts(try read(bob, fid: 1)), ["alice: one", "alice: two"])
    XCTAssertEqual(try read(alice, fid: 1), "", "bob's read moved alice's cursor")
    // A new author: the whole ring replays, for everyone.
    let carol = try connect("carol")
    XCTAssertEqual(try carol.post("lobby:three"), .rwrite(count: 11))
    XCTAssertEqual(
      texts(try read(bob, fid: 1)), ["alice: one", "alice: two", "carol: three"])
    XCTAssertEqual(try read(alice, fid: 1), "")
    // Even a failed write makes its author the board's user.
    XCTAssertEqual(try bob.post("nowhere:x"), .rerror(ename: "write failed"))
    XCTAssertEqual(texts(try read(alice, fid: 1)).count, 3, "replayed under bob's cursor")
    // Readers register the board's user, not themselves.
    let users = try alice.readFile("chat/users")
    XCTAssertTrue(users.contains("alice (idle:"), users)
    XCTAssertTrue(users.contains("carol (idle:"), users)
    XCTAssertTrue(users.contains("bob (idle:"), users)
    XCTAssertEqual(users.split(separator: "\n").count, 3, users)
  }

  // MARK: Errors

  func testFileSystemErrorsCollapseToOneStringPerOperation() throws {
    directory = try makeTemporaryDirectory("9bbs-gen1")
    try Data("x".utf8).write(to: URL(fileURLWithPath: "\(directory)/doomed"))
    try startServer { $0.filesDirectory = self.directory }
    let client = try connect()
    // A failed walk is an Rerror, never a partial Rwalk.
    XCTAssertEqual(
      try client.rpc(.twalk(fid: 0, newfid: 1, names: ["chat", "nowhere"])),
      .rerror(ename: "file not found"))
    // read: EINVAL on /chat/post.
    _ = try client.open("chat/post", fid: 2, mode: .readWrite)
    XCTAssertEqual(
      try client.rpc(.tread(fid: 2, offset: 0, count: 100)), .rerror(ename: "read failed"))
    // write: ENOENT for an unknown room.
    XCTAssertEqual(
      try client.rpc(.twrite(fid: 2, offset: 0, data: ArraySlice("nowhere:hi".utf8))),
      .rerror(ename: "write failed"))
    // remove: ENOTSUP.
    _ = try client.rpc(.twalk(fid: 0, newfid: 3, names: ["etc", "motd"]))
    XCTAssertEqual(try client.rpc(.tremove(fid: 3)), .rerror(ename: "remove failed"))
    // create: EPERM outside a board room.
    _ = try client.rpc(.twalk(fid: 0, newfid: 4, names: ["chat"]))
    XCTAssertEqual(
      try client.rpc(
        .tcreate(fid: 4, name: "room", perm: FileMode(permissions: 0o644), mode: .write)),
      .rerror(ename: "create failed"))
    // stat and open: ENOENT for a file that vanished after the walk.
    _ = try client.rpc(.twalk(fid: 0, newfid: 5, names: ["files", "doomed"]))
    try FileManager.default.removeItem(atPath: "\(directory)/doomed")
    XCTAssertEqual(try client.rpc(.tstat(fid: 5)), .rerror(ename: "stat failed"))
    XCTAssertEqual(try client.rpc(.topen(fid: 5, mode: .read)), .rerror(ename: "open failed"))
    // 9P-level errors keep their own text.
    XCTAssertEqual(
      try client.rpc(.tread(fid: 77, offset: 0, count: 10)), .rerror(ename: "unknown fid"))
  }

  // MARK: Protocol

  func testVersionRepliesAreTaggedNotag() throws {
    try startServer()
    let client = try dial()
    try client.send(.tversion(msize: 65536, version: "9P2000"), tag: 7)
    XCTAssertEqual(
      try client.reply(tag: NineP.noTag), .rversion(msize: 8192, version: "9P2000"))
    try client.send(.tversion(msize: 8192, version: "9P2000.L"), tag: 8)
    XCTAssertEqual(try client.reply(tag: NineP.noTag), .rerror(ename: "unsupported version"))
    XCTAssertFalse(client.arrivalOrder.contains { $0.tag == 7 || $0.tag == 8 })
  }

  func testReadsAreCappedByTheTransmitBufferNotTheMsize() throws {
    try startServer()
    let client = try connect(msize: 256)
    _ = try client.open("chat/post", fid: 2, mode: .write)
    for index in 1...20 {
      _ = try client.rpc(.twrite(fid: 2, offset: 0, data: ArraySlice("lobby:line \(index)".utf8)))
    }
    _ = try client.open("chat/lobby", fid: 1)
    XCTAssertGreaterThan(
      try read(client, fid: 1, count: 4096).utf8.count, 256, "Gen-1 overruns the msize")
  }

  func testFidsLeftOpenAtDisconnectAreCounted() throws {
    try startServer()
    let sloppy = try connect()
    _ = try sloppy.open("chat/lobby", fid: 1)
    _ = try sloppy.rpc(.twalk(fid: 0, newfid: 2, names: ["etc"]))
    sloppy.close()
    XCTAssertTrue(waitUntil(timeout: WireClient.timeout) { self.server?.sessionCount == 0 })
    XCTAssertEqual(server?.fidsLeftOpen, 3, "fids 0, 1 and 2 were never clunked")

    let tidy = try connect("bob")
    _ = try tidy.open("chat/lobby", fid: 1)
    XCTAssertEqual(try tidy.rpc(.tclunk(fid: 1)), .rclunk)
    XCTAssertEqual(try tidy.rpc(.tclunk(fid: 0)), .rclunk)
    tidy.close()
    XCTAssertTrue(waitUntil(timeout: WireClient.timeout) { self.server?.sessionCount == 0 })
    XCTAssertEqual(server?.fidsLeftOpen, 3, "a client that clunked everything adds nothing")
  }

  func testPipelinedRequestsAreAnsweredInOrder() throws {
    try startServer()
    let client = try connect()
    let batch =
      Message.tstat(fid: 0).encoded(tag: 10)
      + Message.twalk(fid: 0, newfid: 1, names: ["etc", "motd"]).encoded(tag: 11)
      + Message.topen(fid: 1, mode: .read).encoded(tag: 12)
      + Message.tread(fid: 1, offset: 0, count: 100).encoded(tag: 13)
    try XCTUnwrap(client.socket).sendRaw(batch)
    guard case .rread = try client.reply(tag: 13) else { return XCTFail("no Rread") }
    XCTAssertEqual(client.arrivalOrder.map(\.tag).suffix(4), [10, 11, 12, 13])
    XCTAssertEqual(try client.rpc(.tclunk(fid: 1), tag: 14), .rclunk, "still connected")
  }

  func testProcessingDelayHoldsEachRequest() throws {
    try startServer { $0.processingDelay = .milliseconds(300) }
    let client = try connect()
    let start = Date()
    XCTAssertEqual(try client.rpc(.tclunk(fid: 9)), .rclunk)
    XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(start), 0.3)
  }
}
