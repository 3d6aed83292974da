import Foundation
import NinePProtocol
import NinePTransport
import TestSupport
import XCTest

/// Runs the real `9bbsd` executable (built next to the test bundle) as a child process.
final class DaemonProcessTests: XCTestCase {
  private var processes: [Process] = []
  private var directory = ""

  override func tearDown() {
    for process in processes where process.isRunning {
      process.terminate()
      process.waitUntilExit()
    }
    processes.removeAll()
    if !directory.isEmpty { try? FileManager.default.removeItem(atPath: directory) }
    super.tearDown()
  }

  private func daemonPath() throws -> String {
    let candidates = [
      Bundle.main.executableURL?.deletingLastPathComponent(),
      URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent(),
      Bundle(for: Self.self).bundleURL.deletingLastPathComponent(),
    ].compactMap { $0?.appendingPathComponent("9bbsd").path }
    guard let found = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) })
    else {
      XCTFail(
        "9bbsd not found next to the tests (looked at \(candidates)); run `swift build` first")
      throw TestError.unexpected("no 9bbsd")
    }
    return found
  }

  private func launch(_ arguments: [String]) throws -> Process {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: try daemonPath())
    process.arguments = arguments
    process.standardError = FileHandle.nullDevice
    try process.run()
    processes.append(process)
    return process
  }

  /// Dials until the daemon accepts (bounded), then handshakes.
  private func connect(_ dial: String, uname: String) throws -> WireClient {
    var result: Result<WireClient, any Error> = .failure(TestError.timeout)
    _ = waitUntil(timeout: 10, interval: 0.02) {
      result = Result {
        let client = try WireClient(dial)
        try client.handshake(uname: uname)
        return client
      }
      return (try? result.get()) != nil
    }
    return try result.get()
  }

  private func stop(_ process: Process) {
    process.terminate()  // SIGTERM
    let exited = DispatchSemaphore(value: 0)
    DispatchQueue.global().async {
      process.waitUntilExit()
      exited.signal()
    }
    XCTAssertEqual(exited.wait(timeout: .now() + 10), .success, "9bbsd did not exit on SIGTERM")
  }

  func testDataSurvivesRestart() throws {
    directory = try makeTemporaryDirectory("9bbs-daemon")
    let socket = directory + "/bbs.sock"
    let arguments = [
      "--listen", "unix!\(socket)", "--data", directory + "/data", "--rooms", "lobby,tech",
      "--log-level", "warning",
    ]
    let first = try launch(arguments)
    do {
      let client = try connect("unix!\(socket)", uname: "root")
      defer { client.close() }
      XCTAssertEqual(try client.post("tech:kept across restarts"), .rwrite(count: 25))
      _ = try client.open("etc/motd", fid: 2, mode: .write)
      XCTAssertEqual(
        try client.rpc(.twrite(fid: 2, offset: 0, data: ArraySlice("Persistent\n".utf8))),
        .rwrite(count: 11))
      _ = try client.rpc(.twalk(fid: 0, newfid: 3, names: ["rooms", "lobby"]))
      guard
        case .rcreate = try client.rpc(
          .tcreate(fid: 3, name: "1738005432123", perm: FileMode(permissions: 0o644), mode: .write))
      else { return XCTFail("create failed") }
      _ = try client.rpc(.twrite(fid: 3, offset: 0, data: ArraySlice("Subject: S\n\nBody".utf8)))
    }
    stop(first)
    XCTAssertEqual(first.terminationStatus, 0)
    XCTAssertFalse(FileManager.default.fileExists(atPath: socket), "socket file left behind")

    let second = try launch(arguments)
    let client = try connect("unix!\(socket)", uname: "bob")
    defer { client.close() }
    XCTAssertEqual(try client.readFile("etc/motd"), "Persistent\n")
    XCTAssertTrue(try client.readFile("chat/tech").hasSuffix("root: kept across restarts\n"))
    XCTAssertTrue(try client.readFile("rooms/lobby/2838644539").contains("Subject: S\n"))
    stop(second)
  }
}
