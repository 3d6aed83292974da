import Foundation
import FuseKit

extension MountTable {
  /// The file system type of a mount9bbs mount (`fuse.` + the subtype it mounts with).
  static let ownType = "fuse.mount9bbs"

  /// The mount9bbs mounts of the user `uid`, in mount order.
  static func ownMounts(of uid: uid_t = getuid()) -> [Entry] {
    entries().filter { $0.type == ownType && $0.userID == uid }
  }
}
