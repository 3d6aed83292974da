import Foundation
import Glibc
import NinePProtocol

/// What the file system says about one entry of the files area.
struct FileInfo: Sendable {
  var isDirectory: Bool
  var size: UInt64
  var permissions: UInt32
  var atime: UInt32
  var mtime: UInt32
  var inode: UInt64
}

/// `O_PATH` (Linux, `<fcntl.h>` behind `_GNU_SOURCE`, which Swift's Glibc module does not
/// define): a descriptor that names a directory for the `*at` calls without opening it for
/// reading, so a walk passes directories it may only search (mode 0111).
private let openPath: Int32 = 0o10_000_000

/// The optional `/files` area: a real directory served read-only or read-write.
///
/// Paths are lists of names that never contain `/`, `.` or `..` (the walk resolves `..`
/// lexically before it gets here). Every access walks from a descriptor of the area's root
/// one component at a time (`openat`, `fstatat`, `mkdirat`, `unlinkat`, `renameat` relative
/// to directory descriptors, never following a link the walk did not read itself), so:
/// - a path of any length works: no call ever sees more than one name, so the host's
///   `PATH_MAX` does not limit how deep a client may go below the root;
/// - nothing outside the root is reachable: a symbolic link inside the area is followed
///   only by the walk, which refuses a target that would leave the root (`..` above it, or
///   an absolute target elsewhere), and a link swapped in for a directory or file between
///   two steps is never followed (`O_NOFOLLOW`), so a race gives an error, not an escape.
final class FilesArea: Sendable {
  /// The area's root, with symbolic links resolved.
  let root: String
  /// Whether writes, creates and removes are allowed.
  let writable: Bool
  /// An `O_PATH` descriptor of the root, held for the server's life: every walk starts here,
  /// so renaming the root's host path away does not move the area.
  private let rootDescriptor: Int32

  /// How many symbolic links one walk follows before it answers ELOOP (Linux's limit).
  static let maxLinks = 40

  /// Opens the area at `directory`.
  init(directory: String, writable: Bool) throws(ServerError) {
    guard let resolved = realpath(directory, nil) else {
      throw ServerError.badConfiguration(
        "--files \(directory): \(String(cString: strerror(errno)))")
    }
    root = String(cString: resolved)
    free(resolved)
    let fd = Glibc.open(root, openPath | O_DIRECTORY | O_CLOEXEC)
    guard fd >= 0 else {
      throw ServerError.badConfiguration("--files \(directory) is not a directory")
    }
    rootDescriptor = fd
    self.writable = writable
  }

  deinit { close(rootDescriptor) }

  /// Whether a name may appear in a path of the area.
  static func isValidName(_ name: String) -> Bool {
    !name.isEmpty && name != "." && name != ".." && !name.contains("/") && !name.contains("\0")
  }

  // MARK: Walking

  /// A directory descriptor the walk opened (closed when the last reference goes), or the
  /// root's (never closed here).
  final class Directory {
    let fd: Int32
    private let owned: Bool
    init(_ fd: Int32, owned: Bool) {
      self.fd = fd
      self.owned = owned
    }
    deinit { if owned { close(fd) } }
  }

  /// Where an existing entry is: its directory and its name there ("." for the root), and
  /// what `fstatat` said about it (not a symbolic link unless the walk was asked not to
  /// follow the last one).
  struct Location {
    let directory: Directory
    let name: String
    let status: stat
    var isDirectory: Bool { status.st_mode & S_IFMT == S_IFDIR }
    var isRegularFile: Bool { status.st_mode & S_IFMT == S_IFREG }
  }

