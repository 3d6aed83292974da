import Foundation
import TestSupport
import XCTest

@testable import BBSMount

/// Issue 24 through real mounts: watched rooms, `chat/unread`, `chat/mentions`, `chat/events`,
/// notify-command and desktop notifications. A second mount (user bob) posts; the mount under
/// test (user alice) watches.
final class AwarenessTests: XCTestCase {
  /// A server with rooms lobby and tech, a posting mount (bob) and the watching mount (alice)
  /// with its own state directory (so it can be mounted again with the same history).
  private struct Scene {
    let rig: MountRig
    let alice: MountProcess
    let bob: MountProcess
    let state: String

    func alicePath(_ relative: String) -> String { alice.mountpoint + "/" + relative }
    func bobPath(_ relative: String) -> String { bob.mountpoint + "/" + relative }
  }

  private func scene(
    _ setup: Setup = .multiplexTCP, rooms: [String] = ["lobby", "tech"], alice: [String] = [],
    environment: [String: String] = [:]
  ) throws -> Scene {
    let rig = try MountRig.start(setup, for: self, rooms: rooms, mountOptions: ["uname=bob"])
    let state = try makeTemporaryDirectory("awareness-state")
    let mount = try mountAlice(rig, options: alice, state: state, environment: environment)
    return Scene(rig: rig, alice: mount, bob: rig.mount, state: state)
  }

  private func mountAlice(
    _ rig: MountRig, options: [String], state: String, environment: [String: String] = [:],
    directory: String = "alice"
  ) throws -> MountProcess {
    let mountpoint = rig.directory + "/" + directory
    if !FileManager.default.fileExists(atPath: mountpoint) {
      try FileManager.default.createDirectory(
        atPath: mountpoint, withIntermediateDirectories: false)
    }
    let mount = try MountProcess(
      address: rig.server.address, mountpoint: mountpoint, options: ["uname=alice"] + options,
      environment: environment.merging(["XDG_STATE_HOME": state]) { $1 })
    addTeardownBlock { [weak self] in
      if let run = self?.testRun, run.totalFailureCount > 0 {
        print("--- alice's mount9bbs log:\n\(mount.child.text)---")
      }
      mount.stop()
    }
    return mount
  }

  /// Posts `text` as one write to the room file at `path` (no shell sees it).
  private func post(_ text: String, to path: String) throws {
    let descriptor = open(path, O_WRONLY)
    guard descriptor >= 0 else {
      throw HarnessError("open \(path): \(String(cString: strerror(errno)))")
    }
    defer { close(descriptor) }
    let bytes = Array((text + "\n").utf8)
    let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
    guard written == bytes.count else {
      throw HarnessError("write \(path) wrote \(written): \(String(cString: strerror(errno)))")
    }
  }

  private func unread(_ scene: Scene) throws -> String {
    try String(contentsOfFile: scene.alicePath("chat/unread"), encoding: .utf8)
  }

  /// Waits (bounded) for alice's `chat/unread` to read `expected`.
  private func waitForUnread(
    _ scene: Scene, _ expected: String, file: StaticString = #filePath, line: UInt = #line
  ) throws {
    waitForUnread(of: scene.alice, expected, file: file, line: line)
  }

  /// Waits (bounded) for `chat/unread` of `mount` to read `expected`.
  private func waitForUnread(
    of mount: MountProcess, _ expected: String, file: StaticString = #filePath,
    line: UInt = #line
  ) {
    var last = ""
    let seen = waitUntil(timeout: 10, interval: 0.05) {
      last = (try? String(contentsOfFile: mount.mountpoint + "/chat/unread", encoding: .utf8)) ?? ""
      return last == expected
    }
    XCTAssertTrue(
      seen, "chat/unread is \(last.debugDescription), expected \(expected.debugDescription)",
      file: file, line: line)
  }

  // MARK: Unread

