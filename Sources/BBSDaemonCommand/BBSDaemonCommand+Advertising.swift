import ArgumentParser
import BBSDiscovery
import BBSIdentity
import BBSServer
import Logging
import NinePTransport

// Serving beyond this machine: warnings for an exposed board, and advertising it (mDNS for
// the TCP listeners, Bluetooth LE and 9PIS for the l2cap ones).
extension BBSDaemonCommand {
  /// Warns when a TCP listener reaches beyond this machine while anyone may attach or the
  /// first to attach becomes the sysop.
  func warnIfExposed(
    _ bound: [String], configuration: BBSServerConfiguration, logger: Logger
  ) {
    let exposed = bound.filter { dial in
      guard case .tcp(let host, _)? = try? TransportAddress(parsing: dial) else { return false }
      return !(host.hasPrefix("127.") || host == "::1" || host == "localhost")
    }
    guard !exposed.isEmpty else { return }
    if configuration.auth != .required {
      logger.warning(
        "9bbsd: \(exposed.joined(separator: ", ")) is reachable from the network and --auth is \(configuration.auth.rawValue): anyone there can attach and post; use --auth required"
      )
    }
    if configuration.sysops.isEmpty && configuration.firstUserIsSysop {
      logger.warning(
        "9bbsd: no --sysop: the first user to attach over the network becomes the sysop; name one with --sysop IDENTITY or --sysop none"
      )
    }
  }

  /// Publishes the TCP listeners over mDNS and the l2cap listeners over Bluetooth LE; without
  /// avahi-daemon it warns and keeps serving, while a Bluetooth advertisement that cannot start
  /// (no bluetoothd, no adapter, adapter off) stops 9bbsd with the reason.
  func startAdvertising(
    _ name: String, listeners bound: [String], boardKey: BoardKey?, server: BBSServer,
    logger: Logger
  ) throws -> (lan: LANAdvertiser?, bluetooth: BluetoothAdvertiser?) {
    let radio = bound.compactMap { dial -> (address: String, psm: UInt16)? in
      guard case .l2cap(let address, let psm, _)? = try? TransportAddress(parsing: dial) else {
        return nil
      }
      return (address, psm)
    }
    var features = ["chat", "messaging"]
    if files != nil { features.append("file-sharing") }
    var bluetooth: BluetoothAdvertiser?
    if let listener = radio.first {
      let advertiser = BluetoothAdvertiser(
        name: name,
        information: [
          .serviceDescription: boardName ?? name,
          .features: features.joined(separator: ","),
          .transportInformation: String(
            format: "l2cap:psm=0x%04x,mtu=%d", listener.psm, Listener.l2capReceiveMTU),
          .appLink: "mount9bbs ble:\(name) MOUNTPOINT",
          .protocolVersion: "9P2000;9bbsd;\(ProductVersion.current)",
        ],
        adapterAddress: listener.address == TransportAddress.anyBluetoothAddress
          ? nil : listener.address, logger: logger)
      do {
        try advertiser.start()
      } catch {
        logger.critical("9bbsd: cannot advertise '\(name)' over Bluetooth LE: \(error)")
        server.stop()
        throw ExitCode.failure
      }
      bluetooth = advertiser
    }
    let tcp = bound.contains {
      if case .tcp? = try? TransportAddress(parsing: $0) { return true }
      return false
    }
    if bluetooth != nil && !tcp { return (nil, bluetooth) }
    return (
      try startLANAdvertising(
        name, listeners: bound, features: features, boardKey: boardKey, server: server,
        logger: logger), bluetooth
    )
  }

  /// Publishes the TCP listeners over mDNS; without avahi-daemon it warns and keeps serving.
  private func startLANAdvertising(
    _ name: String, listeners bound: [String], features: [String], boardKey: BoardKey?,
    server: BBSServer, logger: Logger
  ) throws -> LANAdvertiser {
    let endpoints = bound.compactMap { dial -> LANAdvertiser.Endpoint? in
      guard case .tcp(let host, let port)? = try? TransportAddress(parsing: dial) else {
        return nil
      }
      let loopback = host.hasPrefix("127.") || host == "::1" || host == "localhost"
      if loopback {
        logger.warning(
          "9bbsd: \(dial) accepts local connections only, so it is advertised on the loopback interface only; use --listen tcp!0.0.0.0!\(port) to serve the LAN"
        )
      }
      return LANAdvertiser.Endpoint(port: port, loopbackOnly: loopback)
    }
    guard !endpoints.isEmpty else {
      logger.critical(
        "9bbsd: --advertise publishes TCP and l2cap listeners and there is none; add e.g. --listen tcp!0.0.0.0!5640 or --listen l2cap:0x0080"
      )
      server.stop()
      throw ExitCode.failure
    }
    let advertiser = LANAdvertiser(
      name: name, endpoints: endpoints,
      txt: [
        ("version", "9P2000"), ("features", features.joined(separator: ",")),
        ("board", boardName ?? name),
      ] + (boardKey.map { [("boardkey", $0.fingerprint)] } ?? [])
        // What the board's TCP listeners do when asked for the secure channel.
        + (server.configuration.secure == .off ? [] : [("secure", "noise1")]),
      logger: logger)
    do {
      try advertiser.start()
    } catch {
      logger.error("9bbsd: not advertising '\(name)': \(error)")
    }
    return advertiser
  }
}