  /// Walks `parts` from the root to an existing entry, following symbolic links that stay
  /// inside the area (the last one only when `followingLast`).
  func locate(_ parts: [String], followingLast: Bool = true) throws(NinePFailure)
    -> Location
  {
    guard parts.allSatisfy(Self.isValidName) else { throw NinePFailure.noSuchFile }
    let rootDirectory = Directory(rootDescriptor, owned: false)
    var directories: [Directory] = []  // below the root, innermost last
    var pending = Array(parts.reversed())  // next name last
    var links = 0
    while let name = pending.popLast() {
      let current = directories.last ?? rootDirectory
      if name.isEmpty || name == "." {  // only from a link's target
        if pending.isEmpty { return try here(current) }
        continue
      }
      if name == ".." {  // only from a link's target
        guard !directories.isEmpty else { throw NinePFailure.noSuchFile }  // above the root
        directories.removeLast()
        if pending.isEmpty { return try here(directories.last ?? rootDirectory) }
        continue
      }
      guard name.utf8.count <= Int(NAME_MAX) else { throw NinePFailure.nameTooLong }
      var status = stat()
      guard fstatat(current.fd, name, &status, AT_SYMLINK_NOFOLLOW) == 0 else {
        throw Self.failure(errno, operation: "walk")
      }
      let isLink = status.st_mode & S_IFMT == S_IFLNK
      if isLink && (followingLast || !pending.isEmpty) {
        links += 1
        guard links <= Self.maxLinks else { throw NinePFailure(errno: ELOOP, operation: "walk") }
        var target = try Self.linkTarget(in: current.fd, name: name)
        if target.hasPrefix("/") {
          // Absolute: only a target inside the root, walked again from the root.
          guard target == root || target.hasPrefix(root + "/") else {
            throw NinePFailure.noSuchFile
          }
          target.removeFirst(root.count)
          directories.removeAll()
          if target.isEmpty { target = "." }
        }
        pending += target.split(separator: "/", omittingEmptySubsequences: false)
          .map(String.init).reversed()
        continue
      }
      if pending.isEmpty { return Location(directory: current, name: name, status: status) }
      guard status.st_mode & S_IFMT == S_IFDIR else {
        throw NinePFailure(errno: ENOTDIR, operation: "walk")
      }
      // O_NOFOLLOW with O_PATH opens a link swapped in since the fstatat as the link itself,
      // which O_DIRECTORY then refuses: a race ends in ENOTDIR, never outside.
      let fd = openat(current.fd, name, openPath | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
      guard fd >= 0 else { throw Self.failure(errno, operation: "walk") }
      directories.append(Directory(fd, owned: true))
    }
    return try here(rootDirectory)
  }

  /// The location of a directory the walk holds, as "." in it.
  private func here(_ directory: Directory) throws(NinePFailure) -> Location {
    var status = stat()
    guard fstatat(directory.fd, ".", &status, 0) == 0 else {
      throw Self.failure(errno, operation: "walk")
    }
    return Location(directory: directory, name: ".", status: status)
  }

  /// The existing directory at `parts`, for creating in it or listing it.
  private func locateDirectory(_ parts: [String]) throws(NinePFailure) -> Location {
    let location = try locate(parts)
    guard location.isDirectory else { throw NinePFailure(errno: ENOTDIR, operation: "walk") }
    return location
  }

  /// The target of the symbolic link `name` in `directory`.
  private static func linkTarget(in directory: Int32, name: String) throws(NinePFailure)
    -> String
  {
    var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
    let count = readlinkat(directory, name, &buffer, buffer.count - 1)
    guard count > 0 else { throw failure(errno, operation: "walk") }
    return String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
  }

  /// The failure for an errno from a walk step: ENOENT says "file not found" as a missing
  /// entry always has; a name too long says so.
  static func failure(_ code: Int32, operation: String) -> NinePFailure {
    switch code {
    case ENOENT: NinePFailure.noSuchFile
    case ENAMETOOLONG: NinePFailure.nameTooLong
    default: NinePFailure(errno: code, operation: operation)
    }
  }

  /// What `status` says about an entry, as the tree reports it.
  private static func info(_ status: stat) -> FileInfo {
    FileInfo(
      isDirectory: status.st_mode & S_IFMT == S_IFDIR, size: UInt64(max(0, status.st_size)),
      permissions: UInt32(status.st_mode) & 0o777,
      atime: UInt32(truncatingIfNeeded: max(0, status.st_atim.tv_sec)),
      mtime: UInt32(truncatingIfNeeded: max(0, status.st_mtim.tv_sec)),
      inode: UInt64(status.st_ino))
  }

  // MARK: Operations

  /// Information about an existing entry (following confined symbolic links).
  func info(_ parts: [String]) throws(NinePFailure) -> FileInfo {
    Self.info(try locate(parts).status)
  }

  /// The entries of a directory, sorted by name, skipping ones that escape the area.
  func list(_ parts: [String]) throws(NinePFailure) -> [(name: String, info: FileInfo)] {
    let location = try locateDirectory(parts)
    let fd = openat(
      location.directory.fd, location.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
    guard fd >= 0 else { throw Self.failure(errno, operation: "read") }
    guard let stream = fdopendir(fd) else {
      close(fd)
      throw NinePFailure(errno: ENOTDIR, operation: "read")
    }
    defer { closedir(stream) }
    var entries: [(name: String, info: FileInfo)] = []
    while let entry = readdir(stream) {
      let name = withUnsafePointer(to: &entry.pointee.d_name) {
        $0.withMemoryRebound(to: CChar.self, capacity: Int(NAME_MAX) + 1) { String(cString: $0) }
      }
      guard Self.isValidName(name) else { continue }
      var status = stat()
      guard fstatat(dirfd(stream), name, &status, AT_SYMLINK_NOFOLLOW) == 0 else { continue }
      if status.st_mode & S_IFMT == S_IFLNK {
        // A link is listed as what it leads to, when that is inside the area.
        if let info = try? info(parts + [name]) { entries.append((name, info)) }
      } else {
        entries.append((name, Self.info(status)))
      }
    }
    return entries.sorted { $0.name < $1.name }
  }

  /// Opens an existing regular file for I/O; returns the descriptor.
  func open(_ parts: [String], mode: OpenMode) throws(NinePFailure) -> Int32 {
    let location = try locate(parts)
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
    // A fifo or device someone put in the host directory: never opened (a fifo would block
    // the server until a peer came).
    if !location.isRegularFile && !location.isDirectory {
      throw NinePFailure(errno: EACCES, operation: "open")
    }
    let fd = openat(location.directory.fd, location.name, flags)
    guard fd >= 0 else { throw Self.failure(errno, operation: "open") }
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
    guard name.utf8.count <= Int(NAME_MAX) else { throw NinePFailure.nameTooLong }
    let location = try locateDirectory(parent)
    // The new entry's directory, opened from its parent (the root, or the walk's directory).
    let fd = openat(
      location.directory.fd, location.name, openPath | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
    guard fd >= 0 else { throw Self.failure(errno, operation: "create") }
    defer { close(fd) }
    // The mode asked for exactly: the client applied its umask already, 9bbsd's own (022
    // as a rule) must not take bits away again (`open(…, O_CREAT, 0642)` made 0640).
    let exact = mode_t(permissions & 0o777)
    if directory {
      guard mkdirat(fd, name, exact) == 0 else { throw Self.failure(errno, operation: "create") }
      guard fchmodat(fd, name, exact, AT_SYMLINK_NOFOLLOW) == 0 else {
        throw Self.failure(errno, operation: "create")
      }
      return nil
    }
    var flags: Int32 = O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW
    flags |= mode.access == 0 ? O_RDONLY : (mode.access == 1 ? O_WRONLY : O_RDWR)
    let file = openat(fd, name, flags, exact)
    guard file >= 0 else { throw Self.failure(errno, operation: "create") }
    guard fchmod(file, exact) == 0 else {
      let failure = Self.failure(errno, operation: "create")
      close(file)
      throw failure
    }
    return file
  }

  /// Removes a file or an empty directory (the area's root cannot be removed).
  func remove(_ parts: [String]) throws(NinePFailure) {
    guard writable else { throw NinePFailure("permission denied") }
    guard !parts.isEmpty, parts.allSatisfy(Self.isValidName) else {
      throw NinePFailure("permission denied")
    }
    // Remove the link itself, never what a symbolic link points at; its directory must be
    // inside the area.
    let location = try locate(parts, followingLast: false)
    let flags = location.isDirectory ? AT_REMOVEDIR : 0
    guard unlinkat(location.directory.fd, location.name, flags) == 0 else {
      // The 9p4z table has no text for ENOTEMPTY ("remove failed" would say EIO); Plan 9's
      // wording maps back to ENOTEMPTY in every client.
      if errno == ENOTEMPTY || errno == EEXIST { throw NinePFailure.directoryNotEmpty }
      throw Self.failure(errno, operation: "remove")
    }
  }
}
