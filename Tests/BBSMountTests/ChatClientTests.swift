import Foundation
import TestSupport
import XCTest

/// `mount9bbs chat` as a person uses it: in tmux, against a real 9bbsd mounted by
/// `mount9bbs -f`, with a second mount (another user) posting into the rooms.
final class ChatClientTests: XCTestCase {
  /// The chat's mount (as alice), the second mount (bob), and tmux running the chat.
  private struct Rig {
    let mount: MountRig
    let bob: MountProcess
    let window: TmuxWindow

    /// Posts `text` as bob to `room`, as `echo text > room` does.
    func bobSays(_ text: String, in room: String = "lobby") throws {
      let handle = try XCTUnwrap(FileHandle(forWritingAtPath: bob.mountpoint + "/chat/" + room))
      try handle.write(contentsOf: Data((text + "\n").utf8))
      try handle.close()
    }

    /// What a room file holds so far, read from bob's mount (`dd iflag=nofollow`).
    func roomText(_ room: String = "lobby") throws -> String {
      try sh("dd if='\(bob.mountpoint)/chat/\(room)' iflag=nofollow status=none")
    }
  }

  private func start(
    room: String = "lobby", rooms: [String] = ["lobby", "tech", "news"],
    setup: Setup = .multiplexTCP, mountOptions: [String] = [],
    width: Int = 100, height: Int = 30,
    environment: String = "", before: ((MountRig, MountProcess) throws -> Void)? = nil
  ) throws -> Rig {
    let mount = try MountRig.start(
      setup, for: self, rooms: rooms,
      mountOptions: ["uname=alice"] + mountOptions)
    let bob = try mount.secondMount(for: self, options: ["uname=bob"])
    try before?(mount, bob)
    let command =
      "\(environment) \(BuiltProducts.path(of: "mount9bbs")) chat '\(mount.mountpoint)' \(room); "
      + "echo CHAT-EXIT=$?; stty -a | tr ' ;' '\\n\\n' | grep -x -e '-*icanon' -e '-*echo'"
    let window = try TmuxWindow(command, width: width, height: height)
    addTeardownBlock { window.stop() }
    addTeardownBlock { [weak self] in
      guard let run = self?.testRun, run.totalFailureCount > 0 else { return }
      print("--- chat screen:\n\(window.screen())---")
    }
    let rig = Rig(mount: mount, bob: bob, window: window)
    // A process starting on a loaded machine: a generous wait.
    XCTAssertTrue(window.waitFor("[1:\(room)]", timeout: Self.processWait).matched, window.screen())
    return rig
  }

  /// How long a process may take to start or end (the chat's first screen, its exit).
  private static let processWait: TimeInterval = 30

  /// The input row (the last non-empty row of the screen).
  private func inputRow(_ screen: String) -> String {
    let row = screen.split(separator: "\n").last { $0 == ">" || $0.hasPrefix("> ") } ?? ""
    return String(row.reversed().drop { $0 == " " }.reversed())
  }

  func testTypingWhileLinesArriveKeepsTheInputAndPostsExactly() throws {
    let rig = try start { _, bob in
      let handle = try XCTUnwrap(FileHandle(forWritingAtPath: bob.mountpoint + "/chat/lobby"))
      try handle.write(contentsOf: Data("said before you came\n".utf8))
      try handle.close()
    }
    XCTAssertTrue(rig.window.waitFor("bob: said before you came").matched, rig.window.screen())
    try rig.window.type("half a sent")
    for number in 1...5 { try rig.bobSays("interruption \(number)") }
    let screen = rig.window.waitFor("bob: interruption 5").screen
    XCTAssertEqual(inputRow(screen), "> half a sent", screen)
    try rig.window.type("ence, finished")
    try rig.window.press("Enter")
    XCTAssertTrue(rig.window.waitFor("alice: half a sentence, finished").matched)
    XCTAssertEqual(inputRow(rig.window.screen()), ">")
    // What the shell would mangle goes as typed.
    let tricky = #"it's "$HOME" !! `id` \n 'q'"#
    try rig.window.type(tricky)
    try rig.window.press("Enter")
    XCTAssertTrue(
      waitUntil(timeout: 10) {
        (try? rig.roomText())?.contains("alice: " + tricky + "\n") ?? false
      },
      (try? rig.roomText()) ?? "")
    // UTF-8, wide characters and combining marks are typed and posted as they are.
    let unicode = "héllo 日本 e\u{301}"
    try rig.window.type(unicode)
    try rig.window.press("Enter")
    XCTAssertTrue(
      waitUntil(timeout: 10) {
        (try? rig.roomText())?.contains("alice: " + unicode + "\n") ?? false
      }, (try? rig.roomText()) ?? "")
    // ↑ brings lines back, newest first; Ctrl-C clears the line unsent.
    try rig.window.press("Up")
    let unicodeRecalled = rig.window.waitForScreen { self.inputRow($0) == "> " + unicode }
    XCTAssertTrue(unicodeRecalled.matched, unicodeRecalled.screen)
    try rig.window.press("Up")
    let recalled = rig.window.waitForScreen { self.inputRow($0) == "> " + tricky }
    XCTAssertTrue(recalled.matched, recalled.screen)
    try rig.window.press("C-c")
    XCTAssertTrue(rig.window.waitForScreen { self.inputRow($0) == ">" }.matched)
  }

