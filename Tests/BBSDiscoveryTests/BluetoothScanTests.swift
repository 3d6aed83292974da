import BBSIdentity
import Foundation
import TestSupport
import XCTest

/// `mount9bbs scan` against a fake BlueZ (python-dbusmock with the project's own template) on
/// a private D-Bus bus: what it prints, and which BlueZ calls it makes.
final class BluetoothScanTests: XCTestCase {
  var mock: BlueZMock!

  override func setUpWithError() throws {
    mock = try BlueZMock()
    let mock = mock
    addTeardownBlock { mock?.remove() }
  }

  static var grid: [String: Any] {
    [
      "address": "C0:FF:EE:00:00:01", "address_type": "random", "name": "THE_GRID", "rssi": -52,
      "uuids": [ninePISService], "appear_after": 0.3, "resolve_after": 0.2,
      "services": [fullService(transport: "l2cap:psm=9,mtu=4096,dynamic,sessions=4,range=80-ff")],
    ]
  }

  static func scene(_ devices: [[String: Any]], adapters: [[String: Any]] = [["name": "hci0"]])
    -> [String: Any]
  {
    ["adapters": adapters, "devices": devices]
  }

  /// The calls every scan makes around its work: the exact filter first, StopDiscovery last,
  /// discovery paused (StopDiscovery … StartDiscovery) around every Connect, since BlueZ sends
  /// the LE connect only once discovery has stopped.
  func assertDiscoveryBracketed(file: StaticString = #filePath, line: UInt = #line) {
    let calls = mock.calls
    guard calls.count >= 3 else {
      return XCTFail("too few BlueZ calls: \(calls.map(\.method))", file: file, line: line)
    }
    XCTAssertEqual(calls[0].method, "SetDiscoveryFilter", file: file, line: line)
    XCTAssertEqual(calls[0].path, "/org/bluez/hci0", file: file, line: line)
    let filter = calls[0].args.first as? [String: Any]
    XCTAssertEqual(
      filter?.count, 2, "filter: \(String(describing: filter))", file: file, line: line)
    XCTAssertEqual(filter?["UUIDs"] as? [String], [ninePISService], file: file, line: line)
    XCTAssertEqual(filter?["Transport"] as? String, "le", file: file, line: line)
    XCTAssertEqual(calls[1].method, "StartDiscovery", file: file, line: line)
    let adapterCalls = calls.filter { $0.path == "/org/bluez/hci0" }.map(\.method)
    let pairs = Array(adapterCalls.dropFirst())
    XCTAssertEqual(adapterCalls.first, "SetDiscoveryFilter", file: file, line: line)
    XCTAssertEqual(
      pairs,
      Array(repeating: ["StartDiscovery", "StopDiscovery"], count: max(1, pairs.count / 2))
        .flatMap { $0 }, "discovery started and stopped in turn: \(adapterCalls)", file: file,
      line: line)
    var discovering = false
    for method in mock.methods {
      switch method {
      case "StartDiscovery": discovering = true
      case "StopDiscovery": discovering = false
      case "Connect":
        XCTAssertFalse(
          discovering, "Connect while discovering: \(mock.methods)", file: file, line: line)
      default: break
      }
    }
  }

  // MARK: Devices

