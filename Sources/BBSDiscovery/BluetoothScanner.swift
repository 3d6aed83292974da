import Foundation
import Logging
import NinePTransport
import Synchronization

/// A Bluetooth LE device that advertises the 9P Information Service.
public struct BluetoothDevice: Sendable, Hashable {
  /// The device address, `XX:XX:XX:XX:XX:XX`.
  public var address: String
  /// Public or (static) random; Zephyr boards usually use random.
  public var addressType: BluetoothAddressType
  /// The advertised name (usually from the scan response), if any.
  public var name: String?
  /// The signal strength in dBm when last seen.
  public var rssi: Int?

  /// A device with the given properties.
  public init(
    address: String, addressType: BluetoothAddressType, name: String? = nil, rssi: Int? = nil
  ) {
    self.address = address
    self.addressType = addressType
    self.name = name
    self.rssi = rssi
  }

  /// `NAME (ADDRESS)`, or the address alone.
  public var label: String { name.map { "\($0) (\(address))" } ?? address }
}

/// What a Bluetooth scan reports, in the order it happens.
public enum BluetoothScanEvent: Sendable {
  /// A device advertising 9PIS was seen; its characteristics are being read.
  case seen(BluetoothDevice)
  /// A device's 9PIS characteristics were read (some may be missing).
  case read(BluetoothDevice, NinePInformation)
  /// A device was seen but its characteristics could not be read.
  case unreadable(BluetoothDevice, DiscoveryError)
}

/// How long and how thoroughly to scan.
public struct BluetoothScanOptions: Sendable {
  /// How long LE discovery runs.
  public var duration: Duration
  /// How long connecting and resolving one device's services may take.
  public var readTimeout: Duration
  /// Connect to each device and read its 9PIS characteristics.
  public var readsInformation: Bool

  /// Options with the given values.
  public init(
    duration: Duration = .seconds(10), readTimeout: Duration = .seconds(10),
    readsInformation: Bool = true
  ) {
    self.duration = duration
    self.readTimeout = readTimeout
    self.readsInformation = readsInformation
  }
}

/// The outcome of a whole scan.
public struct BluetoothScanSummary: Sendable {
  /// The adapter used, e.g. `hci0`.
  public var adapter: String
  /// Devices seen advertising 9PIS.
  public var seen: Int
  /// Devices whose characteristics were read.
  public var read: Int
}

/// Finds 9BBS boards over Bluetooth LE through BlueZ's D-Bus API.
///
/// ``scan(options:onEvent:)`` runs on the caller's thread: it checks BlueZ and the adapter,
/// sets a discovery filter on the 9PIS UUID (LE only), starts discovery, reports each
/// matching device, connects to it, waits for its services to resolve, reads the five
/// characteristics and disconnects again. Discovery stops when the duration ends or
/// ``cancel()`` is called (from any thread, or from `onEvent`).
public final class BluetoothScanner: Sendable {
  private let cancelled = Atomic<Bool>(false)
  private let logger: Logger

  /// A scanner that logs to `logger`.
  public init(logger: Logger = Logger(label: "mount9bbs.discovery")) {
    self.logger = logger
  }

  /// Ends a running scan soon: discovery stops, devices being read are disconnected.
  public func cancel() {
    cancelled.store(true, ordering: .relaxed)
  }

  var isCancelled: Bool { cancelled.load(ordering: .relaxed) }

  /// Scans, calling `onEvent` on this thread as devices appear and are read.
  /// - Throws: the first failure that stops the whole scan (no bus, no BlueZ, no adapter,
  ///   adapter off); failures of single devices are reported as events.
  @discardableResult
  public func scan(
    options: BluetoothScanOptions = BluetoothScanOptions(),
    onEvent: (BluetoothScanEvent) -> Void
  ) throws(DiscoveryError) -> BluetoothScanSummary {
    let session = try BlueZScan(scanner: self, options: options, logger: logger)
    return try session.run(onEvent)
  }
}

// MARK: - The scan

/// One scan's state: the bus, BlueZ's objects as last reported, and each device's progress.
private final class BlueZScan {
  static let bluez = "org.bluez"
  static let adapterInterface = "org.bluez.Adapter1"
  static let deviceInterface = "org.bluez.Device1"
  static let serviceInterface = "org.bluez.GattService1"
  static let characteristicInterface = "org.bluez.GattCharacteristic1"
  static let callTimeout: Duration = .seconds(5)

  /// path → interface → property → value
  typealias Objects = [String: [String: [String: DBusValue]]]

  enum Stage { case connecting, resolving, done }

  struct Work {
    var device: BluetoothDevice
    var stage: Stage
    var deadline: ContinuousClock.Instant
    var connectedByUs = false
  }

