/// Text from the network (unames, identities, room and file names) made safe for the log.
///
/// A client chooses these bytes: written raw, an escape sequence in one rewrites the terminal
/// of whoever reads the log, and a newline forges a log line. Control characters (C0, DEL,
/// C1) and bidirectional overrides become visible escapes (`\x1B`, `\u{202E}`), and a
/// backslash is doubled so an escape cannot be forged.
enum LogText {
  static func escaped(_ text: String) -> String {
    var result = ""
    result.reserveCapacity(text.utf8.count)
    for scalar in text.unicodeScalars {
      switch scalar.value {
      case 0x5C:
        result += "\\\\"
      case 0x00...0x1F, 0x7F...0x9F:
        result += "\\x" + hex(scalar.value, width: 2)
      case 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069:
        result += "\\u{" + hex(scalar.value, width: 4) + "}"
      default:
        result.unicodeScalars.append(scalar)
      }
    }
    return result
  }

  private static func hex(_ value: UInt32, width: Int) -> String {
    let digits = String(value, radix: 16, uppercase: true)
    return String(repeating: "0", count: max(0, width - digits.count)) + digits
  }
}
