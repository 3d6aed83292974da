import Foundation
import FuseKit
import TerminalText

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

  /// Why the caller cannot ask the mount9bbs mount at `path` (absolute) anything or stop it,
  /// or nil: it is another user's, whose daemon listens in that user's runtime directory and
  /// whose mount only that user (or root) may remove. Said instead of blaming a dead daemon.
  static func othersMount(at path: String, asking what: String) -> String? {
    guard let entry = entry(at: path), entry.isMount9BBS, let owner = entry.userID,
      owner != getuid()
    else { return nil }
    let name = getpwuid(owner).flatMap { String(validatingCString: $0.pointee.pw_name) }
    let who = name.map { "\($0) (uid \(owner))" } ?? "uid \(owner)"
    let command = "mount9bbs \(what) \(TerminalText.shellQuoted(path))"
    return "\(TerminalText.escaped(path)) is \(who)'s mount: ask them, or run "
      + (name.map { "sudo -u \(TerminalText.shellQuoted($0)) \(command)" } ?? command
        + " as that user")
  }
}

extension MountTable.Entry {
  /// A mount9bbs mount: type `fuse.mount9bbs`, or one mounted with another `subtype=` (or
  /// none: plain `fuse`, as xfstests needs) whose source is a `9bbs:` address.
  var isMount9BBS: Bool {
    type == MountTable.ownType
      || (MountTable.isFuse(type) && source.hasPrefix(MountTable.sourcePrefix))
  }
}
