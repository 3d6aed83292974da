import Glibc
import XCTest

@testable import FuseKit

/// The flags a bind remount gets: all the mount has (a remount sets every per-mount flag),
/// with the access-time options applied in order.
final class AccessTimesTests: XCTestCase {
  private func flags(_ options: [String], on present: [String]) -> UInt {
    var times = AccessTimes()
    for option in options { XCTAssertTrue(times.add(option), option) }
    return times.mountFlags(from: present)
  }

  func testTheMountsOtherFlagsAreKept() {
    let present = ["ro", "nosuid", "nodev", "noexec", "relatime"]
    let flags = flags(["nodiratime"], on: present)
    for flag in [MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_RELATIME, MS_NODIRATIME] {
      XCTAssertNotEqual(flags & UInt(flag), 0, "flag \(flag)")
    }
  }

  func testStrictAtimeClearsRelatimeAndNoatime() {
    let flags = flags(["strictatime"], on: ["rw", "noatime", "relatime"])
    XCTAssertEqual(flags & UInt(MS_NOATIME | MS_RELATIME), 0)
    XCTAssertNotEqual(flags & UInt(MS_STRICTATIME), 0)
  }

  func testTheLaterOptionWins() {
    XCTAssertEqual(flags(["nodiratime", "diratime"], on: ["rw"]) & UInt(MS_NODIRATIME), 0)
    XCTAssertEqual(
      flags(["strictatime", "relatime"], on: ["rw"]) & UInt(MS_RELATIME | MS_STRICTATIME),
      UInt(MS_RELATIME))
  }

  func testOtherOptionsAreNotTaken() {
    var times = AccessTimes()
    XCTAssertFalse(times.add("noatime"), "libfuse's own")
    XCTAssertFalse(times.add("lazytime"))
    XCTAssertTrue(times.isEmpty)
  }
}
