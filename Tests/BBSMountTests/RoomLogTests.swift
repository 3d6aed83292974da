import Foundation
import TestSupport
import XCTest

/// `chat/log/ROOM`: what a room has said so far, as a file that ends, so `grep`, `wc -l`,
/// `less` and `cp` work on it while `chat/ROOM` keeps streaming. Caught up as an open of the
/// room is, one stable size per open, the room file's lines and escaping.
final class RoomLogTests: XCTestCase {
  func testSearchAndCountWhatWasSaid() throws {
    let rig = try MountRig.start(.multiplexTCP, for: self)
    let other = try rig.secondMount(for: self, options: ["uname=bob"])
    for line in ["hello all", "alice: are you there", "bye"] {
      try sh("echo '\(line)' > \(other.mountpoint)/chat/post")
    }
    XCTAssertEqual(try sh("ls \(rig.path("chat/log"))"), "lobby\ntech\n")
    // These end: on the room file each would wait for the next line.
    XCTAssertEqual(try sh("timeout 10 wc -l < \(rig.path("chat/log/lobby"))"), "3\n")
    XCTAssertEqual(
      chatTexts(try sh("timeout 10 grep there \(rig.path("chat/log/lobby"))")),
      ["alice: are you there"])
    XCTAssertEqual(
      chatTexts(try sh("timeout 10 tail -n 2 \(rig.path("chat/log/lobby"))")),
      ["alice: are you there", "bye"])
    let copy = rig.directory + "/lobby.txt"
    try sh("timeout 10 cp \(rig.path("chat/log/lobby")) \(copy)")
    let copied = try String(contentsOfFile: copy, encoding: .utf8)
    // The room file's lines, byte for byte.
    XCTAssertEqual(copied, try sh("timeout 10 head -n 3 \(rig.path("chat/lobby"))"))
    XCTAssertEqual(chatLines(copied).map(\.author), ["bob", "bob", "bob"])
    XCTAssertEqual(try sh("timeout 10 cat \(rig.path("chat/log/tech"))"), "")
    // Read only, and nothing is made in it.
    XCTAssertNotEqual(try shell("echo x > \(rig.path("chat/log/lobby"))").status, 0)
    XCTAssertNotEqual(try shell("touch \(rig.path("chat/log/new"))").status, 0)
    // truncate(2) by path and utimes: a setattr with no open (coreutils opens first).
    XCTAssertNotEqual(
      try shell(
        "python3 -c 'import os,sys; os.truncate(sys.argv[1], 0)' \(rig.path("chat/log/lobby"))"
      )
      .status, 0)
    XCTAssertNotEqual(try shell("touch \(rig.path("chat/log/lobby"))").status, 0)
    XCTAssertNotEqual(try shell("rm \(rig.path("chat/log/lobby"))").status, 0)
    XCTAssertNotEqual(try shell("rmdir \(rig.path("chat/log"))").status, 0)
    XCTAssertNotEqual(try shell("timeout 10 cat \(rig.path("chat/log/nosuch"))").status, 0)
    XCTAssertNotEqual(try shell("timeout 10 cat \(rig.path("chat/log/post"))").status, 0)
    rig.assertNoViolations()
  }

  /// An open's size is fixed at open: its `fstat`, its reads and `wc -c` agree, while the
  /// room grows; the next open shows the growth.
  func testEachOpenIsAStableSnapshot() throws {
    let rig = try MountRig.start(.multiplexTCP, for: self)
    let other = try rig.secondMount(for: self, options: ["uname=bob"])
    try sh("echo 'one' > \(other.mountpoint)/chat/post")
    let log = rig.path("chat/log/lobby")
    let script = """
      import os, sys, subprocess
      fd = os.open(sys.argv[1], os.O_RDONLY)
      before = os.fstat(fd).st_size
      subprocess.run(["sh", "-c", "echo two > " + sys.argv[2]], check=True)
      subprocess.run(["timeout", "10", "sh", "-c",
        "until grep -q two " + sys.argv[3] + "; do sleep 0.05; done"], check=True)
      data = b""
      while True:
        chunk = os.read(fd, 7)
        if not chunk: break
        data += chunk
      print(before, os.fstat(fd).st_size, len(data), os.stat(sys.argv[1]).st_size)
      """
    let out = try sh(
      "timeout 20 python3 -c '\(script)' \(log) \(other.mountpoint)/chat/post "
        + "\(rig.path("chat/log/lobby"))")
    let numbers = out.split(separator: " ").compactMap {
      Int($0.trimmingCharacters(in: .whitespacesAndNewlines))
    }
    XCTAssertEqual(numbers.count, 4, out)
    guard numbers.count == 4 else { return }
    let oneLine = "[00:00:00] bob: one\n".utf8.count
    XCTAssertEqual(numbers[0], oneLine, out)
    XCTAssertEqual(numbers[1], oneLine, "fstat of the open changed: \(out)")
    XCTAssertEqual(numbers[2], oneLine, "the open read past its size: \(out)")
    // The same thread's stat of the path while it has it open is its open's size too.
    XCTAssertEqual(numbers[3], oneLine, out)
    XCTAssertEqual(
      try sh("timeout 10 wc -c < \(log)"), "\(oneLine + "[00:00:00] bob: two\n".utf8.count)\n")
    XCTAssertEqual(
      chatLines(try sh("timeout 10 cat \(log)")).map(\.description), ["bob: one", "bob: two"])
    rig.assertNoViolations()
  }

