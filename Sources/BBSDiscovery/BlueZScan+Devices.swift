// Each device a Bluetooth scan finds: whether it is a 9BBS board (9PIS advertised on our
// adapter), connecting to it, waiting for its services to resolve, reading the five 9PIS
// characteristics and disconnecting again, each within the read timeout.

import Foundation
import Logging
import NinePTransport

extension BlueZScan {
  private func device(at path: String) -> BluetoothDevice? {
    guard let properties = objects[path]?[Self.deviceInterface],
      let address = properties["Address"]?.stringValue
    else { return nil }
    let type: BluetoothAddressType =
      properties["AddressType"]?.stringValue == "public" ? .public : .random
    let name = properties["Name"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 }
    // 127 is HCI's "RSSI not available" (virtual controllers report nothing else).
    let rssi = properties["RSSI"]?.intValue.flatMap { $0 == 127 ? nil : $0 }
    return BluetoothDevice(address: address, addressType: type, name: name, rssi: rssi)
  }

  /// Whether a device object belongs to our adapter, advertises 9PIS and is around now.
  /// How sure the scan is that a device is a board.
  enum Candidate {
    /// It advertises 9PIS (BlueZ lists the UUID).
    case board
    /// BlueZ heard it during this filtered discovery but lists UUIDs from an earlier connection
    /// without 9PIS: once a device's services were resolved, BlueZ stops adding advertised
    /// UUIDs, so a machine that became a board since (a Linux box now running `9bbsd
    /// --advertise`) looks like this. Read, and listed only if it has the 9PIS service.
    case maybe
  }

  /// Whether a device object belongs to a scanned adapter, is around now, and advertises 9PIS
  /// (or may: see ``Candidate/maybe``; never a paired device, which a board never is).
  private func candidate(_ path: String) -> Candidate? {
    guard adapterPaths.contains(where: { path.hasPrefix($0 + "/") }),
      let properties = objects[path]?[Self.deviceInterface]
    else { return nil }
    let uuid = NinePInformationService.serviceUUID
    let uuids = (properties["UUIDs"]?.stringArray ?? []).map { $0.lowercased() }
    let serviceData = (properties["ServiceData"]?.stringKeyed ?? [:]).keys.map { $0.lowercased() }
    guard uuids.contains(uuid) || serviceData.contains(uuid) else {
      let paired =
        properties["Paired"]?.boolValue == true || properties["Bonded"]?.boolValue == true
      return heardDuringDiscovery.contains(path) && !uuids.isEmpty && !paired
        && options.readsInformation ? .maybe : nil
    }
    let around =
      properties["RSSI"] != nil || properties["Connected"]?.boolValue == true
      || appeared.contains(path)
    return around ? .board : nil
  }

  func evaluateDevices() {
    for path in objects.keys.sorted() where work[path] == nil {
      guard let candidate = candidate(path), let device = device(at: path) else { continue }
      logger.debug(
        "\(candidate == .board ? "9PIS" : "possible 9PIS") device \(device.label) at \(path)")
      let now = ContinuousClock.now
      let unheardLink = isConnected(path) && !heardDuringDiscovery.contains(path)
      work[path] = Work(
        device: device, stage: .done, deadline: now.advanced(by: options.readTimeout),
        readyAt: now.advanced(by: unheardLink ? Self.linkedPatience : Self.settle),
        unsure: candidate == .maybe)
      if candidate == .board { emit(.seen(device)) }
      if options.readsInformation { work[path]?.stage = .waiting }
    }
    for (path, item) in work where item.stage == .resolving && servicesResolved(path) {
      read(path)
    }
  }

  private func servicesResolved(_ path: String) -> Bool {
    objects[path]?[Self.deviceInterface]?["ServicesResolved"]?.boolValue == true
  }

  func isConnected(_ path: String) -> Bool {
    objects[path]?[Self.deviceInterface]?["Connected"]?.boolValue == true
  }

  /// Connects to every board waiting to be read whose link is down (discovery has paused).
  func connectWaiting(now: ContinuousClock.Instant) {
    for (path, item) in work where item.stage == .waiting && !isConnected(path) {
      startReading(path, now: now)
    }
  }

  /// Starts reading a board: it has the read timeout from now.
  func startReading(_ path: String, now: ContinuousClock.Instant) {
    if let name = advertisedNames[path] { work[path]?.device.name = name }
    work[path]?.deadline = now.advanced(by: options.readTimeout)
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
      report(item, .connectFailed(device: item.device.label, reason: reason))
    }
  }

  func expireDeadlines(now: ContinuousClock.Instant) {
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
      report(item, error)
    }
  }

  /// A board that could not be read is listed with the reason; a device only suspected of
  /// being one (``Candidate/maybe``) is not.
  private func report(_ item: Work, _ error: DiscoveryError) {
    if item.unsure {
      logger.debug("cannot tell whether \(item.device.label) is a board: \(error)")
    } else {
      emit(.unreadable(item.device, error))
    }
  }

  func abandonPendingWork() {
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
      // The name it advertised, as the scan listed it and `ble:NAME` looks for it: once
      // connected, BlueZ renames the device to its GAP name (a Linux board's "BlueZ 5.66").
      // A board still connected (a mount's link lingers a moment) does not advertise, and
      // BlueZ calls it by its GAP name: the name it advertised last is in the scan cache.
      let cached =
        advertisedNames[path] == nil && !item.connectedByUs
        ? DiscoveryCache().board(named: item.device.address, kind: .bluetooth)?.name : nil
      item.device.name = advertisedNames[path] ?? cached ?? item.device.name ?? refreshed.name
      item.device.rssi = refreshed.rssi ?? item.device.rssi
    }
    let uuid = NinePInformationService.serviceUUID
    let services = objects.filter { _, interfaces in
      guard let service = interfaces[Self.serviceInterface] else { return false }
      return service["Device"]?.stringValue == path
        && service["UUID"]?.stringValue?.lowercased() == uuid
    }.keys
    guard let service = services.sorted().first else {
      if item.unsure {
        logger.debug("\(item.device.label) has no 9PIS service: not a board")
      } else {
        emit(.unreadable(item.device, .noInformationService(device: item.device.label)))
      }
      return
    }
    if item.unsure { emit(.seen(item.device)) }
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
