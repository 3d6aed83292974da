import BBSIdentity
import Foundation
import NinePProtocol
import TestSupport
import XCTest

/// 9bbsd's own key, as a user meets it: made once in the data directory (mode 0600, a key
/// `ssh-keygen` reads), its fingerprint logged and kept across restarts, presented in every
/// challenge; keys that cannot work are refused at start.
final class BoardKeyTests: XCTestCase {
  private var directory = ""

  override func setUpWithError() throws {
    directory = try makeTemporaryDirectory("9bbsd-board-key")
  }

  override func tearDown() {
    try? FileManager.default.removeItem(atPath: directory)
    super.tearDown()
  }

  /// The fingerprint 9bbsd logged at start.
  private func fingerprint(_ server: ServerProcess) throws -> String {
    let line = server.log.split(separator: "\n").first { $0.contains("9bbsd: board key SHA256:") }
    return try XCTUnwrap(line?.split(separator: " ").last.map(String.init), server.log)
  }

  /// The board key a client sees in a challenge.
  private func presented(_ server: ServerProcess) throws -> BoardKey? {
    let client = try WireClient(server.address)
    _ = try client.rpc(.tversion(msize: 8192, version: "9P2000"), tag: NineP.noTag)
    _ = try client.rpc(.tauth(afid: 1, uname: String(repeating: "a", count: 40), aname: ""))
    guard case .rread(let bytes) = try client.rpc(.tread(fid: 1, offset: 0, count: 1024)) else {
      throw HarnessError("no challenge")
    }
    return try ChallengeResponse.Challenge(parsing: Array(bytes)).boardKey
  }

  func testTheKeyIsMadeOnceInTheDataDirectoryAndPresentedToClients() throws {
    let data = directory + "/data"
    let arguments = ["--auth", "required", "--data", data]
    var server = try ServerProcess(transport: "unix", extra: arguments)
    let path = data + "/board_key"
    XCTAssertTrue(server.log.contains("created the board key \(path)"), server.log)
    let logged = try fingerprint(server)
    var info = stat()
    XCTAssertEqual(stat(path, &info), 0)
    XCTAssertEqual(info.st_mode & 0o777, 0o600)
    XCTAssertEqual(try presented(server)?.fingerprint, logged)
    // ssh-keygen reads it, and prints the same fingerprint.
    let printed = try shell("ssh-keygen -l -f \(path)")
    XCTAssertTrue(printed.output.contains(logged), printed.output)
    server.stop()

    server = try ServerProcess(transport: "unix", extra: arguments)
    defer { server.stop() }
    XCTAssertFalse(server.log.contains("created the board key"), server.log)
    XCTAssertEqual(try fingerprint(server), logged)
    XCTAssertEqual(try presented(server)?.fingerprint, logged)
    // Without a key, 32 bytes as a deployed board.
    let keyless = try ServerProcess(
      transport: "unix", extra: ["--auth", "required", "--board-key", "none"])
    defer { keyless.stop() }
    XCTAssertNil(try presented(keyless))
  }

  func testKeysThatCannotWorkAreRefusedAtStart() throws {
    let p256 = directory + "/p256"
    XCTAssertEqual(try shell("ssh-keygen -q -t ecdsa -b 256 -N '' -f \(p256)").status, 0)
    let open = directory + "/open"
    XCTAssertEqual(try shell("ssh-keygen -q -t ed25519 -N '' -f \(open)").status, 0)
    XCTAssertEqual(chmod(open, 0o644), 0)
    for (extra, phrase) in [
      (["--board-key", p256], "a board key is Ed25519"),
      (["--board-key", open], "readable by others"),
      (["--board-key", open, "--auth-sign", "raw"], "imitates a deployed board"),
      (["--auth-sign", "signed"], "--auth-sign must be 'bound' or 'raw'"),
    ] {
      XCTAssertThrowsError(
        try ServerProcess(transport: "unix", extra: ["--auth", "required"] + extra)
      ) { XCTAssertTrue("\($0)".contains(phrase), "\(extra): \($0)") }
    }
  }
}
