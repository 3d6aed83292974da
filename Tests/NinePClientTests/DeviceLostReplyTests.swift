import Foundation
import NinePClient
import NinePProtocol
import NinePTransport
import TestSupport
import XCTest

/// A device can lose a reply (TX buffer timeout, SDU over the peer's MTU; docs/board-facts.md §3.2,
/// §9.5). The device profile keeps the channel "busy" until a request is answered, so a lost
/// reply must not wedge the session: on timeout the client flushes and carries on, and if the
/// device answers nothing at all the session closes so its owner can reconnect.
final class DeviceLostReplyTests: XCTestCase {
  private func connect(
    timeout: Duration, handler: @escaping @Sendable (ScriptedServer, Tag, Message) -> Void
  ) throws -> (Session, ScriptedServer) {
    let (client, server) = MemoryTransport.pair()
    let peer = ScriptedServer(transport: server, msize: 8192, handler: handler)
    var configuration = SessionConfiguration(
      profile: .device, uname: "glenda", requestTimeout: timeout)
    configuration.parkGrace = .milliseconds(20)
    let session = try Session.connect(transport: client, configuration: configuration)
    addTeardownBlock { session.close() }
    return (session, peer)
  }

  private static let stat = Stat(
    qid: Qid(path: 2), mode: FileMode(permissions: 0o444), name: "motd")

  /// The first Tstat's reply is lost: it times out, the Tflush goes out, and the next request
  /// is answered.
  func testLostReplyDoesNotWedgeTheDeviceSession() throws {
    let stats = Outcomes<Void>()
    let (session, peer) = try connect(timeout: .milliseconds(200)) { server, tag, message in
      switch message {
      case .tstat:
        let first = stats.count == 0
        stats.add(.success(()))
        if !first { server.reply(tag, .rstat(stat: Self.stat)) }  // the first reply is lost
      case .tflush: server.reply(tag, .rflush)
      default: server.reply(tag, .rerror(ename: "operation not supported"))
      }
    }
    let lost = try awaitFailure("lost stat", timeout: 5) {
      session.stat(session.rootFid, completion: $0)
    }
    XCTAssertEqual(lost, .timedOut)
    let next = try awaitResult("stat after the lost reply", timeout: 5) {
      session.stat(session.rootFid, completion: $0)
    }
    XCTAssertEqual(next.name, "motd")
    XCTAssertNil(session.closedReason)
    let types = peer.requests.dropFirst(2).map(\.message.type)
    XCTAssertEqual(types, [.tstat, .tflush, .tstat], "one request at a time, flush in between")
  }

  /// A device that answers nothing any more (not even the Tflush) closes the session within
  /// a bounded time instead of leaving it open with every request timing out.
  func testSilentDeviceClosesTheSession() throws {
    let (session, _) = try connect(timeout: .milliseconds(200)) { _, _, _ in }
    let closed = Outcomes<String>()
    session.onClose { closed.add(.success($0)) }
    let lost = try awaitFailure("lost stat", timeout: 5) {
      session.stat(session.rootFid, completion: $0)
    }
    XCTAssertEqual(lost, .timedOut)
    XCTAssertTrue(closed.wait(timeout: 5), "the session stayed open on a silent device")
    XCTAssertNotNil(session.closedReason)
    let after = try awaitFailure("request on the closed session", timeout: 5) {
      session.stat(session.rootFid, completion: $0)
    }
    guard case .sessionClosed = after else { return XCTFail("\(after)") }
  }
}
