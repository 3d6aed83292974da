import Foundation
import TestSupport
import XCTest

/// Several processes appending small records through the mount at once, on a loaded machine
/// (a busy loop on one core), every record then checked in the server's own copy of the file:
/// each writer's own file (xfstests generic/069's shape) and one file all of them append to.
///
/// Within one mount, appends to one file are ordered by the kernel (each `O_APPEND` write
/// takes the inode's lock and its end), so even a shared file must come out whole; what 9P2000
/// cannot promise is `O_APPEND` from two clients (it has no append mode for a Twrite).
///
/// `timeout=5`: the default 30 s would only make a stall slower to show. Before the fix,
/// write-behind queued one Twrite per 4-byte write (up to 8 MiB of them), requests timed out
/// behind each other, were flushed, and left zeros in the files while `write(2)` had said
/// yes (and `close` failed with ETIMEDOUT).
final class ConcurrentWriterTests: XCTestCase {
  /// Runs scripts/append-writers through a fresh mount of `setup`, checking the server's copy.
  func appendThroughTheMount(
    _ setup: Setup, shared: Bool, writers: Int = 6, seconds: Int,
    file: StaticString = #filePath, line: UInt = #line
  ) throws {
    let area = try makeTemporaryDirectory("mount9bbs-append")
    addTeardownBlock { try? FileManager.default.removeItem(atPath: area) }
    let rig = try MountRig.start(
      setup, for: self, serverArguments: ["--files", area, "--files-rw"],
      mountOptions: ["timeout=5"])
    let command =
      [
        "python3", PackagePaths.path("scripts/append-writers"), rig.path("files"), "--check", area,
        "--writers", "\(writers)", "--seconds", "\(seconds)", "--busy", "1",
      ] + (shared ? ["--shared"] : [])
    let result = try shell(command.joined(separator: " "), timeout: TimeInterval(seconds + 90))
    XCTAssertEqual(result.status, 0, result.output, file: file, line: line)
    XCTAssertTrue(result.output.hasSuffix("append-writers: passed\n"), result.output)
    XCTAssertFalse(
      rig.mount.child.text.contains("in time; flushing"),
      "a request waited out its timeout on a healthy server:\n\(rig.mount.child.text)",
      file: file, line: line)
    rig.assertNoViolations(file: file, line: line)
  }

  func testSixWritersAppendingToTheirOwnFilesOverTCP() throws {
    try appendThroughTheMount(.multiplexTCP, shared: false, seconds: 6)
  }

  func testSixWritersAppendingToOneFileOverTCP() throws {
    try appendThroughTheMount(.multiplexTCP, shared: true, seconds: 4)
  }

  func testSixWritersAppendingToTheirOwnFilesOverUnix() throws {
    try appendThroughTheMount(.multiplexUnix, shared: false, seconds: 6)
  }

  func testSixWritersAppendingToOneFileOverUnix() throws {
    try appendThroughTheMount(.multiplexUnix, shared: true, seconds: 4)
  }

  func testSixWritersAppendingToTheirOwnFilesOnABoard() throws {
    try appendThroughTheMount(.deviceSeqpacket, shared: false, seconds: 4)
  }

  func testSixWritersAppendingToOneFileOnABoard() throws {
    try appendThroughTheMount(.deviceSeqpacket, shared: true, seconds: 4)
  }
}
