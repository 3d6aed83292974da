import Foundation
import Glibc
import NinePProtocol

/// A request failed; `ename` is the Rerror text (9p4z table, facts §7.6).
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
}

/// What the file system says about one entry of the files area.
struct FileInfo: Sendable {
  var isDirectory: Bool
  var size: UInt64
  var permissions: UInt32
  var atime: UInt32
  var mtime: UInt32
  var inode: UInt64
}

/// The optional `/files` area: a real directory served read-only or read-write.
///
/// Paths are lists of names that never contain `/`, `.` or `..` (the walk resolves `..`
/// lexically before it gets here). Every access resolves symbolic links with `realpath` and
/// refuses anything that ends up outside the area's root.
final class FilesArea: Sendable {
  /// The area's root, with symbolic links resolved.
  let root: String
  /// Whether writes, creates and removes are allowed.
  let writable: Bool

  /// Opens the area at `directory`.
  init(directory: String, writable: Bool) throws(ServerError) {
    guard let resolved = realpath(directory, nil) else {
      throw ServerError.badConfiguration(
        "--files \(directory): \(String(cString: strerror(errno)))")
    }
    root = String(cString: resolved)
    free(resolved)
    var info = stat()
    guard stat(root, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
      throw ServerError.badConfiguration("--files \(directory) is not a directory")
    }
    self.writable = writable
  }

  /// The absolute path of `parts`, without any check.
  func absolute(_ parts: [String]) -> String {
    parts.isEmpty ? root : root + "/" + parts.joined(separator: "/")
  }

  /// Whether a name may appear in a path of the area.
  static func isValidName(_ name: String) -> Bool {
    !name.isEmpty && name != "." && name != ".." && !name.contains("/") && !name.contains("\0")
  }

  /// The confined absolute path of an existing entry: symbolic links are resolved and the
  /// result must lie inside the root.
  func confinedPath(_ parts: [String]) throws(NinePFailure) -> String {
    guard parts.allSatisfy(Self.isValidName) else { throw NinePFailure.noSuchFile }
    guard let resolved = realpath(absolute(parts), nil) else { throw NinePFailure.noSuchFile }
    defer { free(resolved) }
    let path = String(cString: resolved)
    guard path == root || path.hasPrefix(root + "/") else { throw NinePFailure.noSuchFile }
    return path
  }

  /// Information about an existing entry (following confined symbolic links).
  func info(_ parts: [String]) throws(NinePFailure) -> FileInfo {
    let path = try confinedPath(parts)
    var buffer = stat()
    guard stat(path, &buffer) == 0 else { throw NinePFailure(errno: errno, operation: "stat") }
    return FileInfo(
      isDirectory: buffer.st_mode & S_IFMT == S_IFDIR, size: UInt64(max(0, buffer.st_size)),
      permissions: UInt32(buffer.st_mode) & 0o777,
      atime: UInt32(truncatingIfNeeded: max(0, buffer.st_atim.tv_sec)),
      mtime: UInt32(truncatingIfNeeded: max(0, buffer.st_mtim.tv_sec)),
      inode: UInt64(buffer.st_ino))
  }

  /// The entries of a directory, sorted by name, skipping ones that escape the area.
  func list(_ parts: [String]) throws(NinePFailure) -> [(name: String, info: FileInfo)] {
    let path = try confinedPath(parts)
    let names: [String]
    do {
      names = try FileManager.default.contentsOfDirectory(atPath: path)
    } catch {
      throw NinePFailure(errno: ENOTDIR, operation: "read")
    }
    var entries: [(name: String, info: FileInfo)] = []
    for name in names.sorted() where Self.isValidName(name) {
      if let info = try? info(parts + [name]) { entries.append((name, info)) }
    }
    return entries
  }

  /// Opens an existing regular file for I/O; returns the descriptor.
  func open(_ parts: [String], mode: OpenMode) throws(NinePFailure) -> Int32 {
    let path = try confinedPath(parts)
    if mode.allowsWriting || mode.truncates {
      guard writable else { throw NinePFailure("permission denied") }
    }
    var flags: Int32 = O_CLOEXEC | O_NOFOLLOW
    switch mode.access {
    case 1: flags |= O_WRONLY
    case 2: flags |= O_RDWR
    default: flags |= O_RDONLY
    }
    if mode.truncates { flags |= O_TRUNC }
    let fd = Glibc.open(path, flags)
    guard fd >= 0 else { throw NinePFailure(errno: errno, operation: "open") }
    return fd
  }

  /// Creates a file (returning its open descriptor) or a directory (returning nil) in the
  /// directory `parent`.
  func create(
    in parent: [String], name: String, directory: Bool, permissions: UInt32, mode: OpenMode
  )
    throws(NinePFailure) -> Int32?
  {
    guard writable else { throw NinePFailure("permission denied") }
    guard Self.isValidName(name) else { throw NinePFailure(errno: EINVAL, operation: "create") }
    let path = try confinedPath(parent) + "/" + name
    if directory {
      guard mkdir(path, mode_t(permissions & 0o777)) == 0 else {
        throw NinePFailure(errno: errno, operation: "create")
      }
      return nil
    }
    var flags: Int32 = O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW
    flags |= mode.access == 0 ? O_RDONLY : (mode.access == 1 ? O_WRONLY : O_RDWR)
    let fd = Glibc.open(path, flags, mode_t(permissions & 0o777))
    guard fd >= 0 else { throw NinePFailure(errno: errno, operation: "create") }
    return fd
  }

