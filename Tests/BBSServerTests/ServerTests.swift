import Foundation
import NinePProtocol
import NinePTransport
import TestSupport
import XCTest

@testable import BBSServer

/// The default ("multiplex") profile over real TCP sockets.
final class ServerTests: ServerTestCase {
  private func startServer(_ configure: (inout BBSServerConfiguration) -> Void = { _ in }) throws {
    var configuration = BBSServerConfiguration(
      listen: ["tcp!127.0.0.1!0"], rooms: ["lobby", "tech"], motd: "Hello from the test")
    configure(&configuration)
    let server = try BBSServer(configuration: configuration)
    try start(server)
  }

  private func lines(_ message: Message) -> String {
    guard case .rread(let data) = message else { return "not an Rread: \(message)" }
    return String(decoding: data, as: UTF8.self)
  }

  // MARK: Basics

  func testVersionAuthAttachAndReadMotd() throws {
    try startServer()
    let client = try dial()
    XCTAssertEqual(
      try client.rpc(.tversion(msize: 1 << 30, version: "9P2000"), tag: NineP.noTag),
      .rversion(msize: UInt32(NineP.defaultMessageSize), version: "9P2000"))
    XCTAssertEqual(
      try client.rpc(.tversion(msize: 8192, version: "9P1999"), tag: NineP.noTag),
      .rversion(msize: UInt32(NineP.defaultMessageSize), version: "unknown"))
    // Like 9p4z HEAD: any version starting with 9P2000 gets plain 9P2000.
    XCTAssertEqual(
      try client.rpc(.tversion(msize: 4096, version: "9P2000.L"), tag: NineP.noTag),
      .rversion(msize: 4096, version: "9P2000"))
    XCTAssertEqual(
      try client.rpc(.tversion(msize: 8192, version: "9P2000"), tag: NineP.noTag),
      .rversion(msize: 8192, version: "9P2000"))
    XCTAssertEqual(
      try client.rpc(.tauth(afid: 5, uname: "alice", aname: "")),
      .rerror(ename: "authentication not required"))
    guard
      case .rattach(let qid) = try client.rpc(
        .tattach(fid: 0, afid: NineP.noFid, uname: "alice", aname: ""))
    else { return XCTFail("attach failed") }
    XCTAssertTrue(qid.isDirectory)
    XCTAssertEqual(try client.readFile("etc/motd"), "Hello from the test\n")
    XCTAssertEqual(try client.readFile("etc/version"), "9BBS v0.1.0\n")
    XCTAssertEqual(
      try client.rpc(.tattach(fid: 1, afid: NineP.noFid, uname: "a", aname: "nowhere")),
      .rerror(ename: "aname not found"))
  }

  func testAttachBeforeVersionIsRefused() throws {
    try startServer()
    let client = try dial()
    // Plan 9 servers serve nothing before Tversion; the session then works as usual.
    XCTAssertEqual(
      try client.rpc(.tattach(fid: 0, afid: NineP.noFid, uname: "alice", aname: "")),
      .rerror(ename: "version not negotiated"))
    XCTAssertEqual(
      try client.rpc(.twalk(fid: 0, newfid: 1, names: ["etc"])),
      .rerror(ename: "version not negotiated"))
    try client.handshake()
    XCTAssertEqual(try client.readFile("etc/motd"), "Hello from the test\n")
  }

  func testAttachToSubtreeAndWalks() throws {
    try startServer()
    let client = try connect(aname: "etc")
    XCTAssertEqual(try client.readFile("boardname"), "9BBS\n")
    guard case .rwalk(let qids) = try client.rpc(.twalk(fid: 0, newfid: 1, names: ["nets", "x"]))
    else { return XCTFail("expected a partial walk") }
    XCTAssertEqual(qids.count, 1)
    XCTAssertEqual(
      try client.rpc(.twalk(fid: 0, newfid: 1, names: ["nope"])),
      .rerror(ename: "file not found"))
    // Walking in place is allowed in the default profile.
    guard case .rwalk = try client.rpc(.twalk(fid: 0, newfid: 0, names: ["nets"])) else {
      return XCTFail("walk in place failed")
    }
  }

