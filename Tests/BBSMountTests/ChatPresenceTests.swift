import Foundation
import TestSupport
import XCTest

/// `chat/users` on 9bbsd means "present now": a user is listed while a mount of theirs is
/// attached, from the mount on (before it opens a room), and not after it unmounts.
final class ChatPresenceTests: XCTestCase {
  func testUsersListsWhoIsMountedNow() throws {
    let rig = try MountRig.start(.multiplexTCP, for: self)
    let users = rig.path("chat/users")
    func listed() -> [String] {
      ((try? sh("timeout 10 cat \(users)")) ?? "").split(separator: "\n").map(String.init)
    }
    func names() -> [String] { listed().map { String($0.split(separator: " ").first ?? "") } }
    let other = try rig.secondMount(for: self, options: ["uname=bob"])
    // bob has not opened a room: his mount is attached, so he is here.
    XCTAssertTrue(waitUntil(timeout: 5) { names().contains("bob") }, "\(listed())")
    for line in listed() {
      XCTAssertNotNil(
        line.range(of: #"^[^ ]+ \(idle: [0-9]+s\)$"#, options: .regularExpression), line)
    }
    other.stop()
    XCTAssertTrue(waitUntil(timeout: 5) { !names().contains("bob") }, "\(listed())")
    XCTAssertTrue(names().contains("root"), "\(listed())")
  }
}
