import Foundation
import TestSupport
import XCTest

/// The mount for real: a `9bbsd` process, a `mount9bbs -f` process, and the tools people use
/// (ls, cat, stat, find, grep, tail, echo) on the mounted tree. Every scenario runs against
/// both the multiplexing server over TCP and the device profile over seqpacket; device runs
/// also check that 9bbsd never had to drop a session for a wire-rule violation.
final class MountIntegrationTests: XCTestCase {
  // MARK: - Browsing, files and board messages

  func testBrowseFilesAndPostBoardMessageMultiplex() throws {
    try browseFilesAndPostBoardMessage(.multiplexTCP)
  }

  func testBrowseFilesAndPostBoardMessageDevice() throws {
    try browseFilesAndPostBoardMessage(.deviceSeqpacket)
  }

  private func browseFilesAndPostBoardMessage(_ setup: Setup) throws {
    // Bigger than one Rread at the device's 8192-byte msize, so reads come in pieces.
    let big = (0..<2000).map { "line \($0) of the big file\n" }.joined()
    let rig = try MountRig.start(
      setup, for: self,
      files: [
        "readme.txt": "hello from the files area\n",
        "big.txt": big,
        "notes/todo.txt": "buy milk\nfind the needle in the haystack\n",
      ],
      serverArguments: ["--board-name", "Mount Test BBS", "--motd", "motd of the mount tests"])

    let root = try sh("ls \(rig.mountpoint)")
    XCTAssertEqual(Set(root.split(separator: "\n")), ["chat", "etc", "files", "rooms"])

    // /etc: ls -l, cat, stat.
    let etc = try sh("ls -l \(rig.path("etc"))")
    for name in ["boardname", "motd", "sysop", "version", "registration"] {
      XCTAssertTrue(
        etc.split(separator: "\n").contains { $0.hasPrefix("-") && $0.hasSuffix(" " + name) },
        "ls -l etc lacks a regular file \(name):\n\(etc)")
    }
    XCTAssertTrue(etc.contains { $0 == "d" } && etc.contains(" nets"), etc)
    XCTAssertEqual(try sh("cat \(rig.path("etc/motd"))"), "motd of the mount tests\n")
    XCTAssertEqual(try sh("cat \(rig.path("etc/boardname"))"), "Mount Test BBS\n")
    let version = try sh("stat -c '%a %U %F' \(rig.path("etc/version"))")
    XCTAssertTrue(version.hasPrefix("444 root regular"), version)
    XCTAssertTrue(try sh("cat \(rig.path("etc/version"))").hasPrefix("9BBS"))
    XCTAssertEqual(
      try sh("stat -c '%F' \(rig.path("etc/nets"))"), "directory\n")

    // /rooms: the board rooms are directories.
    let rooms = try sh("ls -l \(rig.path("rooms"))")
    for name in ["lobby", "tech"] {
      XCTAssertTrue(
        rooms.split(separator: "\n").contains { $0.hasPrefix("d") && $0.hasSuffix(" " + name) },
        rooms)
    }

    // /files: sizes, contents, find, grep -r.
    let files = try sh("ls -l \(rig.path("files"))")
    XCTAssertTrue(
      files.split(separator: "\n").contains {
        $0.hasPrefix("-") && $0.contains(" \(big.utf8.count) ") && $0.hasSuffix(" big.txt")
      }, files)
    XCTAssertTrue(
      files.split(separator: "\n").contains { $0.hasPrefix("d") && $0.hasSuffix(" notes") }, files)
    XCTAssertEqual(try sh("cat \(rig.path("files/readme.txt"))"), "hello from the files area\n")
    XCTAssertEqual(try sh("cat \(rig.path("files/big.txt"))"), big)
    XCTAssertEqual(
      try sh("head -n 3 \(rig.path("files/big.txt"))"),
      "line 0 of the big file\nline 1 of the big file\nline 2 of the big file\n")
    XCTAssertEqual(
      try sh("stat -c '%s %F' \(rig.path("files/big.txt"))"), "\(big.utf8.count) regular file\n")
    XCTAssertEqual(
      Set(try sh("find \(rig.path("files"))").split(separator: "\n").map(String.init)),
      Set(
        ["", "/readme.txt", "/big.txt", "/notes", "/notes/todo.txt"].map { rig.path("files") + $0 })
    )
    XCTAssertEqual(
      try sh("grep -r needle \(rig.path("files"))"),
      rig.path("files/notes/todo.txt") + ":find the needle in the haystack\n")

    // A board message: written with cat > new, it appears under a new numeric id.
    let before = Set(try sh("ls \(rig.path("rooms/lobby"))").split(separator: "\n"))
    let body = "first line of the message\nsecond line, with ünïcödé\n"
    let draft = rig.directory + "/message.txt"
    try Data(("Subject: mount test\n\n" + body).utf8).write(to: URL(fileURLWithPath: draft))
    try sh("cat \(draft) > \(rig.path("rooms/lobby/new"))")
    let after = Set(try sh("ls \(rig.path("rooms/lobby"))").split(separator: "\n"))
    let added = after.subtracting(before)
    XCTAssertEqual(added.count, 1, "ls before: \(before), after: \(after)")
    let id = try XCTUnwrap(added.first)
    XCTAssertTrue(id.allSatisfy(\.isNumber), "new message is not named by a numeric id: \(id)")
    let message = try sh("cat \(rig.path("rooms/lobby/\(id)"))")
    XCTAssertTrue(message.contains("Subject: mount test\n"), message)
    XCTAssertTrue(message.contains("\n\n" + body), "body missing from:\n\(message)")
    // grep -r reaches message files too (their listed size is the body only).
    XCTAssertTrue(
      try sh("grep -r 'second line' \(rig.path("rooms"))").contains("/rooms/lobby/\(id):"))

    rig.assertNoViolations()
  }

