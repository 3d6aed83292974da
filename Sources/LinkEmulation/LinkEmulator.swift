// LinkEmulation: a user-space link emulator between 9P clients and a server socket.
//
// `LinkEmulator` listens (seqpacket by default, also unix or tcp), and for every client it
// accepts dials the real server and forwards both directions through a `LinkDirection`, which
// imposes what the `LinkProfile` says: one-way delay (RTT/2), a byte rate (token bucket,
// optional per-SDU overhead), and an SDU size limit. Units (9P messages, or incoming packets)
// are cut into SDUs of their own and never merged, so the one-message-per-SDU rule of a 9BBS
// board holds across the emulator.
//
// Threads and blocking sockets, no event loop: one accept thread; per connection and direction
// a reader thread (receives from its source, segments, stamps each SDU with its delivery time,
// blocks when the direction holds `queueLimitBytes`) and a writer thread (sleeps until the head
// SDU is due and sends it). End of stream or an error on either side closes the connection
// once what was already accepted in that direction has been delivered.

import Foundation
import Glibc
import NinePTransport
import Synchronization

/// Forwards clients to a server through an emulated link.
///
/// ```swift
/// let emulator = try LinkEmulator(
///   listen: .seqpacket(path: "/tmp/ble.sock", sduLimit: 245),
///   server: .seqpacket(path: "/tmp/board.sock", sduLimit: 245))
/// emulator.start()
/// // mount9bbs seqpacket!/tmp/ble.sock mnt … ; emulator.statistics().since(before)
/// emulator.close()
/// ```
public final class LinkEmulator: Sendable {
  public let profile: LinkProfile
  /// Where clients connect (for tcp with port 0: the chosen port).
  public let listenAddress: TransportAddress
  public let serverAddress: TransportAddress

  private let listener: Listener
  private let shared: SharedCounters
  private let connections = Mutex<[ObjectIdentifier: EmulatedConnection]>([:])
  private let started = Atomic<Bool>(false)

  /// Binds `listen`; call `start()` to accept.
  public init(
    listen: TransportAddress, server: TransportAddress, profile: LinkProfile = .ble
  ) throws(TransportError) {
    precondition(profile.sduSize > 0, "SDU size must be positive")
    self.profile = profile
    self.serverAddress = server
    listener = try Listener(address: listen)
    listenAddress = listener.boundAddress
    shared = SharedCounters()
  }

  deinit {
    listener.close()
  }

  /// Starts the accept thread. Idempotent.
  public func start() {
    guard !started.exchange(true, ordering: .acquiringAndReleasing) else { return }
    Thread.detachNewThread { [self] in acceptLoop() }
  }

  /// Stops listening and closes every connection. Idempotent.
  public func close() {
    listener.close()
    let open = connections.withLock { table in
      defer { table.removeAll() }
      return Array(table.values)
    }
    for connection in open { connection.close() }
  }

  /// The counters so far.
  public func statistics() -> LinkStatistics {
    var snapshot = shared.snapshot()
    snapshot.connectionsOpen = connections.withLock { $0.count }
    snapshot.timestamp = monotonicNanoseconds()
    return snapshot
  }

  private func acceptLoop() {
    while true {
      let client: SocketTransport
      do {
        guard let accepted = try listener.accept() else { return }
        client = accepted
      } catch {
        return
      }
      let server: SocketTransport
      do {
        server = try SocketTransport.connect(to: serverAddress)
      } catch {
        client.close()
        continue
      }
      shared.connectionAccepted()
      let connection = EmulatedConnection(
        client: client, server: server, profile: profile, shared: shared)
      let key = ObjectIdentifier(connection)
      connections.withLock { $0[key] = connection }
      connection.start { [weak self] in
        _ = self?.connections.withLock { $0.removeValue(forKey: key) }
      }
    }
  }
}

