// A board's presence over Bluetooth LE (`9bbsd --advertise NAME` with an l2cap listener): an
// LE advertisement carrying the 9PIS service UUID and the board's name, and the 9PIS GATT
// service with its five read-only characteristics (../shared/seeds file 001), both registered
// with bluetoothd over D-Bus. Phones running the 9PIS guide's client and `mount9bbs scan` find
// the board by the UUID and read from the service how to reach it. bluetoothd drops both when
// this process's bus connection closes, so stopping is closing.

import Foundation
import Logging
import Synchronization

/// Registers a board's LE advertisement and 9PIS service with bluetoothd and serves them.
///
/// Sendable by hand (`@unchecked`): `bus` and `served` are set up by start() before the thread
/// runs, then used by that thread only; stop() waits for it to end before letting them go.
public final class BluetoothAdvertiser: @unchecked Sendable {

  /// What the board says about itself, one value per 9PIS characteristic.
  public let information: [NinePInformationService.Characteristic: String]
  /// The name advertised (LocalName).
  public let name: String
  /// The adapter to advertise on (its address), or nil for every powered adapter.
  public let adapterAddress: String?
  private let logger: Logger

  private var bus: SdBus?
  private var served: SdBus.ServedObjects?
  private let stopped = Mutex(false)
  private let finished = DispatchSemaphore(value: 0)
  private var running = false
  /// Adapters whose advertisement and service bluetoothd accepted, by name (`hci0`).
  private let accepted = Mutex<Set<String>>([])

  static let root = "/org/mount9bbs/board"
  static let advertisementPath = root + "/advertisement"
  static let applicationPath = root + "/gatt"
  static let servicePath = applicationPath + "/service0"

  public init(
    name: String, information: [NinePInformationService.Characteristic: String],
    adapterAddress: String? = nil, logger: Logger
  ) {
    self.name = name
    self.information = information
    self.adapterAddress = adapterAddress?.uppercased()
    self.logger = logger
  }

  /// The adapters where bluetoothd took both registrations so far.
  public var advertisingOn: Set<String> { accepted.withLock { $0 } }

  /// Connects to bluetoothd, chooses the adapters and asks it to advertise and serve 9PIS.
  /// bluetoothd's answers come later, on the advertiser's thread, and are logged.
  /// - Throws: no system bus, bluetoothd not running, no (matching) adapter, adapter off,
  ///   access denied.
  public func start() throws(DiscoveryError) {
    let bus: SdBus
    do {
      bus = try SdBus.system()
    } catch {
      throw .noSystemBus(reason: error.message)
    }
    let objects = try managedObjects(bus)
    let adapters = try chooseAdapters(objects)
    do {
      served = try bus.serve(under: Self.root) { [self] call in answer(call) }
    } catch {
      throw .bluezFailed(operation: "serving the 9PIS objects", reason: error.description)
    }
    for adapter in adapters { register(on: adapter, bus) }
    self.bus = bus
    running = true
    let thread = Thread { [self] in
      if let bus = self.bus { run(bus) }
      finished.signal()
    }
    thread.name = "9pis-advertiser"
    thread.start()
  }

  /// Stops serving; bluetoothd drops the advertisement and the service with the connection.
  public func stop() {
    guard running else { return }
    running = false
    stopped.withLock { $0 = true }
    finished.wait()
    served = nil
    bus = nil
  }

  private func run(_ bus: SdBus) {
    while !stopped.withLock({ $0 }) {
      do {
        _ = try bus.process()
        try bus.wait(upTo: .milliseconds(200))
      } catch {
        logger.error("9bbsd: Bluetooth advertising stopped: \(error)")
        return
      }
    }
  }

  // MARK: bluetoothd

  private func managedObjects(_ bus: SdBus) throws(DiscoveryError) -> BlueZScan.Objects {
    _ = try BlueZScan.bluezOwner(on: bus)
    return try BlueZScan.managedObjects(on: bus)
  }

  /// The adapter with ``adapterAddress``, or every powered one.
  private func chooseAdapters(_ objects: BlueZScan.Objects) throws(DiscoveryError) -> [String] {
    let all = objects.filter { $0.value[BlueZScan.adapterInterface] != nil }.keys.sorted()
    func property(_ path: String, _ name: String) -> DBusValue? {
      objects[path]?[BlueZScan.adapterInterface]?[name]
    }
    let candidates =
      adapterAddress.map { wanted in
        all.filter { property($0, "Address")?.stringValue?.uppercased() == wanted }
      } ?? all
    guard let first = candidates.first else {
      if let adapterAddress, !all.isEmpty {
        throw .bluezFailed(
          operation: "choosing the adapter",
          reason:
            "no adapter has the address \(adapterAddress) (there are \(all.map(BlueZScan.name(of:)).joined(separator: ", ")))"
        )
      }
      throw .noAdapter
    }
    let powered = candidates.filter { property($0, "Powered")?.boolValue == true }
    guard !powered.isEmpty else {
      let state = property(first, "PowerState")?.stringValue
      throw .adapterOff(adapter: BlueZScan.name(of: first), blocked: state == "off-blocked")
    }
    return powered
  }

