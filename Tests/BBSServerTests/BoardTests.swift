import Foundation
import Logging
import XCTest

@testable import BBSServer

final class BoardTests: XCTestCase {
  private func makeBoard(
    limits: BoardLimits = .standard, store: any BoardStore = InMemoryBoardStore(),
    clock: ManualBoardClock = ManualBoardClock()
  ) throws -> Board {
    try Board(
      configuration: BoardConfiguration(chatRooms: ["lobby", "tech"], limits: limits),
      store: store, clock: clock)
  }

  private func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

  func testMessageCreateWriteRender() throws {
    let board = try makeBoard(clock: ManualBoardClock(wallMillis: 42))
    let created = try board.rooms.createMessage(
      in: "lobby", name: "1738005432123-abc", author: "alice")
    XCTAssertEqual(created.id, 2_838_644_539)
    let content = Array("Subject: Hi all\nX-Other: y\n\nBody text".utf8)
    XCTAssertEqual(
      try board.rooms.write(in: "lobby", id: created.id, offset: 0, data: content), content.count)
    let message = try board.rooms.message(in: "lobby", named: "2838644539-anything")
    XCTAssertEqual(message.subject, "Hi all")
    XCTAssertEqual(text(message.body), "Body text")
    XCTAssertEqual(
      text(message.rendered(.device)),
      "From: alice\nTo: lobby\nSubject: Hi all\nDate: 42\nX-Date-N: 42\n\nBody text\n\nalice\n")
    XCTAssertEqual(
      text(message.rendered(.standard)),
      "From: alice\nTo: lobby\nSubject: Hi all\nDate: Thu, 01 Jan 1970 00:00:00 +0000\n"
        + "X-Date-N: 42\n\nBody text\n\nalice\n")
    XCTAssertEqual(try board.rooms.messages(in: "lobby").map(\.id), [2_838_644_539])
  }

  func testChunkedWritesAssembleInDefaultProfileButNotOnDevice() throws {
    for (limits, expected) in [(BoardLimits.standard, "hello world"), (.device, "world")] {
      let board = try makeBoard(limits: limits)
      let message = try board.rooms.createMessage(in: "lobby", name: "1000", author: "a")
      _ = try board.rooms.write(
        in: "lobby", id: message.id, offset: 0, data: Array("Subject: s\n\nhello ".utf8))
      _ = try board.rooms.write(in: "lobby", id: message.id, offset: 18, data: Array("world".utf8))
      XCTAssertEqual(text(try board.rooms.message(in: "lobby", id: 1000).body), expected)
    }
  }

  func testRoomLimitsAndRoomCreation() throws {
    let board = try makeBoard(limits: .device)
    for index in 0..<20 {
      _ = try board.rooms.createMessage(in: "lobby", name: "\(1000 + index)", author: "a")
    }
    XCTAssertThrowsError(try board.rooms.createMessage(in: "lobby", name: "5000", author: "a")) {
      XCTAssertEqual($0 as? BoardError, .noSpace)
    }
    XCTAssertThrowsError(try board.rooms.createMessage(in: "nope", name: "1", author: "a")) {
      XCTAssertEqual($0 as? BoardError, .notFound)
    }
    XCTAssertThrowsError(try board.createRoomAtRoot("news"))  // created, but "fails"
    XCTAssertTrue(board.rooms.hasRoom("news"))
    let standard = try makeBoard()
    XCTAssertNoThrow(try standard.createRoomAtRoot("news"))
    XCTAssertThrowsError(try standard.createRoomAtRoot("news")) {
      XCTAssertEqual($0 as? BoardError, .exists)
    }
  }

  func testEtcReadsWritesAndAdmin() throws {
    let board = try makeBoard()
    XCTAssertEqual(text(board.etc.read(.version)), "9BBS v0.1.0\n")
    XCTAssertEqual(text(board.etc.read(.registration)), "enabled\n")
    board.etc.register(user: "root")
    board.etc.register(user: "bob")
    XCTAssertEqual(text(board.etc.read(.registration)), "disabled\n")
    XCTAssertTrue(board.etc.isAdmin("root"))
    XCTAssertThrowsError(try board.etc.write(.motd, offset: 0, data: Array("x".utf8), user: "bob"))
    XCTAssertThrowsError(
      try board.etc.write(.version, offset: 0, data: Array("x".utf8), user: "root"))
    XCTAssertEqual(
      try board.etc.write(.motd, offset: 0, data: Array("Hello\n".utf8), user: "root"), 6)
    XCTAssertEqual(text(board.etc.read(.motd)), "Hello\n")
    let long = [UInt8](repeating: 0x41, count: 100)
    XCTAssertEqual(try board.etc.write(.boardname, offset: 0, data: long, user: "root"), 63)
    XCTAssertEqual(board.etc.value(.boardname).count, 63)
  }

