import NinePClient
import NinePProtocol

/// Where a ``RoomFeed`` gets the session its parked reads go on: the pool in the mount (as
/// ``SessionProvider`` is for ``Remote``), a scripted provider in tests.
protocol StreamSessions: Sendable {
  /// Hands over a session with a stream reserved on it (a parking slot), waiting for the link
  /// while it is down. A `quiet` stream (a room watched with no reader) takes the primary's
  /// free slot before a new session is dialled for it.
  func placeStream(
    quiet: Bool, _ completion: @escaping @Sendable (Result<Session, NinePError>) -> Void)

  /// Gives back the stream reserved on `session` (`quiet` as it was placed): its feed stopped
  /// or moved.
  func releaseStream(on session: Session, quiet: Bool)

  /// Whether ordinary requests (posts, walks, file reads) go on `session` too: a stream a
  /// reader waits on is better elsewhere.
  func carriesOrdinaryRequests(_ session: Session) -> Bool
}

extension StreamSessions {
  func placeStream(_ completion: @escaping @Sendable (Result<Session, NinePError>) -> Void) {
    placeStream(quiet: false, completion)
  }

  func carriesOrdinaryRequests(_ session: Session) -> Bool { false }
}

extension Pool: StreamSessions {
  func placeStream(
    quiet: Bool, _ completion: @escaping @Sendable (Result<Session, NinePError>) -> Void
  ) {
    session(for: quiet ? .quietStream : .stream, completion: completion)
  }

  func carriesOrdinaryRequests(_ session: Session) -> Bool { session === current }
}
