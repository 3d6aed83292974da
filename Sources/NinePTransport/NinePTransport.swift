// NinePTransport: dial strings, sockets, 9P message framing and SDU segmentation.
//
// Moving parts:
// - `TransportAddress` parses dial strings (tcp, unix, seqpacket, l2cap, fd) and prints them.
// - `dial(_:options:)` connects (getaddrinfo + non-blocking connect bounded by poll; BlueZ
//   L2CAP set-up in L2CAP.swift) and returns a `SocketTransport`. `Listener` is the server side.
// - `SocketTransport` does blocking I/O on the caller's thread; there are no threads of its
//   own. The client runs one reader thread in `receive` and any number of threads in `send`
//   (a lock keeps whole messages together). Every wait is a `poll()` on the descriptor plus an
//   `IOGate` wake-up pipe, so `close()` from any thread wakes blocked readers and writers, and
//   the gate closes the descriptors only after the last of them has left.
// - Zero-copy paths: a server sends file data with `sendfile(2)` (FileRegion.swift); a client
//   receiving on a stream socket may take a large Rread's data in a pipe (`splice(2)`,
//   Splice.swift) for FUSE to splice on, when its `SpliceRule` accepts the tag.
// - Pure pieces: `FrameAssembler` cuts bytes/SDUs into messages by the 4-byte size prefix;
//   `SDUSegmenter` cuts a message into SDUs of at most the peer's MTU, one message per SDU chain.
// - Errors are `TransportError`, typed-thrown, each with a sentence a user can act on.

import Logging

let logger = Logger(label: "mount9bbs.transport")

/// A connection that carries whole 9P messages.
public protocol MessageTransport: AnyObject, Sendable {
  /// Where this transport leads.
  var address: TransportAddress { get }
  /// Largest SDU the peer accepts on packet transports (seqpacket: from the dial string;
  /// l2cap: BT_SNDMTU read from the socket); nil for byte streams.
  var sendSDULimit: Int? { get }
  /// Sends one complete, size-prefixed 9P message. On packet transports splits it into SDUs of
  /// at most `sendSDULimit` bytes and never puts bytes of two messages in one SDU. Thread-safe:
  /// concurrent callers are serialised so messages never interleave.
  func send(_ message: [UInt8]) throws(TransportError)
  /// Sends one message (`header`, size prefix included, then `payload`) without ever waiting
  /// for the peer: what the connection does not take now is kept, in order, for
  /// ``flushPending()``. For a client whose reader thread sends (see
  /// SocketTransport+NonWaiting.swift). Not to be mixed with `send(_:)` at the same time.
  /// - Returns: true when bytes are left that only a ``flushPending()`` will write.
  func sendWithoutWaiting(header: [UInt8], payload: ArraySlice<UInt8>) throws(TransportError)
    -> Bool
  /// Writes what ``sendWithoutWaiting(header:payload:)`` left, waiting for room; returns when
  /// nothing is left, or at once when another thread is writing it.
  func flushPending() throws(TransportError)
  /// Blocks until one complete message (reassembled by its 4-byte little-endian size prefix,
  /// across reads and SDUs) and returns it including the prefix; returns nil at orderly EOF.
  /// One receiving thread at a time. Sizes < 7 throw `frameTooSmall`; > `limit` throw
  /// `frameTooLarge`; after `close()` it throws `.closed`.
  func receive(limit: Int) throws(TransportError) -> [UInt8]?
  /// Receives like ``receive(limit:)``, but the data of a large Rread that `rule` accepts may
  /// come in a pipe (``SplicedBytes``) instead of memory. Transports that cannot splice (the
  /// default) always return frames.
  func receive(limit: Int, splicing rule: SpliceRule) throws(TransportError) -> ReceivedMessage?
  /// Closes the transport: wakes threads blocked in `receive` or `send` (they throw `.closed`);
  /// idempotent.
  func close()
  /// What protects the connection: nil for a plain one; for the secure channel, its binding
  /// and the board key proved in its handshake.
  var security: ChannelSecurity? { get }
}

extension MessageTransport {
  public var security: ChannelSecurity? { nil }
}

/// What a secure channel (the SecureChannel module, docs/authentication.md §6) tells the layers
/// above it: what a Tauth signature is bound to, and which board key the far end proved.
public struct ChannelSecurity: Sendable, Equatable {
  /// The Noise handshake hash: 32 bytes, the same at both ends of this channel and at no
  /// other, so a signature over it is good on this channel only.
  public var binding: [UInt8]
  /// The raw 32-byte Ed25519 key the board proved in the handshake; nil for a board without
  /// a key.
  public var boardKey: [UInt8]?

  public init(binding: [UInt8], boardKey: [UInt8]?) {
    self.binding = binding
    self.boardKey = boardKey
  }
}

/// How `dial(_:options:)` connects.
public struct DialOptions: Sendable {
  /// How long to wait for the connection (TCP handshake, L2CAP channel set-up).
  public var connectTimeout: Duration = .seconds(10)
  /// The L2CAP security level; 9BBS boards run at low (no pairing).
  public var l2capSecurity: BluetoothSecurity = .low
  /// The receive MTU advertised on L2CAP (`BT_RCVMTU`); the board caps msize by it, so keep it
  /// at least the msize you want plus headroom.
  public var l2capReceiveMTU: Int = 8192 + 64

  public init() {}
}

/// Connects to `address`.
/// - Throws: `connectFailed`, `resolveFailed`, `timedOut`, `bluetoothUnavailable`.
public func dial(_ address: TransportAddress, options: DialOptions = DialOptions())
  throws(TransportError) -> any MessageTransport
{
  try SocketTransport.connect(to: address, options: options)
}
