import SystemPackage

/// Everything that can go wrong while parsing a dial string, connecting, listening or moving
/// 9P messages. Every `description` is one sentence a user can act on.
public enum TransportError: Error, Sendable, Equatable, CustomStringConvertible {
  /// The dial string could not be parsed; `reason` says what to fix.
  case badDialString(String, reason: String)
  /// The connection was refused or failed; `reason` is the system's text, e.g. "Connection refused".
  case connectFailed(address: String, reason: String)
  /// The host name could not be resolved.
  case resolveFailed(host: String, reason: String)
  /// Connecting took longer than `DialOptions.connectTimeout`.
  case timedOut(address: String)
  /// The machine cannot do Bluetooth: no kernel support, or no adapter.
  case bluetoothUnavailable(reason: String)
  /// Binding or listening on a server address failed.
  case listenFailed(address: String, reason: String)
  /// The operation is not available for this kind of address (e.g. listening on `l2cap`).
  case unsupported(operation: String, address: String)
  /// A size prefix announced a message shorter than the 7-byte 9P header.
  case frameTooSmall(size: UInt32)
  /// A size prefix announced a message longer than the receiver's limit.
  case frameTooLarge(size: UInt32, limit: Int)
  /// A packet (SDU) was larger than allowed, or could not be sent in one piece.
  case sduTooLarge(size: Int, limit: Int)
  /// The peer closed the connection in the middle of a message.
  case truncatedMessage(bufferedBytes: Int)
  /// The transport was closed locally.
  case closed
  /// A system call failed.
  case io(operation: String, errno: Int32)
  /// The secure channel failed: a record did not decrypt, or its handshake went wrong.
  case secureChannel(reason: String)

  public var description: String {
    switch self {
    case .badDialString(let string, let reason):
      return "Cannot use dial string '\(string)': \(reason)."
    case .connectFailed(let address, let reason):
      return "Cannot connect to \(address): \(reason)."
    case .resolveFailed(let host, let reason):
      return "Cannot resolve host '\(host)': \(reason); check the name or use an IP address."
    case .timedOut(let address):
      return "Connecting to \(address) timed out; check that the server is up and reachable."
    case .bluetoothUnavailable(let reason):
      return "Bluetooth is unavailable: \(reason)."
    case .listenFailed(let address, let reason):
      return "Cannot listen on \(address): \(reason)."
    case .unsupported(let operation, let address):
      return "Cannot \(operation) on \(address): not supported for this kind of address."
    case .frameTooSmall(let size):
      return
        "Received a 9P message claiming \(size) bytes, below the 7-byte minimum; the peer is not speaking 9P or the stream is corrupt."
    case .frameTooLarge(let size, let limit):
      return
        "Received a 9P message of \(size) bytes, more than the limit of \(limit) bytes; raise the limit (msize) or check the peer."
    case .sduTooLarge(let size, let limit):
      return
        "A packet of \(size) bytes exceeds the limit of \(limit) bytes; lower the SDU size in the dial string."
    case .truncatedMessage(let buffered):
      return
        "The peer closed the connection in the middle of a message (\(buffered) bytes received); the link was lost."
    case .closed:
      return "The transport was closed."
    case .io(let operation, let errno):
      return "The \(operation) failed: \(errnoText(errno))."
    case .secureChannel(let reason):
      return "The secure channel failed: \(reason)."
    }
  }
}

/// The system's text for an errno value, e.g. "Connection refused".
func errnoText(_ code: Int32) -> String {
  Errno(rawValue: code).description
}