  /// A board appearing during discovery is reported at once, connected, its five
  /// characteristics read and printed, disconnected, and cached with its seen times.
  func testMatchingDeviceAppearingDuringDiscoveryIsReadPrintedAndCached() throws {
    guard BlueZMock.requirePython() else { return }
    let run = try mock.run(scene: Self.scene([Self.grid]), ["scan", "--timeout", "1.5"])
    XCTAssertEqual(run.status, 0, run.all)
    XCTAssertTrue(
      run.stderr.contains("Scanning for 9BBS boards over Bluetooth LE for 1.5 s"), run.all)
    XCTAssertTrue(
      run.stderr.contains("seen THE_GRID  C0:FF:EE:00:00:01 (random)  RSSI -52 dBm"), run.all)
    XCTAssertEqual(
      run.stdout,
      """
      THE_GRID  C0:FF:EE:00:00:01 (random)  RSSI -52 dBm
        description  9P Server
        features     chat,messaging
        transport    l2cap:psm=9,mtu=4096,dynamic,sessions=4,range=80-ff → PSM 0x0009, then 0x0080
        app link     https://9p4z.org/clients
        version      9P2000;9p4z;1.0.0
        trust        unknown: not mounted yet
        mount        mount9bbs ble:THE_GRID MOUNTPOINT

      """, run.all)
    XCTAssertTrue(run.stderr.contains("1 found in 1.5 s."), run.all)

    assertDiscoveryBracketed()
    let device = "/org/bluez/hci0/dev_C0_FF_EE_00_00_01"
    let deviceCalls = mock.calls.filter { $0.path.hasPrefix(device) }.map(\.method)
    XCTAssertEqual(
      deviceCalls, ["Connect"] + Array(repeating: "ReadValue", count: 5) + ["Disconnect"])
    let methods = mock.methods
    XCTAssertEqual(
      methods.filter { $0 == "StartDiscovery" }.count, 2,
      "discovery resumes after the read, the scan having time left: \(methods)")

    let cached = try XCTUnwrap(mock.cachedBoards.first, "cache: \(mock.cachedBoards)")
    XCTAssertEqual(cached["kind"] as? String, "ble")
    XCTAssertEqual(cached["name"] as? String, "THE_GRID")
    XCTAssertEqual(cached["address"] as? String, "C0:FF:EE:00:00:01")
    XCTAssertEqual(cached["addressType"] as? String, "random")
    XCTAssertNotNil(cached["firstSeen"] as? String)
    XCTAssertNotNil(cached["lastSeen"] as? String)
    let information = cached["information"] as? [String: Any]
    XCTAssertEqual(information?["featuresText"] as? String, "chat,messaging")
  }

  /// A board whose address has a pinned key (a mount proved it there) shows as pinned, by
  /// address: 9PIS advertises no key.
  func testABoardWithAPinnedKeyShowsAsPinned() throws {
    guard BlueZMock.requirePython() else { return }
    let key = try XCTUnwrap(BoardKey(of: PrivateKey.generate(.ed25519)))
    try BoardPins(path: mock.stateHome + "/mount9bbs/known_boards").pin(
      key, at: "l2cap!C0:FF:EE:00:00:01!0x0009")
    let run = try mock.run(scene: Self.scene([Self.grid]), ["scan", "--timeout", "1.5"])
    XCTAssertEqual(run.status, 0, run.all)
    XCTAssertTrue(run.stdout.contains("  trust        pinned (\(key.fingerprint))\n"), run.all)
  }

  /// A device without the 9PIS UUID (reported because another client scans unfiltered, or
  /// already known) is neither listed nor connected; nothing found is exit status 1.
  func testNonMatchingDevicesAreIgnored() throws {
    guard BlueZMock.requirePython() else { return }
    let heartRate = "0000180d-0000-1000-8000-00805f9b34fb"
    let run = try mock.run(
      scene: Self.scene([
        [
          "address": "C0:FF:EE:00:00:02", "name": "PULSE", "rssi": -40, "uuids": [heartRate],
          "appear_after": 0.1, "unfiltered": true,
        ],
        [
          "address": "C0:FF:EE:00:00:03", "name": "SPEAKER", "rssi": -45, "uuids": [heartRate],
          "known": true,
        ],
      ]), ["scan", "--timeout", "1"])
    XCTAssertEqual(run.status, 1, run.all)
    XCTAssertEqual(run.stdout, "", run.all)
    XCTAssertTrue(
      run.stderr.contains(
        "mount9bbs: no 9BBS board found within 1 s; check that the board is powered and advertising"
      ), run.all)
    XCTAssertFalse(run.stderr.contains("PULSE") || run.stderr.contains("SPEAKER"), run.all)
    XCTAssertFalse(mock.methods.contains("Connect"), "\(mock.methods)")
    assertDiscoveryBracketed()
    XCTAssertLessThan(run.seconds, 8, "nothing found must not take long")
  }