  func testUnreadCountsMoveResetOnReadingToTheEndAndSurviveARemount() throws {
    let scene = try scene()
    try waitForUnread(scene, "lobby 0\ntech 0\n")
    for text in ["one", "two", "three"] { try post(text, to: scene.bobPath("chat/lobby")) }
    try post("elsewhere", to: scene.bobPath("chat/tech"))
    try waitForUnread(scene, "lobby 3\ntech 1\n")
    // `tail -n 2` reads the room to its end: lobby is read, tech is not.
    XCTAssertEqual(
      chatTexts(try sh("tail -n 2 '\(scene.alicePath("chat/lobby"))'")), ["two", "three"])
    try waitForUnread(scene, "lobby 0\ntech 1\n")
    try post("four", to: scene.bobPath("chat/lobby"))
    try post("five", to: scene.bobPath("chat/lobby"))
    try waitForUnread(scene, "lobby 2\ntech 1\n")
    // alice unmounts; bob says one more; alice mounts again with her history.
    scene.alice.stop()
    try post("six", to: scene.bobPath("chat/lobby"))
    let again = try mountAlice(scene.rig, options: [], state: scene.state)
    let path = again.mountpoint + "/chat/unread"
    // Right at once: the first read after the mount already counts what was said while away
    // (its open waits, bounded, for the watched rooms to catch up).
    XCTAssertEqual(
      try String(contentsOfFile: path, encoding: .utf8), "lobby 3\ntech 1\n",
      "the first read of chat/unread after the remount")
    var last = ""
    XCTAssertTrue(
      waitUntil(timeout: 10, interval: 0.05) {
        last = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        return last == "lobby 3\ntech 1\n"
      }, "after the remount chat/unread is \(last.debugDescription)")
    // `mount9bbs status` shows the counts too.
    let status = try runBuilt(
      "mount9bbs", ["status", again.mountpoint], environment: ["XDG_STATE_HOME": scene.state])
    XCTAssertTrue(status.output.contains("3 unread"), status.output)
  }

  func testOwnLinesAreNotUnreadAndWatchNoneListsNoRooms() throws {
    let scene = try scene(alice: ["watch=none"])
    XCTAssertEqual(try unread(scene), "")
    // alice's own post in a room she has open is not news to her.
    let reader = try background(self, "/bin/cat", [scene.alicePath("chat/lobby")])
    try post("from bob", to: scene.bobPath("chat/lobby"))
    try post("from alice", to: scene.alicePath("chat/lobby"))
    XCTAssertTrue(waitUntil(timeout: 10) { reader.text.contains("from alice") }, reader.text)
    try waitForUnread(scene, "lobby 0\n")
  }

  /// The mount's sessions by role (`primary`, `stream`), from `mount9bbs status --json`.
  private func sessionRoles(_ mount: MountProcess) -> [String] {
    guard let status = try? runBuilt("mount9bbs", ["status", mount.mountpoint, "--json"]),
      let object = try? JSONSerialization.jsonObject(with: Data(status.output.utf8))
        as? [String: Any],
      let sessions = object["sessions"] as? [[String: Any]]
    else { return [] }
    return sessions.compactMap { $0["role"] as? String }
  }

  /// Issue 34 item 6: on a board, with no `watch=`, the rooms the member reads count in
  /// `chat/unread`, across a remount, and watching them takes no session of the board's.
  func testABoardCountsTheRoomsTheMemberReadsWithoutConfiguration() throws {
    let scene = try scene(.deviceSeqpacket, rooms: ["lobby", "tech", "dev"])
    XCTAssertEqual(try unread(scene), "", "nothing read yet, nothing counted")
    // alice reads lobby once (an open waits for a room's first line); tech she never reads.
    try post("zero", to: scene.bobPath("chat/lobby"))
    _ = try sh("timeout 10 tail -n 1 '\(scene.alicePath("chat/lobby"))'")
    try waitForUnread(scene, "lobby 0\n")
    for text in ["one", "two"] { try post(text, to: scene.bobPath("chat/lobby")) }
    try post("elsewhere", to: scene.bobPath("chat/tech"))
    try waitForUnread(scene, "lobby 2\n")
    // alice unmounts; bob says more; the remount counts them at once.
    scene.alice.stop()
    try post("three", to: scene.bobPath("chat/lobby"))
    let again = try mountAlice(scene.rig, options: [], state: scene.state)
    waitForUnread(of: again, "lobby 3\n")
    // Watched quietly: on the session the mount holds anyway, none dialled for it.
    XCTAssertEqual(sessionRoles(again), ["primary"])
    let status = try runBuilt(
      "mount9bbs", ["status", again.mountpoint], environment: ["XDG_STATE_HOME": scene.state])
    XCTAssertTrue(status.output.contains("/chat/lobby: 0 reader(s), watched"), status.output)
    // A reader moves the room off the primary, where it would hold posts back.
    let follower = try background(self, "/usr/bin/tail", ["-f", again.mountpoint + "/chat/lobby"])
    XCTAssertTrue(
      waitUntil(timeout: 10) { sessionRoles(again).contains("stream") },
      "the followed room stayed on the primary: \(sessionRoles(again))")
    try post("four", to: scene.bobPath("chat/lobby"))
    XCTAssertTrue(waitUntil(timeout: 10) { follower.text.contains("four") }, follower.text)
    waitForUnread(of: again, "lobby 0\n")
    scene.rig.assertNoViolations()
  }

  // MARK: Mentions and events

