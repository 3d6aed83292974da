import Foundation
import NinePClient
import NinePProtocol
import XCTest

@testable import BBSMount

#if canImport(Glibc)
  import Glibc
#endif

/// The Remote wing against a scripted 9P server: one walk-open-clunk-on-failure sequence, and
/// errors that keep their errno.
final class RemoteTests: XCTestCase {
  private func tree() -> ScriptedTree {
    ScriptedTree(paths: ["etc", "etc/motd", "chat", "chat/users", "rooms", "rooms/lobby"])
  }

  func testWalkOpenHandsOverAnOpenFid() throws {
    let tree = tree()
    let session = try connect(to: tree)
    let opened = result { done in session.walkOpen(["etc", "motd"], mode: .read, completion: done) }
    guard case .success(let file) = opened else { return XCTFail("\(String(describing: opened))") }
    XCTAssertEqual(tree.recorded(\.opens), ["etc/motd"])
    XCTAssertEqual(tree.recorded(\.walkedFids), [file.fid])
    XCTAssertTrue(tree.recorded(\.clunks).isEmpty, "an open fid is the caller's")
  }

  func testWalkOpenClunksTheFidWhenTheOpenFails() throws {
    let tree = tree()
    tree.refusedOpens["etc/motd"] = "permission denied"
    let session = try connect(to: tree)
    let opened = result { done in session.walkOpen(["etc", "motd"], mode: .write, completion: done)
    }
    guard case .failure(let error) = opened else {
      return XCTFail("opened: \(String(describing: opened))")
    }
    XCTAssertEqual(error.errno, EACCES, "the open's own errno")
    XCTAssertTrue(
      tree.waitUntil { $0.clunks.map(\.fid) == $0.walkedFids && $0.clunks.count == 1 },
      "the walked fid is clunked: \(tree.recorded(\.clunks))")
    XCTAssertEqual(tree.recorded(\.clunks).first?.path, "etc/motd")
  }

  func testWalkOpenKeepsTheWalkError() throws {
    let tree = tree()
    tree.refusedWalks["secret"] = "permission denied"
    let session = try connect(to: tree)
    let missing = result { done in
      session.walkOpen(["etc", "nosuchfile"], mode: .read, completion: done)
    }
    guard case .failure(let notFound) = missing else {
      return XCTFail("\(String(describing: missing))")
    }
    XCTAssertEqual(notFound.errno, ENOENT)
    let refused = result { done in session.walkOpen(["secret"], mode: .read, completion: done) }
    guard case .failure(let denied) = refused else {
      return XCTFail("\(String(describing: refused))")
    }
    XCTAssertEqual(denied.errno, EACCES)
    XCTAssertTrue(tree.recorded(\.opens).isEmpty, "nothing to open after a failed walk")
    XCTAssertTrue(tree.recorded(\.clunks).isEmpty, "a failed walk leaves no fid at the server")
  }

  func testWalkCreateClunksTheFidWhenTheCreateFails() throws {
    let tree = tree()
    tree.refusedCreates["chat"] = "permission denied"
    let session = try connect(to: tree)
    let created = result { done in
      session.walkCreate(
        ["chat"], name: "newroom", perm: FileMode(permissions: 0o644), mode: .write,
        completion: done)
    }
    guard case .failure(let error) = created else {
      return XCTFail("\(String(describing: created))")
    }
    XCTAssertEqual(error.errno, EACCES)
    XCTAssertTrue(
      tree.waitUntil { $0.clunks.map(\.path) == ["chat"] }, "\(tree.recorded(\.clunks))")
  }

  func testRemoteOpenAndReadOnceUseOneFidEach() throws {
    let tree = tree()
    tree.contents["chat/users"] = Array("glenda\nrob\n".utf8)
    let session = try connect(to: tree)
    let remote = Remote(sessions: { $0(.success(session)) })
    let users = result { done in remote.readOnce(["chat", "users"], done) }
    XCTAssertEqual(try users?.get(), Array("glenda\nrob\n".utf8))
    XCTAssertTrue(tree.waitUntil { $0.clunks.map(\.path) == ["chat/users"] })

    let file = result { done in remote.open(["etc", "motd"], mode: .read, done) }
    guard case .success(let opened) = file else { return XCTFail("\(String(describing: file))") }
    XCTAssertEqual(opened.path, ["etc", "motd"])
    opened.close()
    XCTAssertTrue(tree.waitUntil { $0.clunks.map(\.path) == ["chat/users", "etc/motd"] })
  }

  func testRemoteOperationsFailWithTheSessionsErrno() {
    let remote = Remote(sessions: { $0(.failure(.sessionClosed(reason: "the link is down"))) })
    let opened = result { done in remote.open(["etc", "motd"], mode: .read, done) }
    guard case .failure(let error) = opened else { return XCTFail("\(String(describing: opened))") }
    XCTAssertEqual(error.errno, ENOTCONN)
  }
}
