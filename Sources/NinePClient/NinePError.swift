import NinePProtocol
import NinePTransport

#if canImport(Glibc)
  import Glibc
#endif

/// Why a 9P request failed.
public enum NinePError: Error, Sendable, Equatable, CustomStringConvertible {
  /// The server answered Rerror. `errno` comes from ``ErrorStrings``; the text is kept for logs.
  case server(ename: String, errno: Int32)
  /// The request was flushed (Tflush answered) before its reply arrived.
  case flushed
  /// The request was withdrawn before it was sent.
  case cancelled
  /// No reply within the request's timeout; the request was flushed.
  case timedOut
  /// The session is closed or was reset; `reason` says why.
  case sessionClosed(reason: String)
  /// The server broke the protocol (bad frame, wrong reply type, too much data…).
  case protocolViolation(String)
  /// The server speaks another 9P dialect.
  case versionNotSupported(serverSaid: String)
  /// A path does not exist (walk failed at `component`).
  case notFound(path: String)
  /// A local limit was reached (fids, tags) and the request could not be queued.
  case resourceExhausted(String)
  /// The transport failed.
  case transport(TransportError)
  /// Tauth, or a Tattach that needs it, failed.
  case authentication(AuthenticationError)
  /// The board has no session for us: its others are in use (it answered Tversion with
  /// `board full: WHY`, as 9bbsd does).
  case boardFull(serverSaid: String)

  /// The errno a file system should report for this error.
  public var errno: Int32 {
    switch self {
    case .server(_, let code): code
    case .flushed, .cancelled: EINTR
    case .timedOut: ETIMEDOUT
    case .sessionClosed: ENOTCONN
    case .protocolViolation: EIO
    case .versionNotSupported: EPROTONOSUPPORT
    case .notFound: ENOENT
    case .resourceExhausted: EMFILE
    case .transport: EIO
    case .authentication: EACCES
    case .boardFull: ECONNREFUSED
    }
  }

  public var description: String {
    switch self {
    case .server(let ename, _): "server error: \(ename)"
    case .flushed: "request flushed"
    case .cancelled: "request cancelled"
    case .timedOut: "no reply from the server in time"
    case .sessionClosed(let reason): "9P session closed: \(reason)"
    case .protocolViolation(let what): "server broke the 9P protocol: \(what)"
    case .versionNotSupported(let said):
      "server does not speak 9P2000 (it answered Tversion with \"\(said)\")"
    case .notFound(let path): "\(path): file not found"
    case .resourceExhausted(let what): "out of \(what)"
    case .transport(let error): error.description
    case .authentication(let error): error.description
    case .boardFull(let said): "board full (\(Self.boardFullReason(said)))"
    }
  }

  /// What follows `board full` in a board's refusal ("all 4 sessions in use").
  static func boardFullReason(_ said: String) -> String {
    var reason = said.dropFirst(Self.boardFullPrefix.count)
    while let first = reason.first, first == ":" || first == " " { reason = reason.dropFirst() }
    return reason.isEmpty ? "no session free" : String(reason)
  }

  /// How a board's answer to Tversion (or Tattach) says it has no session free.
  static let boardFullPrefix = "board full"

  /// Whether the server answered Tversion or Tattach with `ename` because it has no session
  /// free.
  static func meansBoardFull(_ ename: String) -> Bool {
    ename.lowercased().hasPrefix(boardFullPrefix)
  }
}
