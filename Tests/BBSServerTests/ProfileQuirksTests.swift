import Foundation
import NinePProtocol
import XCTest

@testable import BBSServer

/// What a board message and `/etc/nets` look like over the wire: the default profile without
/// a device's quirks, the device profile with them.
final class ProfileQuirksTests: ServerTestCase {
  private func startServer(_ profile: BBSProfile) throws {
    directory = try makeTemporaryDirectory("9bbs-quirks")
    let listen = profile == .standard ? "tcp!127.0.0.1!0" : "seqpacket!\(directory)/bbs.sock"
    let server = try BBSServer(
      configuration: BBSServerConfiguration(listen: [listen], profile: profile),
      clock: ManualBoardClock(wallMillis: 1_738_005_432_123, uptimeMillis: 5000))
    try start(server)
  }

  /// Posts `text` as a message in lobby and returns (what a listing says, what a read gives).
  private func postAndRead(_ client: WireClient, _ text: String) throws -> (Stat, String) {
    guard case .rwalk = try client.rpc(.twalk(fid: 0, newfid: 20, names: ["rooms", "lobby"]))
    else { throw TestError.unexpected("walk") }
    guard
      case .rcreate = try client.rpc(
        .tcreate(fid: 20, name: "1738005432123", perm: FileMode(permissions: 0o644), mode: .write)
      )
    else { throw TestError.unexpected("create") }
    _ = try client.rpc(.twrite(fid: 20, offset: 0, data: ArraySlice(text.utf8)))
    _ = try client.rpc(.tclunk(fid: 20))
    _ = try client.open("rooms/lobby", fid: 21)
    defer { _ = try? client.rpc(.tclunk(fid: 21)) }
    guard case .rread(let listing) = try client.rpc(.tread(fid: 21, offset: 0, count: 4096)),
      let entry = try Stat.decodeDirectory(Array(listing)).first
    else { throw TestError.unexpected("listing") }
    return (entry, try client.readFile("rooms/lobby/2838644539"))
  }

  private func listNets(_ client: WireClient) throws -> [String] {
    _ = try client.open("etc/nets", fid: 30)
    defer { _ = try? client.rpc(.tclunk(fid: 30)) }
    guard case .rread(let data) = try client.rpc(.tread(fid: 30, offset: 0, count: 4096)) else {
      throw TestError.unexpected("read nets")
    }
    return try Stat.decodeDirectory(Array(data)).map(\.name)
  }

  func testDefaultProfileMessageIsListedAsReadWithDateAndSubject() throws {
    try startServer(.standard)
    let client = try connect()
    let (entry, text) = try postAndRead(client, "  Lunch on friday?\nBring snacks.\n")
    XCTAssertEqual(
      text,
      """
      From: alice
      To: lobby
      Subject: Lunch on friday?
      Date: Mon, 27 Jan 2025 19:17:12 +0000
      X-Date-N: 1738005432123

        Lunch on friday?
      Bring snacks.


      alice

      """)
    XCTAssertEqual(entry.length, UInt64(text.utf8.count), "listed size differs from the read")
    XCTAssertEqual(entry.mtime, 1_738_005_432)
    // Tstat agrees with the listing.
    guard
      case .rwalk = try client.rpc(
        .twalk(fid: 0, newfid: 22, names: ["rooms", "lobby", "2838644539"])),
      case .rstat(let stat) = try client.rpc(.tstat(fid: 22))
    else { return XCTFail("Tstat failed") }
    XCTAssertEqual(stat.length, UInt64(text.utf8.count))
  }

  func testDefaultProfileListsOnlyReadableNets() throws {
    try startServer(.standard)
    let client = try connect()
    for name in try listNets(client) {
      XCTAssertFalse(try client.readFile("etc/nets/\(name)").isEmpty, "\(name) is unreadable")
    }
    XCTAssertEqual(
      try client.rpc(.twalk(fid: 0, newfid: 31, names: ["etc", "nets", "fsxnet"])),
      .rwalk(qids: try walkQids(client, ["etc", "nets"])))
  }

  func testDeviceProfileKeepsItsQuirks() throws {
    try startServer(.device)
    let client = try connect()
    let (entry, text) = try postAndRead(client, "Subject: Hi\n\nBody text")
    XCTAssertEqual(
      text,
      "From: alice\nTo: lobby\nSubject: Hi\nDate: 5000\nX-Date-N: 5000\n\nBody text\n\nalice\n")
    XCTAssertEqual(entry.length, 9, "a device lists the body's length")
    XCTAssertEqual(try listNets(client), ["fsxnet", "aethernet"])
    _ = try client.open("etc/nets/fsxnet", fid: 32)
    guard case .rerror = try client.rpc(.tread(fid: 32, offset: 0, count: 100)) else {
      return XCTFail("a device's nets are listed but unreadable")
    }
  }

  private func walkQids(_ client: WireClient, _ names: [String]) throws -> [Qid] {
    guard case .rwalk(let qids) = try client.rpc(.twalk(fid: 0, newfid: 99, names: names)) else {
      throw TestError.unexpected("walk")
    }
    _ = try client.rpc(.tclunk(fid: 99))
    return qids
  }
}
