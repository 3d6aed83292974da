import Foundation
import FuseKit

/// Where a running mount leaves its daemon's pid, so `mount9bbs -u` can stop it properly.
///
/// A lazy unmount alone would leave a live daemon serving readers that hold files open (a
/// blocked `tail -f` keeps it forever). With the pid, `-u` asks the daemon to stop: it
/// answers every waiting reader, unmounts and exits.
///
/// Records live in a directory only the user can write (see ``directory()``), named by an
/// injective encoding of the mount point, and each names its mount point inside: two mount
/// points never share a record, and a record is never taken for another mount's.
struct RuntimeRecord {
  /// The mount point, absolute.
  let mountpoint: String
  /// The pid file.
  let path: String

  /// The record for a mount point (made absolute) in `directory`.
  init(mountpoint: String, in directory: String) {
    // No URL(fileURLWithPath:) here: it stats the path, and stat of our own mount point
    // before the FUSE loop runs never returns.
    self.mountpoint = MountTable.absolutePath(mountpoint)
    path = directory + "/" + Self.fileName(for: self.mountpoint) + ".pid"
  }

  /// The record for a mount point: in the user's runtime directory (made and checked first),
  /// or, when it is not there, in another of the user's runtime directories that holds it: a
  /// mount made from a desktop session (`XDG_RUNTIME_DIR=/run/user/UID`) is found from an ssh
  /// or `su` shell without one, and the other way round.
  init(mountpoint: String) throws(RuntimeDirectoryError) {
    let directory = try Self.directory()
    let primary = RuntimeRecord(mountpoint: mountpoint, in: directory)
    guard !FileManager.default.fileExists(atPath: primary.path) else {
      self = primary
      return
    }
    self =
      Self.otherDirectories(than: directory).lazy.map {
        RuntimeRecord(mountpoint: mountpoint, in: $0)
      }
      .first { FileManager.default.fileExists(atPath: $0.path) } ?? primary
  }

  /// The user's other runtime directories that may hold records: only ones the user owns and
  /// no one else may write.
  static func otherDirectories(than primary: String) -> [String] {
    let uid = geteuid()
    let candidates = [
      "/run/user/\(uid)/mount9bbs", uid == 0 ? "/run/mount9bbs" : "", "/tmp/mount9bbs-\(uid)",
    ]
    return candidates.filter { path in
      var info = stat()
      return !path.isEmpty && path != primary && lstat(path, &info) == 0
        && info.st_mode & S_IFMT == S_IFDIR && info.st_uid == uid && info.st_mode & 0o022 == 0
    }
  }

