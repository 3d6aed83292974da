import Foundation
import Logging
import TestSupport
import XCTest

@testable import BBSMount

/// `-o notify-command=` on its own: the command's words, what reaches its environment, that no
/// shell ever reads the message, and how a flood of mentions is bounded. Real child processes
/// (a small sh script that records its environment), no mount.
final class NotifyCommandTests: XCTestCase {
  private let logger = Logger(label: "test.notify-command")
  private var directory = ""

  override func setUpWithError() throws {
    directory = try makeTemporaryDirectory("notify-command")
  }

  override func tearDown() {
    // Lets any child still held at the gate go on.
    let gate = open(directory + "/go", O_RDWR | O_NONBLOCK)
    if gate >= 0 { close(gate) }
    try? FileManager.default.removeItem(atPath: directory)
  }

  /// Opens the gate of ``recorder(wait:)``'s script for good (until teardown): its children
  /// held there go on, later ones pass at once.
  private func openGate() throws {
    let gate = open(directory + "/go", O_RDWR | O_NONBLOCK)
    guard gate >= 0 else { throw HarnessError("open go: \(String(cString: strerror(errno)))") }
    addTeardownBlock { close(gate) }
  }

  /// A script that appends `ROOM|AUTHOR|TEXT|$1` as one record (NUL-terminated) to
  /// `records`; with `wait`, first held at a gate (opening the FIFO `go` for reading, which
  /// waits until the test opens it, ``openGate()``). Returns its path.
  private func recorder(wait: Bool = false) throws -> String {
    let path = directory + "/record.sh"
    if wait { XCTAssertEqual(mkfifo(directory + "/go", 0o600), 0) }
    let gate = wait ? ": < \"$DIR/go\"\n" : ""
    let script = """
      #!/bin/sh
      DIR='\(directory)'
      \(gate)printf '%s|%s|%s|%s\\0' "$ROOM" "$AUTHOR" "$TEXT" "$1" >> "$DIR/records"
      """
    try script.write(toFile: path, atomically: true, encoding: .utf8)
    chmod(path, 0o755)
    return path
  }

  private var records: [String] {
    guard let data = FileManager.default.contents(atPath: directory + "/records") else { return [] }
    return String(decoding: data, as: UTF8.self).split(separator: "\0").map(String.init)
  }

  /// The command splits at spaces into a program and its words (no quoting: no shell); an
  /// empty one is no command.
  func testTheCommandIsAProgramAndItsWords() {
    XCTAssertNil(NotifyCommand(command: "", logger: logger))
    XCTAssertNil(NotifyCommand(command: "   ", logger: logger))
    XCTAssertEqual(
      NotifyCommand(command: "notify-send  -u low", logger: logger)?.arguments,
      ["notify-send", "-u", "low"])
  }

  /// Room, author and text reach the program as they are, in its environment; what a shell
  /// would run (`$(…)`, backquotes, `;`) stays text, a control character in the room's name is
  /// written visibly, a NUL as `\x00`.
  func testHostileTextReachesTheProgramAsText() throws {
    let command = try XCTUnwrap(
      NotifyCommand(command: try recorder() + " $(touch\(directory)/argument)", logger: logger))
    let pwned = directory + "/pwned"
    command.run(
      room: "a;touch \(pwned)\u{1B}[2J", author: "`touch \(pwned)`",
      text: "$(touch \(pwned)) 'quote\" \0end")
    XCTAssertTrue(waitUntil(timeout: 10) { self.records.count == 1 })
    XCTAssertEqual(
      records,
      [
        "a;touch \(pwned)\\x1B[2J|`touch \(pwned)`|$(touch \(pwned)) 'quote\" \\x00end|$(touch\(directory)/argument)"
      ])
    XCTAssertFalse(FileManager.default.fileExists(atPath: pwned))
    XCTAssertFalse(FileManager.default.fileExists(atPath: directory + "/argument"))
  }