  let scanner: BluetoothScanner
  let options: BluetoothScanOptions
  let logger: Logger
  let bus: SdBus
  var objects: Objects = [:]
  var adapterPath = ""
  var adapterName = ""
  var discovering = false
  var appeared: Set<String> = []
  var work: [String: Work] = [:]
  var readCount = 0
  var emit: (BluetoothScanEvent) -> Void = { _ in }

  init(scanner: BluetoothScanner, options: BluetoothScanOptions, logger: Logger)
    throws(DiscoveryError)
  {
    self.scanner = scanner
    self.options = options
    self.logger = logger
    do {
      bus = try SdBus.system()
    } catch {
      throw .noSystemBus(reason: error.message)
    }
  }

  func run(_ onEvent: (BluetoothScanEvent) -> Void) throws(DiscoveryError)
    -> BluetoothScanSummary
  {
    return try withoutActuallyEscaping(onEvent) { (handler) throws(DiscoveryError) in
      emit = handler
      defer { emit = { _ in } }
      try prepare()
      defer { finish() }
      try loop()
      return BluetoothScanSummary(adapter: adapterName, seen: work.count, read: readCount)
    }
  }

  // MARK: Setup

  private func prepare() throws(DiscoveryError) {
    let owner: String
    do {
      let reply = try bus.call(
        MethodCall(
          destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
          interface: "org.freedesktop.DBus", member: "GetNameOwner",
          arguments: [.string(Self.bluez)]), timeout: Self.callTimeout)
      owner = reply.first?.stringValue ?? ""
    } catch {
      if error.name == "org.freedesktop.DBus.Error.NameHasNoOwner" { throw .bluezNotRunning }
      throw .noSystemBus(reason: error.description)
    }
    do {
      try bus.addMatch(
        "type='signal',sender='\(owner)',interface='org.freedesktop.DBus.ObjectManager',path='/'")
      try bus.addMatch(
        "type='signal',sender='\(owner)',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged',path_namespace='/org/bluez'"
      )
    } catch {
      throw .bluezFailed(operation: "subscribing to signals", reason: error.description)
    }
    let reply = try bluezCall(
      path: "/", interface: "org.freedesktop.DBus.ObjectManager", member: "GetManagedObjects",
      operation: "listing objects")
    for (path, interfaces) in reply.first?.stringKeyed ?? [:] {
      for (interface, properties) in interfaces.stringKeyed ?? [:] {
        objects[path, default: [:]][interface] = properties.stringKeyed ?? [:]
      }
    }
    try chooseAdapter()
    logger.debug("using adapter \(adapterPath)")
    _ = try bluezCall(
      path: adapterPath, interface: Self.adapterInterface, member: "SetDiscoveryFilter",
      arguments: [
        .properties([
          "UUIDs": .array(element: "s", [.string(NinePInformationService.serviceUUID)]),
          "Transport": .string("le"),
        ])
      ], operation: "SetDiscoveryFilter")
    do {
      _ = try bus.call(
        MethodCall(
          destination: Self.bluez, path: adapterPath, interface: Self.adapterInterface,
          member: "StartDiscovery"), timeout: Self.callTimeout)
    } catch {
      switch error.name {
      case "org.bluez.Error.InProgress": break
      case "org.bluez.Error.NotReady": throw .adapterOff(adapter: adapterName, blocked: false)
      default: throw mapped(error, operation: "StartDiscovery")
      }
    }
    discovering = true
  }

  private func chooseAdapter() throws(DiscoveryError) {
    let adapters = objects.filter { $0.value[Self.adapterInterface] != nil }.keys.sorted()
    guard let first = adapters.first else { throw .noAdapter }
    func powered(_ path: String) -> Bool {
      objects[path]?[Self.adapterInterface]?["Powered"]?.boolValue ?? false
    }
    guard let chosen = adapters.first(where: powered) else {
      let state = objects[first]?[Self.adapterInterface]?["PowerState"]?.stringValue
      throw .adapterOff(adapter: Self.name(of: first), blocked: state == "off-blocked")
    }
    adapterPath = chosen
    adapterName = Self.name(of: chosen)
  }

  static func name(of path: String) -> String {
    path.split(separator: "/").last.map(String.init) ?? path
  }

  private func bluezCall(
    path: String, interface: String, member: String, arguments: [DBusValue] = [],
    operation: String
  ) throws(DiscoveryError) -> [DBusValue] {
    do {
      return try bus.call(
        MethodCall(
          destination: Self.bluez, path: path, interface: interface, member: member,
          arguments: arguments), timeout: Self.callTimeout)
    } catch {
      throw mapped(error, operation: operation)
    }
  }

