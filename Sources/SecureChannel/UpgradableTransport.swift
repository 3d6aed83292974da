import NinePTransport
import Synchronization

/// A board's connection that may turn secure: plain until ``upgrade(to:)``, then everything
/// goes through the ``SecureTransport``. The board wraps each stream connection in one, so the
/// code that serves it holds one transport whichever way the client went.
///
/// Plain, a file's bytes still go out with `sendfile(2)`; secure, they are read and encrypted.
public final class UpgradableTransport: FileRegionSending {
  public let plain: SocketTransport
  private let secure = Mutex<SecureTransport?>(nil)

  public init(_ plain: SocketTransport) { self.plain = plain }

  /// From now on, sends and receives go through `channel` (made over ``plain``).
  public func upgrade(to channel: SecureTransport) { secure.withLock { $0 = channel } }

  /// Whether ``upgrade(to:)`` was called.
  public var isSecure: Bool { secure.withLock { $0 != nil } }

  private var current: any MessageTransport { secure.withLock { $0 } ?? plain }

  public var address: TransportAddress { plain.address }
  public var sendSDULimit: Int? { plain.sendSDULimit }
  public var security: ChannelSecurity? { secure.withLock { $0?.security } }

  public func send(_ message: [UInt8]) throws(TransportError) { try current.send(message) }

  public func send(header: [UInt8], file: FileRegion) throws(TransportError) {
    guard let channel = secure.withLock({ $0 }) else {
      return try plain.send(header: header, file: file)
    }
    try channel.send(header: header, file: file)
  }

  public func sendWithoutWaiting(header: [UInt8], payload: ArraySlice<UInt8>)
    throws(TransportError) -> Bool
  {
    try current.sendWithoutWaiting(header: header, payload: payload)
  }

  public func flushPending() throws(TransportError) { try current.flushPending() }

  public func receive(limit: Int) throws(TransportError) -> [UInt8]? {
    try current.receive(limit: limit)
  }

  public func close() { plain.close() }
}
