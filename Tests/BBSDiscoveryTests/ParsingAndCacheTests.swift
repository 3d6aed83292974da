import BBSDiscovery
import Foundation
import NinePTransport
import TestSupport
import XCTest

/// The pure parts: lenient 9PIS transport information, board names, the cache file.
final class ParsingAndCacheTests: XCTestCase {
  /// Every form boards use (docs/board-facts.md §5), and broken ones, parses without error; the PSM
  /// falls back to 0x0080 then 0x0009 when missing or unreadable.
  func testTransportInformationIsParsedLeniently() {
    let cases: [(String, String?, UInt16?, Int?, [String], [UInt16])] = [
      ("l2cap:psm=0x0009,mtu=4096", "l2cap", 0x0009, 4096, [], [0x0009, 0x0080]),
      (
        "l2cap:psm=9,mtu=4096,dynamic,sessions=4,range=80-ff", "l2cap", 9, 4096, ["dynamic"],
        [0x0009, 0x0080]
      ),
      ("l2cap:psm=0x0080", "l2cap", 0x0080, nil, [], [0x0080, 0x0009]),
      ("l2cap:psm=0x%04x", "l2cap", nil, nil, [], [0x0080, 0x0009]),
      ("psm=9", nil, 9, nil, [], [0x0009, 0x0080]),
      ("  L2CAP : PSM=0X25 , MTU = 512 ", "l2cap", 0x25, 512, [], [0x25, 0x0080, 0x0009]),
      ("dynamic", nil, nil, nil, ["dynamic"], [0x0080, 0x0009]),
      ("l2cap", "l2cap", nil, nil, [], [0x0080, 0x0009]),
      ("", nil, nil, nil, [], [0x0080, 0x0009]),
      ("l2cap:psm=0,mtu=-1", "l2cap", nil, nil, [], [0x0080, 0x0009]),
      ("l2cap:psm=70000", "l2cap", nil, nil, [], [0x0080, 0x0009]),
      ("l2cap:=,=5,psm==9, ,", "l2cap", nil, nil, [], [0x0080, 0x0009]),
      ("l2cap:mtu=4096;psm=0x81", "l2cap", 0x81, 4096, [], [0x81, 0x0080, 0x0009]),
    ]
    for (text, transport, psm, mtu, flags, candidates) in cases {
      let info = TransportInfo(parsing: text)
      XCTAssertEqual(info.transport, transport, "transport of '\(text)'")
      XCTAssertEqual(info.psm, psm, "psm of '\(text)'")
      XCTAssertEqual(info.mtu, mtu, "mtu of '\(text)'")
      XCTAssertEqual(info.flags, flags, "flags of '\(text)'")
      XCTAssertEqual(info.psmCandidates, candidates, "PSM candidates of '\(text)'")
    }
    XCTAssertEqual(
      TransportInfo(parsing: "l2cap:psm=9,range=80-ff,sessions=4").parameters,
      ["psm": "9", "range": "80-ff", "sessions": "4"])
  }

  func testFeaturesAndMissingCharacteristics() {
    let information = NinePInformation(
      serviceDescription: "9P Server", featuresText: " Chat, messaging,,file-sharing ")
    XCTAssertEqual(information.features, ["chat", "messaging", "file-sharing"])
    XCTAssertEqual(information.missing, [.transportInformation, .appLink, .protocolVersion])
    XCTAssertEqual(NinePInformation().features, [])
  }

  func testBoardReferences() throws {
    let grid = try XCTUnwrap(try BoardReference(parsing: "ble!THE_GRID"))
    XCTAssertEqual(grid.kind, .bluetooth)
    XCTAssertEqual(grid.name, "THE_GRID")
    XCTAssertFalse(grid.isBluetoothAddress)
    XCTAssertTrue(
      try XCTUnwrap(try BoardReference(parsing: "ble!c0:ff:ee:00:00:01")).isBluetoothAddress)
    let lan = try XCTUnwrap(try BoardReference(parsing: "mdns!My BBS!x"))
    XCTAssertEqual(lan.kind, .lan)
    XCTAssertEqual(lan.name, "My BBS!x")
    XCTAssertNil(try BoardReference(parsing: "tcp!host!564"))
    XCTAssertNil(try BoardReference(parsing: "l2cap!C0:FF:EE:00:00:01!0x80"))
    XCTAssertNil(try BoardReference(parsing: "host:564"))
    XCTAssertThrowsError(try BoardReference(parsing: "mdns!")) { error in
      XCTAssertTrue("\(error)".contains("mount9bbs scan --lan"), "\(error)")
    }
    // The colon forms, which need no quoting in a shell, name the same boards.
    XCTAssertEqual(try BoardReference(parsing: "ble:THE_GRID"), grid)
    let address = try XCTUnwrap(try BoardReference(parsing: "ble:C0:FF:EE:00:00:01"))
    XCTAssertEqual(address.name, "C0:FF:EE:00:00:01")
    XCTAssertTrue(address.isBluetoothAddress)
    XCTAssertEqual(try BoardReference(parsing: "mdns:My BBS!x"), lan)
    XCTAssertNil(try BoardReference(parsing: "tcp:host:564"))
    XCTAssertNil(try BoardReference(parsing: "l2cap:C0:FF:EE:00:00:01:0x80"))
    XCTAssertThrowsError(try BoardReference(parsing: "ble:")) { error in
      XCTAssertTrue("\(error)".contains("no name after ':'"), "\(error)")
    }
  }

