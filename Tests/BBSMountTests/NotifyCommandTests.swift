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

  /// A flood of mentions: four run at once, sixty-four wait their turn, the rest are dropped;
  /// every waiting one runs once a running one ends, and the command works on afterwards.
  func testAFloodIsBounded() throws {
    let command = try XCTUnwrap(NotifyCommand(command: try recorder(wait: true), logger: logger))
    let flood = NotifyCommand.maximumRunning + NotifyCommand.maximumWaiting + 20
    for index in 0..<flood { command.run(room: "lobby", author: "bob", text: "\(index)") }
    try openGate()
    let kept = NotifyCommand.maximumRunning + NotifyCommand.maximumWaiting
    XCTAssertTrue(waitUntil(timeout: 30) { self.records.count >= kept })
    command.run(room: "lobby", author: "bob", text: "after")
    XCTAssertTrue(waitUntil(timeout: 10) { self.records.count >= kept + 1 })
    let texts = Set(records.map { $0.split(separator: "|")[2] })
    XCTAssertEqual(texts, Set((0..<kept).map { "\($0)"[...] } + ["after"]))
    XCTAssertEqual(records.count, kept + 1, "each ran once")
  }

  /// A program that cannot start frees its place: once it exists, mentions run again (had
  /// the failed starts kept their places, none would).
  func testAProgramThatCannotStartFreesItsPlace() throws {
    let command = try XCTUnwrap(NotifyCommand(command: directory + "/record.sh", logger: logger))
    let batch = NotifyCommand.maximumRunning * 3
    for index in 0..<batch { command.run(room: "lobby", author: "bob", text: "early \(index)") }
    _ = try recorder()
    for index in 0..<batch { command.run(room: "lobby", author: "bob", text: "late \(index)") }
    XCTAssertTrue(
      waitUntil(timeout: 20) { self.records.filter { $0.contains("|late ") }.count == batch })
  }
}
