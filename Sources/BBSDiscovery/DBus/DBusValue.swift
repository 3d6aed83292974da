/// A D-Bus value as read from or written to an sd-bus message.
///
/// Only what BlueZ's API needs is modelled; every type a message can carry is still read (as
/// the nearest case) so an unexpected property never breaks decoding.
indirect enum DBusValue: Hashable, Sendable {
  case byte(UInt8)
  case bool(Bool)
  case int16(Int16)
  case uint16(UInt16)
  case int32(Int32)
  case uint32(UInt32)
  case int64(Int64)
  case uint64(UInt64)
  case double(Double)
  case string(String)
  case objectPath(String)
  case signature(String)
  case unixFD(Int32)
  /// An array whose elements have the signature `element` (kept for empty arrays).
  case array(element: String, [DBusValue])
  /// A dictionary `a{kv}`; `key` and `value` are the entry signatures.
  case dictionary(key: String, value: String, [DBusValue: DBusValue])
  case variant(DBusValue)
  case structure([DBusValue])

  /// The value's D-Bus type signature.
  var signature: String {
    switch self {
    case .byte: return "y"
    case .bool: return "b"
    case .int16: return "n"
    case .uint16: return "q"
    case .int32: return "i"
    case .uint32: return "u"
    case .int64: return "x"
    case .uint64: return "t"
    case .double: return "d"
    case .string: return "s"
    case .objectPath: return "o"
    case .signature: return "g"
    case .unixFD: return "h"
    case .array(let element, _): return "a" + element
    case .dictionary(let key, let value, _): return "a{" + key + value + "}"
    case .variant: return "v"
    case .structure(let fields): return "(" + fields.map(\.signature).joined() + ")"
    }
  }

  /// A string dictionary of variants, `a{sv}`: BlueZ's property maps and option maps.
  static func properties(_ entries: [String: DBusValue]) -> DBusValue {
    var map: [DBusValue: DBusValue] = [:]
    for (key, value) in entries { map[.string(key)] = .variant(value) }
    return .dictionary(key: "s", value: "v", map)
  }

  /// The value inside any number of variants.
  var unwrapped: DBusValue {
    if case .variant(let inner) = self { return inner.unwrapped }
    return self
  }

  var stringValue: String? {
    switch unwrapped {
    case .string(let text), .objectPath(let text), .signature(let text): return text
    default: return nil
    }
  }

  var boolValue: Bool? {
    if case .bool(let value) = unwrapped { return value }
    return nil
  }

  var intValue: Int? {
    switch unwrapped {
    case .byte(let value): return Int(value)
    case .int16(let value): return Int(value)
    case .uint16(let value): return Int(value)
    case .int32(let value): return Int(value)
    case .uint32(let value): return Int(value)
    case .int64(let value): return Int(exactly: value)
    case .uint64(let value): return Int(exactly: value)
    default: return nil
    }
  }

  var arrayValue: [DBusValue]? {
    if case .array(_, let items) = unwrapped { return items }
    return nil
  }

  var stringArray: [String]? {
    arrayValue?.compactMap(\.stringValue)
  }

  /// The bytes of an `ay`.
  var bytes: [UInt8]? {
    arrayValue?.compactMap { item -> UInt8? in
      if case .byte(let byte) = item { return byte }
      return nil
    }
  }

  /// A dictionary with string (or object path) keys, such as `a{sv}` or `a{oa{sa{sv}}}`.
  var stringKeyed: [String: DBusValue]? {
    guard case .dictionary(_, _, let map) = unwrapped else { return nil }
    var result: [String: DBusValue] = [:]
    for (key, value) in map {
      if let name = key.stringValue { result[name] = value }
    }
    return result
  }
}
