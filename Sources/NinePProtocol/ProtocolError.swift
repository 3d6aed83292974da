/// Why a frame could not be decoded. Every case names what was wrong, so a log line tells
/// exactly which field of which message a server got wrong.
public enum ProtocolError: Error, Sendable, Equatable, CustomStringConvertible {
  /// The frame is shorter than the 7-byte header (`size[4] type[1] tag[2]`).
  case frameTooShort(size: Int)
  /// The size prefix exceeds the negotiated (or buffer) limit.
  case frameTooLarge(size: Int, limit: Int)
  /// The size prefix disagrees with the number of bytes handed to the decoder.
  case sizeMismatch(declared: Int, actual: Int)
  /// The type byte is not a 9P2000 message type.
  case unknownType(UInt8)
  /// A field runs past the end of the frame.
  case truncated(field: String, message: String)
  /// Bytes are left after the last field.
  case trailingBytes(count: Int, message: String)
  /// A string field is not valid UTF-8.
  case invalidString(field: String, message: String)
  /// A walk carries more than 16 names or qids.
  case tooManyWalkElements(Int)
  /// An Rwalk returned more qids than names were asked for.
  case walkReplyTooLong(asked: Int, got: Int)
  /// An Rread returned more data than the Tread asked for.
  case readReplyTooLong(asked: UInt32, got: Int)
  /// A stat's own size field disagrees with its contents.
  case statSizeMismatch(declared: Int, actual: Int, context: String)
  /// A T-message arrived where an R-message was expected, or the reverse.
  case unexpectedDirection(MessageType)

  public var description: String {
    switch self {
    case .frameTooShort(let size):
      return "9P frame of \(size) bytes is shorter than the 7-byte header"
    case .frameTooLarge(let size, let limit):
      return "9P frame of \(size) bytes exceeds the limit of \(limit) bytes"
    case .sizeMismatch(let declared, let actual):
      return "9P frame declares \(declared) bytes but \(actual) were received"
    case .unknownType(let type):
      return "unknown 9P message type \(type)"
    case .truncated(let field, let message):
      return "\(message) is truncated in field \(field)"
    case .trailingBytes(let count, let message):
      return "\(message) has \(count) unexpected trailing bytes"
    case .invalidString(let field, let message):
      return "\(message) field \(field) is not valid UTF-8"
    case .tooManyWalkElements(let count):
      return "walk carries \(count) elements; 9P2000 allows at most 16"
    case .walkReplyTooLong(let asked, let got):
      return "Rwalk returned \(got) qids for \(asked) names"
    case .readReplyTooLong(let asked, let got):
      return "Rread returned \(got) bytes but only \(asked) were asked for"
    case .statSizeMismatch(let declared, let actual, let context):
      return "\(context) declares \(declared) bytes but its fields take \(actual)"
    case .unexpectedDirection(let type):
      return "unexpected \(type) in this direction"
    }
  }
}
