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

  override func tearDown() {
    for client in clients { client.close() }
    clients.removeAll()
    server?.stop()
    server = nil
    if !directory.isEmpty { try? FileManager.default.removeItem(atPath: directory) }
    super.tearDown()
  }
}