  func testDirectoryReadsByOffset() throws {
    try startServer()
    let client = try connect()
    _ = try client.open("chat", fid: 3)
    var offset: UInt64 = 0
    var names: [String] = []
    while true {
      // A small count forces several reads, each with whole entries.
      guard case .rread(let data) = try client.rpc(.tread(fid: 3, offset: offset, count: 100))
      else { return XCTFail("read failed") }
      if data.isEmpty { break }
      names += try Stat.decodeDirectory(Array(data)).map(\.name)
      offset += UInt64(data.count)
    }
    XCTAssertEqual(names, ["post", "users", "lobby", "tech"])
  }

  // MARK: Chat

  func testPostThenReadRoom() throws {
    try startServer()
    let client = try connect()
    XCTAssertEqual(try client.post("tech:hello tech\n"), .rwrite(count: 16))
    XCTAssertTrue(try client.readFile("chat/tech").hasSuffix("] alice: hello tech\n"))
    XCTAssertEqual(try client.post("nowhere:x"), .rerror(ename: "file not found"))
    XCTAssertEqual(try client.post("hello: there"), .rerror(ename: "file not found"))
  }

  func testCursorsArePerUser() throws {
    try startServer()
    let alice = try connect("alice")
    let bob = try connect("bob")
    _ = try alice.post("lobby:one")
    _ = try alice.post("lobby:two")
    _ = try alice.open("chat/lobby", fid: 5)
    XCTAssertEqual(
      lines(try alice.rpc(.tread(fid: 5, offset: 0, count: 4096))).split(separator: "\n").count, 2)
    _ = try bob.post("lobby:three")
    XCTAssertTrue(
      lines(try alice.rpc(.tread(fid: 5, offset: 0, count: 4096))).hasSuffix("bob: three\n"))
    XCTAssertEqual(try bob.readFile("chat/lobby").split(separator: "\n").count, 3)
  }

  func testUsersListIgnoresOffset() throws {
    try startServer()
    let client = try connect()
    _ = try client.post("lobby:so the read below does not park")
    _ = try client.readFile("chat/lobby")
    _ = try client.open("chat/users", fid: 6)
    let first = lines(try client.rpc(.tread(fid: 6, offset: 0, count: 512)))
    XCTAssertTrue(first.hasPrefix("alice (idle: "))
    XCTAssertEqual(lines(try client.rpc(.tread(fid: 6, offset: 100, count: 512))), first)
  }

  func testParkedReadIsWokenByAnotherConnection() throws {
    try startServer()
    let reader = try connect("bob")
    let writer = try connect("alice")
    _ = try reader.open("chat/lobby", fid: 7)
    try reader.send(.tread(fid: 7, offset: 0, count: 4096), tag: 40)
    XCTAssertTrue(
      waitUntil(timeout: WireClient.timeout) { self.server?.board.chat.waiterCount == 1 })
    XCTAssertFalse(reader.hasReply(tag: 40))
    // Other requests on the same session are not blocked by the parked read.
    XCTAssertEqual(try reader.readFile("etc/version"), "9BBS v0.1.0\n")
    _ = try writer.post("lobby:wake up")
    XCTAssertTrue(lines(try reader.reply(tag: 40)).hasSuffix("] alice: wake up\n"))
  }

  func testFlushOfParkedReadAnswersReadThenFlush() throws {
    try startServer()
    let client = try connect()
    _ = try client.open("chat/lobby", fid: 7)
    try client.send(.tread(fid: 7, offset: 0, count: 4096), tag: 5)
    XCTAssertTrue(
      waitUntil(timeout: WireClient.timeout) { self.server?.board.chat.waiterCount == 1 })
    try client.send(.tflush(oldtag: 5), tag: 6)
    XCTAssertEqual(try client.reply(tag: 6), .rflush)
    XCTAssertEqual(try client.reply(tag: 5), .rread(data: []))
    let order = client.arrivalOrder.suffix(2).map(\.tag)
    XCTAssertEqual(order, [5, 6], "Rread(0) must precede Rflush")
    XCTAssertEqual(server?.board.chat.waiterCount, 0)
    XCTAssertEqual(try client.rpc(.tflush(oldtag: 99), tag: 7), .rflush)
  }

  func testClunkAnswersParkedReadFirst() throws {
    try startServer()
    let client = try connect()
    _ = try client.open("chat/lobby", fid: 7)
    try client.send(.tread(fid: 7, offset: 0, count: 4096), tag: 5)
    XCTAssertTrue(
      waitUntil(timeout: WireClient.timeout) { self.server?.board.chat.waiterCount == 1 })
    try client.send(.tclunk(fid: 7), tag: 6)
    XCTAssertEqual(try client.reply(tag: 6), .rclunk)
    XCTAssertEqual(try client.reply(tag: 5), .rread(data: []))
    XCTAssertEqual(client.arrivalOrder.suffix(2).map(\.tag), [5, 6])
  }