  func testShowsWhatWasSaidWhileAwayMultiplex() throws {
    try showsWhatWasSaidWhileAway(.multiplexTCP)
  }

  func testShowsWhatWasSaidWhileAwayDevice() throws {
    try showsWhatWasSaidWhileAway(.deviceSeqpacket)
  }

  func testShowsWhatWasSaidWhileAwayGen1() throws {
    try showsWhatWasSaidWhileAway(.gen1TCP)
  }

  /// Other users' escape sequences are text, as in the room file; `-o rawtext` keeps them.
  func testEscapesAsTheRoomFileDoes() throws {
    let hostile = #"printf 'look \033[31mRED\n'"#
    for raw in [false, true] {
      let rig = try MountRig.start(
        .deviceSeqpacket, for: self, mountOptions: raw ? ["rawtext"] : [])
      let other = try rig.secondMount(for: self, options: ["uname=mallory"])
      try sh("\(hostile) > \(other.mountpoint)/chat/post")
      let shown = try sh("timeout 10 cat \(rig.path("chat/log/lobby"))")
      if raw {
        XCTAssertTrue(shown.contains("look \u{1B}[31mRED"), shown)
      } else {
        XCTAssertTrue(shown.contains(#"look \x1B[31mRED"#), shown)
        XCTAssertFalse(shown.contains("\u{1B}"), shown)
      }
      other.stop()
      rig.mount.stop()
      rig.server.stop()
    }
  }

  /// A board with a thousand rooms: the log directory lists them all, `ls -l` of it answers
  /// in bounded time (each stat answers at once), and the mount stays small and responsive.
  func testAThousandRoomsStayBounded() throws {
    let rooms = ["lobby"] + (1...1000).map { String(format: "r%04d", $0) }
    let rig = try MountRig.start(.multiplexTCP, for: self, rooms: rooms)
    XCTAssertEqual(try sh("ls \(rig.path("chat/log")) | wc -l", timeout: 30), "1001\n")
    let started = Date()
    XCTAssertEqual(try sh("ls -l \(rig.path("chat/log")) | wc -l", timeout: 60), "1002\n")
    XCTAssertLessThan(Date().timeIntervalSince(started), 30)
    XCTAssertEqual(try sh("timeout 10 cat \(rig.path("chat/log/r0500"))"), "")
    XCTAssertEqual(try sh("timeout 10 cat \(rig.path("etc/boardname"))").isEmpty, false)
    let pid = rig.mount.child.process.processIdentifier
    let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
    let rss = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") }.flatMap {
      Int($0.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
    }
    XCTAssertLessThan(rss ?? .max, 200 << 10, "mount9bbs RSS \(rss ?? -1) KiB")
    XCTAssertTrue(rig.mount.child.isRunning)
  }

  /// A board room named `log` is shadowed by the directory, listed once and said in the log.
  func testARoomNamedLogIsShadowedOnce() throws {
    let rig = try MountRig.start(.multiplexTCP, for: self, rooms: ["lobby", "log"])
    let listed = try sh("ls -F \(rig.path("chat"))").split(separator: "\n")
    XCTAssertEqual(listed.filter { $0.hasPrefix("log") }, ["log/"])
    XCTAssertEqual(try sh("ls \(rig.path("chat/log"))"), "lobby\n")
    XCTAssertTrue(
      waitUntil(timeout: 5) { rig.mount.child.text.contains("room named 'log'") },
      rig.mount.child.text)
  }

  /// Mount A reads, goes away; B says five lines; A, remounted with its history, has all of
  /// them in the log at once, in order, each once.
  private func showsWhatWasSaidWhileAway(_ setup: Setup) throws {
    let rig = try MountRig.start(setup, for: self)
    let state = try makeTemporaryDirectory("mount9bbs-state")
    let first = try rig.mountAway(as: "ada", state: state, for: self)
    try sh("echo 'before' > \(first.mountpoint)/chat/lobby")
    _ = try sh("timeout 10 head -n 1 \(first.mountpoint)/chat/lobby")
    first.stop()
    let said = (1...5).map { "while away \($0)" }
    for line in said { try sh("echo '\(line)' > \(rig.path("chat/lobby"))") }

    let back = try rig.mountAway(as: "ada", state: state, for: self)
    let log = back.mountpoint + "/chat/log/lobby"
    let started = Date()
    let shown = try sh("timeout 10 cat \(log)")
    XCTAssertLessThan(Date().timeIntervalSince(started), 4)
    XCTAssertEqual(
      chatLines(shown).map(\.description), ["ada: before"] + said.map { "root: " + $0 })
    XCTAssertEqual(try sh("timeout 10 wc -l < \(log)"), "6\n")
    rig.assertNoViolations()
  }
}
