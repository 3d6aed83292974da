import Foundation
import NinePTransport

/// A man in the middle for fault-injection tests: forwards every connection it accepts to
/// the real server, and can cut the connections (also in the middle of a message), stall
/// them, delay them, or refuse new ones, as a radio link going out of range would.
public final class FaultProxy: @unchecked Sendable {
  public let listenAddress: TransportAddress
  public let serverAddress: TransportAddress
  private let listener: Listener
  private let lock = NSLock()
  private var pairs: [(SocketTransport, SocketTransport)] = []
  private var refusing = false
  private var stalled = false
  private var delay: TimeInterval = 0
  private var replyDelay: TimeInterval = 0
  private var cutNextMessage = false
  private let stallCondition = NSCondition()
  /// Connections accepted so far.
  public private(set) var acceptedCount = 0
  private var tapped: [UInt8] = []

  /// Every byte forwarded so far, either way, in the order forwarded: what a tap on the path
  /// sees.
  public var forwardedBytes: [UInt8] {
    lock.lock()
    defer { lock.unlock() }
    return tapped
  }

  /// Listens on `listen` (a unix path is simplest) and forwards to `server`.
  public init(listen: TransportAddress, server: TransportAddress) throws {
    listenAddress = listen
    serverAddress = server
    listener = try Listener(address: listen)
    Thread.detachNewThread { [self] in acceptLoop() }
  }

  /// Closes every current connection at once.
  public func cut() {
    lock.lock()
    let all = pairs
    pairs.removeAll()
    lock.unlock()
    for (a, b) in all {
      a.close()
      b.close()
    }
  }

  /// Cuts the connections after forwarding part of the next chunk of bytes either way.
  public func cutMidMessage() {
    lock.lock()
    cutNextMessage = true
    lock.unlock()
  }

  /// While refusing, new connections are accepted and closed at once (the server is "gone").
  public func setRefusing(_ value: Bool) {
    lock.lock()
    refusing = value
    lock.unlock()
    if value { cut() }
  }

  /// While stalled, bytes are held, not forwarded (a link that stops answering).
  public func setStalled(_ value: Bool) {
    stallCondition.lock()
    stalled = value
    stallCondition.broadcast()
    stallCondition.unlock()
  }

  /// Holds every chunk this long before forwarding it.
  public func setDelay(_ seconds: TimeInterval) {
    lock.lock()
    delay = seconds
    lock.unlock()
  }

  /// Holds every chunk from the server this long more before forwarding it: answers come
  /// late while requests reach the server at once.
  public func setReplyDelay(_ seconds: TimeInterval) {
    lock.lock()
    replyDelay = seconds
    lock.unlock()
  }

  public func stop() {
    listener.close()
    cut()
    setStalled(false)
  }

  private func acceptLoop() {
    while let client = try? listener.accept() {
      lock.lock()
      acceptedCount += 1
      let refuse = refusing
      lock.unlock()
      if refuse {
        client.close()
        continue
      }
      guard let server = try? SocketTransport.connect(to: serverAddress) else {
        client.close()
        continue
      }
      lock.lock()
      pairs.append((client, server))
      lock.unlock()
      Thread.detachNewThread { [self] in pump(from: client, to: server, replies: false) }
      Thread.detachNewThread { [self] in pump(from: server, to: client, replies: true) }
    }
  }

  private func pump(from source: SocketTransport, to destination: SocketTransport, replies: Bool) {
    defer {
      source.close()
      destination.close()
    }
    while let chunk = try? source.receiveRaw(maxBytes: 65536) {
      stallCondition.lock()
      while stalled { stallCondition.wait() }
      stallCondition.unlock()
      lock.lock()
      let wait = delay + (replies ? replyDelay : 0)
      let cutting = cutNextMessage
      if cutting { cutNextMessage = false }
      tapped += chunk
      lock.unlock()
      if wait > 0 { Thread.sleep(forTimeInterval: wait) }
      if cutting {
        try? destination.sendRaw(Array(chunk.prefix(max(1, chunk.count / 2))))
        cut()
        return
      }
      do {
        try destination.sendRaw(chunk)
      } catch {
        return
      }
    }
  }
}
