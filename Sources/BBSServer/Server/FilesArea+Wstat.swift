import Glibc
import NinePProtocol

// Twstat of the files area: length, mode, times and name of an existing entry.
extension FilesArea {
  /// Applies a Twstat to an entry (stat(5)): the fields not set to "don't change" are
  /// length, mode (permission bits), atime, mtime and name, checked first and applied in that
  /// order, the rename last. Returns the entry's path afterwards.
  ///
  /// The owner fields are the caller's business (see ``Namespace/wstat(_:_:)``).
  func change(_ parts: [String], to wanted: Stat) throws(NinePFailure) -> [String] {
    let location = try locate(parts)
    let isDirectory = location.isDirectory
    let changesMode = wanted.mode.rawValue != .max
    let changesLength = wanted.length != .max
    let changesTimes = wanted.atime != .max || wanted.mtime != .max
    let renames = !wanted.name.isEmpty && wanted.name != parts.last
    // All fields "don't change": a request to commit the file to stable storage.
    guard changesMode || changesLength || changesTimes || renames else { return parts }
    guard writable else { throw NinePFailure("permission denied") }
    if changesMode {
      // The directory bit cannot change, and the other mode bits have no Unix meaning here.
      guard wanted.mode.isDirectory == isDirectory else {
        throw NinePFailure(errno: EINVAL, operation: "wstat")
      }
      guard wanted.mode.rawValue & ~(FileMode.directory.rawValue | 0o777) == 0 else {
        throw NinePFailure(errno: ENOTSUP, operation: "wstat")
      }
    }
    if changesLength && isDirectory && wanted.length != 0 {
      throw NinePFailure(errno: EINVAL, operation: "wstat")
    }
    if renames {
      guard Self.isValidName(wanted.name), !parts.isEmpty else {
        throw NinePFailure(errno: EINVAL, operation: "wstat")
      }
      guard wanted.name.utf8.count <= Int(NAME_MAX) else { throw NinePFailure.nameTooLong }
    }
    if changesLength && !isDirectory { try truncate(location, length: wanted.length) }
    let directory = location.directory.fd
    if changesMode {
      // AT_SYMLINK_NOFOLLOW: a link swapped in since the walk is refused, not followed.
      guard
        fchmodat(directory, location.name, mode_t(wanted.mode.permissions), AT_SYMLINK_NOFOLLOW)
          == 0
      else { throw Self.failure(errno, operation: "wstat") }
    }
    if changesTimes {
      let omit = (1 << 30) - 2  // UTIME_OMIT, a macro Swift does not import
      func time(_ seconds: UInt32) -> timespec {
        seconds == .max
          ? timespec(tv_sec: 0, tv_nsec: omit)
          : timespec(tv_sec: Int(seconds), tv_nsec: 0)
      }
      let times = [time(wanted.atime), time(wanted.mtime)]
      guard utimensat(directory, location.name, times, AT_SYMLINK_NOFOLLOW) == 0 else {
        throw Self.failure(errno, operation: "wstat")
      }
    }
    guard renames else { return parts }
    try rename(parts, to: wanted.name)
    return Array(parts.dropLast()) + [wanted.name]
  }

  /// Truncates or extends a file (Twstat length).
  func truncate(_ parts: [String], length: UInt64) throws(NinePFailure) {
    guard writable else { throw NinePFailure("permission denied") }
    try truncate(try locate(parts), length: length)
  }

  private func truncate(_ location: Location, length: UInt64) throws(NinePFailure) {
    guard location.isRegularFile else { throw NinePFailure(errno: EINVAL, operation: "wstat") }
    let fd = openat(
      location.directory.fd, location.name, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
    guard fd >= 0 else { throw Self.failure(errno, operation: "wstat") }
    defer { close(fd) }
    guard ftruncate(fd, off_t(clamping: length)) == 0 else {
      // Past what the file system holds: said so, not "wstat failed" (EIO).
      if errno == EFBIG { throw NinePFailure.fileTooLarge }
      throw Self.failure(errno, operation: "wstat")
    }
  }

  /// Renames an entry within its directory (Twstat name).
  func rename(_ parts: [String], to name: String) throws(NinePFailure) {
    guard writable else { throw NinePFailure("permission denied") }
    guard Self.isValidName(name), !parts.isEmpty else {
      throw NinePFailure(errno: EINVAL, operation: "wstat")
    }
    guard name.utf8.count <= Int(NAME_MAX) else { throw NinePFailure.nameTooLong }
    // The entry itself (a link is renamed, not followed), in the directory the walk reached.
    let location = try locate(parts, followingLast: false)
    let directory = location.directory.fd
    guard renameat(directory, location.name, directory, name) == 0 else {
      // A directory renamed over a non-empty one: as for remove, Plan 9's words, which every
      // client maps back to ENOTEMPTY ("wstat failed" would say EIO).
      if errno == ENOTEMPTY || errno == EEXIST { throw NinePFailure.directoryNotEmpty }
      throw Self.failure(errno, operation: "wstat")
    }
  }
}