  // MARK: - Reading rooms with tail and cat

  func testTailAndCatPrintExactlyThePostedLinesMultiplex() throws {
    try tailAndCatPrintExactlyThePostedLines(.multiplexTCP)
  }

  func testTailAndCatPrintExactlyThePostedLinesDevice() throws {
    try tailAndCatPrintExactlyThePostedLines(.deviceSeqpacket)
  }

  private func tailAndCatPrintExactlyThePostedLines(_ setup: Setup) throws {
    let rig = try MountRig.start(setup, for: self)
    let lobby = rig.path("chat/lobby")
    let early = (1...4).map { "early \($0): posted before anyone reads" }
    for text in early { try sh("echo '\(text)' > \(rig.path("chat/post"))") }

    let readers: [(String, ChildProcess)] = try [
      ("tail -f", background(self, "/usr/bin/tail", ["-f", lobby])),
      ("tail -F", background(self, "/usr/bin/tail", ["-F", lobby])),
      ("tail -n 20 -f", background(self, "/usr/bin/tail", ["-n", "20", "-f", lobby])),
      ("cat", background(self, "/bin/cat", [lobby])),
    ]
    for (name, reader) in readers {
      XCTAssertTrue(
        waitUntil(timeout: 10) { chatTexts(reader.text) == early },
        "\(name) did not print the backlog: \(reader.text)")
    }

    let late = (1...12).map { "late \($0): «ünïcödé» and some words to make it longer" }
    try sh(
      late.map { "echo '\($0)' > \(rig.path("chat/post"))" }.joined(separator: "; "))
    let expected = (early + late).map { ChatLine(author: "root", text: $0) }
    for (name, reader) in readers {
      XCTAssertTrue(
        waitUntil(timeout: 15) { chatLines(reader.text).count >= expected.count },
        "\(name) printed only \(chatLines(reader.text).count) of \(expected.count) lines")
    }
    for (name, reader) in readers {
      XCTAssertEqual(chatLines(reader.text), expected, "\(name) printed:\n\(reader.text)")
      XCTAssertTrue(reader.isRunning, "\(name) ended: a room never ends")
    }
    rig.assertNoViolations()
  }

  func testTailFollowsAnotherClientsPostMultiplex() throws {
    try tailFollowsAnotherClientsPost(.multiplexTCP)
  }

  func testTailFollowsAnotherClientsPostDevice() throws {
    try tailFollowsAnotherClientsPost(.deviceSeqpacket)
  }

