import NinePClient
import NinePProtocol

/// Where a ``RoomFeed`` gets the session its parked reads go on: the pool in the mount (as
/// ``SessionProvider`` is for ``Remote``), a scripted provider in tests.
protocol StreamSessions: Sendable {
  /// Hands over a session with a stream reserved on it (a parking slot), waiting for the link
  /// while it is down.
  func placeStream(_ completion: @escaping @Sendable (Result<Session, NinePError>) -> Void)

  /// Gives back the stream reserved on `session`: its feed stopped or moved.
  func releaseStream(on session: Session)
}

extension Pool: StreamSessions {
  func placeStream(_ completion: @escaping @Sendable (Result<Session, NinePError>) -> Void) {
    session(for: .stream, completion: completion)
  }
}
