import Foundation
import TestSupport
import XCTest

@testable import BBSIdentity

/// A pin file that cannot be turned against its user: a line that cannot be read refuses the
/// boards it may pin (and costs no other pin), a file others may write is refused, and the
/// command a refusal suggests does only what it says when pasted into bash.
final class BoardPinsTests: XCTestCase {
  private var directory = ""
  private var pins: BoardPins { BoardPins(path: directory + "/state/mount9bbs/known_boards") }
  private let home = "tcp!10.0.0.5!5640"
  private let club = "tcp!10.0.0.6!5640"

  override func setUpWithError() throws {
    directory = try makeTemporaryDirectory("bbsidentity-pins")
  }

  override func tearDown() {
    try? FileManager.default.removeItem(atPath: directory)
    super.tearDown()
  }

  private func key() throws -> BoardKey {
    try XCTUnwrap(BoardKey(of: PrivateKey.generate(.ed25519)))
  }

  /// Writes the pin file's bytes (its directory private, as `pin` makes it).
  private func write(_ lines: [[UInt8]]) throws {
    let path = pins.path
    try FileManager.default.createDirectory(
      atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true,
      attributes: [.posixPermissions: 0o700])
    let bytes: [UInt8] = lines.flatMap { $0 + [0x0A] }
    XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(bytes as [UInt8])))
    XCTAssertEqual(chmod(path, 0o600), 0)
  }

  private func line(_ address: String, _ key: BoardKey) -> [UInt8] {
    Array(BoardPins.line(address: address, key: key).utf8)
  }

  /// One byte that is not UTF-8 in another board's line once made every pin vanish, so a
  /// changed key was accepted and pinned again. Now only that line is lost, and it refuses its
  /// own board, saying which line.
  func testABadByteCostsOnlyItsLineAndRefusesItsBoard() throws {
    let (homeKey, clubKey, other) = (try key(), try key(), try key())
    var broken = line(club, clubKey)
    broken.insert(0xFF, at: broken.count - 3)
    try write([Array("# pins".utf8), line(home, homeKey), broken, []])
    XCTAssertEqual(pins.entries().map(\.address), [home])
    XCTAssertEqual(try pins.check(homeKey, at: home), .pinned)
    XCTAssertThrowsError(try pins.check(other, at: home)) {
      guard case .changed = $0 as? BoardPins.Refusal else { return XCTFail("\($0)") }
    }
    XCTAssertThrowsError(try pins.check(clubKey, at: club)) {
      XCTAssertEqual(
        $0 as? BoardPins.Refusal,
        .unreadableLine(
          address: club, line: 3, reason: "its key is not UTF-8 text", file: pins.path))
      XCTAssertTrue("\($0)".contains("line 3 of \(pins.path) cannot be read"), "\($0)")
    }
    XCTAssertThrowsError(try pins.check(nil, at: club))
    XCTAssertEqual(try pins.check(other, at: "tcp!10.0.0.7!5640"), .new)
    XCTAssertEqual(
      pins.trust(at: [club], advertised: nil, advertisesKeys: false).word, "unreadable")
  }

  /// A line whose address cannot be read may pin any board: every board not pinned in a line
  /// that can be read is refused until it is fixed.
  func testALineWithAnUnreadableAddressRefusesEveryUnpinnedBoard() throws {
    let homeKey = try key()
    try write([line(home, homeKey), [0x74, 0xC3, 0x28, 0x20] + Array("ssh-ed25519 AAAA".utf8)])
    XCTAssertEqual(try pins.check(homeKey, at: home), .pinned)
    XCTAssertThrowsError(try pins.check(try key(), at: club)) {
      guard
        case .unreadableLine(club, 2, "its address is not UTF-8 text", _) = $0 as? BoardPins.Refusal
      else { return XCTFail("\($0)") }
    }
  }

  /// A pin file or directory that others may write proves nothing: refused, with the fix.
  func testAPinFileOthersMayWriteIsRefused() throws {
    let homeKey = try key()
    try write([line(home, homeKey)])
    XCTAssertEqual(try pins.check(homeKey, at: home), .pinned)
    XCTAssertEqual(chmod(pins.path, 0o666), 0)
    XCTAssertThrowsError(try pins.check(homeKey, at: home)) {
      XCTAssertEqual(
        $0 as? BoardPins.Refusal,
        .unsafeFile(path: pins.path, reason: "is writable by others"))
      XCTAssertTrue("\($0)".contains("chmod go-w \(pins.path)"), "\($0)")
    }
    XCTAssertEqual(
      pins.trust(at: [home], advertised: nil, advertisesKeys: false).word, "unreadable")
    XCTAssertEqual(chmod(pins.path, 0o600), 0)
    let folder = (pins.path as NSString).deletingLastPathComponent
    XCTAssertEqual(chmod(folder, 0o777), 0)
    XCTAssertThrowsError(try pins.check(homeKey, at: home)) {
      XCTAssertEqual(
        $0 as? BoardPins.Refusal,
        .unsafeFile(path: folder, reason: "is in a directory that is writable by others"))
    }
    XCTAssertEqual(chmod(folder, 0o700), 0)
    // A planted link in its place is refused too (a link's mode is 0777).
    try FileManager.default.removeItem(atPath: pins.path)
    try FileManager.default.createSymbolicLink(atPath: pins.path, withDestinationPath: "/dev/null")
    XCTAssertThrowsError(try pins.check(homeKey, at: home))
  }

  /// The line a relay refusal suggests adding, pasted into bash with a path and an address that
  /// hold shell syntax, appends exactly that line and runs nothing else.
  func testTheSuggestedCommandIsQuotedForTheShell() throws {
    let folder = directory + "/it's $(touch pwned) `touch pwned2`"
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    let file = folder + "/known_boards"
    let address = "tcp!$(touch pwned3)!5640"
    let real = try key()
    let refusal = BoardPins.Refusal.pinnedElsewhere(
      address: address, key: real, others: [home], file: file)
    let text = "\(refusal)"
    let command = try XCTUnwrap(text.range(of: "add it: ").map { String(text[$0.upperBound...]) })
    let run = try shell("cd \(directory) && bash -c \(command.shellQuotedForTest)")
    XCTAssertEqual(run.status, 0, run.output)
    XCTAssertEqual(
      try String(contentsOfFile: file, encoding: .utf8),
      BoardPins.line(address: address, key: real) + "\n")
    for name in ["pwned", "pwned2", "pwned3"] {
      XCTAssertFalse(FileManager.default.fileExists(atPath: directory + "/" + name), name)
    }
  }
}

extension String {
  /// The string in single quotes for `sh -c` (the test's own quoting, not the one under test).
  fileprivate var shellQuotedForTest: String { "'" + replacing("'", with: "'\\''") + "'" }
}