  /// `BOARD` says which board the mention is from (the name it was mounted by), on one line.
  func testTheBoardIsInTheEnvironment() throws {
    let script = directory + "/board.sh"
    try "#!/bin/sh\nprintf '%s' \"$BOARD\" > '\(directory)/board'\n".write(
      toFile: script, atomically: true, encoding: .utf8)
    chmod(script, 0o755)
    let command = try XCTUnwrap(
      NotifyCommand(command: script, board: "ble:GRID9\nx", logger: logger))
    command.run(room: "lobby", author: "bob", text: "alice: hi")
    XCTAssertTrue(
      waitUntil(timeout: 10) { FileManager.default.fileExists(atPath: self.directory + "/board") })
    let board = (try? String(contentsOfFile: directory + "/board", encoding: .utf8)) ?? ""
    XCTAssertTrue(board.hasPrefix("ble:GRID9") && board.hasSuffix("x"), board)
    XCTAssertFalse(board.contains("\n"), board)
  }

  /// A flood of mentions: the first few run, one at a time and in order; the rest of the
  /// burst becomes one run that says how many (a flood once ran the command 4,490 times in
  /// 20 s, out of order); the command works on afterwards.
  func testAFloodIsCoalescedAndRunsInOrder() throws {
    let command = try XCTUnwrap(NotifyCommand(command: try recorder(), logger: logger))
    let flood = 500
    for index in 0..<flood {
      command.run(room: index % 2 == 0 ? "lobby" : "tech", author: "bob", text: "\(index)")
    }
    let limit = command.burstLimit
    XCTAssertTrue(waitUntil(timeout: 15) { self.records.count >= limit + 1 }, "\(records)")
    let texts = records.map { String($0.split(separator: "|")[2]) }
    XCTAssertEqual(Array(texts.prefix(limit)), (0..<limit).map { "\($0)" }, "in order")
    XCTAssertEqual(texts.dropFirst(limit).first, "\(flood - limit) more mentions", "\(records)")
    XCTAssertEqual(records[limit].split(separator: "|")[0], "lobby, tech")
    XCTAssertTrue(waitUntil(timeout: 3) { self.records.count == limit + 1 })
    command.run(room: "lobby", author: "bob", text: "after")
    XCTAssertTrue(waitUntil(timeout: 10) { self.records.last?.contains("|after|") ?? false })
    XCTAssertEqual(records.count, limit + 2, "\(records)")
  }

  /// A command slower than the mentions: at most its queue waits (64; 5 here), the rest are
  /// dropped; the waiting ones run once the running one ends, in order.
  func testASlowCommandKeepsAtMostItsQueueInOrder() throws {
    let command = try XCTUnwrap(
      NotifyCommand(
        command: try recorder(wait: true), logger: logger, maximumWaiting: 5, burstLimit: 100))
    for index in 0..<20 { command.run(room: "lobby", author: "bob", text: "\(index)") }
    try openGate()
    XCTAssertTrue(waitUntil(timeout: 30) { self.records.count >= 6 })
    XCTAssertTrue(waitUntil(timeout: 2) { self.records.count > 6 } == false, "\(records)")
    XCTAssertEqual(records.map { String($0.split(separator: "|")[2]) }, (0..<6).map { "\($0)" })
  }

  /// A program that cannot start frees its place: once it exists, mentions run again (had
  /// the failed starts kept their places, none would).
  func testAProgramThatCannotStartFreesItsPlace() throws {
    let command = try XCTUnwrap(NotifyCommand(command: directory + "/record.sh", logger: logger))
    for index in 0..<command.burstLimit {
      command.run(room: "lobby", author: "bob", text: "early \(index)")
    }
    _ = try recorder()
    Thread.sleep(forTimeInterval: NotifyCommand.burstWindow.timeInterval + 0.1)  // a new window
    for index in 0..<command.burstLimit {
      command.run(room: "lobby", author: "bob", text: "late \(index)")
    }
    XCTAssertTrue(
      waitUntil(timeout: 20) {
        self.records.filter { $0.contains("|late ") }.count == command.burstLimit
      }, "\(records)")
  }
}
