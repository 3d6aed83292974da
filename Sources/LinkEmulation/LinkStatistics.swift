/// Counters of one direction of an emulated link.
public struct DirectionStatistics: Sendable, Equatable {
  /// Payload bytes delivered.
  public var bytes: Int = 0
  /// SDUs delivered.
  public var sdus: Int = 0
  /// Units (9P messages, or packets in `packets` framing) delivered.
  public var messages: Int = 0
  /// Link time charged at the configured rate for what was accepted, SDU overhead included.
  public var busyNanoseconds: Int64 = 0

  public init() {}

  static func - (lhs: Self, rhs: Self) -> Self {
    var result = Self()
    result.bytes = lhs.bytes - rhs.bytes
    result.sdus = lhs.sdus - rhs.sdus
    result.messages = lhs.messages - rhs.messages
    result.busyNanoseconds = lhs.busyNanoseconds - rhs.busyNanoseconds
    return result
  }
}

/// A snapshot of an emulator's counters; subtract two snapshots to measure a window.
public struct LinkStatistics: Sendable, Equatable {
  /// Client → server.
  public var upstream = DirectionStatistics()
  /// Server → client.
  public var downstream = DirectionStatistics()
  /// Client connections accepted so far.
  public var connectionsAccepted = 0
  /// Connections currently forwarding.
  public var connectionsOpen = 0
  /// Client "turns": upstream messages sent after the connection last delivered something
  /// downstream (or as its first message). With one request in flight at a time this is the
  /// number of round trips; pipelined requests sent together count once.
  public var roundTrips = 0
  /// When the snapshot was taken (CLOCK_MONOTONIC, ns).
  public var timestamp: Int64 = 0

  public init() {}

  /// The counters accumulated between `earlier` and this snapshot (`connectionsOpen` stays as
  /// it is now).
  public func since(_ earlier: LinkStatistics) -> LinkStatistics {
    var result = self
    result.upstream = upstream - earlier.upstream
    result.downstream = downstream - earlier.downstream
    result.connectionsAccepted = connectionsAccepted - earlier.connectionsAccepted
    result.roundTrips = roundTrips - earlier.roundTrips
    result.timestamp = timestamp - earlier.timestamp
    return result
  }

  /// Fraction of the emulated rate a direction used over `elapsedNanoseconds` (on a window
  /// from `since`, the window's own length by default): charged link time / elapsed time.
  public func utilisation(
    _ direction: KeyPath<LinkStatistics, DirectionStatistics>,
    elapsedNanoseconds: Int64? = nil
  ) -> Double {
    let elapsed = elapsedNanoseconds ?? timestamp
    guard elapsed > 0 else { return 0 }
    return Double(self[keyPath: direction].busyNanoseconds) / Double(elapsed)
  }
}
