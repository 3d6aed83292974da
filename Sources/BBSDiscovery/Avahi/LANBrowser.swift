import CAvahi
import Foundation
import Logging
import NinePTransport
import Synchronization

/// A 9P server advertised on the LAN over mDNS/DNS-SD, resolved to an address.
public struct LANService: Sendable, Hashable {
  /// The service instance name, e.g. `THE_GRID`.
  public var name: String
  /// The service type it was found under (`_9p._tcp` or `_9pfs._tcp`).
  public var type: String
  /// The DNS-SD domain, usually `local`.
  public var domain: String
  /// The host name, e.g. `box.local`.
  public var host: String
  /// The address it resolved to (IPv4 when there is one).
  public var address: String
  /// The TCP port.
  public var port: UInt16
  /// The TXT record as `key=value` pairs (a bare key has an empty value).
  public var txt: [String: String]

  /// A service with the given fields.
  public init(
    name: String, type: String, domain: String = "local", host: String, address: String,
    port: UInt16, txt: [String: String] = [:]
  ) {
    self.name = name
    self.type = type
    self.domain = domain
    self.host = host
    self.address = address
    self.port = port
    self.txt = txt
  }

  /// The features from the TXT `features=` value.
  public var features: [String] { NinePInformation.features(in: txt["features"]) }

  /// Where to dial it.
  public var dialAddress: TransportAddress { .tcp(host: address, port: port) }
}

/// What a LAN browse reports, in the order it happens.
public enum LANScanEvent: Sendable {
  /// A service appeared and was resolved.
  case found(LANService)
  /// A service that was found is no longer advertised (its server went away).
  case removed(name: String)
  /// A service appeared but could not be resolved.
  case unresolved(name: String, DiscoveryError)
}

/// Finds 9P servers on the LAN by browsing `_9p._tcp` and `_9pfs._tcp` through avahi-daemon.
///
/// ``browse(duration:onEvent:)`` runs on the caller's thread with an `AvahiSimplePoll`; each
/// service instance is resolved once (IPv4 first) and reported once, however many types and
/// interfaces it appears on, and reported removed when its last instance goes.
public final class LANBrowser: Sendable {
  /// The DNS-SD service types browsed (and published by `9bbsd --advertise`).
  public static let serviceTypes = ["_9p._tcp", "_9pfs._tcp"]

  private let cancelled = Atomic<Bool>(false)
  private let logger: Logger

  /// A browser that logs to `logger`.
  public init(logger: Logger = Logger(label: "mount9bbs.discovery")) {
    self.logger = logger
  }

  /// Ends a running browse soon (from any thread, or from `onEvent`).
  public func cancel() {
    cancelled.store(true, ordering: .relaxed)
  }

  /// Browses for `duration`, calling `onEvent` on this thread.
  /// - Returns: how many services were found.
  /// - Throws: ``DiscoveryError/noAvahiDaemon(reason:)`` when avahi-daemon is not reachable,
  ///   ``DiscoveryError/avahiFailed(operation:reason:)`` when it fails during the browse.
  @discardableResult
  public func browse(duration: Duration, onEvent: (LANScanEvent) -> Void) throws(DiscoveryError)
    -> Int
  {
    let session = try AvahiBrowse(logger: logger)
    defer { session.close() }
    let clock = ContinuousClock()
    let end = clock.now.advanced(by: duration)
    var found = 0
    while clock.now < end && !cancelled.load(ordering: .relaxed) {
      try session.iterate(milliseconds: 100)
      for event in session.takeEvents() {
        if case .found = event { found += 1 }
        onEvent(event)
      }
    }
    return found
  }
}

// MARK: - One browse

/// The Avahi objects and state of one browse; every callback runs inside `iterate`.
private final class AvahiBrowse {
  struct Instance: Hashable {
    var interface: AvahiIfIndex
    var proto: AvahiProtocol
    var type: String
    var domain: String
  }

