import Foundation
import NinePProtocol
import NinePTransport
import TestSupport
import XCTest

@testable import BBSServer

/// `--profile device` over seqpacket: a real board's limits, quirks and wire discipline.
final class DeviceProfileTests: ServerTestCase {
  private func startServer(processingDelay: Duration = .zero) throws {
    directory = try makeTemporaryDirectory("9bbs-dev")
    let configuration = BBSServerConfiguration(
      listen: ["seqpacket!\(directory)/bbs.sock"], profile: .device, rooms: ["lobby"],
      processingDelay: processingDelay)
    let server = try BBSServer(configuration: configuration)
    try start(server)
  }

  private func rawClient() throws -> (WireClient, SocketTransport) {
    let client = try dial()
    return (client, try XCTUnwrap(client.socket))
  }

  // MARK: Wire violations

  func testTwoMessagesInOneSDUDisconnect() throws {
    try startServer()
    let (client, socket) = try rawClient()
    let version = Message.tversion(msize: 8192, version: "9P2000").encoded(tag: NineP.noTag)
    let attach = Message.tattach(fid: 0, afid: NineP.noFid, uname: "a", aname: "").encoded(tag: 1)
    try socket.sendRaw(version + attach)
    XCTAssertTrue(client.waitForDisconnect())
  }

  func testSDUWhileBusyDisconnects() throws {
    try startServer(processingDelay: .milliseconds(300))
    let (client, socket) = try rawClient()
    try socket.sendRaw(Message.tversion(msize: 8192, version: "9P2000").encoded(tag: NineP.noTag))
    try socket.sendRaw(
      Message.tattach(fid: 0, afid: NineP.noFid, uname: "a", aname: "").encoded(tag: 1))
    XCTAssertTrue(client.waitForDisconnect())
  }

  func testOversizeSDUDisconnects() throws {
    try startServer()
    let client = try connect()
    _ = try client.open("chat/post", fid: 1, mode: .write)
    let big = Message.twrite(fid: 1, offset: 0, data: ArraySlice(repeating: 0x41, count: 300))
    try XCTUnwrap(client.socket).sendRaw(big.encoded(tag: 2))
    XCTAssertTrue(client.waitForDisconnect())
  }

  func testSegmentedMessageIsAccepted() throws {
    try startServer()
    let client = try connect()
    // The transport splits this 330-byte Twrite into SDUs of at most 245 bytes.
    _ = try client.open("chat/post", fid: 1, mode: .write)
    let text = "lobby:" + String(repeating: "x", count: 300)
    XCTAssertEqual(
      try client.rpc(.twrite(fid: 1, offset: 0, data: ArraySlice(text.utf8)), tag: 2),
      .rwrite(count: UInt32(text.utf8.count)), "full count although the text is cut at 255")
    let line = try client.readFile("chat/lobby", count: 1024)
    XCTAssertTrue(line.hasSuffix("alice: " + String(repeating: "x", count: 255) + "\n"))
  }

  // MARK: Limits

  func testFifthParkedReadIsAnsweredAtOnce() throws {
    try startServer()
    let client = try connect()
    for index in 0..<5 { _ = try client.open("chat/lobby", fid: Fid(10 + index)) }
    for index in 0..<4 {
      try client.send(.tread(fid: Fid(10 + index), offset: 0, count: 1024), tag: Tag(100 + index))
      // Wait for the board to free the channel before the next request.
      XCTAssertTrue(
        waitUntil(timeout: WireClient.timeout) {
          self.server?.board.chat.waiterCount == index + 1 && self.server?.busyConnections == 0
        })
    }
    XCTAssertEqual(
      try client.rpc(.tread(fid: 14, offset: 0, count: 1024), tag: 104), .rread(data: []))
    XCTAssertEqual(server?.board.chat.waiterCount, 4)
  }