  func testSQLiteStoreSurvivesRestart() throws {
    let dir = FileManager.default.temporaryDirectory
      .appendingPathComponent("9bbs-store-\(UUID().uuidString)").path
    defer { try? FileManager.default.removeItem(atPath: dir) }
    do {
      let board = try makeBoard(store: try SQLiteBoardStore(directory: dir))
      board.etc.register(user: "root")
      _ = try board.etc.write(.motd, offset: 0, data: Array("persisted\n".utf8), user: "root")
      try board.chat.post(payload: Array("tech:remember me".utf8), author: "alice")
      try board.rooms.createRoom("news")
      let message = try board.rooms.createMessage(in: "news", name: "1738005432123", author: "bob")
      _ = try board.rooms.write(
        in: "news", id: message.id, offset: 0, data: Array("Subject: S\n\nB".utf8))
    }
    let board = try makeBoard(store: try SQLiteBoardStore(directory: dir))
    XCTAssertEqual(board.etc.value(.motd), "persisted")
    XCTAssertTrue(board.etc.isAdmin("root"))
    XCTAssertEqual(board.rooms.roomNames, ["lobby", "tech", "news"])
    let message = try board.rooms.message(in: "news", id: 2_838_644_539)
    XCTAssertEqual(message.subject, "S")
    XCTAssertEqual(text(message.body), "B")
    XCTAssertTrue(
      text(try board.chat.read(room: "tech", user: "x", count: 512)).hasSuffix(
        "alice: remember me\n"))
    try board.chat.post(payload: Array("tech:next".utf8), author: "alice")
    XCTAssertTrue(
      text(try board.chat.read(room: "tech", user: "x", count: 512)).hasSuffix("alice: next\n"))
  }

  func testSQLiteStoreTrimsChatHistory() throws {
    let dir = FileManager.default.temporaryDirectory
      .appendingPathComponent("9bbs-store-\(UUID().uuidString)").path
    defer { try? FileManager.default.removeItem(atPath: dir) }
    let store = try SQLiteBoardStore(directory: dir)
    for id in 1...10 {
      try store.appendChatMessages(
        [ChatMessage(room: "lobby", id: UInt64(id), author: "a", text: [], stamp: 0)], keep: 3)
    }
    XCTAssertEqual(try store.chatMessages(room: "lobby", limit: 100).map(\.id), [8, 9, 10])
  }

  /// The store holds every member's messages: its directory is 0700 and the database with
  /// its WAL files 0600 under a permissive umask, and a database an earlier 9bbsd left
  /// world-readable is made private when opened.
  func testSQLiteStoreFilesAreTheOwnersAlone() throws {
    let dir = FileManager.default.temporaryDirectory
      .appendingPathComponent("9bbs-store-\(UUID().uuidString)").path
    defer { try? FileManager.default.removeItem(atPath: dir) }
    let old = umask(0o002)
    defer { umask(old) }
    func mode(_ path: String) -> mode_t {
      var info = stat()
      return stat(path, &info) == 0 ? info.st_mode & 0o777 : 0
    }
    let database = dir + "/" + SQLiteBoardStore.fileName
    do {
      let store = try SQLiteBoardStore(directory: dir)
      try store.appendChatMessages(
        [ChatMessage(room: "lobby", id: 1, author: "a", text: Array("hi".utf8), stamp: 0)], keep: 3)
      XCTAssertEqual(mode(dir), 0o700)
      for file in [database, database + "-wal", database + "-shm"] {
        XCTAssertEqual(mode(file), 0o600, file)
      }
    }
    XCTAssertEqual(chmod(database, 0o644), 0)
    _ = try SQLiteBoardStore(directory: dir)
    XCTAssertEqual(mode(database), 0o600)
  }

  func testImpliedSubjectsAndDates() {
    XCTAssertEqual(impliedSubject(of: Array("\n  \nFirst line \nsecond".utf8)), "First line")
    XCTAssertEqual(impliedSubject(of: Array(" \n".utf8)), "(no subject)")
    XCTAssertEqual(impliedSubject(of: Array(String(repeating: "é", count: 50).utf8)).utf8.count, 72)
    XCTAssertEqual(rfc2822Date(millis: 1_738_005_432_123), "Mon, 27 Jan 2025 19:17:12 +0000")
    XCTAssertEqual(rfc2822Date(millis: 951_782_400_000), "Tue, 29 Feb 2000 00:00:00 +0000")
  }

  func testRFC822Parsing() {
    XCTAssertEqual(parseRFC822(Array("no headers here".utf8)).body, Array("no headers here".utf8))
    let parsed = parseRFC822(Array("Subject: a b\r\nFrom: x\r\n\r\nbody\n".utf8))
    XCTAssertEqual(parsed.subject, "a b")
    XCTAssertEqual(parsed.body, Array("body\n".utf8))
    XCTAssertEqual(leadingNumber("123-x"), 123)
    XCTAssertNil(leadingNumber("x123"))
  }
}
