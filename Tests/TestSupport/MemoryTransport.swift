import Foundation
import NinePProtocol
import NinePTransport

/// One end of an in-memory, message-preserving connection, for scripted-peer tests.
public final class MemoryTransport: MessageTransport, @unchecked Sendable {
  public let address: TransportAddress
  public let sendSDULimit: Int? = nil
  private let condition = NSCondition()
  private var inbox: [[UInt8]] = []
  private var closed = false
  fileprivate weak var peer: MemoryTransport?

  init(name: String) { address = .unix(path: name) }

  /// A connected pair: what one sends the other receives.
  public static func pair() -> (client: MemoryTransport, server: MemoryTransport) {
    let client = MemoryTransport(name: "memory-client")
    let server = MemoryTransport(name: "memory-server")
    client.peer = server
    server.peer = client
    return (client, server)
  }

  public func send(_ message: [UInt8]) throws(TransportError) {
    guard let peer, !isClosed else { throw .closed }
    peer.deliver(message)
  }

  /// Never waits: the peer's inbox has no bound.
  public func sendWithoutWaiting(header: [UInt8], payload: ArraySlice<UInt8>)
    throws(TransportError) -> Bool
  {
    try send(header + payload)
    return false
  }

  public func flushPending() throws(TransportError) {}

  fileprivate func deliver(_ message: [UInt8]) {
    condition.lock()
    inbox.append(message)
    condition.signal()
    condition.unlock()
  }

  private var isClosed: Bool {
    condition.lock()
    defer { condition.unlock() }
    return closed
  }

  public func receive(limit: Int) throws(TransportError) -> [UInt8]? {
    condition.lock()
    defer { condition.unlock() }
    while inbox.isEmpty && !closed { condition.wait() }
    if inbox.isEmpty { return nil }
    let message = inbox.removeFirst()
    if message.count > limit { throw .frameTooLarge(size: UInt32(message.count), limit: limit) }
    return message
  }

  /// Like `receive` but gives up after `timeout` (returns nil).
  public func receive(timeout: TimeInterval) -> [UInt8]? {
    condition.lock()
    defer { condition.unlock() }
    let deadline = Date(timeIntervalSinceNow: timeout)
    while inbox.isEmpty && !closed {
      if !condition.wait(until: deadline) { return nil }
    }
    return inbox.isEmpty ? nil : inbox.removeFirst()
  }

  public func close() {
    condition.lock()
    closed = true
    condition.broadcast()
    condition.unlock()
    peer?.peerClosed()
  }

  fileprivate func peerClosed() {
    condition.lock()
    closed = true
    condition.broadcast()
    condition.unlock()
  }
}

/// A scripted 9P peer on the server end of a ``MemoryTransport`` pair: answers Tversion and
/// Tattach itself and hands every other request to a handler that may reply at once, later,
/// or never.
public final class ScriptedServer: @unchecked Sendable {
  public let transport: MemoryTransport
  public let msize: UInt32
  private let lock = NSLock()
  private var log: [(tag: Tag, message: Message)] = []
  private var handler: @Sendable (ScriptedServer, Tag, Message) -> Void
  private var thread: Thread?

  public init(
    transport: MemoryTransport, msize: UInt32 = 8192,
    handler: @escaping @Sendable (ScriptedServer, Tag, Message) -> Void
  ) {
    self.transport = transport
    self.msize = msize
    self.handler = handler
    let thread = Thread { [self] in run() }
    self.thread = thread
    thread.start()
  }

  /// Every request received so far, in order (Tversion and Tattach included).
  public var requests: [(tag: Tag, message: Message)] {
    lock.lock()
    defer { lock.unlock() }
    return log
  }

  public func reply(_ tag: Tag, _ message: Message) {
    try? transport.send(message.encoded(tag: tag))
  }

  public func sendRaw(_ bytes: [UInt8]) { try? transport.send(bytes) }

  private func run() {
    while let frame = try? transport.receive(limit: 1 << 24) {
      guard let (tag, message) = try? Message.decode(frame, limits: .unbounded) else { continue }
      lock.lock()
      log.append((tag, message))
      lock.unlock()
      switch message {
      case .tversion(let size, _):
        reply(tag, .rversion(msize: min(size, msize), version: "9P2000"))
      case .tattach:
        reply(tag, .rattach(qid: Qid(type: .directory, path: 1)))
      default:
        handler(self, tag, message)
      }
    }
  }
}
