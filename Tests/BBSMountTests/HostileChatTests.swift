import Foundation
import TestSupport
import XCTest

/// Issues 23 and 24's bad input through real mounts of a ``HostileChatServer``: room names and
/// lines with escapes, newlines and tabs, names that are not UTF-8, 64 KiB lines, thousands of
/// rooms, a users list of hostile names, a room that answers every read at once. Every file
/// the mount writes about them, its status and its log come out escaped, one record per
/// line, bounded; the daemon keeps answering.
final class HostileChatTests: XCTestCase {
  static let escape = "\u{1B}]0;owned\u{07}\u{1B}[2J"

  /// Room names a server can send: every one of them is a legal 9P name.
  static let hostileNames = [
    "\(escape)esc", "new\nFORGED line", "tab\there", "sp ace", "back\\x1bslash",
    "bidi\u{202E}txt", String(repeating: "r", count: 255),
  ]

  /// Bytes of a control character or escape a terminal or a line reader acts on.
  /// (A tab is one where fields are tab-separated, text elsewhere: `tabs` says which.)
  private func controls(in text: String, tabs: Bool = false) -> [Unicode.Scalar] {
    text.unicodeScalars.filter {
      ($0.value < 0x20 && $0 != "\n" && !(tabs && $0 == "\t")) || (0x7F...0x9F).contains($0.value)
        || $0.value == 0x202E
    }
  }

  private func read(_ path: String) throws -> String {
    try String(decoding: Data(contentsOf: URL(fileURLWithPath: path)), as: UTF8.self)
  }

  /// `cat` of a stream file, saying `opening` (on its own line, first) just before its open.
  private func streamReader(_ path: String) throws -> ChildProcess {
    try background(
      self, "/usr/bin/python3",
      [
        "-c",
        "import os,sys\nprint('opening',flush=True)\nfd=os.open(sys.argv[1],os.O_RDONLY)\n"
          + "while True:\n  b=os.read(fd,65536)\n  if not b: break\n  os.write(1,b)",
        path,
      ])
  }