  let logger: Logger
  var poll: OpaquePointer?
  var client: OpaquePointer?
  var browsers: [OpaquePointer] = []
  var instances: [String: Set<Instance>] = [:]
  var reported: Set<String> = []
  var resolving: Set<String> = []
  var events: [LANScanEvent] = []
  var failure: DiscoveryError?

  init(logger: Logger) throws(DiscoveryError) {
    self.logger = logger
    guard let poll = avahi_simple_poll_new() else {
      throw .avahiFailed(operation: "creating a poll loop", reason: "out of memory")
    }
    self.poll = poll
    var error: Int32 = 0
    let context = Unmanaged.passUnretained(self).toOpaque()
    client = avahi_client_new(
      avahi_simple_poll_get(poll), AvahiClientFlags(0),
      { _, state, userdata in
        guard let userdata, state == AVAHI_CLIENT_FAILURE else { return }
        let browse = Unmanaged<AvahiBrowse>.fromOpaque(userdata).takeUnretainedValue()
        browse.failure = .avahiFailed(
          operation: "the connection to avahi-daemon", reason: "the daemon went away")
      }, context, &error)
    guard let client else {
      close()
      if [AVAHI_ERR_NO_DAEMON, AVAHI_ERR_DISCONNECTED, AVAHI_ERR_DBUS_ERROR].contains(Int(error)) {
        throw .noAvahiDaemon(reason: avahiText(error))
      }
      throw .avahiFailed(operation: "connecting to avahi-daemon", reason: avahiText(error))
    }
    for type in LANBrowser.serviceTypes {
      guard
        let browser = avahi_service_browser_new(
          client, AvahiIfIndex(AVAHI_IF_UNSPEC), AvahiProtocol(AVAHI_PROTO_UNSPEC), type, nil,
          AvahiLookupFlags(0),
          { _, interface, proto, event, name, type, domain, _, userdata in
            guard let userdata else { return }
            Unmanaged<AvahiBrowse>.fromOpaque(userdata).takeUnretainedValue().browsed(
              event: event,
              instance: Instance(
                interface: interface, proto: proto, type: type.map { String(cString: $0) } ?? "",
                domain: domain.map { String(cString: $0) } ?? "local"),
              name: name.map { String(cString: $0) })
          }, context)
      else {
        let code = avahi_client_errno(client)
        close()
        throw .avahiFailed(operation: "browsing \(type)", reason: avahiText(code))
      }
      browsers.append(browser)
    }
  }

  func close() {
    for browser in browsers { avahi_service_browser_free(browser) }
    browsers.removeAll()
    if let client { avahi_client_free(client) }
    client = nil
    if let poll { avahi_simple_poll_free(poll) }
    poll = nil
  }

  func iterate(milliseconds: Int32) throws(DiscoveryError) {
    guard let poll else { return }
    let rc = avahi_simple_poll_iterate(poll, milliseconds)
    if let failure { throw failure }
    if rc < 0 && errno != EINTR {
      throw .avahiFailed(operation: "polling", reason: String(cString: strerror(errno)))
    }
  }

  func takeEvents() -> [LANScanEvent] {
    defer { events.removeAll() }
    return events
  }

  // MARK: Callbacks

  func browsed(event: AvahiBrowserEvent, instance: Instance, name: String?) {
    switch event {
    case AVAHI_BROWSER_NEW:
      guard let name else { return }
      logger.debug("mDNS: new \(name) (\(instance.type)) on interface \(instance.interface)")
      instances[name, default: []].insert(instance)
      if !reported.contains(name) && !resolving.contains(name) {
        resolve(name: name, instance: instance, addressProtocol: AvahiProtocol(AVAHI_PROTO_INET))
      }
    case AVAHI_BROWSER_REMOVE:
      guard let name else { return }
      logger.debug("mDNS: removed \(name) (\(instance.type))")
      instances[name]?.remove(instance)
      if instances[name]?.isEmpty ?? true {
        instances[name] = nil
        if reported.remove(name) != nil { events.append(.removed(name: name)) }
      }
    case AVAHI_BROWSER_FAILURE:
      let code = client.map { avahi_client_errno($0) } ?? 0
      failure = .avahiFailed(operation: "browsing \(instance.type)", reason: avahiText(code))
    default:
      break
    }
  }