  /// A board BlueZ already knows (in range: it has an RSSI) is listed without waiting for a
  /// new advertisement; one already connected with resolved services is read without a
  /// Connect and left connected.
  func testAlreadyKnownDevicesAreRead() throws {
    guard BlueZMock.requirePython() else { return }
    var known = Self.grid
    known["known"] = true
    var connected = Self.grid
    connected["address"] = "C0:FF:EE:00:00:04"
    connected["name"] = "LINKED"
    connected["known"] = true
    connected["connected"] = true
    connected["services"] = [fullService(description: "Linked board")]
    let run = try mock.run(
      scene: Self.scene([known, connected]), ["scan", "--timeout", "1", "--json"])
    XCTAssertEqual(run.status, 0, run.all)
    let boards = run.jsonLines.filter { $0["event"] as? String == "board" }
    XCTAssertEqual(
      Set(boards.compactMap { $0["name"] as? String }), ["THE_GRID", "LINKED"], run.all)
    XCTAssertEqual(
      boards.first { $0["name"] as? String == "LINKED" }?["description"] as? String,
      "Linked board")
    let linked = mock.calls.filter { $0.path.hasPrefix("/org/bluez/hci0/dev_C0_FF_EE_00_00_04") }
    XCTAssertEqual(linked.map(\.method), Array(repeating: "ReadValue", count: 5))
    let grid = mock.calls.filter { $0.path.hasPrefix("/org/bluez/hci0/dev_C0_FF_EE_00_00_01") }
    XCTAssertEqual(grid.first?.method, "Connect")
    XCTAssertEqual(grid.last?.method, "Disconnect")
    assertDiscoveryBracketed()
  }

  /// Characteristics a board does not serve are shown as such, listed as missing in JSON,
  /// and a missing transport information means the fallback PSMs.
  func testMissingCharacteristicsAreReportedAndPSMsFallBack() throws {
    guard BlueZMock.requirePython() else { return }
    var sparse = Self.grid
    sparse["services"] = [
      ["uuid": ninePISService, "characteristics": [ninePIS(2): "Bare board"]]
    ]
    let text = try mock.run(scene: Self.scene([sparse]), ["scan", "--timeout", "1"])
    XCTAssertEqual(text.status, 0, text.all)
    XCTAssertTrue(text.stdout.contains("  description  Bare board\n"), text.all)
    XCTAssertTrue(text.stdout.contains("  features     (not served)\n"), text.all)
    XCTAssertTrue(
      text.stdout.contains("  transport    (not served) → PSM 0x0080, then 0x0009\n"), text.all)
    XCTAssertTrue(text.stdout.contains("  version      (not served)\n"), text.all)

    let json = try mock.run(scene: Self.scene([sparse]), ["scan", "--timeout", "1", "--json"])
    let board = try XCTUnwrap(json.jsonLines.first { $0["event"] as? String == "board" }, json.all)
    XCTAssertEqual(
      board["missing"] as? [String], ["featuresText", "transport", "appLink", "protocolVersion"])
    XCTAssertEqual(
      board["dial"] as? [String],
      ["l2cap!C0:FF:EE:00:00:01!0x0080", "l2cap!C0:FF:EE:00:00:01!0x0009"])
    XCTAssertNil(board["psm"])

    // A device advertising 9PIS whose GATT has no 9PIS service at all.
    var impostor = Self.grid
    impostor["services"] = [
      ["uuid": "0000180a-0000-1000-8000-00805f9b34fb", "characteristics": [:]]
    ]
    let none = try mock.run(scene: Self.scene([impostor]), ["scan", "--timeout", "1"])
    XCTAssertEqual(none.status, 0, none.all)
    XCTAssertTrue(
      none.stdout.contains("serves no 9P Information Service over GATT"), none.all)
  }

