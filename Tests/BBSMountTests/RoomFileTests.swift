import Foundation
import Glibc
import TestSupport
import XCTest

/// A room file behaves like a growing file for the other tools users reach for: `head -n 3`
/// ends, `grep --line-buffered` streams, `O_NONBLOCK` gets EAGAIN at the end, `poll()` wakes
/// on a new line, and `stat` sees the size grow.
final class RoomFileTests: XCTestCase {
  func testHeadGrepNonBlockingPollAndGrowthMultiplex() throws {
    try headGrepNonBlockingPollAndGrowth(.multiplexTCP)
  }

  func testHeadGrepNonBlockingPollAndGrowthDevice() throws {
    try headGrepNonBlockingPollAndGrowth(.deviceSeqpacket)
  }

  /// Opening a room again shows its history at once, although the server has nothing new for
  /// this user (its read cursor is at the end): the mount keeps a room's transcript after its
  /// last reader closes.
  func testReopeningARoomShowsItsHistoryAtOnce() throws {
    let rig = try MountRig.start(.multiplexTCP, for: self)
    try post(rig, "remember me")
    let first = try shell("head -n 1 \(rig.path("chat/lobby"))", timeout: 20)
    XCTAssertTrue(first.output.hasSuffix("root: remember me\n"), first.output)
    let started = Date()
    let again = try shell("timeout 5 head -n 1 \(rig.path("chat/lobby"))", timeout: 20)
    XCTAssertEqual(again.status, 0, "the second open waited for a new message")
    XCTAssertEqual(again.output, first.output)
    XCTAssertLessThan(Date().timeIntervalSince(started), 3)
  }

  /// The feed stops when the last reader closes and starts again with the next: a line said
  /// again after that is new, not a replay, and shows (only a lost read arms the filter).
  func testALineSaidAgainAfterTheRoomWasReopenedShows() throws {
    let rig = try MountRig.start(.multiplexTCP, for: self)
    try post(rig, "ok")
    let first = try shell("head -n 1 \(rig.path("chat/lobby"))", timeout: 20)
    XCTAssertTrue(first.output.hasSuffix("root: ok\n"), first.output)
    let reader = ChildProcess("/bin/sh", ["-c", "exec cat \(rig.path("chat/lobby"))"])
    try reader.start()
    addTeardownBlock { reader.stop(grace: 1) }
    XCTAssertTrue(waitUntil(timeout: 10) { reader.text.contains("root: ok") })
    try post(rig, "ok")
    XCTAssertTrue(
      waitUntil(timeout: 10) { reader.text.components(separatedBy: "root: ok\n").count == 3 },
      "the second ok did not show: \(reader.text)")
  }

  /// A room read to the end shows its recent lines at once after a remount (the server has
  /// nothing unread for the user), without showing any line twice; with `history=off` the
  /// room is empty until the next post.
  func testRemountedRoomShowsItsHistoryAtOnce() throws {
    let server = try ServerProcess(transport: "tcp")
    addTeardownBlock { server.stop() }
    let directory = try makeTemporaryDirectory("mount9bbs-history")
    let state = directory + "/state"
    let mountpoint = directory + "/mnt"
    try FileManager.default.createDirectory(atPath: mountpoint, withIntermediateDirectories: false)
    func mount(_ options: [String] = []) throws -> MountProcess {
      let mount = try MountProcess(
        address: server.address, mountpoint: mountpoint, options: ["uname=ada"] + options,
        environment: ["XDG_STATE_HOME": state])
      addTeardownBlock { mount.stop() }
      return mount
    }
    let room = mountpoint + "/chat/lobby"

    let first = try mount()
    for line in ["one", "two", "three"] {
      XCTAssertEqual(try shell("/bin/echo \(line) > \(mountpoint)/chat/post").status, 0)
    }
    let seen = try shell("timeout 10 head -n 3 \(room)", timeout: 20)
    XCTAssertEqual(seen.status, 0, seen.output)
    first.stop()

    _ = try mount()
    let started = Date()
    let again = try shell("timeout 5 head -n 3 \(room)", timeout: 20)
    XCTAssertEqual(again.status, 0, "the remounted room waited for a new post")
    XCTAssertEqual(again.output, seen.output)
    XCTAssertLessThan(Date().timeIntervalSince(started), 3)
    let reader = ChildProcess("/bin/sh", ["-c", "exec cat \(room)"])
    try reader.start()
    addTeardownBlock { reader.stop(grace: 1) }
    XCTAssertEqual(try shell("/bin/echo four > \(mountpoint)/chat/post").status, 0)
    XCTAssertTrue(waitUntil(timeout: 10) { reader.text.contains("ada: four") }, reader.text)
    XCTAssertEqual(
      reader.text.split(separator: "\n").map { $0.split(separator: " ").dropFirst().joined() },
      ["ada:one", "ada:two", "ada:three", "ada:four"])
    reader.stop(grace: 1)
    forceUnmount(mountpoint)

    _ = try mount(["history=off"])
    let empty = try shell("timeout 2 head -n 1 \(room)", timeout: 20)
    XCTAssertEqual(empty.status, 124, "without history the room had lines: \(empty.output)")
  }

