import Foundation
import TestSupport
import XCTest

/// Opening a room shows what the server has for you now: a room nobody had open, or one
/// remounted with its history from disk, first reads the lines the server kept for the user
/// (its backlog), so `tail -n 5` shows the last five said, not the last five this mount saw.
final class RoomCatchUpTests: XCTestCase {
  func testRemountedRoomShowsWhatWasSaidWhileAwayMultiplex() throws {
    try remountedRoomShowsWhatWasSaidWhileAway(.multiplexTCP)
  }

  func testRemountedRoomShowsWhatWasSaidWhileAwayDevice() throws {
    try remountedRoomShowsWhatWasSaidWhileAway(.deviceSeqpacket)
  }

  func testRemountedRoomShowsWhatWasSaidWhileAwayGen1() throws {
    try remountedRoomShowsWhatWasSaidWhileAway(.gen1TCP)
  }

  func testRoomNobodyFollowsShowsTheLatestLineMultiplex() throws {
    try roomNobodyFollowsShowsTheLatestLine(.multiplexTCP)
  }

  func testRoomNobodyFollowsShowsTheLatestLineDevice() throws {
    try roomNobodyFollowsShowsTheLatestLine(.deviceSeqpacket)
  }

  func testRoomNobodyFollowsShowsTheLatestLineGen1() throws {
    try roomNobodyFollowsShowsTheLatestLine(.gen1TCP)
  }

  /// With the server gone, an open of a room with history still answers, after a bounded
  /// wait, with what the mount has, and the log says why.
  func testOpenWithTheServerGoneAnswersWithHistoryAfterABoundedWait() throws {
    let rig = try MountRig.start(.multiplexTCP, for: self)
    let state = try makeTemporaryDirectory("mount9bbs-state")
    let away = try rig.mountAway(as: "ada", state: state, for: self)
    try post(away.mountpoint, "kept on disk")
    let seen = try sh("timeout 10 head -n 1 \(away.mountpoint)/chat/lobby")
    away.stop()

    let back = try rig.mountAway(as: "ada", state: state, for: self)
    // Listed while the server was there: the open, not the lookup, meets the dead link.
    try sh("ls \(back.mountpoint)/chat")
    rig.server.stop()
    let started = Date()
    let shown = try shell("timeout 10 tail -n 1 \(back.mountpoint)/chat/lobby", timeout: 20)
    let elapsed = Date().timeIntervalSince(started)
    XCTAssertEqual(shown.status, 0, shown.output)
    XCTAssertEqual(shown.output, seen)
    XCTAssertLessThan(elapsed, 4, "the open waited too long for a server that is gone")
    XCTAssertTrue(
      waitUntil(timeout: 5) { back.child.text.contains("no end of the server's backlog") },
      "the log does not say the room may be behind:\n\(back.child.text)")
  }

  /// Mount A reads three lines, goes away; B says five; A, remounted with its history, shows
  /// exactly those five with `tail -n 5`, on every try.
  private func remountedRoomShowsWhatWasSaidWhileAway(_ setup: Setup) throws {
    let rig = try MountRig.start(setup, for: self)
    let state = try makeTemporaryDirectory("mount9bbs-state")
    let first = try rig.mountAway(as: "ada", state: state, for: self)
    for line in ["before one", "before two", "before three"] {
      try post(first.mountpoint, line)
    }
    let seen = try sh("timeout 10 head -n 3 \(first.mountpoint)/chat/lobby")
    XCTAssertEqual(bodies(seen), ["ada: before one", "ada: before two", "ada: before three"])
    first.stop()

    let said = (1...5).map { "while away \($0)" }
    for line in said { try post(rig.mountpoint, line) }

    let back = try rig.mountAway(as: "ada", state: state, for: self)
    for attempt in 1...3 {
      let started = Date()
      let shown = try sh("timeout 10 tail -n 5 \(back.mountpoint)/chat/lobby")
      XCTAssertEqual(
        bodies(shown), said.map { "root: " + $0 }, "try \(attempt) showed stale lines")
      XCTAssertLessThan(Date().timeIntervalSince(started), 4, "try \(attempt) was slow")
    }
    // And the whole room, in order, each line once.
    let all = try sh("timeout 10 head -n 8 \(back.mountpoint)/chat/lobby")
    XCTAssertEqual(
      bodies(all),
      ["ada: before one", "ada: before two", "ada: before three"] + said.map { "root: " + $0 })
    rig.assertNoViolations()
  }

  /// A room read once and closed: someone else's next line shows on the next open, at once.
  private func roomNobodyFollowsShowsTheLatestLine(_ setup: Setup) throws {
    let rig = try MountRig.start(setup, for: self)
    let other = try rig.secondMount(for: self, options: ["uname=bob"])
    let room = rig.path("chat/tech")
    try post(other.mountpoint, "first", room: "tech")
    XCTAssertEqual(bodies(try sh("timeout 10 tail -n 1 \(room)")), ["bob: first"])
    for line in ["second", "third"] {
      try post(other.mountpoint, line, room: "tech")
      XCTAssertEqual(bodies(try sh("timeout 10 tail -n 2 \(room)")).last, "bob: \(line)")
    }
    XCTAssertEqual(
      bodies(try sh("timeout 10 tail -n 3 \(room)")), ["bob: first", "bob: second", "bob: third"])
    // `stat` too: answered at once (an `ls -l` stats every room), it sets the room catching
    // up, and soon counts the line said since (a copy's read ends at the end).
    let before = Array(try sh("dd if=\(room) iflag=nofollow bs=64k status=none").utf8).count
    try post(other.mountpoint, "fourth", room: "tech")
    func size() -> Int? {
      (try? sh("stat -c %s \(room)")).flatMap {
        Int($0.trimmingCharacters(in: .whitespacesAndNewlines))
      }
    }
    let grown = "[00:00:00] bob: fourth\n".utf8.count
    XCTAssertTrue(
      waitUntil(timeout: 5) { size() == before + grown }, "stat stayed stale: \(size() ?? -1)")
    let last = try sh("timeout 10 tail -n 1 \(room)")
    XCTAssertEqual(bodies(last), ["bob: fourth"])
    XCTAssertEqual(size(), before + Array(last.utf8).count)
    rig.assertNoViolations()
  }

  private func post(_ mountpoint: String, _ text: String, room: String = "lobby") throws {
    try sh("echo '\(text)' > \(mountpoint)/chat/\(room)")
  }

  /// The lines of `output` without their `[HH:MM:SS] ` stamps.
  private func bodies(_ output: String) -> [String] {
    output.split(separator: "\n").map { String($0.split(separator: " ", maxSplits: 1).last ?? "") }
  }
}