  /// A file name that differs for every mount point: letters, digits, `.` and `-` stay, `/`
  /// becomes `_`, and every other byte (`_` and `%` among them) becomes `%XX`. Names too long
  /// for a directory entry keep their start and end a 64-bit hash of the whole; the record's
  /// own text (its mount point) settles the rare clash.
  static func fileName(for absolute: String) -> String {
    var name = ""
    for byte in absolute.utf8 {
      switch byte {
      case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
        UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "-"):
        name.append(Character(UnicodeScalar(byte)))
      case UInt8(ascii: "/"):
        name.append("_")
      default:
        name += "%" + String(byte, radix: 16, uppercase: true).leftPadded(to: 2)
      }
    }
    guard name.utf8.count > 200 else { return name }
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325  // FNV-1a
    for byte in absolute.utf8 {
      hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3
    }
    return String(name.prefix(180)) + "~" + String(hash, radix: 16).leftPadded(to: 16)
  }

  /// The user's runtime directory for records, created mode 0700 if missing.
  ///
  /// `$XDG_RUNTIME_DIR/mount9bbs`, else `/run/mount9bbs` for root, else
  /// `/tmp/mount9bbs-UID`. In a shared directory such as /tmp another user could have made
  /// that name first and would then control our pid files and status socket: the directory
  /// must be a real directory (not a link) owned by us, and is made private if it is not.
  static func directory() throws(RuntimeDirectoryError) -> String {
    let path: String
    if let runtime = ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"], !runtime.isEmpty {
      path = runtime + "/mount9bbs"
    } else if geteuid() == 0 {
      path = "/run/mount9bbs"
    } else {
      path = "/tmp/mount9bbs-\(geteuid())"
    }
    if mkdir(path, 0o700) != 0 && errno != EEXIST {
      throw .cannotCreate(path, String(cString: strerror(errno)))
    }
    var info = stat()
    guard lstat(path, &info) == 0 else {
      throw .cannotCreate(path, String(cString: strerror(errno)))
    }
    guard info.st_mode & S_IFMT == S_IFDIR else { throw .notADirectory(path) }
    guard info.st_uid == geteuid() else { throw .foreignOwner(path, owner: info.st_uid) }
    if info.st_mode & 0o077 != 0 && chmod(path, 0o700) != 0 {
      throw .cannotCreate(path, String(cString: strerror(errno)))
    }
    return path
  }

  /// The daemon's control socket (see ``ControlSocket``).
  var controlPath: String { String(path.dropLast(4)) + ".sock" }

  func write(pid: pid_t) {
    try? "\(pid)\n\(mountpoint)\n".write(toFile: path, atomically: true, encoding: .utf8)
  }

  func remove() {
    try? FileManager.default.removeItem(atPath: path)
    try? FileManager.default.removeItem(atPath: controlPath)
  }

  /// The pid and mount point a record file holds, if it is well formed.
  static func contents(of path: String) -> (pid: pid_t, mountpoint: String)? {
    guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
    let lines = text.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
    guard lines.count == 2, let pid = pid_t(lines[0]), pid > 0 else { return nil }
    let mountpoint = lines[1].hasSuffix("\n") ? lines[1].dropLast() : lines[1]
    return (pid, String(mountpoint))
  }

  /// Removes the records of daemons that died without cleaning up (kill -9).
  static func sweepStale(in directory: String) {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
    for name in names where name.hasSuffix(".sock") {
      // A control socket without its pid file belongs to nobody.
      let pid = directory + "/" + name.dropLast(5) + ".pid"
      if !FileManager.default.fileExists(atPath: pid) {
        try? FileManager.default.removeItem(atPath: directory + "/" + name)
      }
    }
    for name in names where name.hasSuffix(".pid") {
      let path = directory + "/" + name
      guard let record = contents(of: path) else {
        try? FileManager.default.removeItem(atPath: path)
        continue
      }
      if kill(record.pid, 0) != 0 && errno == ESRCH {
        try? FileManager.default.removeItem(atPath: path)
        try? FileManager.default.removeItem(atPath: String(path.dropLast(4)) + ".sock")
      }
    }
  }

  /// The daemon's pid if the record is this mount point's and its process is a live
  /// mount9bbs.
  var livePID: pid_t? {
    guard let record = Self.contents(of: path), record.mountpoint == mountpoint,
      kill(record.pid, 0) == 0,
      let exe = try? FileManager.default.destinationOfSymbolicLink(
        atPath: "/proc/\(record.pid)/exe"),
      exe.hasSuffix("/mount9bbs")
    else { return nil }
    return record.pid
  }
}

/// Why the runtime directory cannot hold our records; each says what to do.
enum RuntimeDirectoryError: Error, CustomStringConvertible {
  case cannotCreate(String, String)
  case notADirectory(String)
  case foreignOwner(String, owner: uid_t)

  var description: String {
    switch self {
    case .cannotCreate(let path, let reason):
      return "cannot use the runtime directory \(path): \(reason)"
    case .notADirectory(let path):
      return
        "refusing the runtime directory \(path): it is not a directory (a link or file is in its place); remove it or set XDG_RUNTIME_DIR"
    case .foreignOwner(let path, let owner):
      return
        "refusing the runtime directory \(path): it belongs to uid \(owner), not to you (uid \(geteuid())), so whoever owns it could redirect mount9bbs -u and status; remove it or set XDG_RUNTIME_DIR"
    }
  }
}

extension String {
  fileprivate func leftPadded(to width: Int) -> String {
    String(repeating: "0", count: Swift.max(0, width - count)) + self
  }
}