  /// Bracketed paste: a pasted tab is text, never nick completion (`a<TAB>tab` went out as
  /// `alice tab`); a paste of several lines asks first, then posts them in order; `n` drops
  /// one.
  func testPastesKeepTheirTabsAndSeveralLinesAskFirst() throws {
    let rig = try start()
    try rig.bobSays("hello from bob")
    XCTAssertTrue(rig.window.waitFor("bob: hello from bob").matched, rig.window.screen())
    try rig.window.paste("a\ttab")
    XCTAssertTrue(
      rig.window.waitForScreen { self.inputRow($0) == "> a→tab" }.matched, rig.window.screen())
    try rig.window.press("Enter")
    XCTAssertTrue(
      waitUntil(timeout: 10) { ((try? rig.roomText()) ?? "").contains("alice: a\ttab\n") },
      (try? rig.roomText()) ?? "")
    try rig.window.paste("all:\n\tgcc -o hello hello.c\nthird line\n")
    XCTAssertTrue(
      rig.window.waitFor("paste of 3 lines to lobby").matched, rig.window.screen())
    XCTAssertFalse(((try? rig.roomText()) ?? "").contains("third line"), "posted before a yes")
    try rig.window.press("y")
    XCTAssertTrue(
      waitUntil(timeout: 10) {
        ((try? rig.roomText()) ?? "").contains(
          "alice: all:\n") && ((try? rig.roomText()) ?? "").contains("alice: third line\n")
      }, (try? rig.roomText()) ?? "")
    let text = try rig.roomText()
    let order = ["alice: all:", "alice: \tgcc -o hello hello.c", "alice: third line"].map {
      text.range(of: $0)?.lowerBound
    }
    XCTAssertFalse(order.contains(nil), text)
    XCTAssertEqual(order.compactMap { $0 }, order.compactMap { $0 }.sorted(), text)
    try rig.window.paste("one\ntwo\n")
    XCTAssertTrue(rig.window.waitFor("paste of 2 lines").matched, rig.window.screen())
    try rig.window.press("n")
    XCTAssertTrue(rig.window.waitFor("paste of 2 lines dropped").matched, rig.window.screen())
    XCTAssertFalse(try rig.roomText().contains("alice: two"))
  }

  /// `-o highlight=deploy`: the client marks a line with the word as a mention (») as the
  /// mount counts it, not only lines that name you.
  func testHighlightWordsAreMarkedAsMentions() throws {
    let rig = try start(mountOptions: ["highlight=deploy"])
    try rig.bobSays("time to deploy")
    try rig.bobSays("nothing to see")
    let screen = rig.window.waitFor("bob: nothing to see").screen
    let row = screen.split(separator: "\n").first { $0.contains("bob: time to deploy") } ?? ""
    XCTAssertTrue(row.contains("» bob: time to deploy"), screen)
    let plain = screen.split(separator: "\n").first { $0.contains("bob: nothing to see") } ?? ""
    XCTAssertFalse(plain.contains("»"), screen)
  }

