import Glibc
import NinePProtocol

/// A request failed; `ename` is the Rerror text (9p4z table, docs/board-facts.md §7.6).
struct NinePFailure: Error, Equatable {
  let ename: String
  /// Whether the failure came from the file system (an errno) rather than the 9P layer; Gen-1
  /// replaces such texts with one generic string per request.
  let isFileSystemError: Bool

  init(_ ename: String) {
    self.ename = ename
    isFileSystemError = false
  }

  private init(fileSystemError ename: String) {
    self.ename = ename
    isFileSystemError = true
  }

  /// The 9p4z text for an errno, with `operation`'s `… failed` fallback.
  init(errno code: Int32, operation: String) {
    ename = ErrorStrings.ename(for: code, operation: operation)
    isFileSystemError = true
  }

  init(_ error: BoardError, operation: String) {
    self.init(errno: error.errno, operation: operation)
  }

  /// A failed walk (a 9P-level answer, not a file system one).
  static let notFound = NinePFailure("file not found")
  /// ENOENT from the file system: the same text, but a Gen-1 board says `… failed`.
  static let noSuchFile = NinePFailure(errno: ENOENT, operation: "stat")
  /// ENOTEMPTY from the file system, in Plan 9's words (a Gen-1 board says `remove failed`).
  static let directoryNotEmpty = NinePFailure(fileSystemError: "directory not empty")
  /// EFBIG from the file system (a truncate past the largest file it holds).
  static let fileTooLarge = NinePFailure(fileSystemError: "file too large")
  /// ENAMETOOLONG from the file system (a name longer than NAME_MAX), in Plan 9's words
  /// ("walk failed" would say EIO).
  static let nameTooLong = NinePFailure(fileSystemError: "file name too long")
}
