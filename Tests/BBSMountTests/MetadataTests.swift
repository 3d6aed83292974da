import Foundation
import FuseKit
import NinePProtocol
import TestSupport
import XCTest

@testable import BBSMount

/// chmod, touch, chown, chgrp, truncate, cp -p, rmdir and df on a real mount of a real
/// `9bbsd --files DIR --files-rw`, checked both through the mount and on the server's disk.
final class MetadataTests: XCTestCase {
  private let fixtures = [
    "a.txt": "0123456789\n",
    "notes/todo.txt": "buy milk\n",
  ]

  /// Runs `command` expecting failure; returns its output (the tool's error message).
  private func failing(_ command: String, file: StaticString = #filePath, line: UInt = #line)
    throws -> String
  {
    let result = try shell(command, timeout: 20)
    XCTAssertNotEqual(result.status, 0, "`\(command)` succeeded", file: file, line: line)
    return result.output
  }

  private func onDisk(_ rig: MountRig, _ relative: String) throws -> stat {
    var buffer = stat()
    guard stat(rig.directory + "/files/" + relative, &buffer) == 0 else {
      throw HarnessError("stat \(relative) on disk: errno \(errno)")
    }
    return buffer
  }

  func testMetadataChangesReachTheServerOrFailClearly() throws {
    let rig = try MountRig.start(
      .multiplexTCP, for: self, files: fixtures, serverArguments: ["--files-rw"])
    let file = rig.path("files/a.txt")

    // chmod: the mount shows the new mode at once, and the real file has it.
    try sh("chmod 600 \(file)")
    XCTAssertEqual(try sh("stat -c %a \(file)"), "600\n")
    XCTAssertEqual(try onDisk(rig, "a.txt").st_mode & 0o7777, 0o600)
    XCTAssertTrue(try failing("chmod u+s \(file)").contains("Operation not permitted"))
    XCTAssertEqual(try onDisk(rig, "a.txt").st_mode & 0o7777, 0o600)

    // touch -d: the time is the server's.
    try sh("touch -d '2020-01-01 00:00:00 UTC' \(file)")
    XCTAssertEqual(try sh("stat -c %Y \(file)"), "1577836800\n")
    XCTAssertEqual(try onDisk(rig, "a.txt").st_mtim.tv_sec, 1_577_836_800)
    try sh("touch -a -d '2021-06-01 00:00:00 UTC' \(file)")
    XCTAssertEqual(try sh("stat -c '%X %Y' \(file)"), "1622505600 1577836800\n")

    // truncate.
    try sh("truncate -s 4 \(file)")
    XCTAssertEqual(try sh("cat \(file)"), "0123")
    XCTAssertEqual(try onDisk(rig, "a.txt").st_size, 4)

    // chown and chgrp: to the owner the mount shows, nothing to do; to anyone else, EPERM.
    try sh("chown $(id -u):$(id -g) \(file)")
    XCTAssertTrue(try failing("chown 12345 \(file)").contains("Operation not permitted"))
    XCTAssertTrue(try failing("chgrp 12345 \(file)").contains("Operation not permitted"))
    XCTAssertEqual(try sh("stat -c %u \(file)"), try sh("id -u"))

    // cp -p keeps the mode and the times.
    let source = rig.directory + "/source.txt"
    try sh(
      "printf 'copied\\n' > \(source) && chmod 640 \(source)"
        + " && touch -d '2019-05-05 05:05:05 UTC' \(source)")
    try sh("cp -p \(source) \(rig.path("files/copy.txt"))")
    XCTAssertEqual(try sh("stat -c '%a %Y %s' \(rig.path("files/copy.txt"))"), "640 1557032705 7\n")
    let copy = try onDisk(rig, "copy.txt")
    XCTAssertEqual(copy.st_mode & 0o7777, 0o640)
    XCTAssertEqual(copy.st_mtim.tv_sec, 1_557_032_705)

    // chmod of a directory, then rmdir of a non-empty one.
    try sh("chmod 700 \(rig.path("files/notes"))")
    XCTAssertEqual(try onDisk(rig, "notes").st_mode & 0o7777, 0o700)
    XCTAssertTrue(
      try failing("rmdir \(rig.path("files/notes"))").contains("Directory not empty"))
    XCTAssertEqual(try sh("cat \(rig.path("files/notes/todo.txt"))"), "buy milk\n")

    // Board and chat files have no metadata to change, but `>` still truncates a post file.
    XCTAssertTrue(
      try failing("chmod 600 \(rig.path("chat/lobby"))").contains("Operation not permitted"))
    XCTAssertTrue(
      try failing("touch -d 2020-01-01 \(rig.path("etc/motd"))").contains(
        "Operation not permitted"))
    try sh("echo 'metadata test post' > \(rig.path("chat/post"))")
    try sh("truncate -s 0 \(rig.path("chat/post"))")

    // df: 9P2000 cannot tell the size, so the mount shows a fixed, empty 1 TiB with 2³² inodes
    // (programs that check for room before writing go ahead; a full server says ENOSPC).
    XCTAssertEqual(
      try sh("stat -f -c '%S %b %f %a %c %d %l' \(rig.mountpoint)"),
      "4096 268435456 268435456 268435456 4294967296 4294967296 255\n")
    XCTAssertTrue(try sh("df \(rig.mountpoint)").contains(rig.mountpoint))

    rig.assertNoViolations()
  }

  func testDeviceRefusesMetadataChangesInsteadOfIgnoringThem() throws {
    let rig = try MountRig.start(
      .deviceSeqpacket, for: self, files: fixtures, serverArguments: ["--files-rw"])
    let file = rig.path("files/a.txt")
    let before = try onDisk(rig, "a.txt")
    XCTAssertTrue(try failing("chmod 600 \(file)").contains("Operation not permitted"))
    XCTAssertTrue(
      try failing("touch -d '2020-01-01 00:00:00 UTC' \(file)").contains(
        "Operation not permitted"))
    let after = try onDisk(rig, "a.txt")
    XCTAssertEqual(after.st_mode, before.st_mode)
    XCTAssertEqual(after.st_mtim.tv_sec, before.st_mtim.tv_sec)
    XCTAssertEqual(try sh("stat -c %a \(file)"), "644\n")
    // Writing with `>` (O_TRUNC at open) still works on a board.
    try sh("echo replaced > \(file)")
    XCTAssertEqual(try sh("cat \(file)"), "replaced\n")
    XCTAssertEqual(try sh("stat -f -c %l \(rig.mountpoint)"), "63\n")
    rig.assertNoViolations()
  }

  func testBoardMessagesListTheSizeCatReadsAndTouchStillMakesADraft() throws {
    let rig = try MountRig.start(.multiplexTCP, for: self)
    let room = rig.path("rooms/lobby")
    try sh("printf 'Lunch on friday?\\nBring snacks.\\n' > \(room)/new")
    let id = try sh("ls \(room)").trimmingCharacters(in: .whitespacesAndNewlines)
    XCTAssertTrue(!id.isEmpty && id.allSatisfy(\.isNumber), "no message in the room: \(id)")
    let message = try sh("cat \(room)/\(id)")
    XCTAssertEqual(try sh("stat -c %s \(room)/\(id)"), "\(message.utf8.count)\n")
    XCTAssertTrue(message.contains("\nSubject: Lunch on friday?\n"), message)
    let date = try XCTUnwrap(
      message.split(separator: "\n").first { $0.hasPrefix("Date: ") }, message)
    XCTAssertNotNil(
      date.range(
        of: #"^Date: \w{3}, \d{2} \w{3} \d{4} \d{2}:\d{2}:\d{2} \+0000$"#,
        options: .regularExpression),
      "not an RFC 2822 date: \(date)")
    // `touch` of a new name in a room still works (the draft has nothing to send).
    try sh("touch \(room)/another")
    XCTAssertTrue(
      try failing("touch -d 2020-01-01 \(room)/\(id)").contains("Operation not permitted"))
    rig.assertNoViolations()
  }

  // MARK: - What a setattr becomes

  private func change(
    _ changes: FuseSetAttributes, kind: NodeKind = .file, _ configure: (inout stat) -> Void
  ) -> Result<MetadataChange, MetadataRefusal> {
    var attributes = stat()
    configure(&attributes)
    return MetadataChange.make(
      for: kind, attributes: attributes, changes: changes, owner: (uid: 1000, gid: 100),
      now: Date(timeIntervalSince1970: 1_700_000_000))
  }

  func testSetattrBecomesOneTwstat() throws {
    var expected = Stat.unchanged
    expected.mode = FileMode(permissions: 0o600)
    expected.length = 5
    expected.mtime = 1_577_836_800
    expected.atime = 1_700_000_000
    let made = try change([.mode, .size, .mtime, .atime, .atimeNow, .uid]) {
      $0.st_mode = S_IFREG | 0o600
      $0.st_size = 5
      $0.st_mtim.tv_sec = 1_577_836_800
      $0.st_uid = 1000  // the owner shown: no change
    }.get()
    XCTAssertEqual(made.stat, expected)
    let before = Stat(
      qid: Qid(type: .file, path: 7), mode: FileMode(permissions: 0o644), atime: 1, mtime: 2,
      length: 10, name: "a", uid: "u")
    let after = made.applied(to: before)
    XCTAssertEqual(
      [after.mode.permissions, UInt32(after.length), after.atime, after.mtime],
      [0o600, 5, 1_700_000_000, 1_577_836_800])
    XCTAssertEqual([after.name, after.uid], ["a", "u"])
    XCTAssertEqual(
      try change([.mode], kind: .directory) { $0.st_mode = S_IFDIR | 0o700 }.get().stat.mode,
      FileMode(permissions: 0o700, .directory))
    XCTAssertFalse(try change([.gid, .ctime]) { $0.st_gid = 100 }.get().changesAnything)
  }

  func testSetattrRefusesWhat9PCannotSay() {
    XCTAssertEqual(change([.uid]) { $0.st_uid = 0 }, .failure(MetadataRefusal(EPERM, "")))
    XCTAssertEqual(change([.gid]) { $0.st_gid = 0 }, .failure(MetadataRefusal(EPERM, "")))
    XCTAssertEqual(
      change([.mode]) { $0.st_mode = S_IFREG | 0o4755 }, .failure(MetadataRefusal(EPERM, "")))
    // Times 9P2000's u32 cannot hold (2³²−1 is "don't change"): EOVERFLOW, never a wrapped time.
    XCTAssertEqual(
      change([.mtime]) { $0.st_mtim.tv_sec = -86400 }, .failure(MetadataRefusal(EOVERFLOW, "")))
    XCTAssertEqual(
      change([.atime, .mtime]) {
        $0.st_atim.tv_sec = 1 << 31
        $0.st_mtim.tv_sec = 1 << 32
      }, .failure(MetadataRefusal(EOVERFLOW, "")))
    XCTAssertEqual(
      change([.atime]) { $0.st_atim.tv_sec = Int(UInt32.max) },
      .failure(MetadataRefusal(EOVERFLOW, "")))
    XCTAssertEqual(
      try change([.atime, .mtime]) {
        $0.st_atim.tv_sec = 1 << 31
        $0.st_mtim.tv_sec = Int(UInt32.max) - 1
      }.get().stat.mtime, UInt32.max - 1)
  }
}
