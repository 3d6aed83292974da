import Foundation
import NinePClient
import NinePProtocol
import XCTest

@testable import BBSMount

/// ReadAhead against a scripted server: requests of one window arriving out of order, a request
/// the kernel sends late, a seek and a second pass over the file, each served with the right
/// bytes and without reading anything twice that did not need it.
final class ReadAheadTests: XCTestCase {
  private let length = 4096
  private let blocks = 64
  /// Eight requests ahead.
  private var depth: Int { 8 * length }

  private func content() -> [UInt8] {
    (0..<length * blocks).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 12) }
  }

  private func open() throws -> (ReadAhead, ScriptedTree) {
    let tree = ScriptedTree(paths: ["files", "files/big"])
    tree.contents["files/big"] = content()
    let session = try connect(to: tree)
    let opened = result { done in session.walkOpen(["files", "big"], mode: .read, completion: done)
    }
    guard case .success(let file)? = opened else {
      XCTFail("open: \(String(describing: opened))")
      throw CocoaError(.fileReadUnknown)
    }
    let remote = RemoteFile(
      path: ["files", "big"], mode: .read, session: session, fid: file.fid, iounit: 0,
      sessions: { $0(.success(session)) })
    let readAhead = ReadAhead(
      file: remote, depth: depth, size: UInt64(length * blocks), generation: { 0 })
    addTeardownBlock { readAhead.close() }
    return (readAhead, tree)
  }

  /// Reads block `index` and checks its bytes.
  private func read(
    _ readAhead: ReadAhead, block index: Int, file: StaticString = #filePath, line: UInt = #line
  ) {
    let got = result { done in
      readAhead.read(
        size: length, offset: UInt64(index * length), group: RequestGroup(), done)
    }
    guard case .success(let pieces)? = got else {
      return XCTFail("block \(index): \(String(describing: got))", file: file, line: line)
    }
    let bytes = pieces.flatMap { Array($0.contents()) }
    XCTAssertEqual(
      bytes, Array(content()[index * length..<(index + 1) * length]), "block \(index)",
      file: file, line: line)
  }

  /// Waits until the server has been asked for the blocks up to `index` (or the last).
  private func assertReadAhead(
    to index: Int, _ tree: ScriptedTree, file: StaticString = #filePath, line: UInt = #line
  ) {
    let target = UInt64(min(index, blocks - 1) * length)
    XCTAssertTrue(
      tree.waitUntil { $0.reads.contains { $0.offset == target } },
      "block \(index) not read ahead: \(requested(tree))", file: file, line: line)
  }

  /// The blocks the server was asked for, in order of arrival.
  private func requested(_ tree: ScriptedTree) -> [Int] {
    tree.recorded { $0.reads.filter { $0.path == "files/big" }.map { Int($0.offset) / length } }
  }

  /// Requests of one window swapped pairwise, as the kernel's readahead and libfuse's threads
  /// deliver them: every block read once, nothing flushed.
  func testReorderedRequestsTakeWhatWasReadAhead() throws {
    let (readAhead, tree) = try open()
    var order: [Int] = []
    for pair in stride(from: 0, to: blocks, by: 2) { order += [pair + 1, pair] }
    for (position, index) in order.enumerated() {
      read(readAhead, block: index)
      // From the fourth read on, eight requests stay ahead of the reader.
      if position >= 3 { assertReadAhead(to: index + 7, tree) }
    }
    let asked = requested(tree)
    XCTAssertEqual(asked.sorted(), Array(0..<blocks), "each block once: \(asked)")
    XCTAssertEqual(tree.recorded(\.flushes), 0)
  }

  /// A request the kernel skipped and sends once the reader reaches it, ten blocks behind:
  /// it is read on its own and what was read ahead stays.
  func testALateRequestBehindLeavesTheReadAheadAlone() throws {
    let (readAhead, tree) = try open()
    for index in 0..<30 where index != 12 { read(readAhead, block: index) }
    read(readAhead, block: 12)
    for index in 30..<40 { read(readAhead, block: index) }
    let asked = requested(tree)
    XCTAssertEqual(asked.filter { $0 < 40 }.sorted(), Array(0..<40), "each once: \(asked)")
    XCTAssertEqual(tree.recorded(\.flushes), 0)
  }

  /// A seek drops what was read ahead; after it reads go on from the new place, correct; a
  /// second pass from the start reads the file again, ahead of the reader once more.
  func testSeekAndSecondPass() throws {
    let (readAhead, tree) = try open()
    for index in 0..<4 { read(readAhead, block: index) }
    for index in 40..<44 { read(readAhead, block: index) }
    assertReadAhead(to: 43 + 8, tree)
    let before = requested(tree).count
    for index in 0..<blocks {
      read(readAhead, block: index)
      // The second pass reads ahead of itself again from its second read.
      if index >= 1 { assertReadAhead(to: index + 8, tree) }
    }
    let secondPass = requested(tree)[before...]
    XCTAssertEqual(secondPass.sorted(), Array(0..<blocks), "each block once")
  }
}