  func testSecondReadOnFidAnswersTheFirst() throws {
    try startServer()
    let client = try connect()
    _ = try client.open("chat/lobby", fid: 7)
    try client.send(.tread(fid: 7, offset: 0, count: 4096), tag: 5)
    XCTAssertTrue(
      waitUntil(timeout: WireClient.timeout) { self.server?.board.chat.waiterCount == 1 })
    try client.send(.tread(fid: 7, offset: 0, count: 4096), tag: 6)
    XCTAssertEqual(try client.reply(tag: 5), .rread(data: []))
    XCTAssertTrue(
      waitUntil(timeout: WireClient.timeout) { self.server?.board.chat.waiterCount == 1 })
    _ = try client.post("lobby:for the second")
    XCTAssertTrue(lines(try client.reply(tag: 6)).hasSuffix("for the second\n"))
  }

  func testDisconnectDropsParkedReads() throws {
    try startServer()
    let client = try connect()
    _ = try client.open("chat/lobby", fid: 7)
    try client.send(.tread(fid: 7, offset: 0, count: 4096), tag: 5)
    XCTAssertTrue(
      waitUntil(timeout: WireClient.timeout) { self.server?.board.chat.waiterCount == 1 })
    client.close()
    XCTAssertTrue(
      waitUntil(timeout: WireClient.timeout) {
        self.server?.board.chat.waiterCount == 0 && self.server?.sessionCount == 0
      })
  }

  func testTversionDropsParkedReadsWithoutReply() throws {
    try startServer()
    let client = try connect()
    _ = try client.open("chat/lobby", fid: 7)
    try client.send(.tread(fid: 7, offset: 0, count: 4096), tag: 5)
    XCTAssertTrue(
      waitUntil(timeout: WireClient.timeout) { self.server?.board.chat.waiterCount == 1 })
    XCTAssertEqual(
      try client.rpc(.tversion(msize: 8192, version: "9P2000"), tag: NineP.noTag),
      .rversion(msize: 8192, version: "9P2000"))
    XCTAssertEqual(server?.board.chat.waiterCount, 0)
    XCTAssertFalse(client.hasReply(tag: 5))
    XCTAssertEqual(try client.rpc(.tstat(fid: 0)), .rerror(ename: "unknown fid"))
  }

  func testOnePostWakesManyClients() throws {
    try startServer()
    let readers = try (0..<20).map { try connect("reader\($0)") }
    for reader in readers {
      _ = try reader.open("chat/tech", fid: 7)
      try reader.send(.tread(fid: 7, offset: 0, count: 4096), tag: 9)
    }
    XCTAssertTrue(
      waitUntil(timeout: WireClient.timeout) {
        self.server?.board.chat.waiterCount == readers.count
      })
    let writer = try connect("writer")
    _ = try writer.post("tech:hello everyone")
    for reader in readers {
      XCTAssertTrue(lines(try reader.reply(tag: 9)).hasSuffix("writer: hello everyone\n"))
    }
  }

  // MARK: Board rooms and /etc

  func testBoardMessageCreateWriteReadAndListing() throws {
    try startServer()
    let client = try connect()
    guard case .rwalk = try client.rpc(.twalk(fid: 0, newfid: 20, names: ["rooms", "lobby"])) else {
      return XCTFail("walk failed")
    }
    guard
      case .rcreate(let qid, _) = try client.rpc(
        .tcreate(
          fid: 20, name: "1738005432123-abc", perm: FileMode(permissions: 0o644), mode: .write))
    else { return XCTFail("create failed") }
    XCTAssertFalse(qid.isDirectory)
    let content = Array("Subject: Greetings\n\nFirst post.".utf8)
    XCTAssertEqual(
      try client.rpc(.twrite(fid: 20, offset: 0, data: content[...])),
      .rwrite(count: UInt32(content.count)))
    _ = try client.rpc(.tclunk(fid: 20))
    let text = try client.readFile("rooms/lobby/2838644539")
    XCTAssertTrue(text.hasPrefix("From: alice\nTo: lobby\nSubject: Greetings\nDate: "))
    XCTAssertTrue(text.hasSuffix("\n\nFirst post.\n\nalice\n"))
    _ = try client.open("rooms/lobby", fid: 21)
    guard case .rread(let listing) = try client.rpc(.tread(fid: 21, offset: 0, count: 4096)) else {
      return XCTFail("listing failed")
    }
    let entries = try Stat.decodeDirectory(Array(listing))
    XCTAssertEqual(entries.map(\.name), ["2838644539"])
    XCTAssertEqual(entries.first?.length, UInt64(text.utf8.count))  // the size of what reads
    _ = try client.rpc(.twalk(fid: 0, newfid: 22, names: ["rooms", "lobby", "2838644539"]))
    XCTAssertEqual(try client.rpc(.tremove(fid: 22)), .rerror(ename: "operation not supported"))
  }