  /// The transport information strings real boards use all turn into the right PSMs.
  func testVariedTransportInformationStrings() throws {
    guard BlueZMock.requirePython() else { return }
    let strings = [
      "l2cap:psm=0x0009,mtu=4096", "l2cap:psm=9,mtu=4096,dynamic,sessions=4,range=80-ff",
      "l2cap:psm=0x0080", "l2cap:psm=0x%04x", "psm=0x85", "dynamic",
    ]
    var devices: [[String: Any]] = []
    for (index, transport) in strings.enumerated() {
      var device = Self.grid
      device["address"] = "C0:FF:EE:00:01:0\(index)"
      device["name"] = "BOARD\(index)"
      device["appear_after"] = 0.1 + 0.05 * Double(index)
      device["services"] = [fullService(transport: transport)]
      devices.append(device)
    }
    let run = try mock.run(scene: Self.scene(devices), ["scan", "--timeout", "1.5", "--json"])
    XCTAssertEqual(run.status, 0, run.all)
    var byName: [String: [String: Any]] = [:]
    for board in run.jsonLines where board["event"] as? String == "board" {
      if let name = board["name"] as? String { byName[name] = board }
    }
    let expected: [(psm: Int?, mtu: Int?, first: String)] = [
      (9, 4096, "0x0009"), (9, 4096, "0x0009"), (0x80, nil, "0x0080"), (nil, nil, "0x0080"),
      (0x85, nil, "0x0085"), (nil, nil, "0x0080"),
    ]
    for (index, want) in expected.enumerated() {
      let board = try XCTUnwrap(byName["BOARD\(index)"], "BOARD\(index) missing: \(run.all)")
      XCTAssertEqual(board["transport"] as? String, strings[index])
      XCTAssertEqual(board["psm"] as? Int, want.psm, strings[index])
      XCTAssertEqual(board["mtu"] as? Int, want.mtu, strings[index])
      let dial = board["dial"] as? [String] ?? []
      XCTAssertEqual(dial.first, "l2cap!C0:FF:EE:00:01:0\(index)!\(want.first)", strings[index])
      XCTAssertTrue(
        Set(dial).isSuperset(
          of: ["0x0080", "0x0009"].map { "l2cap!C0:FF:EE:00:01:0\(index)!\($0)" }),
        "\(strings[index]): \(dial)")
    }
  }

  /// --feature keeps only boards announcing the feature (case-insensitive).
  func testFeatureFilter() throws {
    guard BlueZMock.requirePython() else { return }
    var files = Self.grid
    files["address"] = "C0:FF:EE:00:00:05"
    files["name"] = "FILES"
    files["services"] = [fullService(features: "file-sharing")]
    let run = try mock.run(
      scene: Self.scene([Self.grid, files]), ["scan", "--timeout", "1.5", "--feature", "CHAT"])
    XCTAssertEqual(run.status, 0, run.all)
    XCTAssertTrue(run.stdout.contains("THE_GRID"), run.all)
    XCTAssertFalse(run.stdout.contains("FILES"), run.all)
    XCTAssertTrue(run.stderr.contains("skipped FILES (C0:FF:EE:00:00:05)"), run.all)
  }

  /// A failing Connect is reported with BlueZ's reason and what to do; other boards are
  /// still read.
  func testFailingConnectIsReportedAndTheScanGoesOn() throws {
    guard BlueZMock.requirePython() else { return }
    var broken = Self.grid
    broken["address"] = "C0:FF:EE:00:00:06"
    broken["name"] = "BROKEN"
    broken["appear_after"] = 0.1
    broken["connect_error"] = ["org.bluez.Error.Failed", "le-connection-abort-by-local"]
    let run = try mock.run(scene: Self.scene([broken, Self.grid]), ["scan", "--timeout", "1.5"])
    XCTAssertEqual(run.status, 0, run.all)
    XCTAssertTrue(
      run.stdout.contains(
        """
        BROKEN  C0:FF:EE:00:00:06 (random)  RSSI -52 dBm
          error        cannot connect to BROKEN (C0:FF:EE:00:00:06): le-connection-abort-by-local; \
        check that the board is powered and near
        """), run.all)
    XCTAssertTrue(
      run.stdout.contains(
        "  mount        mount9bbs ble:BROKEN MOUNTPOINT  (PSM 0x0080, then 0x0009)"), run.all)
    XCTAssertTrue(run.stdout.contains("  description  9P Server"), run.all)
    let broke = mock.calls.filter { $0.path.hasPrefix("/org/bluez/hci0/dev_C0_FF_EE_00_00_06") }
    XCTAssertEqual(broke.map(\.method), ["Connect"], "no Disconnect after a failed Connect")
    assertDiscoveryBracketed()
  }