  /// Whether a ``streamReader(_:)`` has a file whose path ends in `suffix` open, or is in its
  /// open (a stream file's open returns with its first line; the mount counts the reader from
  /// the open on).
  private func isOpening(_ child: ChildProcess, _ suffix: String) -> Bool {
    guard child.text.hasPrefix("opening\n") else { return false }
    let proc = "/proc/\(child.process.processIdentifier)"
    // openat: 257 on x86_64, 56 on arm64.
    let call = (try? String(contentsOfFile: proc + "/syscall", encoding: .utf8))?
      .split(separator: " ").first
    if call == "257" || call == "56" { return true }
    let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: proc + "/fd")) ?? []
    return descriptors.contains {
      (try? FileManager.default.destinationOfSymbolicLink(atPath: proc + "/fd/" + $0))?
        .hasSuffix(suffix) ?? false
    }
  }

  /// Whether `ls` and `stat` answer within `limit` seconds.
  private func assertResponsive(
    _ mount: MountProcess, limit: TimeInterval = 2, file: StaticString = #filePath,
    line: UInt = #line
  ) throws {
    let started = Date()
    _ = try shell("ls '\(mount.mountpoint)/chat' > /dev/null", timeout: 10)
    _ = try shell("stat '\(mount.mountpoint)/chat/unread' > /dev/null", timeout: 10)
    XCTAssertLessThan(Date().timeIntervalSince(started), limit, file: file, line: line)
  }

  func testHostileRoomNamesLinesAndUsersComeOutEscapedOneRecordPerLine() throws {
    let line = { (author: String, text: String) in "[12:00:00] \(author): \(text)\n" }
    var rooms = Self.hostileNames.map {
      HostileChatServer.Room($0, lines: line("mallory", "alice see \(Self.escape) here"))
    }
    rooms.append(HostileChatServer.Room(bytes: [0x62, 0xFF, 0xFE, 0x61], lines: line("m", "x")))
    rooms.append(
      HostileChatServer.Room(
        "lobby",
        lines: line("mal\tlory\u{1B}[31m", "alice \(Self.escape) tab\there")
          + line("mallory", "alice $(touch /tmp/hostile-chat-canary) `id`")
          // 64 KiB without a newline, naming alice, then one more line.
          + "[12:00:02] mallory: alice " + String(repeating: "\u{1B}[5mx", count: 16_000)
          + "\n" + line("mallory", "after the long line")))
    let server = try HostileChatServer(
      rooms: rooms,
      users: [
        "alice (idle: 0s)\n",
        "alice (idle: 0s)\n\(Self.escape)evil (idle: 1s)\ntab\tuser (idle: 2s)\n",
      ])
    addTeardownBlock { server.stop() }
    let work = try makeTemporaryDirectory("hostile-chat")
    // A notify-command that keeps its ROOM, AUTHOR and TEXT.
    let script = work + "/record"
    try """
    #!/bin/sh
    printf '%s' "$ROOM" > "$0.$$.room"
    printf '%s' "$AUTHOR" > "$0.$$.author"
    printf '%s' "$TEXT" > "$0.$$.text"
    """.write(toFile: script, atomically: true, encoding: .utf8)
    chmod(script, 0o755)
    // chat/users read every second, not every 10: the arrivals below come in two rounds.
    let mount = try mountHostileChat(
      server,
      options: ["watch=all", "watch-interval=1", "notify=off", "notify-command=\(script)", "debug"])
    let chat = mount.mountpoint + "/chat"
    XCTAssertTrue(
      waitUntil(timeout: 10) { FileManager.default.fileExists(atPath: chat + "/events") })
    let events = try streamReader(chat + "/events")
    let mentions = try streamReader(chat + "/mentions")
    // Both opens are in before the first line (an open starts from now).
    XCTAssertTrue(
      waitUntil(timeout: 10) {
        isOpening(events, "/chat/events") && isOpening(mentions, "/chat/mentions")
      }, (try? shell("ls -l /proc/\(events.process.processIdentifier)/fd"))?.output ?? "")
    server.release()
    try assertResponsive(mount)

    // chat/mentions: one line per mention, the room one field, nothing a terminal acts on.
    XCTAssertTrue(
      waitUntil(timeout: 15) {
        mentions.text.split(separator: "\n").count >= Self.hostileNames.count + 4
      },
      mentions.text.prefix(3000).debugDescription)
    for record in mentions.text.split(separator: "\n").dropFirst() {
      XCTAssertEqual(
        controls(in: String(record), tabs: true), [], String(record.prefix(200)).debugDescription)
      XCTAssertLessThanOrEqual(record.utf8.count, 300 << 10)
      XCTAssertFalse(record.split(separator: " ").first?.isEmpty ?? true)
    }
    XCTAssertTrue(mentions.text.contains("new\\nFORGED\\x20line [12:00:00] mallory: alice"))
    XCTAssertFalse(mentions.text.contains("\nFORGED"))

    // chat/unread: `ROOM COUNT`, two fields per line.
    let unread = try read(chat + "/unread")
    for record in unread.split(separator: "\n") {
      XCTAssertEqual(record.split(separator: " ").count, 2, unread.debugDescription)
      XCTAssertEqual(controls(in: String(record)), [], String(record).debugDescription)
    }
    XCTAssertTrue(unread.contains("tab\\there 1\n"), unread.debugDescription)
    XCTAssertTrue(unread.contains("sp\\x20ace 1\n"), unread.debugDescription)

    // chat/events: a timestamp and tab-separated fields, controls escaped.
    // Both users' arrivals: one may be listed a round after the other.
    let arrivals = [
      "\tuser-arrived\t\\x1b]0;owned\\x07\\x1b[2Jevil\n", "\tuser-arrived\ttab\\tuser\n",
    ]
    XCTAssertTrue(
      waitUntil(timeout: 20) { arrivals.allSatisfy(events.text.contains) },
      events.text.debugDescription)
    for record in events.text.split(separator: "\n").dropFirst() {
      let fields = record.split(separator: "\t", omittingEmptySubsequences: false)
      XCTAssertGreaterThanOrEqual(fields.count, 3, String(record).debugDescription)
      XCTAssertTrue(fields.first?.hasSuffix("Z") ?? false, String(record).debugDescription)
      XCTAssertEqual(controls(in: String(record), tabs: true), [], String(record).debugDescription)
      if fields.count > 1, fields[1] == "message" || fields[1] == "mention" {
        XCTAssertEqual(fields.count, 4, String(record).debugDescription)
      }
    }
    XCTAssertTrue(events.text.contains("\tuser-arrived\t\\x1b]0;owned\\x07\\x1b[2Jevil\n"))
    XCTAssertTrue(events.text.contains("\tuser-arrived\ttab\\tuser\n"))
    // The author as the room file shows it (`\x1B` already), then escaped as a field.
    XCTAssertTrue(events.text.contains("\tmessage\tlobby\tmal\\tlory\\\\x1B[31m\n"))
    // The line cut at 64 KiB is one message, not one per piece.
    XCTAssertTrue(
      waitUntil(timeout: 10) { events.text.contains("\tmessage\tlobby\tmallory\n") })
    XCTAssertEqual(
      events.text.split(separator: "\n").filter { $0.contains("\tmessage\tlobby\t") }.count, 4,
      events.text.debugDescription)

    // The transcript and `ls chat/log`: the room as its file shows it.
    let log = try read(chat + "/log/lobby")
    XCTAssertEqual(controls(in: log, tabs: true), [], String(log.prefix(300)))
    let names = try FileManager.default.contentsOfDirectory(atPath: chat + "/log")
    XCTAssertTrue(names.contains("tab\there"), names.debugDescription)

    // status, text and JSON.
    let status = try runBuilt("mount9bbs", ["status", mount.mountpoint])
    XCTAssertEqual(controls(in: status.output), [], status.output)
    let json = try runBuilt("mount9bbs", ["status", mount.mountpoint, "--json"])
    let object = try JSONSerialization.jsonObject(with: Data(json.output.utf8)) as? [String: Any]
    let paths = (object?["rooms"] as? [[String: Any]])?.compactMap { $0["path"] as? String } ?? []
    XCTAssertTrue(paths.contains("/chat/new\nFORGED line"), paths.debugDescription)

    // The daemon's log: every record one line, nothing raw.
    try assertResponsive(mount)
    let daemon = mount.child.text
    XCTAssertFalse(daemon.contains("\u{1B}"), String(daemon.prefix(2000)))
    // Every room's history is kept, the 255-byte name's too.
    XCTAssertFalse(daemon.contains("not kept"), String(daemon.prefix(2000)))
    for record in daemon.split(separator: "\n") {
      XCTAssertFalse(record.hasPrefix("FORGED"), String(record))
    }
    XCTAssertFalse(FileManager.default.fileExists(atPath: "/tmp/hostile-chat-canary"))

    // notify-command's environment: the room, author and text as the room file shows them.
    func recorded(_ suffix: String) -> [String] {
      let names = (try? FileManager.default.contentsOfDirectory(atPath: work)) ?? []
      return names.filter { $0.hasSuffix(suffix) }.compactMap { try? read(work + "/" + $0) }
    }
    // Each mention runs it, or is counted in a run that sums up a burst ("N more mentions").
    func told() -> Int {
      recorded(".text").reduce(0) { total, text in
        guard text.hasSuffix(" more mentions") || text.hasSuffix(" more mention") else {
          return total + 1
        }
        return total + (Int(text.prefix { $0.isNumber }) ?? 0)
      }
    }
    XCTAssertTrue(
      waitUntil(timeout: 15) { told() >= Self.hostileNames.count + 3 },
      recorded(".text").debugDescription)
    for value in recorded(".room") + recorded(".author") + recorded(".text") {
      XCTAssertEqual(controls(in: value, tabs: true), [], value.debugDescription)
    }
    XCTAssertTrue(
      recorded(".room").contains { $0.contains(#"\x1B]0;owned\x07\x1B[2Jesc"#) },
      recorded(".room").debugDescription)
    XCTAssertTrue(recorded(".room").contains { $0.contains(#"new\x0AFORGED line"#) })
  }

  /// Unread counts and histories kept for the next mount: a room name with newlines stays one
  /// room, and rooms named alike keep their own lines.
  func testRoomNamesCannotForgeAnotherRoomsCountOrShareItsHistory() throws {
    let forged = "x\nlobby 999999\ny"
    let server = try HostileChatServer(rooms: [
      HostileChatServer.Room(forged, lines: "[12:00:00] mallory: hello\n"),
      HostileChatServer.Room("lobby"),
      HostileChatServer.Room("a b", lines: "[12:00:00] mallory: in a b\n"),
      HostileChatServer.Room("a_b", lines: "[12:00:00] mallory: in a_b\n"),
    ])
    addTeardownBlock { server.stop() }
    server.release()
    let state = try makeTemporaryDirectory("hostile-chat-state")
    let first = try mountHostileChat(server, options: ["watch=all", "notify=off"], state: state)
    let expected = "a\\x20b 1\na_b 1\nlobby 0\nx\\nlobby\\x20999999\\ny 1\n"
    var unread = ""
    XCTAssertTrue(
      waitUntil(timeout: 10) {
        unread = (try? read(first.mountpoint + "/chat/unread")) ?? ""
        return unread == expected
      }, unread.debugDescription)
    first.stop()
    let again = try mountHostileChat(server, options: ["watch=all", "notify=off"], state: state)
    XCTAssertTrue(
      waitUntil(timeout: 10) {
        unread = (try? read(again.mountpoint + "/chat/unread")) ?? ""
        return unread.contains("\nlobby ") && unread.contains("x\\n")
      }, unread.debugDescription)
    XCTAssertTrue(unread.contains("\nlobby 0\n"), unread.debugDescription)
    XCTAssertFalse(unread.contains("lobby 999999"), unread.debugDescription)
    // Two rooms whose names differ only in what a file name cannot hold keep their own
    // histories: neither shows the other's lines after the remount.
    let log = try read(again.mountpoint + "/chat/log/a_b")
    XCTAssertTrue(log.contains("in a_b"), log)
    XCTAssertFalse(log.contains("in a b"), log)
  }

  /// Thousands of rooms and one that answers every read at once, full, forever: the daemon
  /// keeps answering, its files and memory stay bounded.
  func testThousandsOfRoomsAndAFirehoseRoomBlockNothing() throws {
    let firehose = HostileChatServer.Room(
      "firehose", lines: "[12:00:00] mallory: alice \(Self.escape) flood\n", endless: true)
    let many = (0..<3000).map { HostileChatServer.Room(String(format: "zz%04d", $0)) }
    // And one endless line: every read at once, full of `x`, never a newline.
    let endlessLine = HostileChatServer.Room("endless", endless: true)
    let server = try HostileChatServer(rooms: [endlessLine, firehose] + many)
    addTeardownBlock { server.stop() }
    let mount = try mountHostileChat(server, options: ["watch=all", "notify=off"])
    let chat = mount.mountpoint + "/chat"
    XCTAssertTrue(
      waitUntil(timeout: 10) { FileManager.default.fileExists(atPath: chat + "/mentions") })
    let mentions = try background(self, "/bin/cat", [chat + "/mentions"])
    server.release()
    XCTAssertTrue(waitUntil(timeout: 10) { mentions.text.contains("flood") })
    // `chat/unread` answers after at most its catch-up wait (1.5 s: the endless room never
    // catches up); the bound is that plus a margin for a loaded machine, far below a block.
    var slowest = 0.0
    for _ in 0..<6 {
      let started = Date()
      try assertResponsive(mount, limit: 5)
      _ = try read(chat + "/unread")
      slowest = max(slowest, Date().timeIntervalSince(started))
    }
    print("hostile chat: slowest ls+stat+unread during a firehose: \(slowest) s")
    XCTAssertLessThan(slowest, 3)
    let listed = try FileManager.default.contentsOfDirectory(atPath: chat)
    XCTAssertGreaterThan(listed.count, 3000)
    let started = Date()
    let logs = try FileManager.default.contentsOfDirectory(atPath: chat + "/log")
    XCTAssertLessThan(Date().timeIntervalSince(started), 2)
    XCTAssertTrue(logs.contains("firehose"), "\(logs.prefix(10))")
    let unread = try read(chat + "/unread").split(separator: "\n")
    XCTAssertLessThanOrEqual(unread.count, 4096 + 64)
    let pid = mount.child.process.processIdentifier
    let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
    let rss = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? "?"
    print("hostile chat: mount9bbs during a firehose: \(rss)")
    let kilobytes =
      Int(rss.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
      ?? .max
    XCTAssertLessThan(kilobytes, 400 << 10)
    // Every record, not only the first ones: one byte scan of what cat got (splitting the
    // flood into lines took seconds).
    let flood = mentions.text
    XCTAssertFalse(flood.utf8.contains(0x1B), String(flood.prefix(2000)).debugDescription)
    XCTAssertTrue(mount.child.isRunning)
  }

  /// `mount9bbs chat` on a board of hostile room names and lines: all of it shown as text.
  func testTheChatClientShowsHostileRoomNamesAndLinesAsText() throws {
    var rooms = Self.hostileNames.map {
      HostileChatServer.Room($0, lines: "[12:00:00] mallory: alice in \($0)\n")
    }
    rooms.append(
      HostileChatServer.Room(
        "lobby",
        lines: "[12:00:00] mallory: " + String(repeating: "y", count: 64 << 10) + "\n"
          + "[12:00:01] mallory: first\n[12:00:02] mal\tlory: alice evil \(Self.escape)\rX\n"
          + "[12:00:03] mallory: last\n"))
    let server = try HostileChatServer(rooms: rooms)
    addTeardownBlock { server.stop() }
    server.release()
    let mount = try mountHostileChat(server, options: ["watch=all", "notify=off"])
    let window = try TmuxWindow(
      "\(BuiltProducts.path(of: "mount9bbs")) chat '\(mount.mountpoint)' lobby; echo CHAT-EXIT=$?",
      width: 120, height: 40)
    addTeardownBlock { window.stop() }
    addTeardownBlock { [weak self] in
      guard let run = self?.testRun, run.totalFailureCount > 0 else { return }
      print("--- chat screen:\n\(window.screen())---")
    }
    XCTAssertTrue(window.waitFor("mallory: last").matched, window.screen())
    var screen = window.screen()
    XCTAssertTrue(screen.contains("mallory: first"), "the screen was cleared:\n\(screen)")
    XCTAssertTrue(screen.contains(#"alice evil \x1B]0;owned\x07\x1B[2J\x0DX"#), screen)
    try window.type("/rooms")
    try window.press("Enter")
    screen = window.waitFor("rooms:").screen
    XCTAssertTrue(screen.contains("rooms:"), screen)
    XCTAssertTrue(screen.contains("mallory: first"), "the screen was cleared:\n\(screen)")
    XCTAssertFalse(
      screen.split(separator: "\n").contains { $0.hasPrefix("FORGED") },
      "a room name broke a line:\n\(screen)")
    let title = try window.tmux(["display-message", "-p", "-t", "t", "#{pane_title}"])
    XCTAssertFalse(title.contains("owned"), title)
    // Rooms are named as they are named (chat/unread's escapes undone, shown safe), with
    // their counts, and joining one clears its count.
    XCTAssertTrue(screen.contains("sp ace (1 unread)"), screen)
    try window.type("/j sp ace")
    try window.press("Enter")
    screen = window.waitFor("alice in sp ace").screen
    XCTAssertTrue(screen.contains("alice in sp ace"), screen)
    let statusLine = window.waitForScreen { !$0.contains("sp ace 1") }.screen
    XCTAssertFalse(statusLine.contains("sp ace 1"), statusLine)
    XCTAssertFalse(statusLine.contains("sp\\x20ace"), statusLine)
    try window.press("C-d")
    XCTAssertTrue(window.waitForExit(timeout: 30), window.screen())
    XCTAssertTrue(window.screenWithHistory().contains("CHAT-EXIT=0"), window.screenWithHistory())
  }

  /// A hostile user on a fair board (9bbsd): escapes (refused by the board), tabs, `$(…)`,
  /// a bidirectional override, a 64 KiB post. What the watching mount makes of them is text.
  func testAHostileUsersPostsReachTheWatchingMountAsText() throws {
    let rig = try MountRig.start(
      .multiplexTCP, for: self, rooms: ["lobby"], mountOptions: ["uname=bob"])
    let work = try makeTemporaryDirectory("hostile-user")
    let script = work + "/record"
    try """
    #!/bin/sh
    printf '%s' "$ROOM" > "$0.$$.room"
    printf '%s' "$TEXT" > "$0.$$.text"
    """.write(toFile: script, atomically: true, encoding: .utf8)
    chmod(script, 0o755)
    let mountpoint = rig.directory + "/alice"
    try FileManager.default.createDirectory(atPath: mountpoint, withIntermediateDirectories: false)
    let alice = try MountProcess(
      address: rig.server.address, mountpoint: mountpoint,
      options: ["uname=alice", "watch=all", "notify=off", "notify-command=\(script)"])
    addTeardownBlock { [weak self] in
      if let run = self?.testRun, run.totalFailureCount > 0 {
        print("--- alice's mount9bbs log:\n\(String(alice.child.text.suffix(5000)))---")
      }
      alice.stop()
    }
    let chat = mountpoint + "/chat"
    XCTAssertTrue(
      waitUntil(timeout: 10) { FileManager.default.fileExists(atPath: chat + "/events") })
    let events = try background(self, "/bin/cat", [chat + "/events"])
    let mentions = try background(self, "/bin/cat", [chat + "/mentions"])
    let reader = try background(self, "/usr/bin/tail", ["-f", chat + "/lobby"])
    let lobby = rig.path("chat/lobby")
    func post(_ text: String) throws {
      let handle = try XCTUnwrap(FileHandle(forWritingAtPath: lobby))
      try handle.write(contentsOf: Data((text + "\n").utf8))
      try handle.close()
    }
    var marker = 0
    XCTAssertTrue(
      waitUntil(timeout: 15, interval: 0.3) {
        marker += 1
        try? post("alice ready \(marker)")
        return mentions.text.contains("alice ready") && events.text.contains("\tmention\t")
      }, mentions.text)
    let canary = work + "/canary"
    // The board refuses control characters: the writer is told, nothing else changes.
    XCTAssertThrowsError(try post("alice \(Self.escape) evil"))
    try post("alice tab\there $(touch \(canary)) `touch \(canary)` \u{202E}txt 'q' \"qq\" \\")
    let started = Date()
    try post("alice big " + String(repeating: "z", count: 64 << 10))
    XCTAssertLessThan(Date().timeIntervalSince(started), 5, "a 64 KiB post held up the writer")
    try post("alice after")
    XCTAssertTrue(waitUntil(timeout: 15) { mentions.text.contains("alice after") }, mentions.text)
    try assertResponsive(alice)
    for record in mentions.text.split(separator: "\n") {
      XCTAssertEqual(controls(in: String(record), tabs: true), [], String(record.prefix(300)))
      XCTAssertLessThanOrEqual(record.utf8.count, 70 << 10)
    }
    XCTAssertTrue(mentions.text.contains("bob: alice tab\there $(touch \(canary))"), mentions.text)
    XCTAssertTrue(mentions.text.contains(#"\u{202E}txt 'q' "qq" \"#), mentions.text)
    for record in events.text.split(separator: "\n") {
      XCTAssertEqual(controls(in: String(record), tabs: true), [], String(record.prefix(300)))
    }
    let transcript = try read(chat + "/log/lobby")
    XCTAssertEqual(controls(in: transcript, tabs: true), [], String(transcript.suffix(300)))
    XCTAssertTrue(
      waitUntil(timeout: 10) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: work)) ?? []
        return names.filter { $0.hasSuffix(".text") }.count >= marker + 2
      })
    let texts = ((try? FileManager.default.contentsOfDirectory(atPath: work)) ?? []).filter {
      $0.hasSuffix(".text")
    }.compactMap { try? read(work + "/" + $0) }
    for text in texts {
      XCTAssertEqual(controls(in: text, tabs: true), [], String(text.prefix(300)))
    }
    XCTAssertFalse(FileManager.default.fileExists(atPath: canary), "a post ran a command")
    XCTAssertEqual(controls(in: reader.text, tabs: true), [], String(reader.text.suffix(300)))
    XCTAssertTrue(alice.child.isRunning)
  }
}