/// Counters shared by every connection of an emulator.
final class SharedCounters: Sendable {
  private let state = Mutex(LinkStatistics())

  func snapshot() -> LinkStatistics { state.withLock { $0 } }

  func connectionAccepted() { state.withLock { $0.connectionsAccepted += 1 } }

  func charge(upstream: Bool, nanoseconds: Int64) {
    state.withLock {
      if upstream {
        $0.upstream.busyNanoseconds += nanoseconds
      } else {
        $0.downstream.busyNanoseconds += nanoseconds
      }
    }
  }

  func delivered(upstream: Bool, bytes: Int, endsUnit: Bool) {
    state.withLock {
      if upstream {
        $0.upstream.bytes += bytes
        $0.upstream.sdus += 1
        if endsUnit { $0.upstream.messages += 1 }
      } else {
        $0.downstream.bytes += bytes
        $0.downstream.sdus += 1
        if endsUnit { $0.downstream.messages += 1 }
      }
    }
  }

  func roundTrip() { state.withLock { $0.roundTrips += 1 } }
}

/// One client and its server connection: two directions and the turn tracking.
final class EmulatedConnection: Sendable {
  let client: SocketTransport
  let server: SocketTransport
  private let upstream: LinkDirection
  private let downstream: LinkDirection
  private let state = Mutex(State())

  private struct State {
    var closed = false
    /// Called once when the connection closes (given to `start`).
    var onClose: (@Sendable () -> Void)?
    /// True until the client sends after something came back: the next upstream message
    /// starts a new round trip.
    var awaitingTurn = true
  }

  init(
    client: SocketTransport, server: SocketTransport, profile: LinkProfile,
    shared: SharedCounters
  ) {
    self.client = client
    self.server = server
    upstream = LinkDirection(
      source: client, destination: server, profile: profile, isUpstream: true, shared: shared)
    downstream = LinkDirection(
      source: server, destination: client, profile: profile, isUpstream: false, shared: shared)
    upstream.connection = self
    downstream.connection = self
  }

  /// Starts both directions; `onClose` is called once when the connection closes.
  func start(onClose: @escaping @Sendable () -> Void) {
    state.withLock { $0.onClose = onClose }
    upstream.start()
    downstream.start()
  }

  /// An upstream unit was accepted: counts a round trip if the client had been answered.
  func upstreamUnitAccepted(_ shared: SharedCounters) {
    let newTurn = state.withLock { state -> Bool in
      defer { state.awaitingTurn = false }
      return state.awaitingTurn
    }
    if newTurn { shared.roundTrip() }
  }

  func downstreamUnitDelivered() {
    state.withLock { $0.awaitingTurn = true }
  }

  func close() {
    let first = state.withLock { state -> (@Sendable () -> Void)?? in
      guard !state.closed else { return nil }
      state.closed = true
      defer { state.onClose = nil }
      return .some(state.onClose)
    }
    guard let onClose = first else { return }
    upstream.stop()
    downstream.stop()
    client.close()
    server.close()
    onClose?()
  }
}

/// One direction of a connection: reader thread → timed queue → writer thread.
///
/// `@unchecked Sendable`: the queue's vars are touched only inside `monitor` (a Monitor, not
/// a Mutex: the writer waits on its condition until an item is due); `connection` is set
/// once by EmulatedConnection's init, before `start()`.
final class LinkDirection: @unchecked Sendable {
  private let source: SocketTransport
  private let destination: SocketTransport
  private let profile: LinkProfile
  private let isUpstream: Bool
  private let shared: SharedCounters
  weak var connection: EmulatedConnection?

  private struct Item {
    /// nil marks the end of the stream.
    var bytes: [UInt8]?
    var due: Int64
    var endsUnit: Bool
  }

  // Guarded by `monitor`.
  private let monitor = Monitor()
  private var queue: [Item] = []
  private var head = 0
  private var queuedBytes = 0
  private var stopped = false
  /// Token bucket as a theoretical arrival time (GCRA): when the link has sent everything
  /// accepted so far.
  private var linkFreeAt: Int64 = 0

