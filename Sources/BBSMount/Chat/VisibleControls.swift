import TerminalText

/// Other users' control characters in room lines, made visible: what reaches a reader's
/// terminal through `tail -f` or `cat` of a room is text, never a command to the terminal.
///
/// A line on a board is anyone's bytes. Raw, `ESC [ 31 m` recolours every reader's terminal,
/// `ESC ] 0 ; … BEL` retitles it, `CR` moves the cursor back over the real author's name, and
/// a bidirectional override reorders what follows it. So every C0 control but tab and newline,
/// DEL, every C1 control (U+0080–U+009F, in UTF-8 or as a lone byte), every byte that is not
/// UTF-8, every bidirectional control and every invisible character (zero width space or joiner,
/// word joiner, byte order mark; see ``TerminalText/isUnsafe(_:)``) is written out as `\x1B` or
/// `\u{202E}`: `bob` with a zero width space in it is not `bob`. A zero width joiner between two
/// emoji (👩‍🚀) is kept. Tab, newline and all other UTF-8 text pass unchanged. (`-o rawtext`
/// turns this off.)
///
/// Data comes in pieces (one reply at a time): a UTF-8 sequence cut at the end of a piece is
/// kept (3 bytes at most) and finished with the next.
struct VisibleControls: Sendable {
  private var pending: [UInt8] = []
  /// The last scalar passed was an emoji (or a part of one): a joiner after it may be kept.
  private var afterEmoji = false

  /// `data` with its controls made visible.
  mutating func escape(_ data: [UInt8]) -> [UInt8] {
    let input = pending.isEmpty ? data : pending + data
    pending.removeAll()
    var output: [UInt8] = []
    output.reserveCapacity(input.count)
    var index = 0
    while index < input.count {
      let byte = input[index]
      if byte < 0x80 {
        afterEmoji = false
        if byte == 0x09 || byte == 0x0A || !TerminalText.isUnsafe(UInt32(byte)) {
          output.append(byte)
        } else {
          Self.appendEscape(byte, to: &output)
        }
        index += 1
        continue
      }
      switch Self.sequence(in: input, at: index) {
      case .incomplete:
        pending = Array(input[index...])
        return output
      case .invalid:
        Self.appendEscape(byte, to: &output)
        afterEmoji = false
        index += 1
      case .scalar(TerminalText.zeroWidthJoiner, let length) where afterEmoji:
        // Kept only between two emoji: wait for what follows when the data ends here.
        guard index + length < input.count else {
          pending = Array(input[index...])
          return output
        }
        switch Self.sequence(in: input, at: index + length) {
        case .incomplete:
          pending = Array(input[index...])
          return output
        case .scalar(let next, _) where TerminalText.joinsEmoji(next):
          output += input[index..<(index + length)]
        case .scalar, .invalid:
          output += Array(TerminalText.visibleEscape(TerminalText.zeroWidthJoiner).utf8)
        }
        afterEmoji = false
        index += length
      case .scalar(let value, let length):
        if TerminalText.isUnsafe(value) {
          output += Array(TerminalText.visibleEscape(value).utf8)
        } else {
          output += input[index..<(index + length)]
        }
        afterEmoji = TerminalText.joinsEmoji(value)
        index += length
      }
    }
    return output
  }

  /// What is held of a cut sequence, escaped byte by byte: the data ended there for good.
  mutating func finish() -> [UInt8] {
    var output: [UInt8] = []
    for byte in pending { Self.appendEscape(byte, to: &output) }
    pending.removeAll()
    return output
  }

  private enum Sequence {
    case scalar(UInt32, length: Int)
    case invalid
    /// A valid start that the data ends in the middle of.
    case incomplete
  }

  /// The UTF-8 sequence at `index` (whose first byte is ≥ 0x80), by RFC 3629's table: no
  /// overlong forms, no surrogates, nothing past U+10FFFF.
  private static func sequence(in bytes: [UInt8], at index: Int) -> Sequence {
    let lead = bytes[index]
    let length: Int
    var second: ClosedRange<UInt8> = 0x80...0xBF
    switch lead {
    case 0xC2...0xDF: length = 2
    case 0xE0:
      length = 3
      second = 0xA0...0xBF
    case 0xE1...0xEC, 0xEE...0xEF: length = 3
    case 0xED:
      length = 3
      second = 0x80...0x9F
    case 0xF0:
      length = 4
      second = 0x90...0xBF
    case 0xF1...0xF3: length = 4
    case 0xF4:
      length = 4
      second = 0x80...0x8F
    default: return .invalid
    }
    var value = UInt32(lead) & (length == 2 ? 0x1F : length == 3 ? 0x0F : 0x07)
    for offset in 1..<length {
      guard index + offset < bytes.count else { return .incomplete }
      let next = bytes[index + offset]
      let allowed = offset == 1 ? second : 0x80...0xBF
      guard allowed.contains(next) else { return .invalid }
      value = value << 6 | UInt32(next & 0x3F)
    }
    return .scalar(value, length: length)
  }

  /// A byte that is not text (a control, or not UTF-8), as `\xNN`.
  private static func appendEscape(_ byte: UInt8, to output: inout [UInt8]) {
    output += Array(TerminalText.visibleEscape(UInt32(byte)).utf8)
  }
}
