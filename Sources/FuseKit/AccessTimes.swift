// The access-time mount options libfuse 3 does not take (it knows `atime` and `noatime`
// only): applied to the mount itself once it is made, as `mount -o remount,bind,…` would.

import Glibc

/// How a mount updates access times, from the `-o` options libfuse leaves to its caller:
/// `relatime`, `norelatime`, `strictatime`, `nostrictatime`, `diratime`, `nodiratime`.
public struct AccessTimes: Sendable, Equatable {
  /// The options, in the order given (a later one wins, as with mount(8)).
  public private(set) var options: [String] = []

  /// Every option this type takes.
  public static let names: Set<String> = [
    "relatime", "norelatime", "strictatime", "nostrictatime", "diratime", "nodiratime",
  ]

  /// The per-mount flags a remount may change besides (`mount -o remount,ro`).
  public static let remountNames: Set<String> = names.union([
    "ro", "rw", "nosuid", "suid", "nodev", "dev", "noexec", "exec", "noatime", "atime",
  ])

  private let accepted: Set<String>

  /// Access-time options only, or (`remount`) every per-mount flag.
  public init(remount: Bool = false) {
    accepted = remount ? Self.remountNames : Self.names
  }

  /// Adds `name`; false if it is not an option this takes.
  public mutating func add(_ name: String) -> Bool {
    guard accepted.contains(name) else { return false }
    options.append(name)
    return true
  }

  public var isEmpty: Bool { options.isEmpty }

  /// The per-mount flags for a bind remount: the mount's present ones (its options in the
  /// mount table), with these applied. A remount sets all of them, so none may be left out.
  func mountFlags(from present: [String]) -> UInt {
    let known: [String: Int] = [
      "ro": MS_RDONLY, "nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC,
      "noatime": MS_NOATIME, "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME,
    ]
    var flags = present.reduce(UInt(0)) { $0 | UInt(known[$1] ?? 0) }
    let atime = UInt(MS_NOATIME | MS_RELATIME | MS_STRICTATIME)
    for option in options {
      switch option {
      case "relatime", "nostrictatime": flags = flags & ~atime | UInt(MS_RELATIME)
      case "norelatime", "strictatime": flags = flags & ~atime | UInt(MS_STRICTATIME)
      case "diratime": flags &= ~UInt(MS_NODIRATIME)
      case "nodiratime": flags |= UInt(MS_NODIRATIME)
      case "noatime": flags = flags & ~atime | UInt(MS_NOATIME)
      case "atime": flags &= ~UInt(MS_NOATIME)
      case "ro": flags |= UInt(MS_RDONLY)
      case "rw": flags &= ~UInt(MS_RDONLY)
      case "nosuid": flags |= UInt(MS_NOSUID)
      case "suid": flags &= ~UInt(MS_NOSUID)
      case "nodev": flags |= UInt(MS_NODEV)
      case "dev": flags &= ~UInt(MS_NODEV)
      case "noexec": flags |= UInt(MS_NOEXEC)
      case "exec": flags &= ~UInt(MS_NOEXEC)
      default: break
      }
    }
    return flags
  }

  /// Applies the options to the mount at `path` (absolute), reading its flags from the mount
  /// table: a `statvfs` would ask the file system, whose loop does not run yet. Throws the
  /// errno of a refused remount (EPERM: only root may change a mount's flags).
  public func apply(to path: String) throws(AccessTimeError) {
    guard !options.isEmpty else { return }
    guard let entry = MountTable.entry(at: path) else { throw AccessTimeError(errno: ENOENT) }
    let flags = mountFlags(from: entry.options)
    // Already so (`relatime` is the kernel's default): nothing to change, and no root needed.
    if flags & ~UInt(MS_STRICTATIME) == AccessTimes(remount: true).mountFlags(from: entry.options) {
      return
    }
    guard Glibc.mount(nil, path, nil, UInt(MS_REMOUNT | MS_BIND) | flags, nil) == 0 else {
      throw AccessTimeError(errno: errno)
    }
  }
}

/// A mount's access-time options could not be applied (errno of the remount).
public struct AccessTimeError: Error, Equatable, Sendable {
  public let errno: Int32
}