  func testCreateBoardRoomAtRootAndEtcWrites() throws {
    try startServer()
    let sysop = try connect("root")  // the first user is the sysop
    let other = try connect("mallory")
    guard case .rwalk = try sysop.rpc(.twalk(fid: 0, newfid: 30, names: [])) else {
      return XCTFail("clone failed")
    }
    guard
      case .rcreate(let qid, _) = try sysop.rpc(
        .tcreate(fid: 30, name: "news", perm: FileMode(permissions: 0o755, .directory), mode: .read)
      )
    else { return XCTFail("room create failed") }
    XCTAssertTrue(qid.isDirectory)
    XCTAssertTrue(server?.board.rooms.hasRoom("news") ?? false)
    _ = try other.open("etc/motd", fid: 31, mode: .write)
    XCTAssertEqual(
      try other.rpc(.twrite(fid: 31, offset: 0, data: ArraySlice("hacked".utf8))),
      .rerror(ename: "not authorized"))
    _ = try sysop.open("etc/motd", fid: 31, mode: .write)
    XCTAssertEqual(
      try sysop.rpc(.twrite(fid: 31, offset: 0, data: ArraySlice("New motd\n".utf8))),
      .rwrite(count: 9))
    XCTAssertEqual(try other.readFile("etc/motd"), "New motd\n")
    XCTAssertEqual(try other.readFile("etc/registration"), "disabled\n")
  }

  func testMalformedFrameGetsRerrorAndServerLives() throws {
    try startServer()
    let client = try connect()
    // A Tread frame with its count field missing.
    var frame = Message.tread(fid: 0, offset: 0, count: 1).encoded(tag: 3)
    frame.removeLast(4)
    frame[0] = UInt8(frame.count)
    try client.transport.send(frame)
    XCTAssertEqual(try client.reply(tag: 3), .rerror(ename: "malformed Tread"))
    XCTAssertEqual(try client.readFile("etc/version"), "9BBS v0.1.0\n")
  }

  // MARK: Files area

  func testFilesAreaIsConfinedAndReadOnly() throws {
    let dir = try makeTemporaryDirectory("9bbs-files")
    let outside = try makeTemporaryDirectory("9bbs-outside")
    defer {
      try? FileManager.default.removeItem(atPath: dir)
      try? FileManager.default.removeItem(atPath: outside)
    }
    try "inside\n".write(toFile: dir + "/a.txt", atomically: true, encoding: .utf8)
    try "secret\n".write(toFile: outside + "/secret", atomically: true, encoding: .utf8)
    try FileManager.default.createSymbolicLink(
      atPath: dir + "/escape", withDestinationPath: outside)
    try FileManager.default.createSymbolicLink(atPath: dir + "/alias", withDestinationPath: "a.txt")
    try startServer { $0.filesDirectory = dir }
    let client = try connect()
    XCTAssertEqual(try client.readFile("files/a.txt"), "inside\n")
    XCTAssertEqual(try client.readFile("files/alias"), "inside\n")
    XCTAssertEqual(
      try client.rpc(.twalk(fid: 0, newfid: 40, names: ["files", "escape", "secret"])),
      .rwalk(qids: [try XCTUnwrap(walkQid(client, ["files"]))]))
    // ".." from the area's root leads back into the BBS tree, never to the host.
    guard
      case .rwalk(let qids) = try client.rpc(
        .twalk(fid: 0, newfid: 41, names: ["files", "..", "..", "etc"]))
    else { return XCTFail("walk failed") }
    XCTAssertEqual(qids.count, 4)
    XCTAssertEqual(try client.readFile("etc/version"), "9BBS v0.1.0\n")
    // Read-only: no writing, creating or removing.
    XCTAssertEqual(
      try client.open("files/a.txt", fid: 42, mode: .write), .rerror(ename: "permission denied"))
    _ = try client.rpc(.twalk(fid: 0, newfid: 43, names: ["files"]))
    XCTAssertEqual(
      try client.rpc(
        .tcreate(fid: 43, name: "new", perm: FileMode(permissions: 0o644), mode: .write)),
      .rerror(ename: "permission denied"))
  }

