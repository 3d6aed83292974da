import Foundation

/// Where a running mount leaves its daemon's pid, so `mount9bbs -u` can stop it properly.
///
/// A lazy unmount alone would leave a live daemon serving readers that hold files open (a
/// blocked `tail -f` keeps it forever). With the pid, `-u` asks the daemon to stop: it
/// answers every waiting reader, unmounts and exits.
struct RuntimeRecord {
  let path: String

  /// The record for a mount point (made absolute).
  init(mountpoint: String) {
    // No URL(fileURLWithPath:) here: it stats the path, and stat of our own mount point
    // before the FUSE loop runs never returns.
    let absolute = Self.absolute(mountpoint)
    let name = absolute.utf8.map { byte -> String in
      let char = Character(UnicodeScalar(byte))
      return char.isLetter || char.isNumber || char == "-" || char == "." ? String(char) : "_"
    }.joined()
    path = Self.directory + "/" + name + ".pid"
  }

  /// `path` made absolute and normalised as text only, touching no file system.
  static func absolute(_ path: String) -> String {
    var full = path
    if !path.hasPrefix("/") {
      var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
      let cwd = getcwd(&buffer, buffer.count).map { String(cString: $0) } ?? "/"
      full = cwd + "/" + path
    }
    var parts: [Substring] = []
    for part in full.split(separator: "/") {
      if part == "." { continue }
      if part == ".." {
        _ = parts.popLast()
      } else {
        parts.append(part)
      }
    }
    return "/" + parts.joined(separator: "/")
  }

  static var directory: String {
    if let runtime = ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"], !runtime.isEmpty {
      return runtime + "/mount9bbs"
    }
    return getuid() == 0 ? "/run/mount9bbs" : NSTemporaryDirectory() + "mount9bbs-\(getuid())"
  }

  /// The daemon's control socket (see ``ControlSocket``).
  var controlPath: String { String(path.dropLast(4)) + ".sock" }

  func write(pid: pid_t) {
    try? FileManager.default.createDirectory(
      atPath: Self.directory, withIntermediateDirectories: true,
      attributes: [.posixPermissions: 0o700])
    try? "\(pid)\n".write(toFile: path, atomically: true, encoding: .utf8)
  }

  func remove() {
    try? FileManager.default.removeItem(atPath: path)
    try? FileManager.default.removeItem(atPath: controlPath)
  }

  /// Removes the records of daemons that died without cleaning up (kill -9).
  static func sweepStale() {
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
      guard let text = try? String(contentsOfFile: path, encoding: .utf8),
        let pid = pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines)), pid > 0
      else { continue }
      if kill(pid, 0) != 0 && errno == ESRCH {
        try? FileManager.default.removeItem(atPath: path)
        try? FileManager.default.removeItem(atPath: String(path.dropLast(4)) + ".sock")
      }
    }
  }

  /// The daemon's pid if it is still a live mount9bbs process.
  var livePID: pid_t? {
    guard let text = try? String(contentsOfFile: path, encoding: .utf8),
      let pid = pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines)), pid > 0,
      kill(pid, 0) == 0,
      let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe"),
      exe.hasSuffix("/mount9bbs")
    else { return nil }
    return pid
  }
}