  private func tailFollowsAnotherClientsPost(_ setup: Setup) throws {
    let rig = try MountRig.start(setup, for: self)
    let bob = try rig.secondMount(for: self, options: ["uname=bob"])
    let root = ChatLine(author: "root", text: "root is here")
    try sh("echo '\(root.text)' > \(rig.path("chat/post"))")
    let tail = try background(self, "/usr/bin/tail", ["-f", rig.path("chat/lobby")])
    XCTAssertTrue(waitUntil(timeout: 10) { chatLines(tail.text) == [root] }, tail.text)

    let fromBob = ChatLine(author: "bob", text: "hello from bob")
    let posted = ContinuousClock.now
    try sh("echo '\(fromBob.text)' > \(bob.mountpoint)/chat/post")
    XCTAssertTrue(
      waitUntil(timeout: 10) { chatLines(tail.text) == [root, fromBob] },
      "tail -f did not show bob's post: \(tail.text)")
    print("bob's post reached root's tail -f in \(posted.duration(to: .now)) (\(setup))")

    // And the other way round, in a room named by the file.
    let bobHere = ChatLine(author: "bob", text: "bob is here")
    try sh("echo '\(bobHere.text)' > \(bob.mountpoint)/chat/tech")
    let bobsTail = try background(self, "/usr/bin/tail", ["-f", bob.mountpoint + "/chat/tech"])
    XCTAssertTrue(waitUntil(timeout: 10) { chatLines(bobsTail.text) == [bobHere] }, bobsTail.text)
    let fromRoot = ChatLine(author: "root", text: "hello bob, from root")
    try sh("echo '\(fromRoot.text)' > \(rig.path("chat/tech"))")
    XCTAssertTrue(
      waitUntil(timeout: 10) { chatLines(bobsTail.text) == [bobHere, fromRoot] },
      "bob's tail -f printed: \(bobsTail.text)")
    XCTAssertEqual(chatLines(tail.text), [root, fromBob])
    rig.assertNoViolations()
  }

  func testTwoTailsGetEveryLineOfConcurrentWritersMultiplex() throws {
    try twoTailsGetEveryLineOfConcurrentWriters(.multiplexTCP)
  }

  func testTwoTailsGetEveryLineOfConcurrentWritersDevice() throws {
    try twoTailsGetEveryLineOfConcurrentWriters(.deviceSeqpacket)
  }

  private func twoTailsGetEveryLineOfConcurrentWriters(_ setup: Setup) throws {
    let rig = try MountRig.start(setup, for: self)
    let lobby = rig.path("chat/lobby")
    try sh("echo start > \(rig.path("chat/post"))")
    let tails = try (0..<2).map { _ in try background(self, "/usr/bin/tail", ["-f", lobby]) }
    for tail in tails {
      XCTAssertTrue(waitUntil(timeout: 10) { chatTexts(tail.text) == ["start"] }, tail.text)
    }
    let counts = [67, 67, 66]
    let started = ContinuousClock.now
    let writers = try counts.enumerated().map { index, count in
      try background(
        self, "/bin/sh",
        [
          "-c",
          "for n in $(seq 1 \(count)); do echo \"w\(index + 1) $n\" > \(rig.path("chat/post"))"
            + " || exit 1; done",
        ])
    }
    for writer in writers {
      XCTAssertTrue(writer.wait(timeout: 60), "a writer did not finish")
      XCTAssertEqual(writer.process.terminationStatus, 0, writer.text)
    }
    let total = counts.reduce(0, +)
    for (number, tail) in tails.enumerated() {
      XCTAssertTrue(
        waitUntil(timeout: 20) { chatLines(tail.text).count >= 1 + total },
        "tail \(number) printed \(chatLines(tail.text).count - 1) of \(total) lines")
    }
    print(
      "\(total) posts from 3 writers reached both tails in \(started.duration(to: .now)) (\(setup))"
    )
    for (number, tail) in tails.enumerated() {
      var lines = chatLines(tail.text)
      XCTAssertEqual(lines.first?.text, "start")
      lines.removeFirst()
      XCTAssertEqual(lines.count, total, "tail \(number)")
      XCTAssertEqual(Set(lines.map(\.text)).count, lines.count, "tail \(number) duplicated lines")
      XCTAssertTrue(lines.allSatisfy { $0.author == "root" }, "tail \(number): \(tail.text)")
      for (index, count) in counts.enumerated() {
        let mine = lines.map(\.text).filter { $0.hasPrefix("w\(index + 1) ") }
        XCTAssertEqual(
          mine, (1...count).map { "w\(index + 1) \($0)" },
          "tail \(number): writer \(index + 1)'s lines lost or out of order")
      }
    }
    rig.assertNoViolations()
  }

