import Foundation
import Logging
import NinePClient
import NinePProtocol
import XCTest

@testable import BBSMount

#if canImport(Glibc)
  import Glibc
#endif

/// Board messages against a scripted 9P server: a draft goes out whole at close as Tcreate of a
/// timestamp name and one Twrite, once, and a failure keeps its errno.
final class BoardMessageTests: XCTestCase {
  private final class Sent: @unchecked Sendable {
    private let lock = NSLock()
    private var all: [([String], String)] = []
    func add(_ room: [String], _ name: String) { lock.withLock { all.append((room, name)) } }
    var names: [String] { lock.withLock { all.map(\.1) } }
  }

  private func board(_ tree: ScriptedTree, sent: Sent = Sent()) throws -> BoardMessages {
    let session = try connect(to: tree)
    return BoardMessages(
      remote: Remote(sessions: { $0(.success(session)) }),
      logger: Logger(label: "test.board")
    ) { sent.add($0, $1) }
  }

  func testDraftIsSentWholeOnceAsOneTwrite() throws {
    let tree = ScriptedTree(paths: ["rooms", "rooms/lobby"])
    let sent = Sent()
    let board = try board(tree, sent: sent)
    let draft = DraftHandle(roomPath: ["rooms", "lobby"], name: "hello.txt", board: board)
    draft.write(Array("Subject: hi\n\n".utf8), at: 0)
    draft.write(Array("first part, ".utf8), at: 13)
    draft.write(Array("second part\n".utf8), at: 25)
    XCTAssertEqual(draft.size, 37)

    let code = result { done in board.send(draft, done) }
    XCTAssertEqual(code, 0)
    let creates = tree.recorded(\.creates)
    XCTAssertEqual(creates.map(\.directory), ["rooms/lobby"])
    XCTAssertNotNil(UInt64(creates.first?.name ?? ""), "named by a millisecond timestamp")
    let writes = tree.recorded(\.writes)
    XCTAssertEqual(writes.count, 1, "one Twrite: the board re-parses the body on every write")
    XCTAssertEqual(
      writes.first.map { String(decoding: $0.data, as: UTF8.self) },
      "Subject: hi\n\nfirst part, second part\n")
    XCTAssertTrue(tree.waitUntil { $0.clunks.count == 1 }, "the message's fid is clunked")
    XCTAssertEqual(sent.names, ["hello.txt"])

    // The release after the flush has nothing left to send.
    XCTAssertEqual(result { done in board.send(draft, done) }, 0)
    XCTAssertEqual(tree.recorded(\.creates).count, 1)
  }

  func testAFailedWalkKeepsItsErrno() throws {
    let tree = ScriptedTree(paths: ["rooms"])
    tree.refusedWalks["private"] = "permission denied"
    let board = try board(tree)
    let gone = DraftHandle(roomPath: ["rooms", "gone"], name: "a", board: board)
    gone.write(Array("text\n".utf8), at: 0)
    XCTAssertEqual(result { done in board.send(gone, done) }, ENOENT, "not EIO")
    let closed = DraftHandle(roomPath: ["rooms", "private"], name: "b", board: board)
    closed.write(Array("text\n".utf8), at: 0)
    XCTAssertEqual(result { done in board.send(closed, done) }, EACCES, "not EIO")
    XCTAssertTrue(tree.recorded(\.creates).isEmpty)
  }

  func testARefusedCreateKeepsItsErrnoAndClunks() throws {
    let tree = ScriptedTree(paths: ["rooms", "rooms/lobby"])
    tree.refusedCreates["rooms/lobby"] = "permission denied"
    let board = try board(tree)
    let draft = DraftHandle(roomPath: ["rooms", "lobby"], name: "a", board: board)
    draft.write(Array("text\n".utf8), at: 0)
    XCTAssertEqual(result { done in board.send(draft, done) }, EACCES)
    XCTAssertTrue(tree.waitUntil { $0.clunks.map(\.path) == ["rooms/lobby"] })
    XCTAssertTrue(tree.recorded(\.writes).isEmpty)
  }

  func testAnEmptyDraftIsNotSent() throws {
    let tree = ScriptedTree(paths: ["rooms", "rooms/lobby"])
    let board = try board(tree)
    let draft = DraftHandle(roomPath: ["rooms", "lobby"], name: "a", board: board)
    XCTAssertEqual(result { done in board.send(draft, done) }, 0)
    XCTAssertTrue(tree.recorded(\.creates).isEmpty, "nothing written, nothing sent")
  }
}
