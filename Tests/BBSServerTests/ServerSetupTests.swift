import Foundation
import TestSupport
import XCTest

@testable import BBSServer

/// Settings `BBSServer` refuses when it is built, each with the text 9bbsd prints, and which
/// refusal a configuration with several bad settings gets: the connection limit, then the
/// store, then the rest in a fixed order.
final class ServerSetupTests: XCTestCase {
  private var directory = ""

  override func setUpWithError() throws {
    directory = try makeTemporaryDirectory("9bbsd-setup")
  }

  override func tearDown() {
    try? FileManager.default.removeItem(atPath: directory)
    super.tearDown()
  }

  /// What building a server with `configuration` throws; nil when it builds.
  private func refusal(_ configuration: BBSServerConfiguration) -> ServerError? {
    do {
      let server = try BBSServer(configuration: configuration)
      server.stop()
      return nil
    } catch {
      return error
    }
  }

  private func configuration(_ change: (inout BBSServerConfiguration) -> Void)
    -> BBSServerConfiguration
  {
    var configuration = BBSServerConfiguration(listen: ["tcp!127.0.0.1!0"])
    change(&configuration)
    return configuration
  }

  func testEachUnusableSettingIsRefusedWithItsReason() {
    let cases: [(String, BBSServerConfiguration, String)] = [
      (
        "backlog 0", configuration { $0.connectionLimit = .backlog(0) },
        "the connection limit must be at least 1"
      ),
      (
        "cap 0", configuration { $0.connectionLimit = .refuse(0) },
        "the connection limit must be at least 1"
      ),
      ("no rooms", configuration { $0.rooms = [] }, "at least one chat room is needed"),
      (
        "gen1 with auth",
        configuration {
          $0.profile = .gen1
          $0.auth = .optional
        }, "the gen1 profile has no authentication (its core predates Tauth); use --auth off"
      ),
      (
        "sysops without auth", configuration { $0.sysops = [String(repeating: "a", count: 40)] },
        "sysops are identities: they need --auth optional or required"
      ),
      (
        "per-network 0", configuration { $0.maxConnectionsPerNetwork = 0 },
        "the per-network connection limit must be at least 1"
      ),
      (
        "board message 0", configuration { $0.maxBoardMessageSize = 0 },
        "the board message size limit must be at least 1"
      ),
    ]
    for (name, configuration, reason) in cases {
      XCTAssertEqual(refusal(configuration), .badConfiguration(reason), name)
    }
  }

  func testTheFirstBadSettingInCheckingOrderIsTheOneReported() throws {
    // A data directory that cannot be made: a path below a regular file.
    let file = directory + "/file"
    XCTAssertTrue(FileManager.default.createFile(atPath: file, contents: Data()))
    let everything = configuration {
      $0.connectionLimit = .backlog(0)
      $0.dataDirectory = file + "/data"
      $0.rooms = []
      $0.maxConnectionsPerNetwork = 0
      $0.maxBoardMessageSize = 0
    }
    XCTAssertEqual(
      refusal(everything), .badConfiguration("the connection limit must be at least 1"))
    var rest = everything
    rest.connectionLimit = .unlimited
    guard case .storeFailed? = refusal(rest) else {
      return XCTFail("a data directory that cannot be made: \(String(describing: refusal(rest)))")
    }
    rest.dataDirectory = nil
    XCTAssertEqual(refusal(rest), .badConfiguration("at least one chat room is needed"))
    rest.rooms = ["lobby"]
    XCTAssertEqual(
      refusal(rest), .badConfiguration("the per-network connection limit must be at least 1"))
    rest.maxConnectionsPerNetwork = 1
    XCTAssertEqual(
      refusal(rest), .badConfiguration("the board message size limit must be at least 1"))
    rest.maxBoardMessageSize = 1
    XCTAssertNil(refusal(rest))
  }

  func testOnlyABacklogLimitHasConnectionSlots() throws {
    let backlog = try BBSServer(configuration: configuration { $0.connectionLimit = .backlog(2) })
    defer { backlog.stop() }
    XCTAssertNotNil(backlog.slots)
    let cap = try BBSServer(configuration: configuration { $0.connectionLimit = .refuse(2) })
    defer { cap.stop() }
    XCTAssertNil(cap.slots)
  }
}
