/// Why a board operation failed.
///
/// Each case corresponds to the errno a real 9BBS returns for the same failure, so the 9P
/// layer can turn it into the 9p4z error string (see ``errno``).
public enum BoardError: Error, Equatable, Sendable {
  /// No such room, message or file (ENOENT).
  case notFound
  /// The name is already taken (EEXIST).
  case exists
  /// A room or table is full (ENOSPC).
  case noSpace
  /// The operation is not implemented by the board (ENOTSUP).
  case notSupported
  /// The caller may not do this, e.g. a non-admin writing /etc (EPERM).
  case notPermitted
  /// Malformed input, e.g. a message name without a timestamp (EINVAL).
  case invalidArgument
  /// Writing to something that is not a writable file (EISDIR).
  case isDirectory
  /// A fixed-size table is exhausted, e.g. the 9th chat user on a device (ENOMEM).
  case outOfMemory
  /// The persistent store failed; the text says how (EIO).
  case storage(String)

  /// The Linux errno a 9BBS device reports for this failure.
  public var errno: Int32 {
    switch self {
    case .notFound: return 2  // ENOENT
    case .exists: return 17  // EEXIST
    case .noSpace: return 28  // ENOSPC
    case .notSupported: return 95  // ENOTSUP
    case .notPermitted: return 1  // EPERM
    case .invalidArgument: return 22  // EINVAL
    case .isDirectory: return 21  // EISDIR
    case .outOfMemory: return 12  // ENOMEM
    case .storage: return 5  // EIO
    }
  }
}