  /// Service resolution slower than the scan is awaited (discovery stops on time, the read
  /// finishes after); one that never comes ends at the read timeout with a Disconnect.
  func testSlowServiceResolution() throws {
    guard BlueZMock.requirePython() else { return }
    var slow = Self.grid
    slow["appear_after"] = 0.1
    slow["resolve_after"] = 1.5
    let run = try mock.run(scene: Self.scene([slow]), ["scan", "--timeout", "0.5"])
    XCTAssertEqual(run.status, 0, run.all)
    XCTAssertTrue(run.stdout.contains("  features     chat,messaging"), run.all)
    let methods = mock.methods
    XCTAssertLessThan(
      try XCTUnwrap(methods.firstIndex(of: "StopDiscovery")),
      try XCTUnwrap(methods.firstIndex(of: "ReadValue")), "\(methods)")
    XCTAssertEqual(methods.last, "Disconnect")

    try? FileManager.default.removeItem(atPath: mock.callsPath)
    var stuck = Self.grid
    stuck["resolve_after"] = NSNull()
    let started = Date()
    let timedOut = try mock.run(
      scene: Self.scene([stuck]), ["scan", "--timeout", "0.5", "--read-timeout", "1"])
    XCTAssertEqual(timedOut.status, 0, "the board was found, if unreadable: \(timedOut.all)")
    XCTAssertTrue(
      timedOut.stdout.contains(
        "THE_GRID (C0:FF:EE:00:00:01) connected but its GATT services did not resolve within 1 s"),
      timedOut.all)
    XCTAssertEqual(
      mock.methods,
      ["SetDiscoveryFilter", "StartDiscovery", "StopDiscovery", "Connect", "Disconnect"],
      "the read outlasts the scan: discovery does not resume")
    XCTAssertLessThan(Date().timeIntervalSince(started), 10)
  }

  // MARK: Failures before any scan

  func testAdapterOff() throws {
    guard BlueZMock.requirePython() else { return }
    let off = try mock.run(
      scene: Self.scene([Self.grid], adapters: [["name": "hci0", "powered": false]]), ["scan"])
    XCTAssertEqual(off.status, 1, off.all)
    XCTAssertTrue(
      off.stderr.contains(
        "mount9bbs: the Bluetooth adapter hci0 is powered off; run: bluetoothctl power on"), off.all
    )
    XCTAssertEqual(mock.methods, [], "no discovery on a powered-off adapter")
    XCTAssertLessThan(off.seconds, 8)

    let blocked = try mock.run(
      scene: Self.scene(
        [], adapters: [["name": "hci0", "powered": false, "power_state": "off-blocked"]]),
      ["scan"])
    XCTAssertEqual(blocked.status, 1, blocked.all)
    XCTAssertTrue(
      blocked.stderr.contains("blocked by rfkill; run: rfkill unblock bluetooth"), blocked.all)

    // A second adapter that is powered is used instead.
    let second = try mock.run(
      scene: Self.scene(
        [Self.grid.merging(["adapter": "hci1"]) { $1 }],
        adapters: [["name": "hci0", "powered": false], ["name": "hci1"]]),
      ["scan", "--timeout", "1"])
    XCTAssertEqual(second.status, 0, second.all)
    XCTAssertTrue(second.stdout.contains("THE_GRID"), second.all)
  }

  func testNoAdapter() throws {
    guard BlueZMock.requirePython() else { return }
    let run = try mock.run(scene: Self.scene([], adapters: []), ["scan"])
    XCTAssertEqual(run.status, 1, run.all)
    XCTAssertTrue(
      run.stderr.contains(
        "mount9bbs: no Bluetooth adapter found; plug one in or check `bluetoothctl list`"),
      run.all)
    XCTAssertEqual(mock.methods, [])
    XCTAssertLessThan(run.seconds, 8)
  }