  func testSwitchingRoomsUnreadAndMentions() throws {
    let rig = try start { _, bob in
      for room in ["lobby", "tech"] {
        let handle = try XCTUnwrap(FileHandle(forWritingAtPath: bob.mountpoint + "/chat/" + room))
        try handle.write(contentsOf: Data("hello \(room)\n".utf8))
        try handle.close()
      }
    }
    // Lobby's open is over (its history shown): lines said after it are news, not history.
    XCTAssertTrue(rig.window.waitFor("bob: hello lobby").matched, rig.window.screen())
    try rig.window.type("/j tech")
    try rig.window.press("Enter")
    XCTAssertTrue(rig.window.waitFor("[2:tech]").matched, rig.window.screen())
    try rig.bobSays("quiet line", in: "lobby")
    try rig.bobSays("alice: are you there?", in: "lobby")
    var screen = rig.window.waitFor("1:lobby 2 @1").screen
    XCTAssertTrue(screen.contains("1:lobby 2 @1"), screen)
    try rig.window.press("M-1")
    screen = rig.window.waitFor("[1:lobby]").screen
    let rows = screen.split(separator: "\n").map(String.init)
    let marker = try XCTUnwrap(rows.firstIndex { $0.contains("── new ──") }, screen)
    XCTAssertTrue(rows[marker + 1].hasSuffix("bob: quiet line"), screen)
    XCTAssertTrue(rows[marker + 2].hasSuffix("» bob: alice: are you there?"), screen)
    try rig.window.type("/next")
    try rig.window.press("Enter")
    XCTAssertTrue(rig.window.waitFor("[2:tech]").matched)
    try rig.window.type("/rooms")
    try rig.window.press("Enter")
    XCTAssertTrue(rig.window.waitFor("rooms: 1:lobby, news, 2:tech").matched, rig.window.screen())
    try rig.window.type("/j nosuch")
    try rig.window.press("Enter")
    XCTAssertTrue(
      rig.window.waitFor("cannot open room nosuch: no such room (rooms: lobby, news, tech)")
        .matched,
      rig.window.screen())
    // Tab completes a room, then a nickname.
    try rig.window.type("/j ne")
    try rig.window.press("Tab")
    XCTAssertTrue(rig.window.waitForScreen { self.inputRow($0) == "> /j news" }.matched)
    try rig.window.press("C-c")
    try rig.window.type("bo")
    try rig.window.press("Tab")
    XCTAssertTrue(
      rig.window.waitForScreen { self.inputRow($0) == "> bob:" }.matched, rig.window.screen())
  }

  func testTheFirstLineOfAnEmptyRoomIsNewNotHistory() throws {
    // Opening a room nobody has said anything in waits for its next line; that line is
    // news, counted unread while another room is shown (it used to arrive as history).
    let rig = try start { _, bob in
      let handle = try XCTUnwrap(FileHandle(forWritingAtPath: bob.mountpoint + "/chat/lobby"))
      try handle.write(contentsOf: Data("hello lobby\n".utf8))
      try handle.close()
    }
    try rig.window.type("/j news")
    try rig.window.press("Enter")
    XCTAssertTrue(rig.window.waitFor("[2:news]").matched, rig.window.screen())
    try rig.window.press("M-1")
    XCTAssertTrue(rig.window.waitFor("[1:lobby]").matched, rig.window.screen())
    // Past the mount's longest wait for a backlog (1.5 s), so the open is waiting for a line.
    Thread.sleep(forTimeInterval: 2.5)
    try rig.bobSays("first words in news", in: "news")
    let screen = rig.window.waitFor("2:news 1").screen
    XCTAssertTrue(screen.contains("unread: 2:news 1"), screen)
  }