  /// The cache keeps one entry per board with first- and last-seen times, keeps information a
  /// later unreadable sighting lacks, and finds boards by name, description or address.
  func testCacheRecordsSightingsAndFindsBoards() throws {
    let directory = try makeTemporaryDirectory("cache-test")
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let cache = DiscoveryCache(path: directory + "/deep/mount9bbs/boards.json")
    XCTAssertEqual(cache.boards(), [])

    let device = BluetoothDevice(
      address: "C0:FF:EE:00:00:01", addressType: .random, name: "THE_GRID", rssi: -50)
    let information = NinePInformation(
      serviceDescription: "Grid Board", featuresText: "chat", transportText: "l2cap:psm=0x81")
    let first = Date(timeIntervalSince1970: 1_700_000_000)
    try cache.record(CachedBoard(device, information: information, seen: first))
    let later = first.addingTimeInterval(60)
    try cache.record(CachedBoard(device, information: nil, seen: later))
    try cache.record(
      CachedBoard(
        LANService(
          name: "Test BBS", type: "_9p._tcp", host: "box.local", address: "192.0.2.7", port: 5640,
          txt: ["features": "chat"]), seen: later))

    let boards = cache.boards()
    XCTAssertEqual(boards.count, 2)
    let grid = try XCTUnwrap(cache.board(named: "the_grid", kind: .bluetooth))
    XCTAssertEqual(grid.firstSeen, first)
    XCTAssertEqual(grid.lastSeen, later)
    XCTAssertEqual(grid.information, information, "an unreadable sighting keeps what was read")
    XCTAssertEqual(
      grid.dialCandidates.map(\.description),
      [
        "l2cap!C0:FF:EE:00:00:01!0x0081", "l2cap!C0:FF:EE:00:00:01!0x0080",
        "l2cap!C0:FF:EE:00:00:01!0x0009",
      ])
    XCTAssertEqual(cache.board(named: "Grid Board", kind: .bluetooth)?.address, "C0:FF:EE:00:00:01")
    XCTAssertEqual(cache.board(named: "c0:ff:ee:00:00:01", kind: .bluetooth)?.name, "THE_GRID")
    XCTAssertNil(cache.board(named: "THE_GRID", kind: .lan))
    let lan = try XCTUnwrap(cache.board(named: "test bbs", kind: .lan))
    XCTAssertEqual(lan.dialCandidates, [.tcp(host: "192.0.2.7", port: 5640)])
    XCTAssertEqual(lan.features, ["chat"])

    var attributes = stat()
    XCTAssertEqual(stat(directory + "/deep/mount9bbs", &attributes), 0)
    XCTAssertEqual(attributes.st_mode & 0o777, 0o700, "the cache directory is private")

    try "not json".write(toFile: cache.path, atomically: true, encoding: .utf8)
    XCTAssertEqual(cache.boards(), [], "a damaged cache counts as empty")
  }

  /// `l2cap:BDADDR:PSM` without a type dials a board the scan saw on a public address as
  /// public; a type given is kept. (This host has no Bluetooth: the failure names the address.)
  func testL2CAPTakesTheAddressTypeFromTheScanCache() throws {
    let home = try makeTemporaryDirectory("l2cap-cache")
    let mountpoint = try makeTemporaryDirectory("l2cap-mnt")
    defer {
      try? FileManager.default.removeItem(atPath: home)
      try? FileManager.default.removeItem(atPath: mountpoint)
    }
    try DiscoveryCache(path: home + "/mount9bbs/boards.json").record(
      CachedBoard(
        kind: .bluetooth, name: "PIBOARD", address: "00:AA:01:01:00:01", addressType: "public"))
    func dial(_ address: String) throws -> String {
      let child = ChildProcess(
        BuiltProducts.path(of: "mount9bbs"), ["-f", address, mountpoint],
        environment: ["XDG_CACHE_HOME": home])
      try child.start()
      XCTAssertTrue(child.wait(timeout: 20), child.text)
      return child.text
    }
    XCTAssertTrue(
      try dial("l2cap:00:AA:01:01:00:01:0x80").contains("l2cap!00:AA:01:01:00:01!0x0080!public"))
    let random = try dial("l2cap:00:AA:01:01:00:01:0x80:random")
    XCTAssertTrue(random.contains("l2cap!00:AA:01:01:00:01!0x0080:"), random)
    XCTAssertTrue(
      try dial("l2cap:C0:FF:EE:00:00:09:0x80").contains("l2cap!C0:FF:EE:00:00:09!0x0080:"),
      "not in the cache: random, as before")
  }
}
