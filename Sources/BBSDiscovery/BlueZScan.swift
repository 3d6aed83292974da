// One Bluetooth scan through BlueZ's D-Bus API (see BluetoothScanner): set-up (the bus,
// BlueZ, the adapter, the discovery filter on 9PIS), the loop that applies BlueZ's signals
// to its objects and keeps the deadlines, and stopping. Each device's reading is in
// BlueZScan+Devices.

import Foundation
import Logging
import NinePTransport
import Synchronization

/// One scan's state: the bus, BlueZ's objects as last reported, and each device's progress.
final class BlueZScan {
  static let bluez = "org.bluez"
  static let adapterInterface = "org.bluez.Adapter1"
  static let deviceInterface = "org.bluez.Device1"
  static let serviceInterface = "org.bluez.GattService1"
  static let characteristicInterface = "org.bluez.GattCharacteristic1"
  static let callTimeout: Duration = .seconds(5)

  /// path → interface → property → value
  typealias Objects = [String: [String: [String: DBusValue]]]

  /// A board's reading: waiting for discovery to pause, connecting, waiting for its services,
  /// read (or given up).
  enum Stage { case waiting, connecting, resolving, done }

  struct Work {
    var device: BluetoothDevice
    var stage: Stage
    var deadline: ContinuousClock.Instant
    var connectedByUs = false
    /// When it may be read: a moment after it was first heard, as its scan response (with its
    /// name) may come a little later; a while longer for a board whose link is already up and
    /// that has not been heard yet (BlueZ calls it by its GAP name until it advertises).
    var readyAt = ContinuousClock.now.advanced(by: BlueZScan.settle)
    /// Not known to advertise 9PIS (``Candidate/maybe``): reported only if it has the service.
    var unsure = false
  }

  /// Devices whose RSSI BlueZ updated during this scan's discovery (filtered on 9PIS).
  var heardDuringDiscovery: Set<String> = []

  /// How long a board found is left to finish advertising (its scan response carries the name)
  /// before discovery pauses to read it.
  static let settle: Duration = .milliseconds(400)

  /// How long a board whose link is already up is given to be heard before it is read anyway.
  static let linkedPatience: Duration = .seconds(2)

  /// The last name each device advertised, by path: once connected, BlueZ renames a device to
  /// its GAP name (a Linux board says "BlueZ 5.66"), and a device connected before keeps that
  /// name until its next advertisement.
  var advertisedNames: [String: String] = [:]

  /// When each device's link came up during this scan, by path: BlueZ reads the GAP name
  /// shortly after, and a Name change in that time is no advertisement.
  var linkUp: [String: ContinuousClock.Instant] = [:]

  /// How long after a link comes up a Name change is taken for the GAP name read.
  static let gapNameWindow: Duration = .seconds(5)

  let scanner: BluetoothScanner
  let options: BluetoothScanOptions
  let logger: Logger
  let bus: SdBus
  var objects: Objects = [:]
  /// The powered adapters scanned on, by object path.
  var adapterPaths: [String] = []
  var adapterNames: String { adapterPaths.map(Self.name(of:)).joined(separator: ", ") }
  var discovering = false
  /// When discovery last (re)started.
  var discoveryStarted = ContinuousClock.now

