/// What an emulated link imposes, per direction.
///
/// The defaults are a Bluetooth LE L2CAP connection-oriented channel as a 9BBS board sees it:
/// 30 ms round trip, 125 KB/s, 245-byte SDUs.
public struct LinkProfile: Sendable, Equatable, CustomStringConvertible {
  /// How the emulator finds the units it must never merge into one SDU.
  public enum Framing: String, Sendable, Equatable {
    /// Reassemble 9P messages by their 4-byte little-endian size prefix, then cut each into
    /// SDUs of its own (works from byte streams and from SDUs alike).
    case ninePMessages
    /// Each incoming SDU (or stream read) is a unit: cut into SDUs of at most `sduSize`, never
    /// joined with the next one.
    case packets
  }

  /// Round-trip time; each direction delays every SDU by half of it.
  public var roundTrip: Duration
  /// Byte rate of each direction (bytes per second; 0 means unlimited).
  public var bytesPerSecond: Int
  /// Largest SDU delivered.
  public var sduSize: Int
  /// Bytes charged against the rate per SDU on top of its payload (e.g. 4 for the L2CAP basic
  /// header, more for LL framing); 0 charges payload only.
  public var sduOverhead: Int
  /// Token-bucket depth in bytes: how much may go out back to back once the link has been idle.
  /// 0 serialises every SDU at the rate.
  public var burstBytes: Int
  /// How units are found (see ``Framing``).
  public var framing: Framing
  /// Bytes a direction may hold before its sender blocks (the socket buffer / credit window).
  public var queueLimitBytes: Int
  /// Largest 9P message accepted in `ninePMessages` framing.
  public var maxMessageSize: Int

  public init(
    roundTrip: Duration = .milliseconds(30), bytesPerSecond: Int = 125_000, sduSize: Int = 245,
    sduOverhead: Int = 0, burstBytes: Int = 0, framing: Framing = .ninePMessages,
    queueLimitBytes: Int = 64 * 1024, maxMessageSize: Int = 16 << 20
  ) {
    self.roundTrip = roundTrip
    self.bytesPerSecond = bytesPerSecond
    self.sduSize = sduSize
    self.sduOverhead = sduOverhead
    self.burstBytes = burstBytes
    self.framing = framing
    self.queueLimitBytes = queueLimitBytes
    self.maxMessageSize = maxMessageSize
  }

  /// The default: an LE L2CAP channel to a board.
  public static let ble = LinkProfile()

  /// One-way delay in nanoseconds.
  var oneWayNanoseconds: Int64 { nanoseconds(roundTrip) / 2 }

  /// Nanoseconds one SDU of `payload` bytes occupies the link.
  func transmissionNanoseconds(payload: Int) -> Int64 {
    guard bytesPerSecond > 0 else { return 0 }
    return Int64((Double(payload + sduOverhead) * 1e9 / Double(bytesPerSecond)).rounded())
  }

  public var description: String {
    let rtt = Double(nanoseconds(roundTrip)) / 1e6
    return "rtt \(rtt) ms, \(bytesPerSecond) B/s, SDU \(sduSize) (+\(sduOverhead)), \(framing)"
  }
}

func nanoseconds(_ duration: Duration) -> Int64 {
  let (seconds, attoseconds) = duration.components
  return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
}