  /// Starts readers of `file` the three ways users read streams and posts mentions until
  /// every reader shows one, so the test's own lines all come after the opens.
  private func startReaders(
    _ scene: Scene, _ file: String, until marker: String
  ) throws -> [ChildProcess] {
    let path = scene.alicePath(file)
    let readers = [
      try background(self, "/usr/bin/tail", ["-f", path]),
      try background(
        self, "/bin/sh",
        ["-c", "tail -f \"$0\" | while IFS= read -r line; do printf '%s\\n' \"$line\"; done", path]),
      try background(
        self, "/bin/bash",
        ["-c", "while IFS= read -r line; do printf '%s\\n' \"$line\"; done < \"$0\"", path]),
    ]
    var count = 0
    let ready = waitUntil(timeout: 15, interval: 0.2) {
      count += 1
      try? post("\(marker) \(count)", to: scene.bobPath("chat/tech"))
      return readers.allSatisfy { $0.text.contains(marker) }
    }
    XCTAssertTrue(ready, readers.map(\.text).joined(separator: "\n---\n"))
    // Runs before the readers' own stops: the pipeline's `tail` is the shell's child, which a
    // stop of the shell leaves holding the stream open (the mount then takes seconds to stop).
    addTeardownBlock { [self] in
      let holders = processes(holding: path)
      for pid in holders { kill(pid, SIGKILL) }
      XCTAssertTrue(waitUntil(timeout: 5) { processes(holding: path).isEmpty }, "\(holders)")
    }
    return readers
  }

  /// The processes that have `path` open.
  private func processes(holding path: String) -> [pid_t] {
    let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
    return entries.compactMap { entry in
      guard let pid = pid_t(entry) else { return nil }
      let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? []
      return fds.contains {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\($0)"))
          == path
      } ? pid : nil
    }
  }

  /// The lines of `output` after the last one containing `marker`.
  private func linesAfter(_ marker: String, in output: String) -> [String] {
    let lines = output.split(separator: "\n").map(String.init)
    guard let last = lines.lastIndex(where: { $0.contains(marker) }) else { return lines }
    return Array(lines[(last + 1)...])
  }

  func testMentionsByNameAndHighlightWordsStreamToTailAndReadLoops() throws {
    let scene = try scene(alice: ["highlight=Deploy:urgent"])
    let readers = try startReaders(scene, "chat/mentions", until: "alice ready")
    let lobby = scene.bobPath("chat/lobby")
    for text in [
      "hello everyone", "alicette is not alice's name", "ALICE: ping", "malice aforethought",
      "the deploy is done", "redeployed nothing", "urgent!", "unurgent", "end alice",
    ] {
      try post(text, to: lobby)
    }
    let expected = [
      "alicette is not alice's name", "ALICE: ping", "the deploy is done", "urgent!", "end alice",
    ]
    for reader in readers {
      XCTAssertTrue(
        waitUntil(timeout: 10) { reader.text.contains("end alice") }, "reader saw: \(reader.text)")
      let lines = linesAfter("alice ready", in: reader.text)
      XCTAssertEqual(
        lines.map { String($0.prefix(6)) }, Array(repeating: "lobby ", count: expected.count),
        reader.text)
      XCTAssertEqual(lines.map { ChatLine($0.dropFirst(6)) }.map(\.text), expected, reader.text)
      XCTAssertEqual(Set(lines.map { ChatLine($0.dropFirst(6)).author }), ["bob"])
    }
  }

