import Foundation
import TestSupport
import XCTest

/// `9bbsd` must serve an independent 9P2000 client: python-9p from PyPI (plan9port's wire
/// codec behind a small Python client) runs `Tests/interop/python9p_check.py` against a real
/// `9bbsd` process over TCP. The interpreter is `$MOUNT9BBS_INTEROP_PYTHON`, or
/// `.venv-interop/bin/python` in the package root, which `scripts/test` creates.
final class PythonInteropTests: XCTestCase {
  /// The package root: three levels above this file (Tests/BBSServerTests/…).
  static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    .deletingLastPathComponent().deletingLastPathComponent()

  static var interpreter: String {
    PackagePaths.python(
      environment: "MOUNT9BBS_INTEROP_PYTHON", fallback: ".venv-interop/bin/python")
  }

  static var script: String {
    packageRoot.appendingPathComponent("Tests/interop/python9p_check.py").path
  }

  func testPython9PClientAgainstDefaultProfile() throws {
    try runCheck(profile: "default")
  }

  /// The device profile over TCP serves one request at a time; the script's post while its
  /// read is parked must still be answered.
  func testPython9PClientAgainstDeviceProfile() throws {
    try runCheck(profile: "device")
  }

  private func runCheck(profile: String, file: StaticString = #filePath, line: UInt = #line)
    throws
  {
    let python = Self.interpreter
    guard FileManager.default.isExecutableFile(atPath: python) else {
      return XCTFail(
        """
        The python-9p interop interpreter is missing: \(python) is not an executable. \
        Run `scripts/test` (it creates .venv-interop with python-9p), or set \
        MOUNT9BBS_INTEROP_PYTHON to a python that has python-9p installed.
        """, file: file, line: line)
    }
    let motd = "Interop board, \(profile) profile"
    let server = try ServerProcess(
      transport: "tcp", profile: profile, extra: ["--motd", motd, "--log-level", "info"])
    addTeardownBlock { server.stop() }

    let check = ChildProcess(python, [Self.script, server.address, "--motd", motd])
    try check.start()
    addTeardownBlock { check.stop() }
    guard check.wait(timeout: 60) else {
      check.stop()
      return XCTFail(
        "python9p_check.py did not finish in 60 s:\n\(check.text)", file: file, line: line)
    }
    // Let the output pipe drain (the process has exited; its last lines may still be in flight).
    _ = waitUntil(timeout: 2) { check.text.contains("summary: ") }
    let output = check.text
    XCTAssertEqual(
      check.process.terminationStatus, 0,
      "python-9p checks failed against 9bbsd (\(profile)):\n\(output)\n--- 9bbsd log ---\n\(server.child.text)",
      file: file, line: line)
    XCTAssertTrue(
      output.contains("summary: ") && output.contains(", 0 failed"), output, file: file,
      line: line)
    XCTAssertFalse(output.contains("FAIL"), output, file: file, line: line)
    XCTAssertTrue(
      server.child.isRunning, "9bbsd died:\n\(server.child.text)", file: file, line: line)
  }
}
