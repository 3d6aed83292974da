import BBSDiscovery
import Foundation
import Logging
import TestSupport
import XCTest

/// 9bbsd's Bluetooth presence (``BluetoothAdvertiser``) against a stand-in for bluetoothd
/// (`Tests/fixtures/fake_bluetoothd.py`) on a private bus: like bluetoothd, it asks our GATT
/// application for its objects and reads every characteristic, and asks our advertisement for
/// its properties. (The VM scenario `advertise-scan` runs it against the real bluetoothd.)
final class BluetoothAdvertiserTests: XCTestCase {
  private var directory = ""
  private var bus: ChildProcess?
  private var bluetoothd: ChildProcess?
  private var savedAddress: String?

  private var recordPath: String { directory + "/record.jsonl" }

  override func setUpWithError() throws {
    // A missing interpreter fails the test (requirePython says how to get it), never skips it.
    guard BlueZMock.requirePython() else { throw HarnessError("no python for the fake bluetoothd") }
    directory = try makeTemporaryDirectory("fake-bluetoothd")
    let address = "unix:path=\(directory)/bus"
    let bus = ChildProcess(
      "/usr/bin/dbus-daemon", ["--session", "--nofork", "--address=\(address)"])
    try bus.start()
    self.bus = bus
    XCTAssertTrue(
      waitUntil(timeout: 10) { FileManager.default.fileExists(atPath: directory + "/bus") })
    savedAddress = ProcessInfo.processInfo.environment["DBUS_SYSTEM_BUS_ADDRESS"]
    setenv("DBUS_SYSTEM_BUS_ADDRESS", address, 1)
  }

  override func tearDown() {
    bluetoothd?.stop(grace: 2)
    bus?.stop(grace: 2)
    if let savedAddress {
      setenv("DBUS_SYSTEM_BUS_ADDRESS", savedAddress, 1)
    } else {
      unsetenv("DBUS_SYSTEM_BUS_ADDRESS")
    }
    try? FileManager.default.removeItem(atPath: directory)
  }

  private func startBluetoothd(adapters: [[String: Any]]? = nil) throws {
    var arguments = [
      PackagePaths.path("Tests/fixtures/fake_bluetoothd.py"), recordPath,
    ]
    if let adapters {
      arguments.append(
        String(decoding: try JSONSerialization.data(withJSONObject: adapters), as: UTF8.self))
    }
    let child = ChildProcess(
      BlueZMock.python, arguments,
      environment: ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(directory)/bus"])
    try child.start()
    bluetoothd = child
    XCTAssertTrue(waitUntil(timeout: 15) { !self.records("ready").isEmpty }, child.text)
  }

  private func records(_ call: String) -> [[String: Any]] {
    let text = (try? String(contentsOfFile: recordPath, encoding: .utf8)) ?? ""
    return text.split(separator: "\n").compactMap {
      (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
    }.filter { $0["call"] as? String == call }
  }

  private let information: [NinePInformationService.Characteristic: String] = [
    .serviceDescription: "Grid Nine", .features: "chat,messaging",
    .transportInformation: "l2cap:psm=0x0080,mtu=4096", .appLink: "mount9bbs ble:GRID9 MOUNTPOINT",
    .protocolVersion: "9P2000;9bbsd;0.9.0",
  ]

  private func advertiser(adapter: String? = nil) -> BluetoothAdvertiser {
    BluetoothAdvertiser(
      name: "GRID9", information: information, adapterAddress: adapter,
      logger: Logger(label: "test"))
  }

  func testTheAdvertisementAndThe9PISServiceAreWhatBluetoothdReads() throws {
    try startBluetoothd()
    let advertiser = advertiser()
    try advertiser.start()
    defer { advertiser.stop() }
    XCTAssertTrue(
      waitUntil(timeout: 15) { advertiser.advertisingOn == ["hci0"] }, bluetoothd?.text ?? "")

    let advertisement = try XCTUnwrap(records("RegisterAdvertisement").first)
    XCTAssertNil(advertisement["error"], "\(advertisement)")
    let properties = try XCTUnwrap(advertisement["properties"] as? [String: Any])
    XCTAssertEqual(properties["Type"] as? String, "peripheral")
    XCTAssertEqual(properties["LocalName"] as? String, "GRID9")
    XCTAssertEqual(properties["ServiceUUIDs"] as? [String], [NinePInformationService.serviceUUID])

    let application = try XCTUnwrap(records("RegisterApplication").first)
    XCTAssertNil(application["error"], "\(application)")
    let objects = try XCTUnwrap(application["objects"] as? [String: [String: [String: Any]]])
    let services = objects.values.compactMap { $0["org.bluez.GattService1"] }
    XCTAssertEqual(services.count, 1)
    XCTAssertEqual(services.first?["UUID"] as? String, NinePInformationService.serviceUUID)
    XCTAssertEqual(services.first?["Primary"] as? Bool, true)
    let servicePath = try XCTUnwrap(
      objects.first { $0.value["org.bluez.GattService1"] != nil }?.key)
    let characteristics = objects.values.compactMap { $0["org.bluez.GattCharacteristic1"] }
    XCTAssertEqual(characteristics.count, 5)
    for characteristic in characteristics {
      XCTAssertEqual(characteristic["Flags"] as? [String], ["read"])
      XCTAssertEqual(characteristic["Service"] as? String, servicePath)
    }
    let values = try XCTUnwrap(application["values"] as? [String: String])
    for (characteristic, value) in information {
      XCTAssertEqual(values[characteristic.rawValue], value, characteristic.label)
      XCTAssertEqual(values[characteristic.rawValue + "@2"], String(value.dropFirst(2)), "offset 2")
    }
  }

  func testTheAdapterIsChosenByAddressAndMustBeOn() throws {
    try startBluetoothd(adapters: [
      ["name": "hci0", "address": "00:AA:01:01:00:01", "powered": true],
      ["name": "hci1", "address": "00:AA:01:02:00:01", "powered": false],
    ])
    let first = advertiser(adapter: "00:aa:01:01:00:01")
    try first.start()
    XCTAssertTrue(waitUntil(timeout: 15) { first.advertisingOn == ["hci0"] })
    first.stop()
    XCTAssertEqual(
      records("RegisterAdvertisement").compactMap { $0["adapter"] as? String }, ["/org/bluez/hci0"])

    XCTAssertThrowsError(try advertiser(adapter: "00:AA:01:02:00:01").start()) { error in
      XCTAssertEqual(
        "\(error)", "\(DiscoveryError.adapterOff(adapter: "hci1", blocked: false))")
    }
    XCTAssertThrowsError(try advertiser(adapter: "00:AA:01:09:00:09").start()) { error in
      XCTAssertTrue("\(error)".contains("no adapter has the address 00:AA:01:09:00:09"), "\(error)")
    }
  }

  func testNoBluetoothdIsSaidSo() throws {
    XCTAssertThrowsError(try advertiser().start()) { error in
      XCTAssertEqual("\(error)", "\(DiscoveryError.bluezNotRunning)")
    }
  }
}
