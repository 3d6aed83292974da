import Foundation
import XCTest

@testable import ChatTerminal

/// Times people can read: a board's stamps become the local time lines were said.
final class StampClockTests: XCTestCase {
  /// 2026-11-18 12:26:40 UTC.
  private let now = Date(timeIntervalSince1970: 1_795_000_000)

  private func model(_ kind: StampKind) -> ChatModel {
    var model = ChatModel(ownNames: ["alice"])
    model.paneWidth = 60
    model.paneHeight = 10
    model.knownRooms = ["lobby"]
    model.readStamps(as: kind)
    model.join("lobby")
    return model
  }

  private func screen(_ model: ChatModel) -> [String] {
    model.currentRoom?.scrollback.visibleRows(height: 50, width: 60).map(\.plainText) ?? []
  }

  private func local(_ date: Date) -> String { StampClock.localText(date) }

  private func dateLine(_ date: Date) -> String {
    "── " + ChatModel.dateText(day: ChatModel.dayNumber(date)) + " ──"
  }

  /// The board: `[00:00:29]` 29 s after it booted was shown as 00:00:29 under
  /// today's date. Now history is placed by the boot its newest stamp implies, and a live
  /// line at the time it arrived, which also tells the boot time exactly.
  func testUptimeStampsShowTheLocalTimeTheLinesWereSaid() {
    var model = model(.uptime)
    model.showHistory(
      "lobby", lines: ["[00:00:29] bob: first", "[00:01:00] bob: second"], unread: nil, now: now)
    XCTAssertEqual(
      screen(model),
      [
        dateLine(now), "\(local(now - 31)) bob: first", "\(local(now)) bob: second",
      ])
    let later = now + 100
    model.receive("lobby", line: "[00:02:35] carol: live", now: later)
    XCTAssertEqual(screen(model).last, "\(local(later)) carol: live")
    // Hours past 23 are uptime too; a line said 5 days after boot is today, not day 5.
    var clock = StampClock(kind: .uptime)
    XCTAssertEqual(clock.live(stamp: 123 * 3600, at: now), now)
    XCTAssertEqual(clock.boot, now - 123 * 3600)
    XCTAssertEqual(clock.history([123 * 3600 - 60], at: now + 5), [now - 60])
  }

  /// A board's restart: lines from before it carry larger stamps; they are never placed
  /// after the lines that follow them.
  func testUptimeHistoryAcrossARestartKeepsItsOrder() {
    var clock = StampClock(kind: .uptime)
    let dates = clock.history([7200, 30, 40], at: now)
    XCTAssertEqual(dates[2], now)
    XCTAssertEqual(dates[1], now - 10)
    XCTAssertEqual(dates[0], now - 10, "before the restart: no later than the next line")
  }

  /// 9bbsd's own stamps are UTC: shown in local time, with the day counted back where the
  /// stamps pass midnight.
  func testUTCStampsAreShownInLocalTimeAndDatedAcrossMidnight() {
    // 00:05:00 UTC on 2026-11-19.
    let morning = Date(timeIntervalSince1970: 1_795_046_400 + 300)
    var clock = StampClock(kind: .utc)
    let dates = clock.history([86390, 10, nil], at: morning)
    XCTAssertEqual(dates[0], Date(timeIntervalSince1970: 1_795_046_400 - 10))
    XCTAssertEqual(dates[1], Date(timeIntervalSince1970: 1_795_046_400 + 10))
    XCTAssertNil(dates[2])
    XCTAssertEqual(clock.live(stamp: 300, at: morning), morning)
    XCTAssertEqual(clock.kind, .utc)
  }

  /// A guess of UTC that a live line contradicts (a device behind a gateway mounted with the
  /// multiplex profile) becomes uptime.
  func testALiveLineCorrectsAWrongGuess() {
    var model = model(.utc)
    model.receive("lobby", line: "[00:00:29] bob: just booted", now: now)
    XCTAssertEqual(screen(model).last, "\(local(now)) bob: just booted")
    XCTAssertEqual(model.stampClock?.kind, .uptime)
  }

  /// Without a reading (no status from the mount), stamps are shown as the board sent them.
  func testWithoutAReadingStampsAreAsSent() {
    var model = ChatModel(ownNames: ["alice"])
    model.paneWidth = 60
    model.knownRooms = ["lobby"]
    model.join("lobby")
    model.receive("lobby", line: "[00:00:29] bob: raw", now: now)
    XCTAssertEqual(screen(model).last, "00:00:29 bob: raw")
  }
}

/// Your own line shows at once, marked as on its way, and becomes the board's line when the
/// board echoes it (as Meshtastic and Bitchat clients do); a failed post takes it away.
final class PendingLineTests: XCTestCase {
  private let now = Date(timeIntervalSince1970: 1_795_000_000)

  private func screen(_ model: ChatModel) -> [String] {
    model.currentRoom?.scrollback.visibleRows(height: 50, width: 60).map(\.plainText) ?? []
  }

  func testOwnLineIsPendingUntilTheBoardEchoesIt() {
    var model = ChatModel(ownNames: ["alice"])
    model.paneWidth = 60
    model.knownRooms = ["lobby"]
    model.join("lobby")
    for character in "hello board" { _ = model.handle(.character(character)) }
    XCTAssertEqual(model.handle(.enter), [.post(room: "lobby", text: "hello board")])
    XCTAssertEqual(screen(model).last, "sending… alice: hello board")
    for character in "second" { _ = model.handle(.character(character)) }
    _ = model.handle(.enter)
    XCTAssertEqual(
      Array(screen(model).suffix(2)), ["sending… alice: hello board", "sending… alice: second"])
    // Another user's line goes above what is on its way.
    model.receive("lobby", line: "[12:00:00] bob: meanwhile", now: now)
    model.receive("lobby", line: "[12:00:01] alice: hello board", now: now)
    XCTAssertEqual(
      Array(screen(model).suffix(3)),
      ["12:00:00 bob: meanwhile", "12:00:01 alice: hello board", "sending… alice: second"])
    model.notSent("second", in: "lobby")
    XCTAssertEqual(screen(model).last, "12:00:01 alice: hello board")
    XCTAssertEqual(model.currentRoom?.sending, [])
  }
}
