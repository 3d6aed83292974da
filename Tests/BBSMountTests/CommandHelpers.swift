import Foundation
import TestSupport
import XCTest

/// What the suites that run `mount9bbs` as a command share: running a built executable,
/// a server, a mount directory cleaned up whatever happens, and the shape of a failed mount.
extension XCTestCase {
  /// Runs a built executable to completion (bounded): its status and stdout+stderr.
  func runBuilt(
    _ name: String, _ arguments: [String], environment: [String: String]? = nil,
    timeout: TimeInterval = 20
  ) throws -> (status: Int32, output: String) {
    let child = ChildProcess(BuiltProducts.path(of: name), arguments, environment: environment)
    try child.start()
    guard child.wait(timeout: timeout) else {
      child.stop()
      throw HarnessError("\(name) \(arguments) ran over \(timeout) s: \(child.text)")
    }
    return (child.process.terminationStatus, child.text)
  }

  /// A 9bbsd, stopped with the test.
  func startServerProcess(transport: String = "tcp", extra: [String] = []) throws -> ServerProcess {
    let server = try ServerProcess(transport: transport, extra: extra)
    addTeardownBlock { server.stop() }
    return server
  }

  /// What a successful detached mount printed, less the one line that says where its log
  /// goes when it first makes the log file (a machine with no journal and no syslog).
  func mountOutput(_ output: String) -> String {
    output.split(separator: "\n", omittingEmptySubsequences: false).filter {
      !$0.hasPrefix("mount9bbs: no journal or syslog here; the log goes to ")
    }.joined(separator: "\n")
  }

  /// A private directory with an empty `mnt` in it; on teardown, anything mounted there is
  /// unmounted and any daemon serving it killed before the directory goes.
  func makeMountDirectory(_ prefix: String) throws -> String {
    let directory = try makeTemporaryDirectory(prefix)
    let mountpoint = directory + "/mnt"
    try FileManager.default.createDirectory(atPath: mountpoint, withIntermediateDirectories: false)
    addTeardownBlock {
      for pid in mountDaemons(serving: mountpoint) { kill(pid, SIGKILL) }
      forceUnmount(mountpoint)
      guard !isMounted(mountpoint) else { return }
      try? FileManager.default.removeItem(atPath: directory)
    }
    return directory
  }

  /// `mount9bbs ARGUMENTS` (whose last is `mountpoint`) fails detached and with -f: a non-zero
  /// status, every one of `phrases` in what it printed (in one `mount9bbs: ` line when
  /// `oneLine`), and no mount or daemon left behind.
  func assertMountFails(
    _ arguments: [String], at mountpoint: String, environment: [String: String]? = nil,
    saying phrases: [String], oneLine: Bool = false, file: StaticString = #filePath,
    line: UInt = #line
  ) throws {
    for foreground in [false, true] {
      let arguments = (foreground ? ["-f"] : []) + arguments
      let result = try runBuilt("mount9bbs", arguments, environment: environment)
      let context = "mount9bbs \(arguments.joined(separator: " ")):\n\(result.output)"
      XCTAssertNotEqual(result.status, 0, context, file: file, line: line)
      if oneLine {
        let lines = result.output.split(separator: "\n")
        XCTAssertEqual(lines.count, 1, "not one line: \(context)", file: file, line: line)
        XCTAssertTrue(
          lines.first?.hasPrefix("mount9bbs: ") ?? false, context, file: file, line: line)
      }
      for phrase in phrases {
        XCTAssertTrue(
          result.output.contains(phrase), "missing “\(phrase)” in \(context)", file: file,
          line: line)
      }
      XCTAssertFalse(isMounted(mountpoint), "left a mount: \(context)", file: file, line: line)
      XCTAssertTrue(
        waitUntil(timeout: 5) { mountDaemons(serving: mountpoint).isEmpty },
        "left a daemon: \(context)", file: file, line: line)
    }
  }

  /// `mount9bbs status --json MOUNTPOINT` as an object, nil if it fails.
  func statusJSON(of mountpoint: String) -> [String: Any]? {
    guard
      let result = try? shell(
        "\(BuiltProducts.path(of: "mount9bbs")) status --json \(mountpoint)", timeout: 10),
      result.status == 0, let data = result.output.data(using: .utf8),
      let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
    else { return nil }
    return object
  }

  /// The link's state ("up", "down", …) as `mount9bbs status --json` tells it, nil if it fails.
  func linkState(of mountpoint: String) -> String? {
    (statusJSON(of: mountpoint)?["link"] as? [String: Any])?["state"] as? String
  }
}