  func testFilesAreaReadWrite() throws {
    let dir = try makeTemporaryDirectory("9bbs-files")
    defer { try? FileManager.default.removeItem(atPath: dir) }
    try startServer {
      $0.filesDirectory = dir
      $0.filesWritable = true
    }
    let client = try connect()
    _ = try client.rpc(.twalk(fid: 0, newfid: 50, names: ["files"]))
    guard
      case .rcreate = try client.rpc(
        .tcreate(fid: 50, name: "note.txt", perm: FileMode(permissions: 0o644), mode: .readWrite))
    else { return XCTFail("create failed") }
    XCTAssertEqual(
      try client.rpc(.twrite(fid: 50, offset: 0, data: ArraySlice("hi there".utf8))),
      .rwrite(count: 8))
    _ = try client.rpc(.tclunk(fid: 50))
    XCTAssertEqual(try String(contentsOfFile: dir + "/note.txt", encoding: .utf8), "hi there")
    XCTAssertEqual(try client.readFile("files/note.txt"), "hi there")
    _ = try client.rpc(.twalk(fid: 0, newfid: 51, names: ["files"]))
    XCTAssertEqual(
      try client.rpc(
        .tcreate(fid: 51, name: "..", perm: FileMode(permissions: 0o644), mode: .write)),
      .rerror(ename: "invalid argument"))
    _ = try client.rpc(.tclunk(fid: 51))
    _ = try client.rpc(.twalk(fid: 0, newfid: 52, names: ["files", "note.txt"]))
    XCTAssertEqual(try client.rpc(.tremove(fid: 52)), .rremove)
    XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/note.txt"))
  }

  /// Twrites as large as the msize allows (their data a view into the received frame) land
  /// byte for byte at their offsets; one whose count disagrees with its size is refused and the file is untouched.
  func testFilesAreaLargeWritesAndBadCounts() throws {
    let dir = try makeTemporaryDirectory("9bbs-files")
    defer { try? FileManager.default.removeItem(atPath: dir) }
    try startServer {
      $0.filesDirectory = dir
      $0.filesWritable = true
    }
    let client = try connect()
    _ = try client.rpc(.twalk(fid: 0, newfid: 60, names: ["files"]))
    guard
      case .rcreate = try client.rpc(
        .tcreate(fid: 60, name: "big.bin", perm: FileMode(permissions: 0o644), mode: .write))
    else { return XCTFail("create failed") }
    let content = (0..<16_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 11) }
    // Out of order, with slices that start mid-buffer.
    for range in [8000..<16_000, 0..<1, 1..<8000] {
      XCTAssertEqual(
        try client.rpc(.twrite(fid: 60, offset: UInt64(range.lowerBound), data: content[range])),
        .rwrite(count: UInt32(range.count)))
    }
    XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: dir + "/big.bin")), Data(content))
    for count: UInt32 in [0, 99, 101, .max] {
      var frame = Message.twrite(fid: 60, offset: 0, data: ArraySlice(repeating: 0, count: 100))
        .encoded(tag: 4)
      for index in 0..<4 { frame[19 + index] = UInt8(truncatingIfNeeded: count >> (8 * index)) }
      try client.transport.send(frame)
      XCTAssertEqual(try client.reply(tag: 4), .rerror(ename: "malformed Twrite"), "\(count)")
    }
    _ = try client.rpc(.tclunk(fid: 60))
    XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: dir + "/big.bin")), Data(content))
  }

  private func walkQid(_ client: WireClient, _ names: [String]) throws -> Qid? {
    guard case .rwalk(let qids) = try client.rpc(.twalk(fid: 0, newfid: 99, names: names)) else {
      return nil
    }
    _ = try client.rpc(.tclunk(fid: 99))
    return qids.last
  }
}
