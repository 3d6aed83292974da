/// The SSH binary encoding (RFC 4251 §5) that OpenSSH key files and the ssh-agent protocol
/// share: big-endian `uint32`, length-prefixed `string`, `mpint`.
struct SSHWriter {
  private(set) var bytes: [UInt8] = []

  mutating func uint32(_ value: UInt32) {
    bytes += [
      UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF),
    ]
  }

  mutating func uint8(_ value: UInt8) { bytes.append(value) }

  mutating func string(_ value: [UInt8]) {
    uint32(UInt32(value.count))
    bytes += value
  }

  mutating func string(_ value: String) { string(Array(value.utf8)) }

  /// A non-negative big-endian integer: no leading zeros, one 0x00 if the top bit is set.
  mutating func mpint(_ magnitude: [UInt8]) {
    var value = Array(magnitude.drop { $0 == 0 })
    if let first = value.first, first & 0x80 != 0 { value.insert(0, at: 0) }
    string(value)
  }

  mutating func raw(_ value: [UInt8]) { bytes += value }
}

/// Reads the SSH binary encoding; every read checks the end of the data.
struct SSHReader {
  private let bytes: [UInt8]
  private var position = 0

  init(_ bytes: [UInt8]) { self.bytes = bytes }

  var remaining: Int { bytes.count - position }

  /// What was read wrong; the caller turns it into an ``IdentityError``.
  struct Truncated: Error {}

  mutating func uint8() throws(Truncated) -> UInt8 {
    guard remaining >= 1 else { throw Truncated() }
    defer { position += 1 }
    return bytes[position]
  }

  mutating func uint32() throws(Truncated) -> UInt32 {
    guard remaining >= 4 else { throw Truncated() }
    defer { position += 4 }
    return bytes[position..<position + 4].reduce(0) { $0 << 8 | UInt32($1) }
  }

  mutating func string() throws(Truncated) -> [UInt8] {
    let count = Int(try uint32())
    return try raw(count)
  }

  mutating func text() throws(Truncated) -> String {
    String(decoding: try string(), as: UTF8.self)
  }

  /// An mpint as exactly `width` big-endian bytes (left-padded); nil if it does not fit or is
  /// negative.
  mutating func mpint(width: Int) throws(Truncated) -> [UInt8]? {
    let value = try string()
    if let first = value.first, first & 0x80 != 0 { return nil }
    let magnitude = Array(value.drop { $0 == 0 })
    guard magnitude.count <= width else { return nil }
    return [UInt8](repeating: 0, count: width - magnitude.count) + magnitude
  }

  mutating func raw(_ count: Int) throws(Truncated) -> [UInt8] {
    guard count >= 0, remaining >= count else { throw Truncated() }
    defer { position += count }
    return Array(bytes[position..<position + count])
  }

  mutating func rest() -> [UInt8] {
    defer { position = bytes.count }
    return Array(bytes[position...])
  }
}