  private func mapped(_ error: BusError, operation: String) -> DiscoveryError {
    switch error.name {
    case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner":
      return .bluezNotRunning
    case "org.freedesktop.DBus.Error.AccessDenied":
      return .bluetoothAccessDenied(reason: error.message)
    default:
      return .bluezFailed(operation: operation, reason: error.description)
    }
  }

  // MARK: The loop

  private func loop() throws(DiscoveryError) {
    let clock = ContinuousClock()
    let discoveryEnd = clock.now.advanced(by: options.duration)
    evaluateDevices()
    while true {
      let signals: [BusSignal]
      do {
        signals = try bus.process()
      } catch {
        throw .bluezFailed(operation: "reading the bus", reason: error.description)
      }
      for signal in signals { apply(signal) }
      evaluateDevices()
      let now = clock.now
      if scanner.isCancelled {
        abandonPendingWork()
        return
      }
      if discovering && now >= discoveryEnd { stopDiscovery() }
      expireDeadlines(now: now)
      let pending = work.values.filter { $0.stage != .done }
      if !discovering && pending.isEmpty { return }
      var next = discovering ? discoveryEnd : now.advanced(by: .seconds(1))
      for item in pending where item.deadline < next { next = item.deadline }
      let slice = min(max(next - now, .milliseconds(1)), .milliseconds(100))
      do {
        try bus.wait(upTo: slice)
      } catch {
        throw .bluezFailed(operation: "waiting on the bus", reason: error.description)
      }
    }
  }

  private func finish() {
    if discovering { stopDiscovery() }
  }

  private func stopDiscovery() {
    discovering = false
    do {
      _ = try bus.call(
        MethodCall(
          destination: Self.bluez, path: adapterPath, interface: Self.adapterInterface,
          member: "StopDiscovery"), timeout: Self.callTimeout)
    } catch {
      logger.debug("StopDiscovery: \(error)")
    }
  }

  private func apply(_ signal: BusSignal) {
    switch (signal.interface, signal.member) {
    case ("org.freedesktop.DBus.ObjectManager", "InterfacesAdded"):
      guard signal.body.count >= 2, let path = signal.body[0].stringValue else { return }
      for (interface, properties) in signal.body[1].stringKeyed ?? [:] {
        objects[path, default: [:]][interface] = properties.stringKeyed ?? [:]
        if interface == Self.deviceInterface { appeared.insert(path) }
      }
    case ("org.freedesktop.DBus.ObjectManager", "InterfacesRemoved"):
      guard signal.body.count >= 2, let path = signal.body[0].stringValue else { return }
      for interface in signal.body[1].stringArray ?? [] { objects[path]?[interface] = nil }
      if objects[path]?.isEmpty == true { objects[path] = nil }
    case ("org.freedesktop.DBus.Properties", "PropertiesChanged"):
      guard signal.body.count >= 2, let interface = signal.body[0].stringValue,
        objects[signal.path] != nil
      else { return }
      for (name, value) in signal.body[1].stringKeyed ?? [:] {
        objects[signal.path]?[interface, default: [:]][name] = value
      }
      for name in signal.body.count > 2 ? signal.body[2].stringArray ?? [] : [] {
        objects[signal.path]?[interface]?[name] = nil
      }
    default:
      break
    }
  }

  // MARK: Devices

  private func device(at path: String) -> BluetoothDevice? {
    guard let properties = objects[path]?[Self.deviceInterface],
      let address = properties["Address"]?.stringValue
    else { return nil }
    let type: BluetoothAddressType =
      properties["AddressType"]?.stringValue == "public" ? .public : .random
    let name = properties["Name"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 }
    return BluetoothDevice(
      address: address, addressType: type, name: name, rssi: properties["RSSI"]?.intValue)
  }

  /// Whether a device object belongs to our adapter, advertises 9PIS and is around now.
  private func isCandidate(_ path: String) -> Bool {
    guard path.hasPrefix(adapterPath + "/"), let properties = objects[path]?[Self.deviceInterface]
    else { return false }
    let uuid = NinePInformationService.serviceUUID
    let uuids = (properties["UUIDs"]?.stringArray ?? []).map { $0.lowercased() }
    let serviceData = (properties["ServiceData"]?.stringKeyed ?? [:]).keys.map { $0.lowercased() }
    guard uuids.contains(uuid) || serviceData.contains(uuid) else { return false }
    return properties["RSSI"] != nil || properties["Connected"]?.boolValue == true
      || appeared.contains(path)
  }

