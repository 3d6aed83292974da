import ArgumentParser
import BBSDiscovery
import BBSIdentity
import BBSServer
import Logging
import NinePTransport

// Serving beyond this machine: warnings for an exposed board, and mDNS advertising.
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

  /// Publishes the TCP listeners over mDNS; without avahi-daemon it warns and keeps serving.
  func startAdvertising(
    _ name: String, listeners bound: [String], boardKey: BoardKey?, server: BBSServer,
    logger: Logger
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
        "9bbsd: --advertise publishes TCP listeners and there is none; add e.g. --listen tcp!0.0.0.0!5640"
      )
      server.stop()
      throw ExitCode.failure
    }
    var features = ["chat", "messaging"]
    if files != nil { features.append("file-sharing") }
    let advertiser = LANAdvertiser(
      name: name, endpoints: endpoints,
      txt: [
        ("version", "9P2000"), ("features", features.joined(separator: ",")),
        ("board", boardName ?? name),
      ] + (boardKey.map { [("boardkey", $0.fingerprint)] } ?? []), logger: logger)
    do {
      try advertiser.start()
    } catch {
      logger.error("9bbsd: not advertising '\(name)': \(error)")
    }
    return advertiser
  }
}
