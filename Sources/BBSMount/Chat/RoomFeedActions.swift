import Logging
import NinePClient
import NinePProtocol

extension RoomFeedState {
  /// What a transition asks the feed to do, outside the lock.
  enum Action: Sendable {
    /// Ask the provider for a stream session (``RoomFeedState/placed(_:generation:)`` next);
    /// `quiet` when no reader waits on the feed (a watched room).
    case place(generation: UInt64, quiet: Bool)
    /// A reader opened a room watched so far: if the feed reads on the session ordinary
    /// requests use, it moves (``RoomFeedState/move(off:)``).
    case leaveIfShared(Session)
    /// Walk to the room and open it (``RoomFeedState/opened(_:fid:generation:)`` next).
    case open(Session, generation: UInt64)
    /// Send the next read (``RoomFeedState/beginRead(_:_:generation:)`` first).
    case read(Session, Fid, generation: UInt64)
    /// The same, after `delay`.
    case readLater(Session, Fid, after: Duration, generation: UInt64)
    /// Dial again after `delay` (``RoomFeedState/retryDue(generation:)`` then).
    case retry(after: Duration, generation: UInt64)
    /// Flush a read on the wire.
    case cancel(Session, RequestHandle)
    case clunk(Session, Fid)
    /// Clunk unless the session has closed (the server forgot the fid with it).
    case clunkUnlessClosed(Session, Fid)
    /// Give the parking slot on `session` (placed `quiet` or not) back to the provider.
    case releaseStream(Session, quiet: Bool)
    /// Waiters now ready (`concurrently` when many readers wait on a reply).
    case wake([@Sendable () -> Void], concurrently: Bool = false)
    /// What the server's reads added, ending at transcript offset `end`, for the
    /// ``RoomFeed/onLines`` observer (before the waiters are woken).
    case observe([UInt8], end: UInt64)
    /// The transcript grew by these bytes: the growth callback, then the history on disk
    /// (after the waiters).
    case grew([UInt8])
    case log(Logger.Level, String)
    /// How the board answers a caught-up read: it parks it, or (`parks` false) answers at
    /// once (``RoomFeed/onParking``).
    case learnedParking(parks: Bool)
  }
}