  private func evaluateDevices() {
    for path in objects.keys.sorted() where work[path] == nil && isCandidate(path) {
      guard let device = device(at: path) else { continue }
      logger.debug("9PIS device \(device.label) at \(path)")
      work[path] = Work(
        device: device, stage: .done,
        deadline: ContinuousClock.now.advanced(by: options.readTimeout))
      emit(.seen(device))
      if options.readsInformation { startReading(path) }
    }
    for (path, item) in work where item.stage == .resolving && servicesResolved(path) {
      read(path)
    }
  }

  private func servicesResolved(_ path: String) -> Bool {
    objects[path]?[Self.deviceInterface]?["ServicesResolved"]?.boolValue == true
  }

  private func startReading(_ path: String) {
    let properties = objects[path]?[Self.deviceInterface] ?? [:]
    if properties["Connected"]?.boolValue == true {
      work[path]?.stage = .resolving
      if servicesResolved(path) { read(path) }
      return
    }
    work[path]?.stage = .connecting
    work[path]?.connectedByUs = true
    bus.callAsync(
      MethodCall(
        destination: Self.bluez, path: path, interface: Self.deviceInterface, member: "Connect"),
      timeout: options.readTimeout
    ) { [self] result in
      connectFinished(path, result)
    }
  }

  private func connectFinished(_ path: String, _ result: Result<[DBusValue], BusError>) {
    guard let item = work[path], item.stage == .connecting else { return }
    switch result {
    case .success:
      work[path]?.stage = .resolving
      if servicesResolved(path) { read(path) }
    case .failure(let error)
    where error.name == "org.bluez.Error.AlreadyConnected"
      || error.name == "org.bluez.Error.InProgress":
      work[path]?.stage = .resolving
      if servicesResolved(path) { read(path) }
    case .failure(let error):
      work[path]?.stage = .done
      work[path]?.connectedByUs = false
      let reason = error.message.isEmpty ? error.name : error.message
      emit(.unreadable(item.device, .connectFailed(device: item.device.label, reason: reason)))
    }
  }

  private func expireDeadlines(now: ContinuousClock.Instant) {
    for (path, item) in work where item.stage != .done && item.deadline <= now {
      let seconds = options.readTimeout.timeInterval
      work[path]?.stage = .done
      disconnectIfOurs(path, item)
      let error: DiscoveryError =
        item.stage == .connecting
        ? .connectFailed(
          device: item.device.label,
          reason: "no connection within \(DiscoveryError.format(seconds)) s")
        : .servicesNotResolved(device: item.device.label, seconds: seconds)
      emit(.unreadable(item.device, error))
    }
  }

  private func abandonPendingWork() {
    for (path, item) in work where item.stage != .done {
      work[path]?.stage = .done
      disconnectIfOurs(path, item)
    }
  }

  private func disconnectIfOurs(_ path: String, _ item: Work) {
    guard item.connectedByUs else { return }
    do {
      _ = try bus.call(
        MethodCall(
          destination: Self.bluez, path: path, interface: Self.deviceInterface,
          member: "Disconnect"), timeout: Self.callTimeout)
    } catch {
      logger.debug("Disconnect \(path): \(error)")
    }
  }

  /// Reads the 9PIS characteristics of a connected device whose services have resolved.
  private func read(_ path: String) {
    guard var item = work[path] else { return }
    item.stage = .done
    work[path] = item
    defer { disconnectIfOurs(path, item) }
    if let refreshed = device(at: path) {
      item.device.name = refreshed.name ?? item.device.name
      item.device.rssi = refreshed.rssi ?? item.device.rssi
    }
    let uuid = NinePInformationService.serviceUUID
    let services = objects.filter { _, interfaces in
      guard let service = interfaces[Self.serviceInterface] else { return false }
      return service["Device"]?.stringValue == path
        && service["UUID"]?.stringValue?.lowercased() == uuid
    }.keys
    guard let service = services.sorted().first else {
      emit(.unreadable(item.device, .noInformationService(device: item.device.label)))
      return
    }
    var information = NinePInformation()
    for (characteristicPath, interfaces) in objects.sorted(by: { $0.key < $1.key }) {
      guard let properties = interfaces[Self.characteristicInterface],
        properties["Service"]?.stringValue == service,
        let uuid = properties["UUID"]?.stringValue?.lowercased(),
        let characteristic = NinePInformationService.Characteristic(rawValue: uuid)
      else { continue }
      do {
        let reply = try bus.call(
          MethodCall(
            destination: Self.bluez, path: characteristicPath,
            interface: Self.characteristicInterface, member: "ReadValue",
            arguments: [.properties([:])]), timeout: Self.callTimeout)
        let bytes = reply.first?.bytes ?? []
        let text = String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
        information[characteristic] = text
      } catch {
        logger.warning(
          "cannot read the 9PIS \(characteristic.label) of \(item.device.label): \(error)")
      }
    }
    readCount += 1
    emit(.read(item.device, information))
  }
}