  // MARK: - Blocking, Ctrl-C, and the users file

  func testCatBlocksUntilSigintAndUsersEndsMultiplex() throws {
    try catBlocksUntilSigintAndUsersEnds(.multiplexTCP)
  }

  func testCatBlocksUntilSigintAndUsersEndsDevice() throws {
    try catBlocksUntilSigintAndUsersEnds(.deviceSeqpacket)
  }

  private func catBlocksUntilSigintAndUsersEnds(_ setup: Setup) throws {
    let rig = try MountRig.start(setup, for: self)
    let lobby = rig.path("chat/lobby")
    try sh("echo 'before cat' > \(rig.path("chat/post"))")
    let cat = try background(self, "/bin/cat", [lobby])
    XCTAssertTrue(waitUntil(timeout: 10) { chatTexts(cat.text) == ["before cat"] }, cat.text)
    // cat is now blocked in read(2) at the end of the room: it must stay there.
    XCTAssertFalse(waitUntil(timeout: 1) { !cat.isRunning }, "cat of a room ended: \(cat.text)")

    let signalled = ContinuousClock.now
    cat.signal(SIGINT)
    let ended = waitUntil(timeout: 2, interval: 0.001) { !cat.isRunning }
    let latency = signalled.duration(to: .now)
    XCTAssertTrue(ended, "cat still running 2 s after SIGINT")
    XCTAssertEqual(cat.process.terminationReason, .uncaughtSignal)
    XCTAssertEqual(cat.process.terminationStatus, SIGINT)
    print("SIGINT → blocked cat exited after \(latency) (\(setup))")

    // The users file is read once per open: cat ends.
    let users = try sh("cat \(rig.path("chat/users"))", timeout: 10)
    XCTAssertTrue(users.contains("root (idle: "), users)
    // The room still works after the interrupt.
    let again = try background(self, "/bin/cat", [lobby])
    XCTAssertTrue(waitUntil(timeout: 10) { chatTexts(again.text) == ["before cat"] }, again.text)
    try sh("echo 'after the interrupt' > \(rig.path("chat/post"))")
    XCTAssertTrue(
      waitUntil(timeout: 10) { chatTexts(again.text) == ["before cat", "after the interrupt"] },
      again.text)
    rig.assertNoViolations()
  }

  // MARK: - Posting with echo

  func testEchoPostsLongLinesCRLFAndUnknownRoomsMultiplex() throws {
    try echoPostsLongLinesCRLFAndUnknownRooms(.multiplexTCP)
  }

  func testEchoPostsLongLinesCRLFAndUnknownRoomsDevice() throws {
    try echoPostsLongLinesCRLFAndUnknownRooms(.deviceSeqpacket)
  }

  private func echoPostsLongLinesCRLFAndUnknownRooms(_ setup: Setup) throws {
    let rig = try MountRig.start(setup, for: self)
    try sh(
      "echo 'lobby is open' > \(rig.path("chat/lobby")); "
        + "echo 'tech is open' > \(rig.path("chat/tech"))"
    )
    let lobby = try background(self, "/bin/cat", [rig.path("chat/lobby")])
    let tech = try background(self, "/bin/cat", [rig.path("chat/tech")])
    XCTAssertTrue(waitUntil(timeout: 10) { chatTexts(lobby.text) == ["lobby is open"] }, lobby.text)
    XCTAssertTrue(waitUntil(timeout: 10) { chatTexts(tech.text) == ["tech is open"] }, tech.text)

    try sh("echo 'to the lobby through post' > \(rig.path("chat/post"))")
    try sh("echo 'straight into tech' > \(rig.path("chat/tech"))")
    try sh("echo 'tech:routed to tech through post' > \(rig.path("chat/post"))")
    try sh("echo 'hello: a colon that names no room' > \(rig.path("chat/post"))")
    // 705 bytes, with 2-, 3- and 4-byte characters: more than one post's 255 bytes.
    let long = String(repeating: "é€😀 word ", count: 47)
    XCTAssertGreaterThan(long.utf8.count, 700)
    let longFile = rig.directory + "/long.txt"
    try Data((long + "\n").utf8).write(to: URL(fileURLWithPath: longFile))
    try sh("cat \(longFile) > \(rig.path("chat/tech"))")
    try sh("printf 'sent with CRLF\\r\\n' > \(rig.path("chat/tech"))")

    let missing = try shell("bash -c 'echo x > \(rig.path("chat/nosuchroom"))'")
    XCTAssertNotEqual(missing.status, 0)
    XCTAssertTrue(missing.output.contains("No such file or directory"), missing.output)
    XCTAssertFalse(
      FileManager.default.fileExists(atPath: rig.path("chat/nosuchroom")),
      "writing an unknown room created it")

    XCTAssertTrue(
      waitUntil(timeout: 10) { chatTexts(tech.text).last == "sent with CRLF" }, tech.text)
    XCTAssertEqual(
      chatTexts(lobby.text),
      ["lobby is open", "to the lobby through post", "hello: a colon that names no room"])
    let techTexts = Array(chatTexts(tech.text).dropFirst())
    XCTAssertEqual(techTexts.prefix(2), ["straight into tech", "routed to tech through post"])
    XCTAssertEqual(techTexts.last, "sent with CRLF")
    let pieces = Array(techTexts.dropFirst(2).dropLast())
    XCTAssertGreaterThan(pieces.count, 1, "the long line was not split")
    for piece in pieces { XCTAssertLessThanOrEqual(piece.utf8.count, 255) }
    XCTAssertEqual(pieces.joined(), long, "the long line lost or changed text")
    XCTAssertFalse(tech.text.contains("\r"), "a \\r reached the room")
    rig.assertNoViolations()
  }