  func testNoBlueZAndNoSystemBus() throws {
    let run = try mock.run(scene: nil, ["scan"])
    XCTAssertEqual(run.status, 1, run.all)
    XCTAssertTrue(
      run.stderr.contains(
        "mount9bbs: BlueZ is not running (no org.bluez on the system bus); start it with: sudo systemctl start bluetooth"
      ), run.all)
    XCTAssertLessThan(run.seconds, 8)

    let child = ChildProcess(
      BuiltProducts.path(of: "mount9bbs"), ["scan"],
      environment: ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(mock.directory)/no-such-bus"])
    try child.start()
    XCTAssertTrue(child.wait(timeout: 10), child.text)
    XCTAssertEqual(child.process.terminationStatus, 1, child.text)
    XCTAssertTrue(
      child.text.contains("mount9bbs: cannot reach the D-Bus system bus"), child.text)
  }

  // MARK: Mounting by name

  /// `mount9bbs ble!NAME` scans when the cache does not know the board, fills in address,
  /// type and PSM, and dials L2CAP; later the cache alone answers (no bus needed at all).
  /// The machine has no Bluetooth, so the dial itself fails, naming the resolved address.
  func testMountByNameScansThenUsesTheCache() throws {
    guard BlueZMock.requirePython() else { return }
    let mountpoint = try makeTemporaryDirectory("ble-mnt")
    defer { try? FileManager.default.removeItem(atPath: mountpoint) }
    let scanned = try mock.run(scene: Self.scene([Self.grid]), ["-f", "ble!the_grid", mountpoint])
    XCTAssertEqual(scanned.status, 1, scanned.all)
    XCTAssertTrue(scanned.stderr.contains("looking for the_grid over Bluetooth LE"), scanned.all)
    XCTAssertTrue(scanned.stderr.contains("l2cap!C0:FF:EE:00:00:01!0x0009"), scanned.all)
    XCTAssertTrue(mock.methods.contains("StopDiscovery"), "\(mock.methods)")
    XCTAssertFalse(isMounted(mountpoint))

    let child = ChildProcess(
      BuiltProducts.path(of: "mount9bbs"), ["-f", "ble!THE_GRID", mountpoint],
      environment: [
        "XDG_CACHE_HOME": mock.cacheHome,
        "DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(mock.directory)/no-such-bus",
      ])
    try child.start()
    XCTAssertTrue(child.wait(timeout: 15), child.text)
    XCTAssertEqual(child.process.terminationStatus, 1, child.text)
    XCTAssertFalse(child.text.contains("looking for"), "the cache answers: \(child.text)")
    XCTAssertTrue(child.text.contains("l2cap!C0:FF:EE:00:00:01!0x0009"), child.text)

    // An unknown name fails after the short scan with what to do.
    let unknown = try mock.run(
      scene: Self.scene([]), ["-f", "ble!NOBODY", mountpoint], environment: [:])
    XCTAssertEqual(unknown.status, 1, unknown.all)
    XCTAssertTrue(
      unknown.stderr.contains(
        "no board named 'NOBODY' found within 8 s; list them with: mount9bbs scan"),
      unknown.all)
  }

  /// A board in range of the second adapter only is found: every powered adapter scans.
  func testEveryPoweredAdapterScans() throws {
    guard BlueZMock.requirePython() else { return }
    var far = Self.grid
    far["adapter"] = "hci1"
    let adapters: [[String: Any]] = [
      ["name": "hci0"], ["name": "hci1"], ["name": "hci2", "powered": false, "power_state": "off"],
    ]
    let run = try mock.run(
      scene: Self.scene([far], adapters: adapters), ["scan", "--timeout", "1", "--json"])
    XCTAssertEqual(run.status, 0, run.all)
    let boards = run.jsonLines.filter { $0["event"] as? String == "board" }
    XCTAssertEqual(boards.compactMap { $0["name"] as? String }, ["THE_GRID"], run.all)
    for adapter in ["/org/bluez/hci0", "/org/bluez/hci1"] {
      XCTAssertEqual(
        mock.calls.filter { $0.path == adapter }.first?.method, "SetDiscoveryFilter",
        "\(adapter): \(mock.calls.map(\.method))")
    }
    XCTAssertFalse(
      mock.calls.contains { $0.path == "/org/bluez/hci2" }, "an adapter that is off is left alone")
  }

  /// bluetoothd renames a device to its GAP name once connected (a Linux board says
  /// "BlueZ 5.66"): the scan and the cache keep the name the board advertised, so
  /// `ble:NAME` finds it by that name.
  func testTheAdvertisedNameIsKeptWhenBlueZRenamesTheBoard() throws {
    guard BlueZMock.requirePython() else { return }
    var renamed = Self.grid
    renamed["gap_name"] = "BlueZ 5.66"
    let run = try mock.run(scene: Self.scene([renamed]), ["scan", "--timeout", "1"])
    XCTAssertEqual(run.status, 0, run.all)
    XCTAssertTrue(run.stdout.hasPrefix("THE_GRID  C0:FF:EE:00:00:01"), run.all)
    XCTAssertFalse(run.stdout.contains("BlueZ 5.66"), run.all)
    XCTAssertEqual(mock.cachedBoards.first?["name"] as? String, "THE_GRID")
  }

  /// A board mounted before is known to BlueZ under its GAP name until its next scan
  /// response: the scan lists and caches it under the name it advertises.
  func testABoardConnectedBeforeIsListedUnderItsAdvertisedName() throws {
    guard BlueZMock.requirePython() else { return }
    var known = Self.grid
    known["known"] = true
    known["rssi_known"] = false
    known["known_name"] = "BlueZ 5.66"
    known["gap_name"] = "BlueZ 5.66"
    let run = try mock.run(scene: Self.scene([known]), ["scan", "--timeout", "1.5"])
    XCTAssertEqual(run.status, 0, run.all)
    XCTAssertTrue(run.stdout.hasPrefix("THE_GRID  C0:FF:EE:00:00:01"), run.all)
    XCTAssertEqual(mock.cachedBoards.first?["name"] as? String, "THE_GRID")
  }

  /// A board still connected to this machine (a member's mount, or bluetoothd's GATT client
  /// lingering after one) is called by its GAP name, but a board advertises while a link is up,
  /// and BlueZ renames it to the name heard: the scan lists and caches that name (the kernel's
  /// stack did this in the Bluetooth VM, scenario known-becomes-board).
  func testABoardStillConnectedIsListedUnderTheNameItAdvertises() throws {
    guard BlueZMock.requirePython() else { return }
    var connected = Self.grid
    connected["known"] = true
    connected["connected"] = true
    connected["rssi_known"] = false
    connected["known_name"] = "BlueZ 5.66"
    connected["gap_name"] = "BlueZ 5.66"
    let run = try mock.run(scene: Self.scene([connected]), ["scan", "--timeout", "1.5"])
    XCTAssertEqual(run.status, 0, run.all)
    XCTAssertTrue(run.stdout.hasPrefix("THE_GRID  C0:FF:EE:00:00:01"), run.all)
    XCTAssertEqual(mock.cachedBoards.first?["name"] as? String, "THE_GRID")
    XCTAssertFalse(
      mock.calls.contains { $0.method == "Disconnect" }, "a link the scan did not make is left up")
  }

  /// A machine connected to before it became a board keeps its old UUIDs in BlueZ (which then
  /// ignores advertised ones): heard during the 9PIS-filtered discovery, it is read and listed
  /// if it has the 9PIS service. A device heard that has none is left out without an error,
  /// and a paired one is never connected to.
  func testAMachineThatBecameABoardSinceItsLastConnectionIsFound() throws {
    guard BlueZMock.requirePython() else { return }
    let oldUUIDs = ["00001800-0000-1000-8000-00805f9b34fb", "00001801-0000-1000-8000-00805f9b34fb"]
    var board = Self.grid
    board["known"] = true
    board["rssi_known"] = false
    board["known_uuids"] = oldUUIDs
    var other = board
    other["address"] = "C0:FF:EE:00:00:02"
    other["name"] = "NOT_A_BOARD"
    other["services"] = [[String: Any]]()
    var paired = board
    paired["address"] = "C0:FF:EE:00:00:03"
    paired["name"] = "HEADPHONES"
    paired["paired"] = true
    let run = try mock.run(
      scene: Self.scene([board, other, paired]), ["scan", "--timeout", "1.5", "--json"])
    XCTAssertEqual(run.status, 0, run.all)
    let boards = run.jsonLines.filter { $0["event"] as? String == "board" }
    XCTAssertEqual(boards.compactMap { $0["name"] as? String }, ["THE_GRID"], run.all)
    XCTAssertTrue(run.jsonLines.filter { $0["event"] as? String == "error" }.isEmpty, run.all)
    XCTAssertFalse(
      mock.calls.contains { $0.path.hasSuffix("dev_C0_FF_EE_00_00_03") && $0.method == "Connect" },
      "a paired device is not connected to: \(mock.methods)")
  }
}
