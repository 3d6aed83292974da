import Foundation
import Glibc

extension FuseSession {
  /// Unmounts the FUSE file system at `path`, also when its daemon died or hangs: a lazy
  /// unmount (`umount2(MNT_DETACH)` as root, else `fusermount3 -u -z`). Never touches the
  /// mount itself (a dead or hung mount would fail or block); it reads the mount table.
  ///
  /// To stop a session of this process, use ``exit()``: it also answers waiting readers.
  public static func unmount(path: String) throws(FuseSessionError) {
    let target = absolutePath(path)
    guard let type = mountType(at: target) else { throw .notMounted(target) }
    guard type == "fuse" || type == "fuseblk" || type.hasPrefix("fuse.") else {
      throw .notFuseMount(target, type: type)
    }
    if geteuid() == 0 {
      guard umount2(target, mntDetach) == 0 else {
        throw .unmountFailed(target, reason: String(cString: strerror(errno)))
      }
      return
    }
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/usr/bin/fusermount3")
    p.arguments = ["-u", "-z", target]
    let err = Pipe()
    p.standardError = err
    do { try p.run() } catch {
      throw .unmountFailed(target, reason: "cannot run fusermount3: \(error)")
    }
    p.waitUntilExit()
    guard p.terminationStatus == 0 else {
      let message = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
      throw .unmountFailed(target, reason: message.trimmingCharacters(in: .whitespacesAndNewlines))
    }
  }

  /// Whether a FUSE file system is mounted at `path` (from the mount table).
  public static func isFuseMount(path: String) -> Bool {
    guard let type = mountType(at: absolutePath(path)) else { return false }
    return type == "fuse" || type == "fuseblk" || type.hasPrefix("fuse.")
  }

  /// `MNT_DETACH` from `<sys/mount.h>`.
  private static let mntDetach: Int32 = 2

  /// The file system type of the topmost mount at `path` (absolute), from
  /// `/proc/self/mountinfo`, or nil if nothing is mounted exactly there.
  static func mountType(at path: String) -> String? { mountEntry(at: path)?.type }

  /// The mount id and file system type of the topmost mount at `path` (absolute).
  static func mountEntry(at path: String) -> (id: Int, type: String, device: String)? {
    guard let table = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else {
      return nil
    }
    var found: (id: Int, type: String, device: String)?
    for line in table.split(separator: "\n") {
      // id parent major:minor root mountpoint options [optional…] - type source superoptions
      let fields = line.split(separator: " ")
      guard fields.count >= 7, let dash = fields.firstIndex(of: "-"), dash + 1 < fields.count
      else { continue }
      if unescapeMountField(fields[4]) == path, let id = Int(fields[0]) {
        found = (id, String(fields[dash + 1]), String(fields[2]))
      }
    }
    return found
  }

  /// Decodes the octal escapes (`\040` for space…) of a mount table field.
  static func unescapeMountField(_ field: Substring) -> String {
    var out: [UInt8] = []
    var bytes = Array(field.utf8)[...]
    while let b = bytes.popFirst() {
      if b == UInt8(ascii: "\\"), bytes.count >= 3,
        let v = UInt8(String(decoding: bytes.prefix(3), as: UTF8.self), radix: 8)
      {
        out.append(v)
        bytes = bytes.dropFirst(3)
      } else {
        out.append(b)
      }
    }
    return String(decoding: out, as: UTF8.self)
  }

  /// Makes `path` absolute and removes `.`, `..` and repeated slashes without touching the
  /// file system (a dead mount would fail `realpath`).
  static func absolutePath(_ path: String) -> String {
    var full = path
    if !path.hasPrefix("/") {
      full = FileManager.default.currentDirectoryPath + "/" + path
    }
    var parts: [Substring] = []
    for c in full.split(separator: "/") {
      if c == "." { continue }
      if c == ".." {
        _ = parts.popLast()
        continue
      }
      parts.append(c)
    }
    return "/" + parts.joined(separator: "/")
  }
}