  init(
    source: SocketTransport, destination: SocketTransport, profile: LinkProfile,
    isUpstream: Bool, shared: SharedCounters
  ) {
    self.source = source
    self.destination = destination
    self.profile = profile
    self.isUpstream = isUpstream
    self.shared = shared
  }

  func start() {
    Thread.detachNewThread { [self] in readLoop() }
    Thread.detachNewThread { [self] in writeLoop() }
  }

  func stop() {
    monitor.withLock {
      stopped = true
      monitor.broadcast()
    }
  }

  // MARK: Reader

  private func readLoop() {
    var assembler = FrameAssembler()
    while true {
      let chunk: [UInt8]?
      do {
        chunk = try source.receiveRaw(maxBytes: 65536)
      } catch {
        chunk = nil
      }
      guard let chunk else {
        enqueueEnd()
        return
      }
      switch profile.framing {
      case .packets:
        guard enqueue(unit: chunk) else { return }
      case .ninePMessages:
        assembler.append(chunk)
        do {
          while let message = try assembler.nextMessage(limit: profile.maxMessageSize) {
            guard enqueue(unit: message) else { return }
          }
        } catch {
          enqueueEnd()
          return
        }
      }
    }
  }

  /// Segments a unit and schedules its SDUs; false once the direction has stopped.
  private func enqueue(unit: [UInt8]) -> Bool {
    if isUpstream { connection?.upstreamUnitAccepted(shared) }
    let segments = SDUSegmenter.segments(of: unit, limit: profile.sduSize)
    let burst = profile.transmissionNanoseconds(payload: profile.burstBytes - profile.sduOverhead)
    let delay = profile.oneWayNanoseconds
    for (index, segment) in segments.enumerated() {
      let ok = monitor.withLock { () -> Bool in
        while !stopped && queuedBytes >= profile.queueLimitBytes { monitor.wait(until: nil) }
        if stopped { return false }
        let now = monotonicNanoseconds()
        let cost = profile.transmissionNanoseconds(payload: segment.count)
        linkFreeAt = max(linkFreeAt, now - max(0, burst)) + cost
        let due = max(now, linkFreeAt) + delay
        queue.append(Item(bytes: Array(segment), due: due, endsUnit: index == segments.count - 1))
        queuedBytes += segment.count
        monitor.broadcast()
        shared.charge(upstream: isUpstream, nanoseconds: cost)
        return true
      }
      if !ok { return false }
    }
    return true
  }

  private func enqueueEnd() {
    monitor.withLock {
      let now = monotonicNanoseconds()
      queue.append(
        Item(bytes: nil, due: max(now, linkFreeAt) + profile.oneWayNanoseconds, endsUnit: true))
      monitor.broadcast()
    }
  }

  // MARK: Writer

  private func writeLoop() {
    while true {
      let next = monitor.withLock { () -> Item? in
        while true {
          if stopped { return nil }
          if head < queue.count {
            let item = queue[head]
            let now = monotonicNanoseconds()
            if item.due <= now {
              head += 1
              if head > 1024 && head * 2 > queue.count {
                queue.removeFirst(head)
                head = 0
              }
              queuedBytes -= item.bytes?.count ?? 0
              monitor.broadcast()
              return item
            }
            monitor.wait(until: item.due)
          } else {
            monitor.wait(until: nil)
          }
        }
      }
      guard let next, let bytes = next.bytes else {
        connection?.close()
        return
      }
      do {
        try destination.sendRaw(bytes)
      } catch {
        connection?.close()
        return
      }
      shared.delivered(upstream: isUpstream, bytes: bytes.count, endsUnit: next.endsUnit)
      if !isUpstream && next.endsUnit { connection?.downstreamUnitDelivered() }
    }
  }
}
