#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// Rerror text ↔ errno, by table (after plan9port's `errstr.c`).
///
/// Servers speak three dialects: the 9p4z HEAD table (`errno_to_ename`), the classic Plan 9
/// strings, and 9p4z Gen-1's generic per-operation `… failed` strings. Text is matched exactly
/// first, then by substring; anything unknown is `EIO`, and the caller keeps the text for logs.
public enum ErrorStrings {
  /// Exact texts, 9p4z HEAD first (`docs/board-facts.md` §7.6, §1.9), then Plan 9's.
  static let exact: [String: Int32] = [
    // 9p4z errno_to_ename.
    "permission denied": EACCES,
    "not authorized": EPERM,
    "file not found": ENOENT,
    "not a directory": ENOTDIR,
    "is a directory": EISDIR,
    "file already exists": EEXIST,
    "no space left on device": ENOSPC,
    "out of memory": ENOMEM,
    "invalid argument": EINVAL,
    "operation not supported": ENOTSUP,
    "resource temporarily unavailable": EAGAIN,
    "timeout": ETIMEDOUT,
    // 9p4z protocol-level strings.
    "unknown fid": EBADF,
    "fid not open": EBADF,
    "fid not open for reading": EBADF,
    "fid not open for writing": EBADF,
    "fid already open": EBUSY,
    "cannot walk an open fid": EBUSY,
    "too many name elements": ENAMETOOLONG,
    "cannot allocate newfid": EMFILE,
    "FID already in use": EMFILE,
    "create not supported": EPERM,
    "write not supported": EPERM,
    "remove not supported": EPERM,
    "wstat not supported": EPERM,
    "aname not found": ENOENT,
    "authentication not required": EOPNOTSUPP,
    "authentication required": EACCES,
    "authentication failed": EACCES,
    "authentication incomplete": EACCES,
    "uname does not match authenticated identity": EACCES,
    "invalid identity": EINVAL,
    "authentication timeout": ETIMEDOUT,
    "invalid auth response size": EINVAL,
    "must read challenge first": EINVAL,
    "too many concurrent authentications": EAGAIN,
    "cannot allocate afid": EMFILE,
    "unsupported version": EPROTONOSUPPORT,
    "version not negotiated": EPROTO,
    "bad Tversion": EPROTO,
    "malformed walk message": EPROTO,
    "malformed Tread": EPROTO,
    "malformed Twrite": EPROTO,
    "malformed Tcreate": EPROTO,
    "cannot get root": ENOENT,
    "get_root not implemented": ENOSYS,
    "filesystem not configured": ENXIO,
    // The server could not build its reply (too large for msize): the request's fault no more
    // than the file system's.
    "rstat build failed": EIO,
    "rwrite build failed": EIO,
    "rcreate build failed": EIO,
    // 9p4z's per-op fallbacks for EIO and errnos its table lacks (docs/board-facts.md §7.6), and
    // Gen-1's one generic string per operation: nothing more precise can be said.
    "open failed": EIO,
    "read failed": EIO,
    "write failed": EIO,
    "create failed": EIO,
    "stat failed": EIO,
    "remove failed": EIO,
    "wstat failed": EIO,
    "walk failed": EIO,
    "clunk failed": EIO,
    // Plan 9 (lib9p, kernel) strings.
    "file does not exist": ENOENT,
    "file exists": EEXIST,
    "directory not empty": ENOTEMPTY,
    "file too large": EFBIG,
    "file in use": EBUSY,
    "file is open": EBUSY,
    "i/o error": EIO,
    "read-only file system": EROFS,
    "read only file system": EROFS,
    "bad use of fid": EBADF,
    "fid in use": EBADF,
    "interrupted": EINTR,
    "file name too long": ENAMETOOLONG,
    "name too long": ENAMETOOLONG,
    "not in directory": ENOENT,
    "unknown user": EACCES,
    "no such file or directory": ENOENT,
    "function not implemented": ENOSYS,
    "bad offset": EINVAL,
    "bad count": EINVAL,
    "cross-device link": EXDEV,
    "no space": ENOSPC,
    "device or resource busy": EBUSY,
  ]

  /// Substrings tried in order when no exact text matches (plan9port style).
  static let substrings: [(String, Int32)] = [
    ("not found", ENOENT),
    ("does not exist", ENOENT),
    ("no such", ENOENT),
    ("permission", EACCES),
    ("denied", EACCES),
    ("not authorized", EPERM),
    ("already exists", EEXIST),
    ("exists", EEXIST),
    ("not a directory", ENOTDIR),
    ("is a directory", EISDIR),
    ("not empty", ENOTEMPTY),
    ("no space", ENOSPC),
    ("read-only", EROFS),
    ("read only", EROFS),
    ("not supported", ENOTSUP),
    ("not implemented", ENOSYS),
    ("too long", ENAMETOOLONG),
    ("interrupted", EINTR),
    ("in use", EBUSY),
    ("timeout", ETIMEDOUT),
    ("timed out", ETIMEDOUT),
    ("invalid", EINVAL),
    ("out of memory", ENOMEM),
    // Gen-1 9p4z collapses every fs error to "<op> failed": nothing better than EIO.
    ("failed", EIO),
  ]

  /// The errno a server's Rerror text means. Unknown texts are `EIO`.
  public static func errno(for ename: String) -> Int32 {
    if let code = exact[ename] { return code }
    let lowered = ename.lowercased()
    if let code = exact[lowered] { return code }
    for (needle, code) in substrings where lowered.contains(needle) { return code }
    return EIO
  }

  /// Whether the text is one the tables know (for logging unknown texts once).
  public static func isKnown(_ ename: String) -> Bool {
    let lowered = ename.lowercased()
    return exact[ename] != nil || exact[lowered] != nil
      || substrings.contains { lowered.contains($0.0) }
  }

  /// The 9p4z HEAD text for an errno, as a server built on that table would send it.
  /// `operation` names the per-op fallback (`"read"` → `read failed`) for EIO and unmapped codes.
  public static func ename(for code: Int32, operation: String) -> String {
    switch code {
    case EACCES: "permission denied"
    case EPERM: "not authorized"
    case ENOENT: "file not found"
    case ENOTDIR: "not a directory"
    case EISDIR: "is a directory"
    case EEXIST: "file already exists"
    case ENOSPC: "no space left on device"
    case ENOMEM: "out of memory"
    case EINVAL: "invalid argument"
    case ENOTSUP: "operation not supported"
    case EAGAIN: "resource temporarily unavailable"
    case ETIMEDOUT: "timeout"
    default: "\(operation) failed"
    }
  }
}
