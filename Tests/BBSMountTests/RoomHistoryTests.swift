import Foundation
import Logging
import TestSupport
import XCTest

@testable import BBSMount

/// The on-disk history of a room: whole lines only, bounded, private.
final class RoomHistoryTests: XCTestCase {
  private let logger = Logger(label: "test.history")

  func testKeepsWholeLinesAcrossMountsAndDropsAPartialLastLine() throws {
    let directory = try makeTemporaryDirectory("history-test") + "/bbs"
    do {
      let history = try XCTUnwrap(RoomHistory(directory: directory, room: "lobby", logger: logger))
      XCTAssertEqual(history.load().bytes, [])
      history.append(Array("[10:00:00] ada: one\n[10:00:01] ada: two\n[10:00:02] ada: thr".utf8))
    }
    let history = try XCTUnwrap(RoomHistory(directory: directory, room: "lobby", logger: logger))
    XCTAssertEqual(
      String(decoding: history.load().bytes, as: UTF8.self),
      "[10:00:00] ada: one\n[10:00:01] ada: two\n")
    // The partial line is gone from the file too, so the next line starts clean.
    history.append(Array("[10:00:03] ada: four\n".utf8))
    history.flush()
    XCTAssertEqual(
      String(
        decoding: try XCTUnwrap(FileManager.default.contents(atPath: history.path)), as: UTF8.self),
      "[10:00:00] ada: one\n[10:00:01] ada: two\n[10:00:03] ada: four\n")
    let attributes = try FileManager.default.attributesOfItem(atPath: history.path)
    XCTAssertEqual(attributes[.posixPermissions] as? Int, 0o600)
    let folder = try FileManager.default.attributesOfItem(atPath: directory)
    XCTAssertEqual(folder[.posixPermissions] as? Int, 0o700)
  }

  func testRestoresTheLastPartAndCompactsALargeFile() throws {
    let directory = try makeTemporaryDirectory("history-test") + "/bbs"
    let line = Array((String(repeating: "x", count: 99) + "\n").utf8)
    let lines = RoomHistory.compactBeyond / line.count + 10
    do {
      let history = try XCTUnwrap(RoomHistory(directory: directory, room: "tech", logger: logger))
      history.append(Array([[UInt8]](repeating: line, count: lines).joined()))
    }
    let history = try XCTUnwrap(RoomHistory(directory: directory, room: "tech", logger: logger))
    let restored = history.load().bytes
    XCTAssertLessThanOrEqual(restored.count, RoomHistory.restored)
    XCTAssertGreaterThan(restored.count, RoomHistory.restored - line.count)
    XCTAssertEqual(restored.count % line.count, 0, "restored from a line boundary")
    let size = try FileManager.default.attributesOfItem(atPath: history.path)[.size] as? Int
    XCTAssertEqual(size, restored.count, "the file was cut back to what was restored")
  }

  /// A board flooding a room while the mount runs: the file is cut back whenever it grows past
  /// its bound (it was trimmed only at the next mount, and grew to 35 MB in 90 s).
  func testAFloodWhileMountedKeepsTheFileBounded() throws {
    let directory = try makeTemporaryDirectory("history-test") + "/bbs"
    let history = try XCTUnwrap(RoomHistory(directory: directory, room: "lobby", logger: logger))
    let chunk = Array(
      [[UInt8]](repeating: Array("[10:00:00] eve: flood\n".utf8), count: 4096).joined())
    var largest = 0
    for index in 0..<100 {
      history.append(chunk + Array("[10:00:01] eve: \(index)\n".utf8))
      history.flush()
      let size = try FileManager.default.attributesOfItem(atPath: history.path)[.size] as? Int ?? 0
      largest = max(largest, size)
    }
    XCTAssertLessThanOrEqual(
      largest, RoomHistory.compactBeyond, "written \(100 * chunk.count) bytes")
    let text = String(
      decoding: try XCTUnwrap(FileManager.default.contents(atPath: history.path)), as: UTF8.self)
    XCTAssertTrue(text.hasPrefix("[10:00:0"), "starts at a line: \(text.prefix(40))")
    XCTAssertTrue(text.hasSuffix("eve: 99\n"))
  }

  /// A history directory that others may write (or another user's) is not used: lines planted
  /// in it would show as the room's. The outbox refuses such a directory outright: a post
  /// planted there would go out under the user's name.
  func testStateDirectoriesOthersMayWriteAreNotUsed() throws {
    let base = try makeTemporaryDirectory("history-test")
    let open = base + "/open"
    try FileManager.default.createDirectory(atPath: open, withIntermediateDirectories: true)
    XCTAssertEqual(chmod(open, 0o777), 0)
    XCTAssertNil(RoomHistory(directory: open, room: "lobby", logger: logger))
    XCTAssertEqual(chmod(open, 0o700), 0)
    XCTAssertNotNil(RoomHistory(directory: open, room: "lobby", logger: logger))

    let theirs = base + "/theirs"
    try FileManager.default.createDirectory(atPath: theirs, withIntermediateDirectories: true)
    XCTAssertEqual(chown(theirs, 65534, 65534), 0, "the tests run as root")
    XCTAssertThrowsError(try Outbox(directory: theirs)) {
      XCTAssertTrue("\($0)".contains("is owned by another user"), "\($0)")
    }
    XCTAssertNil(RoomHistory(directory: theirs, room: "lobby", logger: logger))
  }
}
