/// Little-endian 9P2000 field writer.
public struct WireWriter: Sendable {
  public private(set) var bytes: [UInt8]

  public init(capacity: Int = 64) {
    bytes = []
    bytes.reserveCapacity(capacity)
  }

  public mutating func write(_ value: UInt8) { bytes.append(value) }

  public mutating func write(_ value: UInt16) {
    bytes.append(UInt8(truncatingIfNeeded: value))
    bytes.append(UInt8(truncatingIfNeeded: value >> 8))
  }

  public mutating func write(_ value: UInt32) {
    for shift in stride(from: 0, to: 32, by: 8) {
      bytes.append(UInt8(truncatingIfNeeded: value >> UInt32(shift)))
    }
  }

  public mutating func write(_ value: UInt64) {
    for shift in stride(from: 0, to: 64, by: 8) {
      bytes.append(UInt8(truncatingIfNeeded: value >> UInt64(shift)))
    }
  }

  /// Writes `len[2]` then the UTF-8 bytes. Strings longer than 65535 bytes are cut at a
  /// character boundary: the field cannot say more.
  public mutating func write(_ string: String) {
    var utf8 = Array(string.utf8)
    if utf8.count > Int(UInt16.max) {
      var end = Int(UInt16.max)
      while end > 0 && (utf8[end] & 0xC0) == 0x80 { end -= 1 }
      utf8 = Array(utf8[..<end])
    }
    write(UInt16(utf8.count))
    bytes.append(contentsOf: utf8)
  }

  public mutating func write(_ qid: Qid) {
    write(qid.type.rawValue)
    write(qid.version)
    write(qid.path)
  }

  public mutating func write(_ stat: Stat) {
    write(UInt16(truncatingIfNeeded: stat.wireSize - 2))
    write(stat.type)
    write(stat.dev)
    write(stat.qid)
    write(stat.mode.rawValue)
    write(stat.atime)
    write(stat.mtime)
    write(stat.length)
    write(stat.name)
    write(stat.uid)
    write(stat.gid)
    write(stat.muid)
  }

  public mutating func write<C: Collection>(contentsOf data: C) where C.Element == UInt8 {
    bytes.append(contentsOf: data)
  }

  /// Overwrites the four bytes at `offset` with `value` (used for the size prefix).
  mutating func patch(_ value: UInt32, at offset: Int) {
    for index in 0..<4 {
      bytes[offset + index] = UInt8(truncatingIfNeeded: value >> UInt32(index * 8))
    }
  }
}

/// Bounds-checked little-endian 9P2000 field reader. Every read checks the remaining length and
/// throws ``ProtocolError/truncated(field:message:)`` instead of reading past the frame.
public struct WireReader: Sendable {
  private let bytes: [UInt8]
  public private(set) var position: Int
  private let end: Int
  /// The message being decoded, for error texts.
  var message: String = "message"

  public init(_ bytes: [UInt8], from start: Int = 0) {
    self.bytes = bytes
    self.position = start
    self.end = bytes.count
  }

  public var remaining: Int { end - position }

  private mutating func need(_ count: Int, _ field: String) throws(ProtocolError) {
    if count < 0 || remaining < count {
      throw .truncated(field: field, message: message)
    }
  }

  public mutating func readUInt8(_ field: String) throws(ProtocolError) -> UInt8 {
    try need(1, field)
    defer { position += 1 }
    return bytes[position]
  }

  public mutating func readUInt16(_ field: String) throws(ProtocolError) -> UInt16 {
    try need(2, field)
    defer { position += 2 }
    return UInt16(bytes[position]) | UInt16(bytes[position + 1]) << 8
  }

  public mutating func readUInt32(_ field: String) throws(ProtocolError) -> UInt32 {
    try need(4, field)
    var value: UInt32 = 0
    for index in 0..<4 { value |= UInt32(bytes[position + index]) << UInt32(index * 8) }
    position += 4
    return value
  }

  public mutating func readUInt64(_ field: String) throws(ProtocolError) -> UInt64 {
    try need(8, field)
    var value: UInt64 = 0
    for index in 0..<8 { value |= UInt64(bytes[position + index]) << UInt64(index * 8) }
    position += 8
    return value
  }

  /// Reads `count` bytes as a view into the frame, without copying them.
  public mutating func readSlice(_ count: Int, _ field: String) throws(ProtocolError)
    -> ArraySlice<UInt8>
  {
    try need(count, field)
    defer { position += count }
    return bytes[position..<(position + count)]
  }

  /// Reads `len[2]` and a string. `lossy` replaces invalid UTF-8 (used for error texts, which
  /// are only shown); otherwise invalid UTF-8 is an error.
  public mutating func readString(_ field: String, lossy: Bool = false) throws(ProtocolError)
    -> String
  {
    let length = Int(try readUInt16(field))
    try need(length, field)
    let slice = bytes[position..<(position + length)]
    position += length
    if lossy { return String(decoding: slice, as: UTF8.self) }
    guard let string = String(validating: slice, as: UTF8.self) else {
      throw .invalidString(field: field, message: message)
    }
    return string
  }

  public mutating func readQid(_ field: String) throws(ProtocolError) -> Qid {
    try need(Qid.wireSize, field)
    let type = QidType(rawValue: try readUInt8(field))
    let version = try readUInt32(field)
    let path = try readUInt64(field)
    return Qid(type: type, version: version, path: path)
  }

  /// Reads one stat entry, checking that its own size field matches its contents.
  public mutating func readStat(context: String) throws(ProtocolError) -> Stat {
    let saved = message
    message = context
    defer { message = saved }
    let declared = Int(try readUInt16("size"))
    let start = position
    try need(declared, "stat body")
    let type = try readUInt16("type")
    let dev = try readUInt32("dev")
    let qid = try readQid("qid")
    let mode = FileMode(rawValue: try readUInt32("mode"))
    let atime = try readUInt32("atime")
    let mtime = try readUInt32("mtime")
    let length = try readUInt64("length")
    let name = try readString("name")
    let uid = try readString("uid")
    let gid = try readString("gid")
    let muid = try readString("muid")
    let actual = position - start
    guard actual == declared else {
      throw .statSizeMismatch(declared: declared, actual: actual, context: context)
    }
    return Stat(
      type: type, dev: dev, qid: qid, mode: mode, atime: atime, mtime: mtime, length: length,
      name: name, uid: uid, gid: gid, muid: muid)
  }

  public func expectEnd(context: String) throws(ProtocolError) {
    if remaining != 0 { throw .trailingBytes(count: remaining, message: context) }
  }
}