  private func register(on adapter: String, _ bus: SdBus) {
    let name = BlueZScan.name(of: adapter)
    let pending = Mutex(2)
    func done(_ what: String, _ result: Result<[DBusValue], BusError>) {
      switch result {
      case .success:
        let left = pending.withLock { count -> Int in
          count -= 1
          return count
        }
        if left == 0 {
          accepted.withLock { _ = $0.insert(name) }
          logger.notice(
            "9bbsd: advertising '\(self.name)' over Bluetooth LE on \(name) (9PIS: \(information[.transportInformation] ?? ""))"
          )
        }
      case .failure(let error):
        logger.error("9bbsd: bluetoothd refused the \(what) on \(name): \(Self.explain(error))")
      }
    }
    bus.callAsync(
      MethodCall(
        destination: BlueZScan.bluez, path: adapter, interface: "org.bluez.GattManager1",
        member: "RegisterApplication",
        arguments: [.objectPath(Self.applicationPath), .properties([:])]),
      timeout: .seconds(10)
    ) { done("9PIS GATT service", $0) }
    bus.callAsync(
      MethodCall(
        destination: BlueZScan.bluez, path: adapter, interface: "org.bluez.LEAdvertisingManager1",
        member: "RegisterAdvertisement",
        arguments: [.objectPath(Self.advertisementPath), .properties([:])]),
      timeout: .seconds(10)
    ) { done("LE advertisement", $0) }
  }

  private static func explain(_ error: BusError) -> String {
    switch error.name {
    case "org.freedesktop.DBus.Error.UnknownMethod", "org.freedesktop.DBus.Error.UnknownInterface":
      return
        "\(error) (this bluetoothd has no LE advertising or GATT server; BlueZ 5.48 or later is needed)"
    case "org.freedesktop.DBus.Error.AccessDenied":
      return "\(error) (run as root or as a user the D-Bus policy lets use bluetoothd)"
    default:
      return error.description
    }
  }

  // MARK: The objects

  private var characteristics: [(path: String, uuid: String, value: String)] {
    NinePInformationService.Characteristic.allCases.enumerated().map { index, characteristic in
      (
        Self.servicePath + "/char\(index)", characteristic.rawValue,
        information[characteristic] ?? ""
      )
    }
  }

  private var advertisementProperties: [String: DBusValue] {
    [
      "Type": .string("peripheral"),
      "ServiceUUIDs": .array(element: "s", [.string(NinePInformationService.serviceUUID)]),
      "LocalName": .string(name),
    ]
  }

  private var applicationObjects: DBusValue {
    var objects: [DBusValue: DBusValue] = [
      .objectPath(Self.servicePath): interfaces(
        "org.bluez.GattService1",
        ["UUID": .string(NinePInformationService.serviceUUID), "Primary": .bool(true)])
    ]
    for characteristic in characteristics {
      objects[.objectPath(characteristic.path)] = interfaces(
        "org.bluez.GattCharacteristic1",
        [
          "UUID": .string(characteristic.uuid), "Service": .objectPath(Self.servicePath),
          "Flags": .array(element: "s", [.string("read")]),
        ])
    }
    return .dictionary(key: "o", value: "a{sa{sv}}", objects)
  }

  private func interfaces(_ interface: String, _ properties: [String: DBusValue]) -> DBusValue {
    .dictionary(key: "s", value: "a{sv}", [.string(interface): .properties(properties)])
  }

  private func properties(at path: String, _ interface: String) -> [String: DBusValue]? {
    if path == Self.advertisementPath && interface == "org.bluez.LEAdvertisement1" {
      return advertisementProperties
    }
    return nil
  }

  /// Answers bluetoothd's calls on our objects (on the advertiser's thread, inside the bus).
  private func answer(_ call: IncomingCall) -> Result<[DBusValue], BusError>? {
    switch (call.interface, call.member) {
    case ("org.freedesktop.DBus.ObjectManager", "GetManagedObjects")
    where call.path == Self.applicationPath:
      return .success([applicationObjects])
    case ("org.freedesktop.DBus.Properties", "GetAll"):
      guard let interface = call.arguments.first?.stringValue,
        let properties = properties(at: call.path, interface)
      else { return .success([.properties([:])]) }
      return .success([.properties(properties)])
    case ("org.freedesktop.DBus.Properties", "Get"):
      guard call.arguments.count >= 2, let interface = call.arguments[0].stringValue,
        let name = call.arguments[1].stringValue,
        let value = properties(at: call.path, interface)?[name]
      else {
        return .failure(
          BusError(name: "org.freedesktop.DBus.Error.InvalidArgs", message: "no such property"))
      }
      return .success([.variant(value)])
    case ("org.bluez.LEAdvertisement1", "Release"):
      logger.warning("9bbsd: bluetoothd stopped advertising '\(name)'")
      return .success([])
    case ("org.bluez.GattCharacteristic1", "ReadValue"):
      guard let characteristic = characteristics.first(where: { $0.path == call.path }) else {
        return nil
      }
      let offset = call.arguments.first?.stringKeyed?["offset"]?.intValue ?? 0
      let bytes = Array(characteristic.value.utf8)
      guard offset <= bytes.count else {
        return .failure(
          BusError(name: "org.bluez.Error.InvalidOffset", message: "offset past the value"))
      }
      return .success([.array(element: "y", bytes[offset...].map { .byte($0) })])
    default:
      return nil
    }
  }
}
