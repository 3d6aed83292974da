import BBSServer
import Foundation
import NinePClient
import NinePTransport
import XCTest

/// Where ``Pool/session(for:completion:)`` puts streams, against an in-process server.
final class PoolPlacementTests: XCTestCase {
  private var server: BBSServer?
  private var pools: [Pool] = []

  override func tearDown() {
    for pool in pools { pool.close() }
    pools.removeAll()
    server?.stop()
    server = nil
    super.tearDown()
  }

  private func startPool(
    connectionLimit: ConnectionLimit? = nil, requestTimeout: Duration = .seconds(10)
  ) throws -> Pool {
    let server = try BBSServer(
      configuration: BBSServerConfiguration(
        listen: ["tcp!127.0.0.1!0"], rooms: ["lobby"], connectionLimit: connectionLimit))
    self.server = server
    let address = try TransportAddress(parsing: try XCTUnwrap(server.start().first))
    let pool = Pool(
      address: address,
      configuration: SessionConfiguration(
        profile: .multiplex, uname: "glenda", requestTimeout: requestTimeout),
      maxSessions: 2)
    pools.append(pool)
    try pool.start()
    return pool
  }

  func testOrdinaryRequestsGoToThePrimary() throws {
    let pool = try startPool()
    XCTAssertTrue(try Session.placed(pool, .ordinary) === pool.primary)
    XCTAssertEqual(pool.sessions.count, 1)
  }

  /// A stream waits for a new session and is reserved there once; the dial-patience timer
  /// that fires later finds nobody waiting and reserves nothing.
  func testStreamGoesToANewSessionAndHoldsOneReservation() throws {
    let pool = try startPool()
    let stream = try Session.placed(pool, .stream)
    XCTAssertFalse(stream === pool.primary)
    XCTAssertEqual(pool.sessions.count, 2)
    XCTAssertEqual(pool.streamLoad(of: stream), 1)
    // An idle period is the point: the patience timer (2 s) must have fired.
    Thread.sleep(forTimeInterval: 2.3)
    XCTAssertEqual(pool.sessions.map(pool.streamLoad(of:)), [0, 1])
    pool.releaseStream(on: stream)
    XCTAssertEqual(pool.streamLoad(of: stream), 0)
    XCTAssertTrue(try Session.placed(pool, .stream) === stream, "a free slot there comes first")
  }

  /// A server that leaves the second connection waiting: the stream goes to the primary when
  /// the dial gives up, and the next one goes there at once, without dialling again.
  func testServerThatGivesNoSecondSessionSharesThePrimary() throws {
    let pool = try startPool(connectionLimit: .backlog(1), requestTimeout: .seconds(1))
    let first = try Session.placed(pool, .stream)
    XCTAssertTrue(first === pool.primary)
    let started = ContinuousClock.now
    let second = try Session.placed(pool, .stream)
    XCTAssertTrue(second === pool.primary)
    XCTAssertLessThan(started.duration(to: .now), .milliseconds(500), "dialled again")
    XCTAssertEqual(pool.streamLoad(of: pool.primary), 2)
    XCTAssertEqual(pool.sessions.count, 1)
  }
}
