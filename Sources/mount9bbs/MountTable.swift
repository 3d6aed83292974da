import Foundation

/// The kernel's mount table as this process sees it (`/proc/self/mountinfo`).
enum MountTable {
  /// The file system type of a mount9bbs mount (`fuse.` + the subtype it mounts with).
  static let ownType = "fuse.mount9bbs"

  struct Entry: Equatable {
    /// The absolute mount point.
    var mountpoint: String
    /// `fuse.mount9bbs`, `fuse.sshfs`, `ext4`…
    var type: String
    /// The "device" column (`9bbs:tcp!host!port` for ours).
    var source: String
    /// The FUSE `user_id=` of the superblock options: who mounted it.
    var userID: uid_t?
  }

  static func entries() -> [Entry] {
    guard let table = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else {
      return []
    }
    return table.split(separator: "\n").compactMap { line in
      // id parent major:minor root mountpoint options [optional…] - type source superoptions
      let fields = line.split(separator: " ", omittingEmptySubsequences: false)
      guard let dash = fields.firstIndex(of: "-"), dash >= 6, dash + 2 < fields.count else {
        return nil
      }
      let superOptions = dash + 3 < fields.count ? fields[dash + 3].split(separator: ",") : []
      let userID = superOptions.first { $0.hasPrefix("user_id=") }.flatMap {
        uid_t($0.dropFirst("user_id=".count))
      }
      return Entry(
        mountpoint: unescape(fields[4]), type: String(fields[dash + 1]),
        source: unescape(fields[dash + 2]), userID: userID)
    }
  }

  /// The type of the topmost mount exactly at `path` (absolute), nil if nothing is mounted there.
  static func type(at path: String) -> String? {
    entries().last { $0.mountpoint == path }?.type
  }

  /// The mount9bbs mounts of the user `uid`, in mount order.
  static func ownMounts(of uid: uid_t = getuid()) -> [Entry] {
    entries().filter { $0.type == ownType && $0.userID == uid }
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
