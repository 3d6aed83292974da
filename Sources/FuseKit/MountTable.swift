import Foundation
import Glibc

/// The kernel's mount table as this process sees it (`/proc/self/mountinfo`), read as text:
/// it never touches a mount point, which a dead or hung FUSE mount would block.
public enum MountTable {
  /// One mount.
  public struct Entry: Equatable, Sendable {
    /// The kernel's mount id.
    public var id: Int
    /// `major:minor` of the mounted file system (its bdi, for a FUSE mount).
    public var device: String
    /// The absolute mount point.
    public var mountpoint: String
    /// `fuse.mount9bbs`, `fuse.sshfs`, `ext4`…
    public var type: String
    /// The "device" column (`9bbs:tcp!host!port` for mount9bbs).
    public var source: String
    /// The FUSE `user_id=` of the superblock options: who mounted it.
    public var userID: uid_t?
    /// The per-mount options (`rw`, `nosuid`, `relatime`…).
    public var options: [String] = []
  }

  /// Every mount, in mount order (a later one at the same place is on top).
  public static func entries() -> [Entry] {
    guard let table = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else {
      return []
    }
    return table.split(separator: "\n").compactMap { line in
      // id parent major:minor root mountpoint options [optional…] - type source superoptions
      let fields = line.split(separator: " ", omittingEmptySubsequences: false)
      guard let dash = fields.firstIndex(of: "-"), dash >= 6, dash + 2 < fields.count,
        let id = Int(fields[0])
      else { return nil }
      let superOptions = dash + 3 < fields.count ? fields[dash + 3].split(separator: ",") : []
      let userID = superOptions.first { $0.hasPrefix("user_id=") }.flatMap {
        uid_t($0.dropFirst("user_id=".count))
      }
      return Entry(
        id: id, device: String(fields[2]), mountpoint: unescape(fields[4]),
        type: String(fields[dash + 1]), source: unescape(fields[dash + 2]), userID: userID,
        options: fields[5].split(separator: ",").map(String.init))
    }
  }

  /// The topmost mount exactly at `path` (absolute), nil if nothing is mounted there.
  public static func entry(at path: String) -> Entry? {
    entries().last { $0.mountpoint == path }
  }

  /// The type of the topmost mount exactly at `path` (absolute).
  public static func type(at path: String) -> String? { entry(at: path)?.type }

  /// Whether `type` is a FUSE file system's.
  public static func isFuse(_ type: String) -> Bool {
    type == "fuse" || type == "fuseblk" || type.hasPrefix("fuse.")
  }

  /// `path` made absolute, with `.`, `..` and repeated slashes removed, as text only: no
  /// `realpath` or stat, which a dead mount would fail and our own mount, before its loop
  /// runs, would never answer.
  public static func absolutePath(_ path: String) -> String {
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

  /// Decodes the octal escapes (`\040` for space…) of a mount table field.
  private static func unescape(_ field: Substring) -> String {
    var out: [UInt8] = []
    var bytes = Array(field.utf8)[...]
    while let byte = bytes.popFirst() {
      if byte == UInt8(ascii: "\\"), bytes.count >= 3,
        let value = UInt8(String(decoding: bytes.prefix(3), as: UTF8.self), radix: 8)
      {
        out.append(value)
        bytes = bytes.dropFirst(3)
      } else {
        out.append(byte)
      }
    }
    return String(decoding: out, as: UTF8.self)
  }
}
