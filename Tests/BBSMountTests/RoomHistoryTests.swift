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
}
