import CAvahi
import Foundation
import Logging
import Synchronization

/// Publishes a 9P server on the LAN as `_9p._tcp` and `_9pfs._tcp` through avahi-daemon.
///
/// Everything Avahi calls back runs on Avahi's own poll thread (`AvahiThreadedPoll`); the
/// Avahi objects are touched only there or under the poll's lock in ``start()`` and
/// ``stop()``. When the name is taken on the network the service is renamed (`NAME #2`, …).
/// When avahi-daemon is not running the advertiser waits for it and publishes once it starts
/// (a warning says so); it never blocks the caller.
public final class LANAdvertiser: @unchecked Sendable {
  // @unchecked: the vars below `status` are touched by start() before Avahi's poll thread
  // runs, by stop() after it stopped, and otherwise only on that thread; `status` is a Mutex.
  /// Where one TCP listener can be reached: the port to publish, and whether it is local only.
  public struct Endpoint: Sendable, Hashable {
    /// The listening port.
    public var port: UInt16
    /// Whether the listener accepts only loopback connections (then only `lo` is told).
    public var loopbackOnly: Bool

    /// The endpoint of a listener on `port`.
    public init(port: UInt16, loopbackOnly: Bool) {
      self.port = port
      self.loopbackOnly = loopbackOnly
    }
  }

  /// Where the advertiser stands, for logs and tests.
  public enum State: Sendable, Equatable {
    /// Not started, or stopped.
    case idle
    /// Waiting for avahi-daemon.
    case waitingForDaemon
    /// Registering the services.
    case registering
    /// Published under ``LANAdvertiser/name``.
    case published
    /// Failed; the text says why.
    case failed(String)
  }

  private let requestedName: String
  private let endpoints: [Endpoint]
  private let txt: [(String, String)]
  private let logger: Logger
  private let status: Mutex<(name: String, state: State)>

  // Owned by Avahi's thread once started.
  private var poll: OpaquePointer?
  private var client: OpaquePointer?
  private var group: OpaquePointer?
  private var currentName: String
  private var warnedNoDaemon = false

  /// An advertiser for `endpoints` under `name` with TXT `key=value` records, in order.
  public init(name: String, endpoints: [Endpoint], txt: [(String, String)], logger: Logger) {
    requestedName = name
    self.endpoints = endpoints
    self.txt = txt
    self.logger = logger
    currentName = name
    status = Mutex((name, .idle))
  }

  /// The name currently advertised (differs from the requested one after a collision).
  public var name: String { status.withLock { $0.name } }

  /// Where the advertiser stands.
  public var state: State { status.withLock { $0.state } }

  /// Starts publishing in the background.
  /// - Throws: ``DiscoveryError/noAvahiDaemon(reason:)`` when Avahi cannot even be waited for
  ///   (no D-Bus system bus), ``DiscoveryError/avahiFailed(operation:reason:)`` otherwise.
  public func start() throws(DiscoveryError) {
    guard let poll = avahi_threaded_poll_new() else {
      throw .avahiFailed(operation: "creating a poll thread", reason: "out of memory")
    }
    self.poll = poll
    var error: Int32 = 0
    // The state callback runs inside avahi_client_new, before it returns.
    let made = avahi_client_new(
      avahi_threaded_poll_get(poll), AVAHI_CLIENT_NO_FAIL,
      { client, state, userdata in
        guard let userdata else { return }
        Unmanaged<LANAdvertiser>.fromOpaque(userdata).takeUnretainedValue().clientChanged(
          client, state)
      }, Unmanaged.passUnretained(self).toOpaque(), &error)
    guard let made else {
      avahi_threaded_poll_free(poll)
      self.poll = nil
      throw .noAvahiDaemon(reason: avahiText(error))
    }
    client = made
    guard avahi_threaded_poll_start(poll) >= 0 else {
      avahi_client_free(made)
      avahi_threaded_poll_free(poll)
      client = nil
      self.poll = nil
      throw .avahiFailed(operation: "starting the poll thread", reason: "pthread_create failed")
    }
  }

  /// Withdraws the services and stops Avahi's thread. Idempotent.
  public func stop() {
    guard let poll else { return }
    avahi_threaded_poll_stop(poll)
    if let client { avahi_client_free(client) }
    avahi_threaded_poll_free(poll)
    client = nil
    group = nil
    self.poll = nil
    setState(.idle)
  }

  deinit {
    stop()
  }

  private func setState(_ state: State) {
    status.withLock { $0 = (currentName, state) }
  }

  // MARK: Avahi's thread

