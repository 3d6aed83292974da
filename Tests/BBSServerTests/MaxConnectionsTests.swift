import Foundation
import NinePProtocol
import NinePTransport
import XCTest

@testable import BBSServer

/// `--max-connections N`: later clients wait in the listen backlog until one leaves.
final class MaxConnectionsTests: ServerTestCase {

  /// With one connection allowed, a second client's Tversion is answered only once the first
  /// client has gone.
  private func checkSecondClientWaits(profile: BBSProfile, listen: String) throws {
    let server = try BBSServer(
      configuration: BBSServerConfiguration(
        listen: [listen], profile: profile, connectionLimit: .backlog(1)))
    try start(server)
    let first = try connect()

    let second = try dial()  // connects: the kernel's backlog holds it
    try second.send(.tversion(msize: 8192, version: "9P2000"), tag: NineP.noTag)
    XCTAssertNil(
      second.reply(tag: NineP.noTag, ifWithin: 0.5), "answered while the first client is on")
    XCTAssertEqual(server.sessionCount, 1)

    first.close()
    guard case .rversion = try second.reply(tag: NineP.noTag) else {
      return XCTFail("the waiting client was not served after the first one left")
    }
    XCTAssertEqual(server.sessionCount, 1)
  }

  func testGen1SecondClientWaitsForTheFirstOverTCP() throws {
    try checkSecondClientWaits(profile: .gen1, listen: "tcp!127.0.0.1!0")
  }

  func testDefaultProfileSecondClientWaitsOverUnix() throws {
    directory = try makeTemporaryDirectory("9bbs-max")
    try checkSecondClientWaits(profile: .standard, listen: "unix!\(directory)/bbs.sock")
  }

  func testDeviceSecondClientWaitsOverSeqpacket() throws {
    directory = try makeTemporaryDirectory("9bbs-max")
    try checkSecondClientWaits(profile: .device, listen: "seqpacket!\(directory)/bbs.sock")
  }

  func testLimitBelowOneIsRefused() {
    XCTAssertThrowsError(
      try BBSServer(
        configuration: BBSServerConfiguration(
          listen: ["tcp!127.0.0.1!0"], connectionLimit: .backlog(0))))
  }
}