  func testMentionRingsTheBellScrollingHelpAndUsers() throws {
    // The test runner may itself run with NO_COLOR set.
    let rig = try start(environment: "env -u NO_COLOR")
    try rig.bobSays("a plain line")
    XCTAssertTrue(rig.window.waitFor("bob: a plain line").matched)
    XCTAssertFalse(rig.window.bellRang)
    // Authors are coloured (an SGR foreground colour in what tmux shows).
    let coloured = rig.window.screenWithAttributes()
    XCTAssertTrue(hasForegroundColour(coloured), coloured.debugDescription)
    try rig.bobSays("hey Alice, look")
    XCTAssertTrue(rig.window.waitFor("» bob: hey Alice, look").matched, rig.window.screen())
    XCTAssertTrue(waitUntil(timeout: 5) { rig.window.bellRang }, "no bell for a mention")
    for number in 1...40 { try rig.bobSays("numbered \(number)") }
    XCTAssertTrue(rig.window.waitFor("bob: numbered 40").matched)
    try rig.window.press("PPage")
    var screen = rig.window.waitFor("scrolled back (PgDn)").screen
    XCTAssertFalse(screen.contains("numbered 40"), screen)
    XCTAssertTrue(screen.contains("numbered 12"), screen)
    try rig.window.press("NPage")
    screen = rig.window.waitForScreen { !$0.contains("scrolled back") }.screen
    XCTAssertTrue(screen.contains("numbered 40"), screen)
    try rig.window.type("/help")
    try rig.window.press("Enter")
    XCTAssertTrue(
      rig.window.waitFor("-- Enter posts the line as typed").matched, rig.window.screen())
    try rig.window.type("/users")
    try rig.window.press("Enter")
    XCTAssertTrue(rig.window.waitFor("-- users: alice").matched, rig.window.screen())
  }

  func testNoColorMeansNoColours() throws {
    let rig = try start(environment: "NO_COLOR=1")
    try rig.bobSays("a plain line")
    XCTAssertTrue(rig.window.waitFor("bob: a plain line").matched)
    let screen = rig.window.screenWithAttributes()
    XCTAssertFalse(hasForegroundColour(screen), screen)
  }