  /// Words said again are shown again: after a remount, a line posted while away with the
  /// same author and text as one the room already showed is in the backlog, and the same words
  /// said right after the remount reach a reader (only an exact copy, stamp and all, is a
  /// replay; this mount used to drop such lines for 15 s).
  func testWordsSaidAgainAroundARemountShow() throws {
    let server = try ServerProcess(transport: "tcp")
    addTeardownBlock { server.stop() }
    let directory = try makeTemporaryDirectory("mount9bbs-again")
    let state = directory + "/state"
    for name in ["ada", "bob"] {
      try FileManager.default.createDirectory(
        atPath: directory + "/" + name, withIntermediateDirectories: false)
    }
    func mount(_ name: String) throws -> MountProcess {
      let mount = try MountProcess(
        address: server.address, mountpoint: directory + "/" + name, options: ["uname=" + name],
        environment: ["XDG_STATE_HOME": state + "-" + name])
      addTeardownBlock { mount.stop() }
      return mount
    }
    let room = directory + "/ada/chat/lobby"
    func bobSays(_ text: String) throws {
      XCTAssertEqual(try shell("/bin/echo \(text) > \(directory)/bob/chat/post").status, 0)
    }
    /// Server stamps have whole seconds: the same words a second later are another line.
    func nextSecond() { Thread.sleep(forTimeInterval: 1.1) }

    _ = try mount("bob")
    let first = try mount("ada")
    try bobSays("ok")
    let seen = try shell("timeout 10 head -n 1 \(room)", timeout: 20)
    XCTAssertTrue(seen.output.hasSuffix("bob: ok\n"), seen.output)
    first.stop()

    nextSecond()
    try bobSays("ok")
    _ = try mount("ada")
    let caughtUp = try shell("timeout 5 tail -n 2 \(room)", timeout: 20)
    XCTAssertEqual(
      caughtUp.output.components(separatedBy: "bob: ok\n").count, 3,
      "the ok said while away is missing: \(caughtUp.output)")

    let reader = ChildProcess("/bin/sh", ["-c", "exec cat \(room)"])
    try reader.start()
    addTeardownBlock { reader.stop(grace: 1) }
    func oks() -> Int { reader.text.components(separatedBy: "bob: ok\n").count - 1 }
    XCTAssertTrue(waitUntil(timeout: 10) { oks() == 2 }, reader.text)
    nextSecond()
    try bobSays("ok")
    XCTAssertTrue(
      waitUntil(timeout: 10) { oks() == 3 },
      "the ok said after the remount did not show: \(reader.text)")
  }

  private func post(_ rig: MountRig, _ text: String) throws {
    let result = try shell("echo '\(text)' > \(rig.path("chat/post"))")
    XCTAssertEqual(result.status, 0, result.output)
  }

  private func headGrepNonBlockingPollAndGrowth(_ setup: Setup) throws {
    let rig = try MountRig.start(setup, for: self)
    let room = rig.path("chat/lobby")
    for line in ["alpha 1", "beta 2", "gamma 3", "delta 4"] { try post(rig, line) }

    // head ends after three lines of a file that never ends.
    let head = try shell("head -n 3 \(room)", timeout: 20)
    XCTAssertEqual(head.status, 0, head.output)
    XCTAssertEqual(
      head.output.split(separator: "\n").map { $0.split(separator: " ", maxSplits: 1).last ?? "" },
      ["root: alpha 1", "root: beta 2", "root: gamma 3"])

    // grep --line-buffered streams matching lines as they come.
    let grep = ChildProcess("/bin/sh", ["-c", "exec grep --line-buffered needle \(room)"])
    try grep.start()
    addTeardownBlock { grep.stop(grace: 1) }
    XCTAssertTrue(waitUntil(timeout: 10) { grep.isRunning })
    try post(rig, "hay")
    try post(rig, "a needle here")
    XCTAssertTrue(
      waitUntil(timeout: 10) { grep.text.contains("a needle here") }, "grep got: \(grep.text)")
    XCTAssertFalse(grep.text.contains("hay"))

    // O_NONBLOCK at the end is EAGAIN; poll() waits, then wakes for the next line; the size
    // fstat sees grows with it.
    let fd = open(room, O_RDONLY | O_NONBLOCK)
    XCTAssertGreaterThanOrEqual(fd, 0, String(cString: strerror(errno)))
    defer { close(fd) }
    var buffer = [UInt8](repeating: 0, count: 65536)
    var total = 0
    while true {
      let count = read(fd, &buffer, buffer.count)
      if count > 0 {
        total += count
        continue
      }
      XCTAssertEqual(count, -1)
      XCTAssertEqual(
        errno, EAGAIN, "expected EAGAIN at the end, got \(String(cString: strerror(errno)))")
      break
    }
    var info = stat()
    XCTAssertEqual(fstat(fd, &info), 0)
    XCTAssertEqual(Int(info.st_size), total, "st_size is the transcript length")
    var pollfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
    XCTAssertEqual(poll(&pollfd, 1, 0), 0, "readable with nothing new")
    try post(rig, "wake up")
    pollfd.revents = 0
    XCTAssertEqual(poll(&pollfd, 1, 10_000), 1, "poll did not wake for a new line")
    XCTAssertNotEqual(pollfd.revents & Int16(POLLIN), 0)
    let count = read(fd, &buffer, buffer.count)
    XCTAssertGreaterThan(count, 0)
    XCTAssertTrue(
      String(decoding: buffer[..<max(0, count)], as: UTF8.self).hasSuffix("root: wake up\n"))
    XCTAssertEqual(fstat(fd, &info), 0)
    XCTAssertEqual(Int(info.st_size), total + count, "fstat sees the growth at once")
    XCTAssertEqual(rig.server.violations, [], "device rules broken")
  }
}
