import Foundation
import TestSupport
import XCTest

/// ``FileModelChecker`` runs through real mounts of a real `9bbsd --files DIR --files-rw`, over
/// TCP, a Unix socket and the device profile on seqpacket: a new file and one that already has
/// a size (the page-cache path), each then compared with what the server holds. The same
/// runs on a local directory prove the checker itself.
///
/// Seeds are random per run and printed; `MOUNT9BBS_MODEL_SEED=N` repeats one.
final class FileModelTests: XCTestCase {
  /// The run's seed: `MOUNT9BBS_MODEL_SEED`, else a fresh one.
  static let seed: UInt64 = {
    if let text = ProcessInfo.processInfo.environment["MOUNT9BBS_MODEL_SEED"],
      let seed = UInt64(text)
    {
      return seed
    }
    return UInt64.random(in: 1..<1 << 32)
  }()

  /// What a server-side file starts with, for the pre-sized runs: an odd size, not a page's.
  static let initialContents: [UInt8] = {
    var random = SplitMix64(seed: 77)
    return (0..<(100 << 10) + 3).map { _ in UInt8(truncatingIfNeeded: random.next()) }
  }()

  override func setUp() {
    print("FileModelTests: seed \(Self.seed) (MOUNT9BBS_MODEL_SEED=\(Self.seed) repeats it)")
  }

  // MARK: The harness itself

  func testTheModelHoldsOnALocalDirectory() throws {
    let directory = try makeTemporaryDirectory("file-model")
    addTeardownBlock { try? FileManager.default.removeItem(atPath: directory) }
    try FileManager.default.createDirectory(
      atPath: directory + "/files", withIntermediateDirectories: false)
    try exercise(files: directory + "/files", area: directory + "/files", operations: 3000)
  }

  /// The checker is not a test that cannot fail: a byte changed behind its back and a size
  /// changed behind its back are both reported, with the offset and the operations before.
  func testTheCheckerReportsABadByteAndABadSize() throws {
    let directory = try makeTemporaryDirectory("file-model")
    addTeardownBlock { try? FileManager.default.removeItem(atPath: directory) }
    let path = directory + "/victim.bin"
    try Data(Self.initialContents).write(to: URL(fileURLWithPath: path))
    let checker = try FileModelChecker(
      path: path, seed: 5, initialContents: Self.initialContents)
    try checker.run(operations: 50)
    let size = Int(try sh("stat -c %s \(path)").trimmingCharacters(in: .whitespacesAndNewlines))
    let target = try XCTUnwrap(size) / 2
    let current = try XCTUnwrap(FileHandle(forUpdatingAtPath: path))
    try current.seek(toOffset: UInt64(target))
    let byte = try XCTUnwrap(try current.read(upToCount: 1)?.first)
    try current.seek(toOffset: UInt64(target))
    try current.write(contentsOf: [~byte])
    XCTAssertThrowsError(try checker.verifyWholeFile()) { error in
      let failure = error as? FileModelFailure
      XCTAssertEqual(failure?.firstDifference, target, "\(error)")
      XCTAssertEqual(failure?.seed, 5)
      XCTAssertEqual(failure?.recentOperations.count, 40)
      XCTAssertTrue("\(error)".contains("first differing offset \(target)"), "\(error)")
    }
    try current.truncate(atOffset: UInt64(target))
    try current.close()
    XCTAssertThrowsError(try checker.run(operations: 1)) { error in
      XCTAssertTrue(
        "\(error)".contains("size error") || "\(error)".contains("bytes, want"), "\(error)")
    }
  }

  // MARK: Through the mount

  func testTheModelHoldsThroughATCPMount() throws {
    try exerciseMount(.multiplexTCP, operations: 4000)
  }

  func testTheModelHoldsThroughAUnixSocketMount() throws {
    try exerciseMount(.multiplexUnix, operations: 4000)
  }

  /// The device profile: one request at a time, 8 KiB messages, writes that go synchronously,
  /// and no Twstat (`ftruncate` is `EPERM`; `O_TRUNC` still works).
  func testTheModelHoldsThroughADeviceMount() throws {
    try exerciseMount(
      .deviceSeqpacket, operations: 1000, features: [.mmap, .directIO])
  }

  // MARK: Helpers

  private func exerciseMount(
    _ setup: Setup, operations: Int, features: FileModelChecker.Features = .all
  ) throws {
    let area = try makeTemporaryDirectory("mount9bbs-model")
    addTeardownBlock { try? FileManager.default.removeItem(atPath: area) }
    let rig = try MountRig.start(
      setup, for: self, serverArguments: ["--files", area, "--files-rw"])
    try exercise(
      files: rig.path("files"), area: area, operations: operations, features: features)
    rig.assertNoViolations()
  }

  /// Runs the checker on a new file and on one the server already holds (in `files`, the
  /// directory being tested), then compares what `area` (the server's directory) holds.
  private func exercise(
    files: String, area: String, operations: Int, features: FileModelChecker.Features = .all
  ) throws {
    try Data(Self.initialContents).write(to: URL(fileURLWithPath: area + "/sized.bin"))
    let runs: [(name: String, seed: UInt64, initial: [UInt8]?)] = [
      ("new.bin", Self.seed, nil), ("sized.bin", Self.seed &+ 1, Self.initialContents),
    ]
    for run in runs {
      let checker = try FileModelChecker(
        path: files + "/" + run.name, seed: run.seed, features: features,
        initialContents: run.initial)
      do {
        try checker.run(operations: operations / 2)
        try checker.verifyWholeFile()
        let want = try checker.finish()
        let held = try [UInt8](Data(contentsOf: URL(fileURLWithPath: area + "/" + run.name)))
        if held != want {
          let common = min(held.count, want.count)
          let first = (0..<common).first { held[$0] != want[$0] } ?? common
          throw checker.failure(
            "the server holds \(held.count) bytes, the model \(want.count);"
              + " first differing offset \(first)", firstDifference: first)
        }
      } catch let failure as FileModelFailure {
        XCTFail("\(failure)")
        return
      }
    }
  }
}