  private func resolve(name: String, instance: Instance, addressProtocol: AvahiProtocol) {
    guard let client else { return }
    resolving.insert(name)
    let context = Unmanaged.passUnretained(self).toOpaque()
    let resolver = avahi_service_resolver_new(
      client, instance.interface, instance.proto, name, instance.type, instance.domain,
      addressProtocol, AvahiLookupFlags(0),
      {
        resolver, interface, proto, event, name, type, domain, host, address, port, txt, _,
        userdata in
        guard let userdata else { return }
        let browse = Unmanaged<AvahiBrowse>.fromOpaque(userdata).takeUnretainedValue()
        let instance = Instance(
          interface: interface, proto: proto, type: type.map { String(cString: $0) } ?? "",
          domain: domain.map { String(cString: $0) } ?? "local")
        let serviceName = name.map { String(cString: $0) } ?? ""
        if event == AVAHI_RESOLVER_FOUND, let address {
          var buffer = [CChar](repeating: 0, count: Int(AVAHI_ADDRESS_STR_MAX))
          avahi_address_snprint(&buffer, buffer.count, address)
          let service = LANService(
            name: serviceName, type: instance.type, domain: instance.domain,
            host: host.map { String(cString: $0) } ?? "",
            address: String(
              decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self),
            port: port, txt: txtRecord(txt))
          browse.resolved(service)
        } else {
          let code = browse.client.map { avahi_client_errno($0) } ?? 0
          browse.resolveFailed(
            name: serviceName, instance: instance,
            inet: address == nil || address?.pointee.proto == AvahiProtocol(AVAHI_PROTO_INET),
            reason: avahiText(code))
        }
        if let resolver { avahi_service_resolver_free(resolver) }
      }, context)
    if resolver == nil {
      resolving.remove(name)
      let code = avahi_client_errno(client)
      events.append(
        .unresolved(name: name, .lanResolveFailed(service: name, reason: avahiText(code))))
    }
  }

  private func resolved(_ service: LANService) {
    resolving.remove(service.name)
    // A service that went while it was being resolved is not reported.
    guard instances[service.name] != nil, !reported.contains(service.name) else { return }
    reported.insert(service.name)
    events.append(.found(service))
  }

  private var retried: Set<String> = []

  private func resolveFailed(name: String, instance: Instance, inet: Bool, reason: String) {
    resolving.remove(name)
    guard instances[name] != nil else { return }
    // IPv4 first; a host with only IPv6 addresses gets a second try with any protocol.
    if !retried.contains(name) {
      retried.insert(name)
      resolve(name: name, instance: instance, addressProtocol: AvahiProtocol(AVAHI_PROTO_UNSPEC))
      return
    }
    events.append(.unresolved(name: name, .lanResolveFailed(service: name, reason: reason)))
  }
}

/// A TXT record as a dictionary; bare keys map to "".
private func txtRecord(_ list: UnsafeMutablePointer<AvahiStringList>?) -> [String: String] {
  var result: [String: String] = [:]
  var item = list
  while let current = item {
    let size = Int(avahi_string_list_get_size(current))
    if let text = avahi_string_list_get_text(current) {
      let entry = String(decoding: UnsafeBufferPointer(start: text, count: size), as: UTF8.self)
      let parts = entry.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
      if let key = parts.first, !key.isEmpty {
        result[String(key).lowercased()] = parts.count > 1 ? String(parts[1]) : ""
      }
    }
    item = avahi_string_list_get_next(current)
  }
  return result
}

/// Avahi's text for an error code.
func avahiText(_ code: Int32) -> String {
  avahi_strerror(code).map { String(cString: $0) } ?? "error \(code)"
}