  func testEventsStreamMessagesAndMentionsAsTabSeparatedLines() throws {
    let scene = try scene()
    let readers = try startReaders(scene, "chat/events", until: "message\ttech\tbob")
    try post("hi alice", to: scene.bobPath("chat/lobby"))
    try post("plain", to: scene.bobPath("chat/lobby"))
    let pattern = try NSRegularExpression(
      pattern: #"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\t"#)
    for reader in readers {
      XCTAssertTrue(
        waitUntil(timeout: 10) {
          reader.text.split(separator: "\n").filter { $0.hasSuffix("\tlobby\tbob") }.count >= 3
        }, reader.text)
      let lines = reader.text.split(separator: "\n").map(String.init).filter {
        $0.contains("\tlobby\t")
      }
      XCTAssertEqual(
        lines.map { $0.split(separator: "\t").dropFirst().joined(separator: " ") },
        ["message lobby bob", "mention lobby bob", "message lobby bob"], reader.text)
      for line in lines {
        XCTAssertEqual(
          pattern.numberOfMatches(in: line, range: NSRange(line.startIndex..., in: line)), 1, line)
      }
    }
  }

  // MARK: Opening the streams

  /// Where the descriptor of `pid` open on `path` has read or sought to, or nil when it has
  /// none open there (yet).
  private func position(of pid: pid_t, on path: String) -> Int? {
    let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? []
    for fd in fds {
      guard
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\(fd)"))
          == path,
        let info = try? String(contentsOfFile: "/proc/\(pid)/fdinfo/\(fd)", encoding: .utf8),
        let line = info.split(separator: "\n").first(where: { $0.hasPrefix("pos:") })
      else { continue }
      return Int(line.dropFirst(4).trimmingCharacters(in: .whitespaces))
    }
    return nil
  }

  /// Each open of a stream starts with a line of its own and returns at once, so no reader
  /// loses the first event: not `tail -n 0 -f` (it skips what the size counts at the open),
  /// not `tail -f`, `cat` or a `while read` loop; and a shell's `exec 3<` does not hang.
  /// poll(2) on `chat/events` wakes for the next event (a program waiting on several streams
  /// with poll or select, not blocked in read).
  func testPollOnEventsWakesForTheNextEvent() throws {
    let scene = try scene()
    let fd = open(scene.alicePath("chat/events"), O_RDONLY | O_NONBLOCK)
    XCTAssertGreaterThanOrEqual(fd, 0)
    defer { close(fd) }
    var buffer = [UInt8](repeating: 0, count: 65536)
    while read(fd, &buffer, buffer.count) > 0 {}
    var waiting = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
    XCTAssertEqual(poll(&waiting, 1, 0), 0, "readable with nothing new")
    try post("wake up", to: scene.bobPath("chat/lobby"))
    waiting.revents = 0
    // Not woken, poll looks once more only when its time is up (10 s): an event takes ms.
    let started = Date()
    XCTAssertEqual(poll(&waiting, 1, 10_000), 1, "poll did not wake for an event")
    XCTAssertLessThan(Date().timeIntervalSince(started), 5, "poll woke only at its timeout")
    XCTAssertNotEqual(waiting.revents & Int16(POLLIN), 0)
  }

  func testTheFirstEventReachesEveryReaderAndOpensDoNotWait() throws {
    let scene = try scene()
    try waitForUnread(scene, "lobby 0\ntech 0\n")
    for file in ["events", "mentions"] {
      let path = scene.alicePath("chat/" + file)
      let opened = try shell(
        "timeout 5 bash -c 'exec 3< \"$0\"; echo opened' '\(path)'", timeout: 10)
      XCTAssertEqual(opened.output, "opened\n", "\(file): \(opened.output)")
    }
    var readers: [(String, ChildProcess)] = []
    for file in ["events", "mentions"] {
      let path = scene.alicePath("chat/" + file)
      readers += [
        ("tail -n 0 -f \(file)", try background(self, "/usr/bin/tail", ["-n", "0", "-f", path])),
        ("tail -f \(file)", try background(self, "/usr/bin/tail", ["-f", path])),
        ("cat \(file)", try background(self, "/bin/cat", [path])),
        (
          "while read < \(file)",
          try background(
            self, "/bin/bash",
            ["-c", "while IFS= read -r line; do printf '%s\\n' \"$line\"; done < \"$0\"", path])
        ),
      ]
    }
    // Every reader has opened its stream and read or sought past its first line.
    for (name, reader) in readers {
      let path = scene.alicePath(name.hasSuffix("events") ? "chat/events" : "chat/mentions")
      XCTAssertTrue(
        waitUntil(timeout: 10, interval: 0.02) {
          (position(of: reader.process.processIdentifier, on: path) ?? 0) > 0
        }, "\(name) did not open and read its stream: \(reader.text)")
    }
    try post("first alice", to: scene.bobPath("chat/lobby"))
    for (name, reader) in readers {
      let expected = name.hasSuffix("events") ? "\tmessage\tlobby\tbob\n" : "lobby "
      XCTAssertTrue(
        waitUntil(timeout: 10) {
          reader.text.split(separator: "\n").contains { ($0 + "\n").contains(expected) }
        }, "\(name) saw: \(reader.text.debugDescription)")
      if name.hasPrefix("tail -n 0") {
        XCTAssertFalse(reader.text.contains("\tlink\t"), "\(name): \(reader.text)")
        XCTAssertFalse(reader.text.contains("mount9bbs: mentions of"), "\(name): \(reader.text)")
      }
    }
    // The line a mentions open starts with says what it looks for, as a line of room "-".
    let cat = try XCTUnwrap(readers.first { $0.0 == "cat mentions" }?.1)
    XCTAssertTrue(cat.text.hasPrefix("- ["), cat.text)
    XCTAssertTrue(cat.text.contains("mount9bbs: mentions of alice"), cat.text)
  }

  // MARK: Cost

  /// Requests the mount sent so far and reads parked now (every session), from
  /// `mount9bbs status --json`.
  private func traffic(_ mount: MountProcess) throws -> (sent: UInt64, parked: Int) {
    let status = try runBuilt("mount9bbs", ["status", mount.mountpoint, "--json"])
    let object = try JSONSerialization.jsonObject(with: Data(status.output.utf8)) as? [String: Any]
    let sessions = try XCTUnwrap(object?["sessions"] as? [[String: Any]], status.output)
    return (
      sessions.reduce(0) { $0 + (($1["messagesOut"] as? NSNumber)?.uint64Value ?? 0) },
      sessions.reduce(0) { $0 + (($1["parkedReads"] as? NSNumber)?.intValue ?? 0) }
    )
  }

  /// Eight watched rooms of an idle board: each room's read parks on the server, so the mount
  /// sends next to nothing (a keepalive now and then).
  ///
  /// The chat listing, read every `watch-interval=` seconds (4 requests), is left out by the
  /// longest interval, so a short window suffices: fewer than 2 requests in 4 s (a keepalive
  /// may fall in it), where the watched rooms re-sending their reads within it make 8.
  private func measureIdleCost(_ setup: Setup) throws -> Double {
    let rooms = (1...8).map { "room\($0)" }
    let scene = try scene(
      setup, rooms: rooms,
      alice: ["watch=all", "watch-interval=\(AwarenessOptions.longestWatchInterval)"])
    let expected = rooms.sorted().map { "\($0) 0\n" }.joined()
    try waitForUnread(scene, expected)
    // Every watched room caught up: its read is parked.
    XCTAssertTrue(
      waitUntil(timeout: 15, interval: 0.2) {
        ((try? traffic(scene.alice))?.parked ?? 0) >= rooms.count
      }, scene.alice.child.text)
    let window = 4.0
    let before = try traffic(scene.alice).sent
    _ = waitUntil(timeout: window) { false }
    let after = try traffic(scene.alice).sent
    let rate = Double(after - before) / window
    print(
      "idle cost, \(setup), 8 watched rooms: \(after - before) requests in \(window) s = \(rate)/s")
    scene.rig.assertNoViolations()
    return rate
  }

  func testAnIdleWatchedBoardCostsAboutNoRequests() throws {
    XCTAssertLessThan(try measureIdleCost(.multiplexTCP), 0.5)
  }

  func testAnIdleWatchedDeviceBoardCostsAboutNoRequests() throws {
    XCTAssertLessThan(try measureIdleCost(.deviceSeqpacket), 0.5)
  }

  func testEventsTellTheLinkGoingDownAndComingBack() throws {
    let scene = try scene()
    let readers = try startReaders(scene, "chat/events", until: "message\ttech\tbob")
    let address = scene.rig.server.address
    scene.rig.server.stop()
    for reader in readers {
      XCTAssertTrue(
        waitUntil(timeout: 15) {
          reader.text.contains("\tlink\tdown\t") && reader.text.contains("\tlink\treconnecting\t")
        }, reader.text)
    }
    let again = try ServerProcess(transport: "tcp", rooms: ["lobby", "tech"], listen: address)
    addTeardownBlock { again.stop() }
    // Up again after the down (each open's first line said the link was up then).
    for reader in readers {
      XCTAssertTrue(
        waitUntil(timeout: 20) {
          let text = reader.text
          return text.range(of: "\tlink\tdown\t").map {
            text[$0.upperBound...].contains("\tlink\tup\t-\n")
          } ?? false
        }, reader.text)
    }
  }

  func testEventsTellAUserArriving() throws {
    // chat/users is read again every second (10 s by default).
    let scene = try scene(alice: ["watch-interval=1"])
    let readers = try startReaders(scene, "chat/events", until: "message\ttech\tbob")
    // The mount reads the users list to compare with within a second of the first open of
    // chat/events; nothing shows when it has.
    _ = waitUntil(timeout: 1.5) { false }
    // carol reads a room: the board lists her among its users.
    let carol = try mountAlice(
      scene.rig, options: ["uname=carol", "watch=none"], state: scene.state, directory: "carol")
    _ = try sh("timeout 10 tail -n 1 '\(carol.mountpoint)/chat/tech'")
    // Within a few seconds: well before a default 10 s read would come.
    for reader in readers {
      XCTAssertTrue(
        waitUntil(timeout: 8) { reader.text.contains("\tuser-arrived\tcarol\n") }, reader.text)
    }
  }

  // MARK: Options

  /// `watch-interval=` takes whole seconds from 1 to an hour (the tests above mount with 1 and
  /// 3600); zero, negatives, junk and absurd values fail the mount, saying what it expects.
  func testWatchIntervalRefusesZeroNegativesJunkAndAbsurdValues() throws {
    let mountpoint = try makeMountDirectory("watch-interval") + "/mnt"
    for value in ["0", "-5", "ten", "1.5", "3601", "99999999999999999999", ""] {
      let expected =
        value.isEmpty
        ? "option watch-interval needs a value"
        : "option watch-interval=\(value): expected a number from 1 to 3600"
      try assertMountFails(
        ["-o", "watch=all,watch-interval=\(value)", "tcp!127.0.0.1!1", mountpoint],
        at: mountpoint, saying: [expected])
    }
    let help = try runBuilt("mount9bbs", ["mount", "--help"])
    XCTAssertTrue(help.output.contains("watch-interval=SECONDS"), help.output)
  }

  // MARK: Notifications

  /// A notify-command script that writes ROOM, AUTHOR and TEXT to files in `directory`.
  private func recorder(in directory: String) throws -> String {
    let script = directory + "/record"
    try """
    #!/bin/sh
    n=$$
    printf '%s' "$ROOM" > "$0.$n.room"
    printf '%s' "$AUTHOR" > "$0.$n.author"
    printf '%s' "$TEXT" > "$0.$n.text.part" && mv "$0.$n.text.part" "$0.$n.text"
    """.write(toFile: script, atomically: true, encoding: .utf8)
    chmod(script, 0o755)
    return script
  }

  private func recorded(_ directory: String) -> [(room: String, author: String, text: String)] {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
    return names.filter { $0.hasSuffix(".text") }.sorted().map { name in
      let stem = directory + "/" + name.dropLast(".text".count)
      func read(_ suffix: String) -> String {
        (try? String(contentsOfFile: stem + suffix, encoding: .utf8)) ?? "?"
      }
      return (read(".room"), read(".author"), read(".text"))
    }
  }

  func testNotifyCommandGetsHostileTextInItsEnvironmentAndRunsNothingElse() throws {
    let work = try makeTemporaryDirectory("notify-command")
    let script = try recorder(in: work)
    let scene = try scene(alice: ["notify-command=\(script)", "notify=off"])
    let canary = work + "/canary"
    let hostile =
      "alice $(touch \(canary)) `touch \(canary)` \"quoted\" 'single' \\n \\x1b; touch \(canary)"
    try waitForUnread(scene, "lobby 0\ntech 0\n")
    try post(hostile, to: scene.bobPath("chat/lobby"))
    XCTAssertTrue(waitUntil(timeout: 10) { recorded(work).count == 1 }, scene.alice.child.text)
    let run = try XCTUnwrap(recorded(work).first)
    XCTAssertEqual(run.room, "lobby")
    XCTAssertEqual(run.author, "bob")
    XCTAssertEqual(run.text, hostile)
    XCTAssertFalse(FileManager.default.fileExists(atPath: canary), "the message ran a command")
    // The child was waited for: no zombie left behind.
    XCTAssertTrue(
      waitUntil(timeout: 5) {
        (try? sh("ps -o stat= --ppid \(scene.alice.child.process.processIdentifier) || true")).map {
          !$0.contains("Z")
        } ?? false
      })
  }

  /// The command runner itself with what no board sends through a post: a 64 KiB text with
  /// newlines, escapes and control characters.
  func testNotifyCommandPassesA64KiBTextWithNewlinesThroughTheEnvironment() throws {
    let work = try makeTemporaryDirectory("notify-command")
    let script = try recorder(in: work)
    let runner = try XCTUnwrap(NotifyCommand(command: script, logger: .init(label: "test")))
    let canary = work + "/canary"
    var text = "alice $(touch \(canary))\nline two 'q' \"qq\" \\ \u{1B}[31m\t;touch \(canary)\n"
    text += String(repeating: "x", count: (64 << 10) - text.utf8.count)
    runner.run(room: "lo\nbby", author: "b$(id)ob", text: text)
    XCTAssertTrue(waitUntil(timeout: 10) { recorded(work).count == 1 })
    let run = try XCTUnwrap(recorded(work).first)
    // The room's name is the server's bytes, written as the room file writes controls.
    XCTAssertEqual(run.room, #"lo\x0Abby"#)
    XCTAssertEqual(run.author, "b$(id)ob")
    XCTAssertEqual(run.text.utf8.count, 64 << 10)
    XCTAssertEqual(run.text, text)
    XCTAssertFalse(FileManager.default.fileExists(atPath: canary))
  }

  func testWithoutASessionBusOneLogLineAndNothingFails() throws {
    let runtime = try makeTemporaryDirectory("no-bus")
    let scene = try scene(
      alice: ["notify=all"],
      environment: [
        "DBUS_SESSION_BUS_ADDRESS": "unix:path=\(runtime)/nobus", "XDG_RUNTIME_DIR": runtime,
      ])
    let reader = try background(self, "/bin/cat", [scene.alicePath("chat/lobby")])
    for index in 1...5 { try post("alice \(index)", to: scene.bobPath("chat/lobby")) }
    XCTAssertTrue(waitUntil(timeout: 10) { reader.text.contains("alice 5") }, reader.text)
    try waitForUnread(scene, "lobby 0\ntech 0\n")
    let log = scene.alice.child.text
    XCTAssertEqual(log.components(separatedBy: "no session bus").count - 1, 1, log)
    XCTAssertTrue(scene.alice.child.isRunning)
  }

  /// A private session bus with python-dbusmock's notification daemon on it: the bus address
  /// and the mock's log (one line per call), or nil (the test failed) without dbusmock.
  private func notificationDaemon() throws -> (address: String, log: String)? {
    let python = BundledPython.dbusmock
    guard FileManager.default.isExecutableFile(atPath: python) else {
      XCTFail("no dbusmock python at \(python): run scripts/test once (it makes .venv-dbusmock)")
      return nil
    }
    let work = try makeTemporaryDirectory("notify-bus")
    let address = "unix:path=\(work)/bus"
    let bus = try background(
      self, "/usr/bin/dbus-daemon",
      ["--session", "--nofork", "--nopidfile", "--address=\(address)"])
    XCTAssertTrue(
      waitUntil(timeout: 10) { FileManager.default.fileExists(atPath: work + "/bus") }, bus.text)
    let log = work + "/mock.log"
    let mock = ChildProcess(
      python, ["-m", "dbusmock", "--session", "-t", "notification_daemon", "-l", log],
      environment: ["DBUS_SESSION_BUS_ADDRESS": address])
    try mock.start()
    addTeardownBlock { mock.stop(grace: 2) }
    XCTAssertTrue(
      waitUntil(timeout: 15, interval: 0.1) {
        let owned = try? shell(
          "DBUS_SESSION_BUS_ADDRESS='\(address)' gdbus call --session --dest org.freedesktop.DBus --object-path /org/freedesktop/DBus --method org.freedesktop.DBus.NameHasOwner org.freedesktop.Notifications",
          timeout: 5)
        return owned?.output.contains("true") ?? false
      }, mock.text)
    return (address, log)
  }

  func testMentionsBecomeDesktopNotificationsOnTheSessionBusCoalescedInBursts() throws {
    guard let (address, log) = try notificationDaemon() else { return }
    let scene = try scene(environment: ["DBUS_SESSION_BUS_ADDRESS": address])
    try waitForUnread(scene, "lobby 0\ntech 0\n")
    func notifications() -> [String] {
      ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n")
        .filter { $0.contains("Notify ") }.map(String.init)
    }
    try post("not for anyone", to: scene.bobPath("chat/lobby"))
    try post("alice: lunch? \"now\" $(not run)", to: scene.bobPath("chat/lobby"))
    XCTAssertTrue(
      waitUntil(timeout: 10) { notifications().count == 1 }, notifications().joined(separator: "\n")
    )
    let first = try XCTUnwrap(notifications().first)
    // Which board: by the name it was mounted with.
    XCTAssertTrue(first.contains("\"bob in lobby on \(scene.rig.server.address)\""), first)
    XCTAssertTrue(first.contains("alice: lunch?"), first)
    XCTAssertTrue(first.contains("$(not run)"), first)
    // A flood: a few notifications, then one that sums up the rest.
    let flood = 40
    for index in 1...flood { try post("alice flood \(index)", to: scene.bobPath("chat/tech")) }
    XCTAssertTrue(
      waitUntil(timeout: 15) { notifications().contains { $0.contains("more in tech") } },
      notifications().joined(separator: "\n"))
    // Every mention of the flood is told once, on its own or counted in a "N more" line: once
    // they add up to the flood, no notification is left to come.
    let summed = try NSRegularExpression(pattern: #""(\d+) more in tech on "#)
    func told() -> Int {
      notifications().reduce(0) { total, line in
        let range = NSRange(line.startIndex..., in: line)
        if let match = summed.firstMatch(in: line, range: range),
          let counted = Range(match.range(at: 1), in: line)
        {
          return total + (Int(line[counted]) ?? 0)
        }
        return total + (line.contains("\"bob in tech on ") ? 1 : 0)
      }
    }
    XCTAssertTrue(
      waitUntil(timeout: 15) { told() == flood }, notifications().joined(separator: "\n"))
    XCTAssertLessThanOrEqual(notifications().count, 1 + 2 * DesktopNotifier.burstLimit + 4)
  }
}

extension AwarenessTests {
  /// Measures (and bounds, loosely: the machine is shared) how long after the room line its
  /// event line and its notification come; `Tests/fixtures/awareness_latency.py` prints the
  /// numbers.
  func testEventLinesAndNotificationsFollowTheRoomLineWithinMilliseconds() throws {
    guard let (address, log) = try notificationDaemon() else { return }
    let rig = try MountRig.start(.multiplexTCP, for: self, mountOptions: ["uname=bob"])
    let alice = try MountProcess(
      address: rig.server.address, mountpoint: try makeTemporaryDirectory("alice"),
      options: ["uname=alice"],
      environment: [
        "DBUS_SESSION_BUS_ADDRESS": address,
        "XDG_STATE_HOME": try makeTemporaryDirectory("awareness-state"),
      ])
    addTeardownBlock { alice.stop() }
    let script = PackagePaths.path("Tests/fixtures/awareness_latency.py")
    // 15 posts 0.4 s apart (under the notification burst limit): each p50 below is the 8th of
    // 15 samples, as robust against one slow sample as the 15th of 30 was.
    let run = try shell(
      "python3 '\(script)' '\(alice.mountpoint)' '\(rig.mountpoint)' '\(log)' 15", timeout: 90)
    XCTAssertEqual(run.status, 0, run.output)
    print("awareness latency (ms): \(run.output)")
    let result = try XCTUnwrap(
      JSONSerialization.jsonObject(with: Data(run.output.utf8)) as? [String: Any], run.output)
    func p50(_ key: String) -> Double? {
      ((result[key] as? [String: Any])?["p50"] as? NSNumber)?.doubleValue
    }
    XCTAssertLessThan(try XCTUnwrap(p50("event_after_room"), run.output), 50)
    XCTAssertLessThan(try XCTUnwrap(p50("notify_after_room"), run.output), 100)
  }
}

extension AwarenessTests {
  /// A flood of 10,000 mentions (a Unix socket client: 9bbsd does not limit its posting): the
  /// mount stays responsive, every mention streams, notify-command runs are bounded and
  /// reaped, and the daemon's memory stays bounded.
  func testAFloodOfTenThousandMentionsIsBoundedAndBlocksNothing() throws {
    let work = try makeTemporaryDirectory("notify-flood")
    let script = try recorder(in: work)
    let scene = try scene(.multiplexUnix, alice: ["notify-command=\(script)", "notify=off"])
    let readers = try startReaders(scene, "chat/mentions", until: "alice ready")
    let count = 10_000
    let lobby = scene.bobPath("chat/lobby")
    let started = Date()
    for chunk in stride(from: 0, to: count, by: 500) {
      try post(
        (chunk..<min(count, chunk + 500)).map { "alice flood \($0)" }.joined(separator: "\n"),
        to: lobby)
    }
    // The mount answers at once meanwhile.
    let listing = Date()
    try sh("ls '\(scene.alicePath("chat"))' >/dev/null", timeout: 10)
    XCTAssertLessThan(Date().timeIntervalSince(listing), 2)
    for reader in readers {
      XCTAssertTrue(
        waitUntil(timeout: 120, interval: 0.2) {
          reader.text.contains("alice flood \(count - 1)\n")
        },
        String(reader.text.suffix(500)))
      XCTAssertEqual(
        linesAfter("alice ready", in: reader.text).filter { $0.hasPrefix("lobby ") }.count, count)
    }
    print("flood of \(count) mentions streamed in \(Date().timeIntervalSince(started)) s")
    let pid = scene.alice.child.process.processIdentifier
    let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
    let rss = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") }
    let kilobytes =
      Int(rss?.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
      ?? .max
    print("mount9bbs after the flood: \(rss ?? "?"), \(recorded(work).count) notify-command runs")
    XCTAssertLessThan(kilobytes, 400 << 10)
    // Runs end and are reaped; a flood beyond the queue is dropped, and said so.
    XCTAssertTrue(
      waitUntil(timeout: 30) {
        (try? sh("ps -o stat= --ppid \(pid) || true"))?.trimmingCharacters(
          in: .whitespacesAndNewlines
        )
        .isEmpty ?? false
      })
    // A flood is coalesced: a few runs, then one per second that says how many more.
    XCTAssertLessThan(recorded(work).count, count / 10)
    XCTAssertTrue(
      recorded(work).contains { $0.text.hasSuffix(" more mentions") }, "\(recorded(work).prefix(5))"
    )
    XCTAssertTrue(scene.alice.child.isRunning)
  }
}

/// Interpreters the tests run from the package's virtual environments.
enum BundledPython {
  static var dbusmock: String {
    PackagePaths.python(
      environment: "MOUNT9BBS_DBUSMOCK_PYTHON", fallback: ".venv-dbusmock/bin/python")
  }
}
