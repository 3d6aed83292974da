import Foundation
import FuseKit

extension MountTable {
  /// The file system type of a mount9bbs mount (`fuse.` + the subtype it mounts with).
  static let ownType = "fuse.mount9bbs"

  /// What a mount9bbs mount's source starts with (`9bbs:tcp!host!5640`).
  static let sourcePrefix = "9bbs:"

  /// The mount9bbs mounts of the user `uid`, in mount order.
  static func ownMounts(of uid: uid_t = getuid()) -> [Entry] {
    entries().filter { $0.isMount9BBS && $0.userID == uid }
  }

  /// Whether the topmost mount at `path` (absolute) is mount9bbs's.
  static func isMount9BBS(at path: String) -> Bool { entry(at: path)?.isMount9BBS ?? false }
}

extension MountTable.Entry {
  /// A mount9bbs mount: type `fuse.mount9bbs`, or one mounted with another `subtype=` (or
  /// none: plain `fuse`, as xfstests needs) whose source is a `9bbs:` address.
  var isMount9BBS: Bool {
    type == MountTable.ownType
      || (MountTable.isFuse(type) && source.hasPrefix(MountTable.sourcePrefix))
  }
}
