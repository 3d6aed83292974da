/// What the terminal sends, split into keys and pastes. With bracketed paste on (the view
/// asks for it with `ESC [ ? 2004 h`), a terminal wraps pasted text in `ESC [ 200 ~` …
/// `ESC [ 201 ~`, so a tab in it is text, not completion, and its newlines are not Enter. A
/// paste may arrive over several reads; this keeps it until its end marker.
public struct BracketedPaste: Sendable {
  /// One thing curses handed over: a key code (`KEY_UP`…) or a character.
  public enum Input: Equatable, Sendable {
    case code(UInt32)
    case scalar(UInt32)
  }

  /// A key code, a character, Alt plus a character (`ESC x`), or a whole paste.
  public enum Decoded: Equatable, Sendable {
    case code(UInt32)
    case scalar(UInt32)
    case alt(UInt32)
    case paste(String)
  }

  private static let start: [UInt32] = Array("[200~".unicodeScalars.map(\.value))
  private static let end: [UInt32] = Array("[201~".unicodeScalars.map(\.value))
  private static let escape: UInt32 = 0x1B

  /// The paste being read, nil outside one.
  private var pasting: String.UnicodeScalarView?
  /// Its size in bytes: beyond ``limit`` the rest is dropped (the end marker still ends it).
  private var pastedBytes = 0
  private let limit: Int

  public init(limit: Int = 64 * 1024) { self.limit = limit }

  public mutating func decode(_ inputs: [Input]) -> [Decoded] {
    var decoded: [Decoded] = []
    var index = inputs.startIndex
    func follows(_ marker: [UInt32], at position: Int) -> Bool {
      guard position + marker.count <= inputs.count else { return false }
      return zip(inputs[position...], marker).allSatisfy { $0 == .scalar($1) }
    }
    while index < inputs.count {
      let input = inputs[index]
      if var text = pasting {
        if input == .scalar(Self.escape) && follows(Self.end, at: index + 1) {
          decoded.append(.paste(String(text)))
          pasting = nil
          index += 1 + Self.end.count
          continue
        }
        // Text only: tabs and line ends stay, other controls and key codes do not.
        if case .scalar(let value) = input, let scalar = Unicode.Scalar(value),
          value == 0x09 || value == 0x0A || value == 0x0D || value >= 0x20 && value != 0x7F,
          pastedBytes + scalar.utf8.count <= limit
        {
          text.append(scalar)
          pastedBytes += scalar.utf8.count
        }
        pasting = text
        index += 1
        continue
      }
      switch input {
      case .code(let value):
        decoded.append(.code(value))
        index += 1
      case .scalar(Self.escape) where follows(Self.start, at: index + 1):
        pasting = String.UnicodeScalarView()
        pastedBytes = 0
        index += 1 + Self.start.count
      case .scalar(Self.escape):
        // Alt-x arrives as ESC x.
        if index + 1 < inputs.count, case .scalar(let next) = inputs[index + 1], next >= 0x20 {
          decoded.append(.alt(next))
          index += 2
        } else {
          index += 1
        }
      case .scalar(let value):
        decoded.append(.scalar(value))
        index += 1
      }
    }
    return decoded
  }
}
