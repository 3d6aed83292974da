import Foundation
import Logging
import NinePProtocol
import NinePTransport

/// What a request is for, so the pool can keep long-parked stream reads away from the session
/// that ordinary requests use.
public enum Placement: Sendable {
  /// Walks, stats, reads of regular files, posts: the primary session.
  case ordinary
  /// A read that may park at the server for a long time (a chat room feed).
  case stream
}

/// Several sessions to one server, each its own connection (or L2CAP channel) with its own
/// version and attach.
///
/// A device serves one request at a time per channel and parks at most 4 reads per session,
/// so room feeds go to extra sessions and `ls`, `cat` and posting never wait behind them.
/// Against a multiplexing server one extra session is plenty, but the rule is the same.
public final class Pool: @unchecked Sendable {
  public let address: TransportAddress
  public let configuration: SessionConfiguration
  public let dialOptions: DialOptions
  /// Most sessions this pool opens, primary included.
  public let maxSessions: Int
  let logger: Logger

  private let lock = NSLock()
  private var primarySession: Session?
  private var streamSessions: [Session] = []
  private var dialing = false
  private var waiting: [@Sendable (Result<Session, NinePError>) -> Void] = []
  private var closed = false

  public init(
    address: TransportAddress, configuration: SessionConfiguration, maxSessions: Int,
    dialOptions: DialOptions = DialOptions(), logger: Logger = Logger(label: "mount9bbs.client")
  ) {
    self.address = address
    self.configuration = configuration
    self.maxSessions = max(1, maxSessions)
    self.dialOptions = dialOptions
    self.logger = logger
  }

  /// Connects the primary session, blocking the calling thread.
  public func start() throws(NinePError) {
    let session = try dialSession()
    lock.lock()
    primarySession = session
    lock.unlock()
  }

  /// The session for ordinary requests. Valid after ``start()``.
  public var primary: Session {
    lock.lock()
    defer { lock.unlock() }
    guard let primarySession else { preconditionFailure("Pool.start() was not called") }
    return primarySession
  }

  /// All open sessions, primary first (for status output).
  public var sessions: [Session] {
    lock.lock()
    defer { lock.unlock() }
    return (primarySession.map { [$0] } ?? []) + streamSessions
  }

  /// Picks a session for a request of the given kind; dials a new one (off the caller's
  /// thread) when every stream session's parked-read slots are taken and the pool may grow.
  public func session(
    for placement: Placement, completion: @escaping @Sendable (Result<Session, NinePError>) -> Void
  ) {
    lock.lock()
    guard !closed, let primarySession else {
      lock.unlock()
      return completion(.failure(.sessionClosed(reason: "the pool is closed")))
    }
    if placement == .ordinary || maxSessions == 1 {
      lock.unlock()
      return completion(.success(primarySession))
    }
    streamSessions.removeAll { $0.closedReason != nil }
    let slots = configuration.maxParkedReads
    if let free = streamSessions.min(by: { $0.parkableLoad < $1.parkableLoad }),
      free.parkableLoad < slots || streamSessions.count + 1 >= maxSessions
    {
      lock.unlock()
      return completion(.success(free))
    }
    if streamSessions.count + 1 >= maxSessions {
      // Cannot grow: share the primary, which still works, only less well.
      lock.unlock()
      return completion(.success(primarySession))
    }
    waiting.append(completion)
    if dialing {
      lock.unlock()
      return
    }
    dialing = true
    lock.unlock()
    Thread.detachNewThread { [self] in
      let result = Result { () throws(NinePError) -> Session in try dialSession() }
      lock.lock()
      dialing = false
      let callers = waiting
      waiting.removeAll()
      var answer = result
      if case .success(let session) = result {
        if closed {
          session.close(reason: "pool closed")
          answer = .failure(.sessionClosed(reason: "the pool is closed"))
        } else {
          streamSessions.append(session)
        }
      } else if let fallback = self.primarySession {
        logger.warning("could not open another session (\(result)); sharing the primary")
        answer = .success(fallback)
      }
      lock.unlock()
      for caller in callers { caller(answer) }
    }
  }

  /// Closes every session.
  public func close() {
    lock.lock()
    closed = true
    let all = (primarySession.map { [$0] } ?? []) + streamSessions
    lock.unlock()
    for session in all { session.close(reason: "unmounting") }
  }

  private func dialSession() throws(NinePError) -> Session {
    let transport: any MessageTransport
    do {
      transport = try dial(address, options: dialOptions)
    } catch {
      throw .transport(error)
    }
    return try Session.connect(transport: transport, configuration: configuration, logger: logger)
  }
}
