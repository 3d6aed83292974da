import Foundation
import XCTest

@testable import BBSServer

/// A test case that runs an in-process 9bbsd and wire clients against it: everything it
/// started (clients, the server, its temporary directory) is stopped after each test.
class ServerTestCase: XCTestCase {
  var server: BBSServer?
  var clients: [WireClient] = []
  /// A temporary directory of the test's own (sockets, data), removed afterwards if set.
  var directory = ""

  /// The server's first listener, once ``start(_:)`` has run.
  var address = ""

  /// Starts `server`, stopped after the test; its first listener becomes ``address``.
  func start(_ server: BBSServer) throws {
    self.server = server
    address = try XCTUnwrap(server.start().first)
  }

  /// A client connected to ``address`` that has sent nothing yet, closed after the test.
  func dial() throws -> WireClient {
    let client = try WireClient(address)
    clients.append(client)
    return client
  }

  /// A client that has negotiated the version and attached as `uname`, closed after the test.
  func connect(_ uname: String = "alice", aname: String = "", msize: UInt32 = 8192) throws
    -> WireClient
  {
    let client = try dial()
    try client.handshake(uname: uname, aname: aname, msize: msize)
    return client
  }

  override func tearDown() {
    for client in clients { client.close() }
    clients.removeAll()
    server?.stop()
    server = nil
    if !directory.isEmpty { try? FileManager.default.removeItem(atPath: directory) }
    super.tearDown()
  }
}