  /// How long discovery runs before it is restarted. The controller reports each advertiser
  /// once per scan (duplicate filtering), and the kernel drops reports that arrive before it
  /// counts discovery as started: seen in the VM, where a board advertising all along went
  /// unreported for a whole second scan. A restart lets it be heard again.
  static let rescanInterval: Duration = .seconds(3)
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
      return BluetoothScanSummary(adapter: adapterNames, seen: work.count, read: readCount)
    }
  }

  // MARK: Setup

  /// bluetoothd's unique name on `bus`.
  static func bluezOwner(on bus: SdBus) throws(DiscoveryError) -> String {
    do {
      let reply = try bus.call(
        MethodCall(
          destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
          interface: "org.freedesktop.DBus", member: "GetNameOwner",
          arguments: [.string(bluez)]), timeout: callTimeout)
      return reply.first?.stringValue ?? ""
    } catch {
      if error.name == "org.freedesktop.DBus.Error.NameHasNoOwner" { throw .bluezNotRunning }
      throw .noSystemBus(reason: error.description)
    }
  }

  /// Every object bluetoothd has: adapters, devices, their services.
  static func managedObjects(on bus: SdBus) throws(DiscoveryError) -> Objects {
    let reply: [DBusValue]
    do {
      reply = try bus.call(
        MethodCall(
          destination: bluez, path: "/", interface: "org.freedesktop.DBus.ObjectManager",
          member: "GetManagedObjects"), timeout: callTimeout)
    } catch {
      throw mapped(error, operation: "listing objects")
    }
    var objects: Objects = [:]
    for (path, interfaces) in reply.first?.stringKeyed ?? [:] {
      for (interface, properties) in interfaces.stringKeyed ?? [:] {
        objects[path, default: [:]][interface] = properties.stringKeyed ?? [:]
      }
    }
    return objects
  }

  private func prepare() throws(DiscoveryError) {
    let owner = try Self.bluezOwner(on: bus)
    do {
      try bus.addMatch(
        "type='signal',sender='\(owner)',interface='org.freedesktop.DBus.ObjectManager',path='/'")
      try bus.addMatch(
        "type='signal',sender='\(owner)',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged',path_namespace='/org/bluez'"
      )
    } catch {
      throw .bluezFailed(operation: "subscribing to signals", reason: error.description)
    }
    objects = try Self.managedObjects(on: bus)
    try chooseAdapters()
    logger.debug("scanning on \(adapterPaths.joined(separator: ", "))")
    for path in adapterPaths {
      _ = try bluezCall(
        path: path, interface: Self.adapterInterface, member: "SetDiscoveryFilter",
        arguments: [
          .properties([
            "UUIDs": .array(element: "s", [.string(NinePInformationService.serviceUUID)]),
            "Transport": .string("le"),
          ])
        ], operation: "SetDiscoveryFilter")
    }
    try startDiscovery()
  }

  /// Every powered adapter: a board may be in range of one radio and not another.
  private func chooseAdapters() throws(DiscoveryError) {
    let adapters = objects.filter { $0.value[Self.adapterInterface] != nil }.keys.sorted()
    guard let first = adapters.first else { throw .noAdapter }
    func powered(_ path: String) -> Bool {
      objects[path]?[Self.adapterInterface]?["Powered"]?.boolValue ?? false
    }
    adapterPaths = adapters.filter(powered)
    guard !adapterPaths.isEmpty else {
      let state = objects[first]?[Self.adapterInterface]?["PowerState"]?.stringValue
      throw .adapterOff(adapter: Self.name(of: first), blocked: state == "off-blocked")
    }
  }

  /// Starts (or resumes) discovery on every adapter scanned on. An adapter that refuses is
  /// left out (with a warning) while another scans; if none does, its error is the scan's.
  private func startDiscovery() throws(DiscoveryError) {
    var failures: [(path: String, error: DiscoveryError)] = []
    for path in adapterPaths {
      do {
        _ = try bus.call(
          MethodCall(
            destination: Self.bluez, path: path, interface: Self.adapterInterface,
            member: "StartDiscovery"), timeout: Self.callTimeout)
      } catch {
        switch error.name {
        case "org.bluez.Error.InProgress": break
        case "org.bluez.Error.NotReady":
          failures.append((path, .adapterOff(adapter: Self.name(of: path), blocked: false)))
        default: failures.append((path, Self.mapped(error, operation: "StartDiscovery")))
        }
      }
    }
    if let first = failures.first, failures.count == adapterPaths.count { throw first.error }
    for failure in failures {
      logger.warning("not scanning on \(Self.name(of: failure.path)): \(failure.error)")
    }
    adapterPaths.removeAll { path in failures.contains { $0.path == path } }
    discovering = true
    discoveryStarted = ContinuousClock.now
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
      throw Self.mapped(error, operation: operation)
    }
  }

  static func mapped(_ error: BusError, operation: String) -> DiscoveryError {
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
      if discovering && now >= discoveryStarted + Self.rescanInterval
        && now + .seconds(1) < discoveryEnd
      {
        logger.debug("restarting discovery")
        stopDiscovery()
        try startDiscovery()
      }
      let ready = work.filter {
        $0.value.stage == .waiting && ($0.value.readyAt <= now || now >= discoveryEnd)
      }
      // A board whose link is up is read over it, with discovery left running.
      for path in ready.keys where isConnected(path) { startReading(path, now: now) }
      if ready.keys.contains(where: { !isConnected($0) }) {
        // BlueZ sends an LE connect only once discovery has stopped (seen with btmon): pause
        // it while boards are read, and resume it afterwards if the scan has time left.
        if discovering {
          logger.debug("pausing discovery to read the boards found")
          stopDiscovery()
        }
        connectWaiting(now: now)
      }
      expireDeadlines(now: now)
      let pending = work.values.filter { $0.stage != .done }
      if !discovering && pending.isEmpty && now < discoveryEnd && !scanner.isCancelled {
        logger.debug("resuming discovery")
        try startDiscovery()
        continue
      }
      if !discovering && pending.isEmpty { return }
      var next = discovering ? discoveryEnd : now.advanced(by: .seconds(1))
      let rescanAt = discoveryStarted + Self.rescanInterval
      if discovering && rescanAt > now && rescanAt < next { next = rescanAt }
      for item in pending where item.deadline < next { next = item.deadline }
      for item in pending where item.stage == .waiting && item.readyAt < next {
        next = item.readyAt
      }
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
    for path in adapterPaths {
      do {
        _ = try bus.call(
          MethodCall(
            destination: Self.bluez, path: path, interface: Self.adapterInterface,
            member: "StopDiscovery"), timeout: Self.callTimeout)
      } catch {
        logger.debug("StopDiscovery on \(path): \(error)")
      }
    }
  }

  /// Notes a device's changed properties: when it was heard, when its link came up, and the
  /// name it advertised. BlueZ sets Name from every advertisement heard during discovery, even
  /// from a device already connected (a board advertises while a member's link is up), and from
  /// the GAP name when a link comes up: a Name is taken as advertised while discovering, except
  /// just after a link came up and while this scan is connecting to the device.
  private func deviceChanged(_ path: String, _ changed: [String: DBusValue]) {
    let now = ContinuousClock.now
    if changed["Connected"]?.boolValue == true { linkUp[path] = now }
    if discovering, changed["RSSI"] != nil {
      heardDuringDiscovery.insert(path)
      if let item = work[path], item.stage == .waiting {
        work[path]?.readyAt = min(item.readyAt, now.advanced(by: Self.settle))
      }
    }
    guard discovering, let name = changed["Name"]?.stringValue, !name.isEmpty else { return }
    let connecting = work[path].map { $0.stage == .connecting || $0.stage == .resolving } ?? false
    let gapRead =
      objects[path]?[Self.deviceInterface]?["Connected"]?.boolValue == true
      && linkUp[path].map { now < $0.advanced(by: Self.gapNameWindow) } ?? false
    if connecting || gapRead {
      logger.debug("\(path) renamed '\(name)' as its link came up: not an advertised name")
      return
    }
    advertisedNames[path] = name
  }

  private func apply(_ signal: BusSignal) {
    switch (signal.interface, signal.member) {
    case ("org.freedesktop.DBus.ObjectManager", "InterfacesAdded"):
      guard signal.body.count >= 2, let path = signal.body[0].stringValue else { return }
      for (interface, properties) in signal.body[1].stringKeyed ?? [:] {
        objects[path, default: [:]][interface] = properties.stringKeyed ?? [:]
        if interface == Self.deviceInterface {
          appeared.insert(path)
          if let name = properties.stringKeyed?["Name"]?.stringValue, !name.isEmpty {
            advertisedNames[path] = name
          }
        }
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
      if interface == Self.deviceInterface {
        deviceChanged(signal.path, signal.body[1].stringKeyed ?? [:])
      }
      for name in signal.body.count > 2 ? signal.body[2].stringArray ?? [] : [] {
        objects[signal.path]?[interface]?[name] = nil
      }
    default:
      break
    }
  }
}