  /// Whether tmux's `capture-pane -e` output sets a foreground colour (SGR 31-36).
  private func hasForegroundColour(_ screen: String) -> Bool {
    screen.range(of: #"\x1B\[([0-9]+;)*3[1-6](;[0-9]+)*m"#, options: .regularExpression) != nil
  }

  func testHostileLinesAreShownAsTextEvenOnARawMount() throws {
    // rawtext: the mount passes escapes through; the client must still show them as text.
    // (9bbsd's default profile refuses such posts; its Gen-1 profile keeps them, as boards do.)
    let rig = try start(setup: .gen1TCP, mountOptions: ["rawtext"])
    try rig.bobSays("first")
    try rig.bobSays("evil \u{1B}[2J\u{1B}]0;pwned\u{07}\rX \u{202E}txt.exe")
    let screen = rig.window.waitFor("bob: evil").screen
    XCTAssertTrue(
      screen.contains(#"bob: evil \x1B[2J\x1B]0;pwned\x07\x0DX \u{202E}txt.exe"#), screen)
    XCTAssertTrue(screen.contains("bob: first"), "the screen was cleared:\n\(screen)")
    let title = try rig.window.tmux(["display-message", "-p", "-t", "t", "#{pane_title}"])
    XCTAssertFalse(title.contains("pwned"), title)
  }

  func testResizeRedrawsAndKeepsTheInput() throws {
    let rig = try start()
    let long = "a long line " + String(repeating: "word ", count: 30) + "END"
    try rig.bobSays(long)
    XCTAssertTrue(rig.window.waitFor("END").matched)
    try rig.window.type("typing")
    try rig.window.resize(width: 50, height: 12)
    let result = rig.window.waitForScreen { screen in
      let rows = screen.split(separator: "\n", omittingEmptySubsequences: false)
      return rows.count >= 12 && rows[10].hasPrefix(" [1:lobby]") && rows[11].hasPrefix("> typing")
    }
    XCTAssertTrue(result.matched, result.screen)
    XCTAssertTrue(result.screen.split(separator: "\n").allSatisfy { $0.count <= 50 }, result.screen)
  }

  func testQuitCtrlDAndSignalsLeaveTheTerminalSane() throws {
    for (how, exit) in [("/quit", "0"), ("C-d", "0"), ("TERM", "143"), ("SEGV", "139")] {
      let rig = try start()
      switch how {
      case "/quit":
        try rig.window.type("/quit")
        try rig.window.press("Enter")
      case "C-d":
        try rig.window.press("C-d")
      default:
        let chat = try XCTUnwrap(
          waitUntil(timeout: 5) { !self.chatPIDs(rig.mount.mountpoint).isEmpty }
            ? chatPIDs(rig.mount.mountpoint).first : nil)
        kill(chat, how == "TERM" ? SIGTERM : SIGSEGV)
      }
      XCTAssertTrue(
        rig.window.waitForExit(timeout: Self.processWait),
        "\(how):\n\(rig.window.screen())\n\(paneProcesses(rig.window))")
      let screen = rig.window.screenWithHistory()
      XCTAssertTrue(screen.contains("CHAT-EXIT=\(exit)"), "\(how):\n\(screen)")
      // An exit that is not a quit says why.
      if let why = ["TERM": "Terminated (signal 15)", "SEGV": "crashed on signal 11"][how] {
        XCTAssertTrue(screen.contains("mount9bbs chat: " + why), "\(how):\n\(screen)")
      }
      // Back on the normal screen, in cooked mode with echo.
      XCTAssertFalse(screen.contains("[1:lobby]"), "\(how):\n\(screen)")
      let rows = screen.split(separator: "\n")
      XCTAssertTrue(rows.contains("icanon") && rows.contains("echo"), "\(how):\n\(screen)")
      XCTAssertFalse(rows.contains("-icanon") || rows.contains("-echo"), "\(how):\n\(screen)")
    }
  }

  func testTheMountDyingUnderneathIsSaid() throws {
    let rig = try start()
    rig.mount.mount.child.signal(SIGKILL)
    XCTAssertTrue(rig.window.waitForExit(timeout: Self.processWait), rig.window.screen())
    // With the rows that scrolled off.
    let screen = rig.window.screenWithHistory()
    XCTAssertTrue(screen.contains("went away"), screen)
    XCTAssertTrue(screen.contains("CHAT-EXIT=1"), screen)
    let rows = screen.split(separator: "\n")
    XCTAssertTrue(rows.contains("icanon") && !rows.contains("-icanon"), screen)
  }

  func testALinkDropAndReturn() throws {
    let rig = try start()
    rig.mount.server.child.signal(SIGSTOP)
    defer { rig.mount.server.child.signal(SIGCONT) }
    // Typing echoes at once while the server is frozen, and posting does not freeze the UI.
    try rig.window.type("while frozen")
    XCTAssertTrue(
      rig.window.waitForScreen(timeout: 2) { self.inputRow($0) == "> while frozen" }.matched)
    try rig.window.press("Enter")
    try rig.window.type("still typing")
    XCTAssertTrue(
      rig.window.waitForScreen(timeout: 2) { self.inputRow($0) == "> still typing" }.matched)
    rig.mount.server.child.signal(SIGCONT)
    XCTAssertTrue(
      rig.window.waitFor("alice: while frozen", timeout: 20).matched, rig.window.screen())
    try rig.bobSays("back again")
    XCTAssertTrue(rig.window.waitFor("bob: back again").matched, rig.window.screen())
  }

  // MARK: The mount's awareness files, as the chat reads them

  func testTheNewMarkerAtStartComesFromChatUnread() throws {
    // Lines said while the chat was not running (alice's mount counts them in chat/unread)
    // are below the marker when it opens; what alice had read is above it.
    let rig = try start { mount, bob in
      let lobby = bob.mountpoint + "/chat/lobby"
      try sh("echo 'read before' > '\(lobby)'")
      _ = try sh("timeout 10 tail -n 1 '\(mount.mountpoint)/chat/lobby'")
      try sh("echo 'while away 1' > '\(lobby)'; echo 'while away 2' > '\(lobby)'")
      try sh("echo 'also away' > '\(bob.mountpoint)/chat/tech'")
      let unread = mount.mountpoint + "/chat/unread"
      XCTAssertTrue(
        waitUntil(timeout: 10) {
          let text = (try? sh("cat '\(unread)'")) ?? ""
          return text.contains("lobby 2\n") && text.contains("tech 1\n")
        }, (try? sh("cat '\(unread)'")) ?? "")
    }
    let screen = rig.window.waitFor("bob: while away 2").screen
    // A room not open shows its count from chat/unread from the start.
    XCTAssertTrue(screen.contains(" [1:lobby] | unread: tech 1 | link up"), screen)
    let rows = screen.split(separator: "\n").map(String.init)
    let marker = try XCTUnwrap(rows.firstIndex { $0.contains("── new ──") }, screen)
    XCTAssertTrue(rows[marker - 1].hasSuffix("bob: read before"), screen)
    XCTAssertTrue(rows[marker + 1].hasSuffix("bob: while away 1"), screen)
    XCTAssertTrue(rows[marker + 2].hasSuffix("bob: while away 2"), screen)
  }

  func testMentionsAndUnreadInRoomsNotOpenAndRoomsWithCounts() throws {
    // news is never opened by the chat: its counts come from chat/events, chat/mentions and
    // chat/unread alone.
    let rig = try start()
    try rig.bobSays("nothing for you", in: "news")
    var screen = rig.window.waitFor("unread: news 1").screen
    XCTAssertFalse(rig.window.bellRang, screen)
    try rig.bobSays("alice, look at this", in: "news")
    screen = rig.window.waitFor("unread: news 2 @1").screen
    XCTAssertTrue(screen.contains("unread: news 2 @1"), screen)
    XCTAssertTrue(waitUntil(timeout: 5) { rig.window.bellRang }, "no bell for a mention in news")
    // alice's own line (from a shell, on her mount) is not unread; bob's next one is. A line
    // in tech after both shows once the events before it are counted.
    try sh("echo 'my own line' > '\(rig.mount.mountpoint)/chat/news'")
    try rig.bobSays("after yours", in: "news")
    try rig.bobSays("over here", in: "tech")
    screen = rig.window.waitFor(", tech 1").screen
    XCTAssertTrue(screen.contains("unread: news 3 @1, tech 1 |"), screen)
    try rig.window.type("/rooms")
    try rig.window.press("Enter")
    let rooms = "rooms: 1:lobby, news (3 unread), tech (1 unread)"
    screen = rig.window.waitFor(rooms).screen
    XCTAssertTrue(screen.contains(rooms), screen)
    // Joining news shows its lines, the marker before the unread ones, and clears the counts.
    try rig.window.type("/j news")
    try rig.window.press("Enter")
    screen = rig.window.waitFor("bob: after yours").screen
    let rows = screen.split(separator: "\n").map(String.init)
    let marker = try XCTUnwrap(rows.firstIndex { $0.contains("── new ──") }, screen)
    // The marker goes above the date line of the first unread line; counting back the 3
    // unread lines steps over alice's own.
    let firstUnread = rows[(marker + 1)...].first { !$0.hasPrefix("── ") } ?? ""
    XCTAssertTrue(firstUnread.hasSuffix("bob: nothing for you"), screen)
    let status = rows.first { $0.hasPrefix(" [2:news]") } ?? ""
    XCTAssertTrue(status.hasPrefix(" [2:news] | unread: tech 1 |"), screen)
  }

  func testARoomWithASpaceIsCountedAndMentionedUnderItsName() throws {
    // chat/unread and chat/mentions write the space as \x20 to keep the room one field.
    let rig = try start(rooms: ["lobby", "my room"])
    try rig.bobSays("alice: over here", in: "my room")
    // The count (chat/events) and the mention (chat/mentions) come by two files: either may
    // be first on the screen.
    let screen = rig.window.waitFor("unread: my room 1 @1 |").screen
    XCTAssertTrue(screen.contains("unread: my room 1 @1 |"), screen)
    try rig.window.type("/rooms")
    try rig.window.press("Enter")
    let rooms = "rooms: 1:lobby, my room (1 unread)"
    XCTAssertTrue(rig.window.waitFor(rooms).matched, rig.window.screen())
  }

  func testTheLinkAndTheOutboxInTheStatusLine() throws {
    // keepalive=1: a frozen server counts as gone within 2 s.
    let rig = try start(mountOptions: ["keepalive=1"])
    XCTAssertTrue(rig.window.waitFor("link up | outbox 0").matched, rig.window.screen())
    // A frozen server: the post waits in the outbox (its write returns after 2 s), and the
    // link is lost.
    rig.mount.server.child.signal(SIGSTOP)
    var frozen = true
    defer { if frozen { rig.mount.server.child.signal(SIGCONT) } }
    try rig.window.type("sent while frozen")
    try rig.window.press("Enter")
    XCTAssertTrue(rig.window.waitFor("outbox 1").matched, rig.window.screen())
    var screen = rig.window.waitForScreen(timeout: 15) {
      $0.contains("link reconnecting") || $0.contains("link down")
    }.screen
    XCTAssertTrue(screen.contains("link reconnecting") || screen.contains("link down"), screen)
    XCTAssertTrue(screen.contains("outbox 1"), screen)
    rig.mount.server.child.signal(SIGCONT)
    frozen = false
    XCTAssertTrue(rig.window.waitFor("alice: sent while frozen", timeout: 20).matched)
    XCTAssertTrue(rig.window.waitFor("link up | outbox 0").matched, rig.window.screen())
    // The server gone: reconnecting; back where it was: up again.
    let address = rig.mount.server.address
    rig.mount.server.stop()
    screen =
      rig.window.waitForScreen(timeout: 15) {
        $0.contains("link reconnecting") || $0.contains("link down")
      }.screen
    XCTAssertTrue(screen.contains("link reconnecting") || screen.contains("link down"), screen)
    // A post while the link is down goes to the outbox at once, and out once it is back.
    try rig.window.type("sent while down")
    try rig.window.press("Enter")
    XCTAssertTrue(rig.window.waitFor("outbox 1").matched, rig.window.screen())
    let again = try ServerProcess(
      transport: "tcp", rooms: ["lobby", "tech", "news"], listen: address)
    addTeardownBlock { again.stop() }
    screen = rig.window.waitFor("link up", timeout: 20).screen
    XCTAssertTrue(rig.window.waitFor("alice: sent while down").matched, rig.window.screen())
    XCTAssertTrue(rig.window.waitFor("link up | outbox 0").matched, rig.window.screen())
  }

  func testClearErrorsForAWrongRoomNoTerminalAndSeveralMounts() throws {
    let rig = try MountRig.start(.multiplexTCP, for: self, rooms: ["lobby", "tech"])
    let second = try rig.secondMount(for: self, options: ["uname=bob"])
    let chat = BuiltProducts.path(of: "mount9bbs") + " chat"
    // Before the screen is taken: a room that is not there, with the ones that are.
    var result = try shell("\(chat) '\(rig.mountpoint)' nosuch </dev/null 2>&1")
    XCTAssertEqual(result.status, 1, result.output)
    XCTAssertTrue(result.output.contains("no room nosuch (rooms: lobby, tech)"), result.output)
    result = try shell("\(chat) '\(rig.mountpoint)' lobby </dev/null 2>&1")
    XCTAssertEqual(result.status, 1, result.output)
    XCTAssertTrue(result.output.contains("needs a terminal"), result.output)
    result = try shell("\(chat) '\(rig.directory)' 2>&1")
    XCTAssertEqual(result.status, 1, result.output)
    XCTAssertTrue(result.output.contains("is not a mount9bbs mount"), result.output)
    // Without MOUNTPOINT and with several mounts, it names them.
    result = try shell("\(chat) </dev/null 2>&1")
    XCTAssertEqual(result.status, 1, result.output)
    XCTAssertTrue(result.output.contains("say which"), result.output)
    XCTAssertTrue(
      result.output.contains(rig.mountpoint) && result.output.contains(second.mountpoint),
      result.output)
  }

  /// Whether the window's pane is dead, and the processes that have its terminal open (for
  /// a failure's message).
  private func paneProcesses(_ window: TmuxWindow) -> String {
    let pane =
      (try? window.tmux([
        "display-message", "-p", "-t", "t", "#{pane_dead} #{pane_pid} #{pane_tty}",
      ]))
      ?? ""
    let tty =
      pane.split(separator: " ").last.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
      ?? ""
    let holders =
      (try? shell(
        "fuser -v '\(tty)' 2>&1; ps -t '\(tty.replacingOccurrences(of: "/dev/", with: ""))' -o pid,stat,wchan:32,args"
      ))?.output ?? ""
    return "pane (dead pid tty): \(pane)\(holders)"
  }

  /// `mount9bbs chat` processes on `mountpoint`.
  private func chatPIDs(_ mountpoint: String) -> [pid_t] {
    mountDaemons(serving: mountpoint).filter { pid in
      let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") ?? Data()
      return data.split(separator: 0).contains { String(decoding: $0, as: UTF8.self) == "chat" }
    }
  }
}
