import Foundation
import NinePProtocol
import NinePTransport
import XCTest

@testable import BBSServer

/// A full board and a member with no session (BBSServer+Reclaim.swift): the newest session of
/// the user holding the most is taken back for a newcomer whose user holds none; an extra
/// session of a user already in, or a newcomer when nobody holds more than one, is refused.
final class ReclaimTests: ServerTestCase {
  private func fullBoard() throws -> BBSServer {
    let server = try BBSServer(
      configuration: BBSServerConfiguration(
        listen: ["tcp!127.0.0.1!0"], profile: .device, connectionLimit: .refuse(4)))
    try start(server)
    return server
  }

  /// Tversion then Tattach as `uname`: the Tattach's reply.
  private func attach(_ client: WireClient, as uname: String) throws -> Message {
    guard
      case .rversion = try client.rpc(.tversion(msize: 8192, version: "9P2000"), tag: NineP.noTag)
    else { throw TestError.unexpected("Rversion") }
    return try client.rpc(.tattach(fid: 0, afid: NineP.noFid, uname: uname, aname: ""))
  }

  func testANewcomerTakesTheNewestSessionOfTheUserHoldingTheMost() throws {
    _ = try fullBoard()
    let ann = [try connect("ann"), try connect("ann")]
    let bob = [try connect("bob"), try connect("bob")]
    let cyd = try dial()
    guard case .rattach = try attach(cyd, as: "cyd") else {
      return XCTFail("cyd was not let in")
    }
    // Of equals, the newest session goes: bob's second.
    XCTAssertTrue(bob[1].waitForDisconnect(timeout: 5), "bob's extra session was not taken back")
    XCTAssertFalse(ann[1].waitForDisconnect(timeout: 0.2), "ann lost a session too")
    // bob asks for an extra session again: he is in, so it is refused, and nobody else loses.
    let again = try dial()
    XCTAssertEqual(
      try attach(again, as: "bob"), .rerror(ename: "board full: all 4 sessions in use"))
    XCTAssertFalse(ann[1].waitForDisconnect(timeout: 0.5), "ann lost her extra session to bob")
    // Left on probation, it is closed.
    XCTAssertTrue(again.waitForDisconnect(timeout: 5))
  }

  /// Guests are different people: four guests hold one session each, and a newcomer takes
  /// none of theirs.
  func testGuestsAreNotOneMemberHoldingSeveral() throws {
    _ = try fullBoard()
    let guests = try (0..<4).map { _ in try connect("") }
    let newcomer = try dial()
    // Nobody holds more than one: refused at once, as a full board does.
    try newcomer.send(.tversion(msize: 8192, version: "9P2000"), tag: NineP.noTag)
    guard case .rerror(let ename) = try newcomer.reply(tag: NineP.noTag) else {
      return XCTFail("the newcomer was let in")
    }
    XCTAssertEqual(ename, "board full: all 4 sessions in use")
    for guest in guests { XCTAssertFalse(guest.waitForDisconnect(timeout: 0.1)) }
  }

  /// A newcomer let in on probation that never attaches is closed.
  func testANewcomerThatNeverAttachesIsClosed() throws {
    _ = try fullBoard()
    let held = [try connect("ann"), try connect("ann"), try connect("bob"), try connect("cyd")]
    let idle = try dial()
    XCTAssertTrue(idle.waitForDisconnect(timeout: 5), "a probationer stayed")
    for client in held { XCTAssertFalse(client.waitForDisconnect(timeout: 0.1)) }
  }
}
