import Foundation
import Logging
import TestSupport
import XCTest

@testable import BBSMount

/// The member's rooms (`watch=mine`): most recent first, kept across mounts, none watched on a
/// board that answers reads at once (Gen-1, one read position for everyone).
final class MemberRoomsTests: XCTestCase {
  private let logger = Logger(label: "test.rooms")

  func testTheMostRecentlyReadRoomsAreKeptAcrossMounts() throws {
    let directory = try makeTemporaryDirectory("member-rooms")
    let rooms = MemberRooms(directory: directory, logger: logger)
    XCTAssertEqual(rooms.recent(3), [String]())
    for room in ["lobby", "tech", "dev", "news", "tech"] { rooms.note(room) }
    XCTAssertFalse(rooms.note("tech"), "already the most recent")
    XCTAssertEqual(rooms.recent(3), ["tech", "news", "dev"])
    // Names a room never has are not rooms.
    XCTAssertFalse(rooms.note("../etc"))
    XCTAssertFalse(rooms.note(""))
    rooms.flush()
    XCTAssertEqual(MemberRooms(directory: directory, logger: logger).recent(5).count, 4)
    XCTAssertEqual(
      MemberRooms(directory: directory, logger: logger).recent(2), ["tech", "news"])
  }

  func testABoardThatAnswersAtOnceHasNoRoomWatched() throws {
    let directory = try makeTemporaryDirectory("member-rooms")
    let rooms = MemberRooms(directory: directory, logger: logger)
    rooms.note("lobby")
    XCTAssertTrue(rooms.learned(boardParksReads: false))
    XCTAssertFalse(rooms.learned(boardParksReads: false), "not news")
    XCTAssertEqual(rooms.recent(3), [String]())
    rooms.flush()
    XCTAssertEqual(MemberRooms(directory: directory, logger: logger).recent(3), [String]())
    // A read that parks later (a device's instant "no slot" answer misled it) corrects it.
    XCTAssertTrue(rooms.learned(boardParksReads: true))
    XCTAssertEqual(rooms.recent(3), ["lobby"])
  }

  func testAHostileFileKeepsOnlyRoomNames() throws {
    let directory = try makeTemporaryDirectory("member-rooms")
    let names = ["lobby", "a/b", "", "lobby"] + (1...100).map { "r\($0)" }
    try JSONSerialization.data(withJSONObject: ["rooms": names, "answersAtOnce": false])
      .write(to: URL(fileURLWithPath: directory + "/rooms.mine"))
    let rooms = MemberRooms(directory: directory, logger: logger)
    XCTAssertEqual(rooms.recent(2), ["lobby", "r1"])
    XCTAssertEqual(rooms.recent(1000).count, MemberRooms.maximumRooms)
    try Data("not json".utf8).write(to: URL(fileURLWithPath: directory + "/rooms.mine"))
    XCTAssertEqual(MemberRooms(directory: directory, logger: logger).recent(3), [String]())
  }
}