  private func clientChanged(_ client: OpaquePointer?, _ state: AvahiClientState) {
    guard let client else { return }
    switch state {
    case AVAHI_CLIENT_S_RUNNING:
      warnedNoDaemon = false
      publish(client)
    case AVAHI_CLIENT_S_COLLISION, AVAHI_CLIENT_S_REGISTERING:
      // The host name is being (re)registered: withdraw until it settles.
      if let group { avahi_entry_group_reset(group) }
      setState(.registering)
    case AVAHI_CLIENT_CONNECTING:
      // The daemon is gone or not started yet; its entry groups went with it.
      group = nil
      setState(.waitingForDaemon)
      if !warnedNoDaemon {
        warnedNoDaemon = true
        logger.warning(
          "no Avahi daemon is running, so '\(currentName)' is not advertised yet; it will be once avahi-daemon starts (sudo systemctl start avahi-daemon)"
        )
      }
    case AVAHI_CLIENT_FAILURE:
      let reason = avahiText(avahi_client_errno(client))
      setState(.failed(reason))
      logger.error("advertising '\(currentName)' failed: Avahi: \(reason)")
    default:
      break
    }
  }

  private func publish(_ client: OpaquePointer) {
    if group == nil {
      group = avahi_entry_group_new(
        client,
        { group, state, userdata in
          guard let userdata else { return }
          Unmanaged<LANAdvertiser>.fromOpaque(userdata).takeUnretainedValue().groupChanged(
            group, state)
        }, Unmanaged.passUnretained(self).toOpaque())
    }
    guard let group else {
      let reason = avahiText(avahi_client_errno(client))
      setState(.failed(reason))
      logger.error("cannot advertise '\(currentName)': Avahi: \(reason)")
      return
    }
    guard avahi_entry_group_is_empty(group) != 0 else { return }
    setState(.registering)
    var records: UnsafeMutablePointer<AvahiStringList>?
    for (key, value) in txt.reversed() {
      records = avahi_string_list_add(records, "\(key)=\(value)")
    }
    defer { avahi_string_list_free(records) }
    let loopback = AvahiIfIndex(if_nametoindex("lo"))
    for (index, endpoint) in endpoints.enumerated() {
      let name = index == 0 ? currentName : "\(currentName) (port \(endpoint.port))"
      let interface =
        endpoint.loopbackOnly && loopback > 0 ? loopback : AvahiIfIndex(AVAHI_IF_UNSPEC)
      for type in LANBrowser.serviceTypes {
        let rc = avahi_entry_group_add_service_strlst(
          group, interface, AvahiProtocol(AVAHI_PROTO_UNSPEC), AvahiPublishFlags(0), name, type,
          nil, nil, endpoint.port, records)
        if rc == AVAHI_ERR_COLLISION {
          rename(client)
          return
        }
        if rc < 0 {
          setState(.failed(avahiText(rc)))
          logger.error("cannot advertise '\(name)' as \(type): Avahi: \(avahiText(rc))")
          return
        }
      }
    }
    let rc = avahi_entry_group_commit(group)
    if rc < 0 {
      setState(.failed(avahiText(rc)))
      logger.error("cannot advertise '\(currentName)': Avahi: \(avahiText(rc))")
    }
  }

  private func groupChanged(_ group: OpaquePointer?, _ state: AvahiEntryGroupState) {
    switch state {
    case AVAHI_ENTRY_GROUP_ESTABLISHED:
      setState(.published)
      let ports = endpoints.map { String($0.port) }.joined(separator: ", ")
      logger.notice(
        "advertising '\(currentName)' as \(LANBrowser.serviceTypes.joined(separator: " and ")) on port \(ports)"
      )
    case AVAHI_ENTRY_GROUP_COLLISION:
      guard let group, let client = avahi_entry_group_get_client(group) else { return }
      rename(client)
    case AVAHI_ENTRY_GROUP_FAILURE:
      let reason = group.flatMap { avahi_entry_group_get_client($0) }.map {
        avahiText(avahi_client_errno($0))
      }
      setState(.failed(reason ?? "unknown"))
      logger.error("advertising '\(currentName)' failed: Avahi: \(reason ?? "unknown")")
    default:
      break
    }
  }

  /// Picks Avahi's alternative name (`NAME #2`, …) and publishes again.
  private func rename(_ client: OpaquePointer) {
    let old = currentName
    if let alternative = avahi_alternative_service_name(currentName) {
      currentName = String(cString: alternative)
      avahi_free(alternative)
    } else {
      currentName = requestedName + " #2"
    }
    logger.notice("the name '\(old)' is taken on the network; advertising as '\(currentName)'")
    if let group { avahi_entry_group_reset(group) }
    publish(client)
  }
}
