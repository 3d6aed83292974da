import FuseKit
import NinePProtocol
import XCTest

@testable import BBSMount

/// Inode numbers by path: stable while a path keeps its type, new when it changes type (the
/// kernel would mark the old inode bad for good, and the file would give EIO after a server
/// stopped lying about it).
final class InodeTableTests: XCTestCase {
  func testNumberIsKeptWhileThePathKeepsItsType() {
    let table = InodeTable()
    let first = table.record(path: ["etc", "motd"], kind: .file, stat: nil)
    let again = table.record(path: ["etc", "motd"], kind: .file, stat: nil)
    XCTAssertEqual(first.inode, again.inode)
    let room = table.record(path: ["chat", "lobby"], kind: .file, stat: nil)
    XCTAssertEqual(
      table.record(path: ["chat", "lobby"], kind: .room(name: "lobby"), stat: nil).inode, room.inode
    )
  }

  func testPathThatChangesTypeGetsANewNumberAndTheOldOneKeepsItsType() {
    let table = InodeTable()
    let file = table.record(path: ["turncoat"], kind: .file, stat: nil)
    let directory = table.record(path: ["turncoat"], kind: .directory, stat: nil)
    XCTAssertNotEqual(file.inode, directory.inode)
    XCTAssertEqual(table.inode(for: ["turncoat"]), directory.inode)
    XCTAssertEqual(table.node(file.inode)?.kind, .file, "the kernel may still ask for the old one")
    let fileAgain = table.record(path: ["turncoat"], kind: .file, stat: nil)
    XCTAssertNotEqual(fileAgain.inode, directory.inode)
    XCTAssertNotEqual(fileAgain.inode, file.inode, "numbers are never reused while mounted")
  }

  func testRenamedDirectoryTakesItsChildren() {
    let table = InodeTable()
    let directory = table.record(path: ["top", "a"], kind: .directory, stat: nil)
    let file = table.record(path: ["top", "a", "f"], kind: .file, stat: nil)
    let deep = table.record(path: ["top", "a", "d", "g"], kind: .file, stat: nil)
    let sibling = table.record(path: ["top", "ab"], kind: .file, stat: nil)
    table.move(from: ["top", "a"], to: ["top", "b"])
    XCTAssertEqual(table.inode(for: ["top", "b"]), directory.inode)
    XCTAssertEqual(table.inode(for: ["top", "b", "f"]), file.inode)
    XCTAssertEqual(table.node(file.inode)?.path, ["top", "b", "f"])
    XCTAssertEqual(table.node(deep.inode)?.path, ["top", "b", "d", "g"])
    XCTAssertNil(table.inode(for: ["top", "a", "f"]))
    XCTAssertEqual(table.node(sibling.inode)?.path, ["top", "ab"], "a name that only starts alike")
  }
}
