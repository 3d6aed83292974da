import Foundation
import TestSupport
import XCTest

/// A directory of many entries through a real mount of `9bbsd --files-rw`: the mount's own
/// creates, removes, renames and `touch`es keep its listing up to date instead of reading the
/// whole directory again for the next lookup (xfstests generic/006 made 1.3 creates a second
/// at 1,700 entries that way), and what it shows stays what the server holds.
final class DirectoryScaleTests: XCTestCase {
  /// Directory reads (Tread) the server has logged so far: nothing else reads here.
  private func reads(_ rig: MountRig) -> Int {
    rig.server.log.split(separator: "\n").filter { $0.contains("<- Tread") }.count
  }

  func testChangesInABigDirectoryReadNoWholeListingEach() throws {
    let area = try makeTemporaryDirectory("mount9bbs-bigdir")
    addTeardownBlock { try? FileManager.default.removeItem(atPath: area) }
    try FileManager.default.createDirectory(
      atPath: area + "/big", withIntermediateDirectories: false)
    for index in 0..<300 {
      _ = FileManager.default.createFile(atPath: area + "/big/seed-\(index)", contents: Data())
    }
    let rig = try MountRig.start(
      .multiplexTCP, for: self,
      serverArguments: ["--files", area, "--files-rw", "--log-level", "trace"])
    let big = rig.path("files/big")
    XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: big).count, 300)
    let before = reads(rig)
    let script = """
      import os, sys
      d = sys.argv[1]
      for i in range(100):
          open(f'{d}/new-{i}', 'w').close()
      for i in range(100):
          os.utime(f'{d}/seed-{i}', (1000000000, 1000000000))
      for i in range(50):
          os.rename(f'{d}/new-{i}', f'{d}/moved-{i}')
      for i in range(100, 200):
          os.unlink(f'{d}/seed-{i}')
      os.mkdir(f'{d}/sub')
      assert not os.path.exists(f'{d}/new-0') and os.path.exists(f'{d}/moved-0')
      assert not os.path.exists(f'{d}/seed-150') and os.stat(f'{d}/seed-5').st_mtime == 1000000000
      print('ok')
      """
    let path = rig.directory + "/changes.py"
    try script.write(toFile: path, atomically: true, encoding: .utf8)
    XCTAssertEqual(try sh("python3 \(path) '\(big)'", timeout: 120), "ok\n")
    let spent = reads(rig) - before
    // 351 changes: one whole listing each read 2 or more times (a reply, then the empty
    // one that ends it). Kept up to date, the listing is read again only as it expires
    // (once a second).
    XCTAssertLessThan(spent, 60, "directory reads for 351 changes")
    let shown = Set(try FileManager.default.contentsOfDirectory(atPath: big))
    let held = Set(try FileManager.default.contentsOfDirectory(atPath: area + "/big"))
    XCTAssertEqual(shown, held)
    XCTAssertEqual(held.count, 300 + 100 - 100 + 1)
    rig.assertNoViolations()
  }
}
