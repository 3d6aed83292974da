import BBSServer
import Foundation
import NinePClient
import NinePTransport
import TestSupport
import XCTest

/// A pool given several addresses of one server, against in-process servers on real sockets.
final class PoolFailoverTests: XCTestCase {
  private var servers: [BBSServer] = []
  private var pools: [Pool] = []
  private var directory = ""

  override func setUpWithError() throws {
    directory = try makeTemporaryDirectory("pool-failover")
  }

  override func tearDown() {
    for pool in pools { pool.close() }
    for server in servers { server.stop() }
    try? FileManager.default.removeItem(atPath: directory)
    super.tearDown()
  }

  private func startServer(_ listen: String) throws -> TransportAddress {
    let server = try BBSServer(
      configuration: BBSServerConfiguration(listen: [listen], rooms: ["lobby"]))
    servers.append(server)
    return try TransportAddress(parsing: try XCTUnwrap(server.start().first))
  }

  private func pool(_ addresses: [TransportAddress], keepalive: Duration) -> Pool {
    var policy = ReconnectPolicy()
    policy.keepaliveInterval = keepalive
    let pool = Pool(
      addresses: addresses,
      configuration: SessionConfiguration(
        profile: .multiplex, uname: "glenda", requestTimeout: .seconds(10)),
      maxSessions: 2, policy: policy)
    pools.append(pool)
    return pool
  }

  /// The preferred address refuses: the pool starts on the next one. Once the preferred one
  /// serves, the pool moves back by itself within a few keepalive periods, without the link
  /// ever counting as down, and the old session is closed.
  func testStartsOnTheNextAddressAndReturnsToThePreferredOne() throws {
    let preferred = TransportAddress.unix(path: directory + "/preferred.sock")
    let other = try startServer("tcp!127.0.0.1!0")
    let pool = pool([preferred, other], keepalive: .seconds(1))
    let states = StateLog()
    pool.observe { states.record($0) }
    try pool.start()
    XCTAssertEqual(pool.address, other)
    XCTAssertEqual(pool.addresses, [preferred, other])
    let first = pool.primary

    _ = try startServer("unix!" + directory + "/preferred.sock")
    XCTAssertTrue(waitUntil(timeout: 15) { pool.address == preferred }, "did not move back")
    XCTAssertEqual(pool.linkState, .up)
    XCTAssertEqual(pool.switchCount, 1)
    XCTAssertEqual(pool.reconnectCount, 0)
    XCTAssertFalse(pool.primary === first)
    XCTAssertTrue(waitUntil(timeout: 5) { first.closedReason != nil }, "the old session lives on")
    XCTAssertFalse(states.all.contains { if case .down = $0 { true } else { false } })
    // The new primary works.
    let session = pool.primary
    let root = try awaitResult("stat of the root", timeout: 5) { done in
      session.stat(session.rootFid, completion: done)
    }
    XCTAssertTrue(root.qid.isDirectory)
  }

  /// Every address refuses: start reports the preferred one's error.
  func testStartFailsWithThePreferredAddresssError() throws {
    let pool = pool(
      [.unix(path: directory + "/none.sock"), .unix(path: directory + "/neither.sock")],
      keepalive: .seconds(1))
    XCTAssertThrowsError(try pool.start()) { error in
      XCTAssertTrue("\(error)".contains("none.sock"), "\(error)")
    }
  }
}

private final class StateLog: @unchecked Sendable {
  private let lock = NSLock()
  private var states: [LinkState] = []

  func record(_ state: LinkState) { lock.withLock { states.append(state) } }

  var all: [LinkState] { lock.withLock { states } }
}