  func testFidAndWalkRules() throws {
    try startServer()
    let client = try connect()
    XCTAssertEqual(
      try client.rpc(.twalk(fid: 0, newfid: 0, names: ["etc"])),
      .rerror(ename: "cannot allocate newfid"))
    _ = try client.open("etc", fid: 1)
    XCTAssertEqual(
      try client.rpc(.twalk(fid: 1, newfid: 2, names: ["motd"])),
      .rerror(ename: "cannot walk an open fid"))
    XCTAssertEqual(
      try client.rpc(.twstat(fid: 1, stat: .unchanged)), .rerror(ename: "wstat not supported"))
    for fid in 2..<32 {
      guard case .rwalk = try client.rpc(.twalk(fid: 0, newfid: Fid(fid), names: [])) else {
        return XCTFail("clone \(fid) failed")
      }
    }
    XCTAssertEqual(
      try client.rpc(.twalk(fid: 0, newfid: 40, names: [])),
      .rerror(ename: "cannot allocate newfid"))
    XCTAssertEqual(
      try client.rpc(.tversion(msize: 65536, version: "9P2000"), tag: NineP.noTag),
      .rversion(msize: 8192, version: "9P2000"))
  }

  func testQtdirQuirks() throws {
    try startServer()
    let client = try connect()
    guard
      case .rwalk(let qids) = try client.rpc(.twalk(fid: 0, newfid: 1, names: ["chat", "post"]))
    else { return XCTFail("walk failed") }
    XCTAssertTrue(qids[1].isDirectory, "walk says /chat/post is a directory")
    guard case .rstat(let stat) = try client.rpc(.tstat(fid: 1)) else { return XCTFail("stat") }
    XCTAssertEqual(stat.mode.rawValue, 0o755, "mode 0755 without DMDIR")
    XCTAssertTrue(stat.qid.isDirectory)
    XCTAssertEqual(stat.length, 0)
    _ = try client.open("chat", fid: 2)
    guard case .rread(let data) = try client.rpc(.tread(fid: 2, offset: 0, count: 4096)) else {
      return XCTFail("listing failed")
    }
    let entries = try Stat.decodeDirectory(Array(data))
    let post = try XCTUnwrap(entries.first { $0.name == "post" })
    XCTAssertFalse(post.qid.isDirectory)
    XCTAssertEqual(post.mode.rawValue, 0o200)
    XCTAssertNotEqual(post.qid.path, qids[1].path, "qid.path differs between listing and walk")
    XCTAssertEqual(try XCTUnwrap(entries.first { $0.name == "lobby" }).mode.rawValue, 0o444)
    guard case .rwalk(let rooms) = try client.rpc(.twalk(fid: 0, newfid: 3, names: ["rooms"])),
      case .rstat(let roomsStat) = try client.rpc(.tstat(fid: 3))
    else { return XCTFail("rooms") }
    XCTAssertTrue(rooms[0].isDirectory)
    XCTAssertFalse(roomsStat.mode.isDirectory)
  }

  func testRoomCreateAtRootFailsButCreatesAndRoomsFillUp() throws {
    try startServer()
    let client = try connect()
    _ = try client.rpc(.twalk(fid: 0, newfid: 1, names: []))
    XCTAssertEqual(
      try client.rpc(
        .tcreate(fid: 1, name: "news", perm: FileMode(permissions: 0o755, .directory), mode: .read)),
      .rerror(ename: "create failed"))
    XCTAssertTrue(server?.board.rooms.hasRoom("news") ?? false)
    for index in 0..<21 {
      _ = try client.rpc(.twalk(fid: 0, newfid: 2, names: ["rooms", "news"]))
      let reply = try client.rpc(
        .tcreate(fid: 2, name: "\(1_000 + index)", perm: FileMode(permissions: 0o644), mode: .write)
      )
      if index < 20 {
        guard case .rcreate(_, let iounit) = reply else {
          return XCTFail("create \(index): \(reply)")
        }
        XCTAssertEqual(iounit, 0)
      } else {
        XCTAssertEqual(reply, .rerror(ename: "no space left on device"))
      }
      _ = try client.rpc(.tclunk(fid: 2))
    }
  }

  func testFifthSessionIsRefused() throws {
    try startServer()
    for index in 0..<4 { _ = try connect("user\(index)") }
    let extra = try dial()
    XCTAssertTrue(extra.waitForDisconnect())
  }
}