  // MARK: - Responsiveness with many blocked readers

  func testMetadataStaysResponsiveWithTenBlockedReadersMultiplex() throws {
    try metadataStaysResponsiveWithTenBlockedReaders(.multiplexTCP)
  }

  func testMetadataStaysResponsiveWithTenBlockedReadersDevice() throws {
    try metadataStaysResponsiveWithTenBlockedReaders(.deviceSeqpacket)
  }

  private func metadataStaysResponsiveWithTenBlockedReaders(_ setup: Setup) throws {
    let rooms = ["lobby"] + (1...9).map { "room\($0)" }
    let rig = try MountRig.start(setup, for: self, rooms: rooms)
    // A line in each room first: a reader that printed it is blocked in read(2) at the end.
    try sh(rooms.map { "echo 'open \($0)' > \(rig.path("chat/" + $0))" }.joined(separator: "; "))
    let readers = try rooms.map { try background(self, "/bin/cat", [rig.path("chat/" + $0)]) }
    let deadline = Date(timeIntervalSinceNow: 15)
    for (room, reader) in zip(rooms, readers) {
      XCTAssertTrue(
        waitUntil(timeout: max(0, deadline.timeIntervalSinceNow)) {
          chatTexts(reader.text) == ["open \(room)"]
        }, "cat of \(room) printed: \(reader.text)")
    }
    for round in 1...3 {
      var started = ContinuousClock.now
      let listing = try sh("ls \(rig.path("chat"))", timeout: 10)
      let listed = started.duration(to: .now)
      XCTAssertEqual(
        Set(listing.split(separator: "\n").map(String.init)),
        Set(rooms + ["post", "users", "log", "outbox", "unread", "mentions", "events"]))
      started = .now
      try sh("stat \(rig.path("etc/motd"))", timeout: 10)
      let statted = started.duration(to: .now)
      XCTAssertLessThan(listed, .seconds(3), "ls took \(listed) (round \(round))")
      XCTAssertLessThan(statted, .seconds(3), "stat took \(statted) (round \(round))")
      print(
        "round \(round): ls chat \(listed), stat motd \(statted) with 10 blocked readers (\(setup))"
      )
    }
    // Every reader is still blocked, and still served.
    for reader in readers { XCTAssertTrue(reader.isRunning, reader.text) }
    try sh("echo 'to the last room' > \(rig.path("chat/room9"))")
    try sh("echo 'to the lobby' > \(rig.path("chat/post"))")
    XCTAssertTrue(
      waitUntil(timeout: 10) { chatTexts(readers[9].text) == ["open room9", "to the last room"] },
      readers[9].text)
    XCTAssertTrue(
      waitUntil(timeout: 10) { chatTexts(readers[0].text) == ["open lobby", "to the lobby"] },
      readers[0].text)
    rig.assertNoViolations()
  }
}