  /// Removes a file or an empty directory (the area's root cannot be removed).
  func remove(_ parts: [String]) throws(NinePFailure) {
    guard writable else { throw NinePFailure("permission denied") }
    guard !parts.isEmpty, parts.allSatisfy(Self.isValidName) else {
      throw NinePFailure("permission denied")
    }
    // Remove the link itself, never what a symbolic link points at; its directory must be
    // inside the area.
    let parentPath = try confinedPath(Array(parts.dropLast()))
    let path = parentPath + "/" + (parts.last ?? "")
    var buffer = stat()
    guard lstat(path, &buffer) == 0 else { throw NinePFailure.noSuchFile }
    let result = buffer.st_mode & S_IFMT == S_IFDIR ? rmdir(path) : unlink(path)
    guard result == 0 else {
      // The 9p4z table has no text for ENOTEMPTY ("remove failed" would say EIO); Plan 9's
      // wording maps back to ENOTEMPTY in every client.
      if errno == ENOTEMPTY || errno == EEXIST { throw NinePFailure.directoryNotEmpty }
      throw NinePFailure(errno: errno, operation: "remove")
    }
  }

  /// Applies a Twstat to an entry (stat(5)): the fields not set to "don't change" are
  /// length, mode (permission bits), atime, mtime and name, checked first and applied in that
  /// order, the rename last. Returns the entry's path afterwards.
  ///
  /// The owner fields are the caller's business (see ``Tree/wstat(_:_:)``).
  func change(_ parts: [String], to wanted: Stat) throws(NinePFailure) -> [String] {
    let info = try info(parts)
    let changesMode = wanted.mode.rawValue != .max
    let changesLength = wanted.length != .max
    let changesTimes = wanted.atime != .max || wanted.mtime != .max
    let renames = !wanted.name.isEmpty && wanted.name != parts.last
    // All fields "don't change": a request to commit the file to stable storage.
    guard changesMode || changesLength || changesTimes || renames else { return parts }
    guard writable else { throw NinePFailure("permission denied") }
    if changesMode {
      // The directory bit cannot change, and the other mode bits have no Unix meaning here.
      guard wanted.mode.isDirectory == info.isDirectory else {
        throw NinePFailure(errno: EINVAL, operation: "wstat")
      }
      guard wanted.mode.rawValue & ~(FileMode.directory.rawValue | 0o777) == 0 else {
        throw NinePFailure(errno: ENOTSUP, operation: "wstat")
      }
    }
    if changesLength && info.isDirectory && wanted.length != 0 {
      throw NinePFailure(errno: EINVAL, operation: "wstat")
    }
    if renames {
      guard Self.isValidName(wanted.name), !parts.isEmpty else {
        throw NinePFailure(errno: EINVAL, operation: "wstat")
      }
    }
    let path = try confinedPath(parts)
    if changesLength && !info.isDirectory { try truncate(parts, length: wanted.length) }
    if changesMode {
      guard chmod(path, mode_t(wanted.mode.permissions)) == 0 else {
        throw NinePFailure(errno: errno, operation: "wstat")
      }
    }
    if changesTimes {
      let omit = (1 << 30) - 2  // UTIME_OMIT, a macro Swift does not import
      func time(_ seconds: UInt32) -> timespec {
        seconds == .max
          ? timespec(tv_sec: 0, tv_nsec: omit)
          : timespec(tv_sec: Int(seconds), tv_nsec: 0)
      }
      let times = [time(wanted.atime), time(wanted.mtime)]
      guard utimensat(AT_FDCWD, path, times, 0) == 0 else {
        throw NinePFailure(errno: errno, operation: "wstat")
      }
    }
    guard renames else { return parts }
    try rename(parts, to: wanted.name)
    return Array(parts.dropLast()) + [wanted.name]
  }

  /// Truncates or extends a file (Twstat length).
  func truncate(_ parts: [String], length: UInt64) throws(NinePFailure) {
    guard writable else { throw NinePFailure("permission denied") }
    let path = try confinedPath(parts)
    guard Glibc.truncate(path, off_t(clamping: length)) == 0 else {
      // Past what the file system holds: said so, not "wstat failed" (EIO).
      if errno == EFBIG { throw NinePFailure.fileTooLarge }
      throw NinePFailure(errno: errno, operation: "wstat")
    }
  }

  /// Renames an entry within its directory (Twstat name).
  func rename(_ parts: [String], to name: String) throws(NinePFailure) {
    guard writable else { throw NinePFailure("permission denied") }
    guard Self.isValidName(name), !parts.isEmpty else {
      throw NinePFailure(errno: EINVAL, operation: "wstat")
    }
    let parentPath = try confinedPath(Array(parts.dropLast()))
    guard
      Glibc.rename(parentPath + "/" + (parts.last ?? ""), parentPath + "/" + name) == 0
    else {
      // A directory renamed over a non-empty one: as for remove, Plan 9's words, which every
      // client maps back to ENOTEMPTY ("wstat failed" would say EIO).
      if errno == ENOTEMPTY || errno == EEXIST { throw NinePFailure.directoryNotEmpty }
      throw NinePFailure(errno: errno, operation: "wstat")
    }
  }
}
