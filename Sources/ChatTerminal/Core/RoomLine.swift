/// One line of a room file, `[HH:MM:SS] AUTHOR: TEXT`, as the mount shows it.
public struct RoomLine: Sendable, Equatable {
  /// The server's stamp without brackets (`14:38:11`); empty for a line of another shape.
  public var stamp: String
  /// Who said it; empty for a line of another shape.
  public var author: String
  /// What was said (the whole line for a line of another shape).
  public var text: String

  public init(stamp: String, author: String, text: String) {
    self.stamp = stamp
    self.author = author
    self.text = text
  }

  /// Parses one line (without its newline). A line of another shape keeps its text whole,
  /// so nothing a server sends is lost.
  public init(parsing line: Substring) {
    guard line.hasPrefix("["), let close = line.firstIndex(of: "]"),
      line[close...].hasPrefix("] ")
    else {
      self.init(stamp: "", author: "", text: String(line))
      return
    }
    let rest = line[line.index(close, offsetBy: 2)...]
    guard let colon = rest.range(of: ": ") else {
      self.init(stamp: "", author: "", text: String(line))
      return
    }
    self.init(
      stamp: String(line[line.index(after: line.startIndex)..<close]),
      author: String(rest[..<colon.lowerBound]), text: String(rest[colon.upperBound...]))
  }

  /// Whether the line is an action (`/me waves`), shown as `* AUTHOR waves`.
  public var isAction: Bool { text.hasPrefix("/me ") }

  /// The stamp's seconds since midnight, if it is `HH:MM:SS`.
  public var stampSeconds: Int? {
    let parts = stamp.split(separator: ":")
    guard parts.count == 3, let hours = Int(parts[0]), let minutes = Int(parts[1]),
      let seconds = Int(parts[2])
    else { return nil }
    return hours * 3600 + minutes * 60 + seconds
  }
}

/// Splits a growing byte stream into complete lines, keeping a partial line for later.
public struct LineSplitter: Sendable {
  private var pending: [UInt8] = []
  /// The longest partial line kept; a longer one is cut into lines of this size.
  public let limit: Int

  public init(limit: Int = 65536) { self.limit = limit }

  /// The complete lines `bytes` finishes (decoded as UTF-8, bad bytes replaced).
  public mutating func lines(adding bytes: some Sequence<UInt8>) -> [String] {
    var result: [String] = []
    for byte in bytes {
      if byte == 0x0A {
        result.append(String(decoding: pending, as: UTF8.self))
        pending.removeAll(keepingCapacity: true)
      } else {
        pending.append(byte)
        if pending.count >= limit {
          result.append(String(decoding: pending, as: UTF8.self))
          pending.removeAll(keepingCapacity: true)
        }
      }
    }
    return result
  }
}
