// Metadata: chmod, chown, chgrp, utimens and truncate (FUSE setattr) as one Twstat.
//
// A Twstat changes the fields not set to "don't change" (stat(5)), all or nothing, so one
// setattr is one Twstat and the server's answer is the whole answer: what it cannot do comes
// back as an error, never as a silent success. After a change the node is stat'ed again, so
// the reply (and the kernel's attribute cache) shows what the server now holds.
//
// What the mount does itself:
// - Ownership: every node is shown as the mounting user's (`-o uid=,gid=`), so chown/chgrp to
//   that owner changes nothing and succeeds; any other owner is EPERM (there is nothing to map
//   a local user to, and 9P servers refuse owner changes anyway).
// - Rooms, `/chat/post` and `/chat/users` have no server-side metadata: truncating them to 0
//   succeeds (`echo hi > chat/post` truncates first), anything else is EPERM.
// - A board message still being written (a draft) takes truncation and "set times to now"
//   (`touch new-message`); it has no mode to change.

import Foundation
import FuseKit
import NinePClient
import NinePProtocol

#if canImport(Glibc)
  import Glibc
#endif

/// What a setattr asks of the server, checked and ready to send.
struct MetadataChange: Equatable {
  /// The Twstat to send; fields left at ``Stat/unchanged`` stay.
  var stat = Stat.unchanged

  /// Whether the Twstat changes anything at all.
  var changesAnything: Bool { stat != .unchanged }

  /// `entry` as it is after the change.
  func applied(to entry: Stat) -> Stat {
    var result = entry
    if stat.length != .max { result.length = stat.length }
    if stat.mode.rawValue != .max { result.mode = stat.mode }
    if stat.atime != .max { result.atime = stat.atime }
    if stat.mtime != .max { result.mtime = stat.mtime }
    return result
  }

  /// Builds the change for `node` from what the kernel asks, or the errno that refuses it.
  ///
  /// - Parameters:
  ///   - owner: the uid and gid the mount shows every node with.
  ///   - now: the time `touch` means when it gives none.
  static func make(
    for kind: NodeKind, attributes: stat, changes: FuseSetAttributes,
    owner: (uid: uid_t, gid: gid_t), now: Date = Date()
  ) -> Result<MetadataChange, MetadataRefusal> {
    var change = MetadataChange()
    if changes.contains(.uid) && attributes.st_uid != owner.uid
      || changes.contains(.gid) && attributes.st_gid != owner.gid
    {
      return .failure(MetadataRefusal(EPERM, "the mount shows every file as its user's"))
    }
    if changes.contains(.size) {
      guard attributes.st_size >= 0 else { return .failure(MetadataRefusal(EINVAL, "size")) }
      change.stat.length = UInt64(attributes.st_size)
    }
    if changes.contains(.mode) {
      let permissions = UInt32(attributes.st_mode) & 0o7777
      // 9P has no setuid, setgid or sticky bit: dropping one would be a silent half-change.
      guard permissions & ~0o777 == 0 else {
        return .failure(MetadataRefusal(EPERM, "9P has no setuid, setgid or sticky bit"))
      }
      change.stat.mode = FileMode(permissions: permissions, kind == .directory ? .directory : [])
    }
    func seconds(_ time: timespec, now useNow: Bool) -> UInt32? {
      let value = useNow ? Int(now.timeIntervalSince1970) : time.tv_sec
      return value >= 0 && value < Int(UInt32.max) ? UInt32(value) : nil
    }
    // A time 9P2000's u32 cannot hold is refused whole (EOVERFLOW, "Value too large"), never
    // clamped or wrapped: a silent wrong time is worse than an error.
    let outOfRange = MetadataRefusal(
      EOVERFLOW,
      "9P2000 keeps times as 32-bit seconds since 1970: 1970-01-01 to 2106-02-07 06:28:14 UTC")
    if changes.contains(.atime) || changes.contains(.atimeNow) {
      guard let time = seconds(attributes.st_atim, now: changes.contains(.atimeNow)) else {
        return .failure(outOfRange)
      }
      change.stat.atime = time
    }
    if changes.contains(.mtime) || changes.contains(.mtimeNow) {
      guard let time = seconds(attributes.st_mtim, now: changes.contains(.mtimeNow)) else {
        return .failure(outOfRange)
      }
      change.stat.mtime = time
    }
    return .success(change)
  }
}

/// Why the mount refuses a setattr without asking the server.
struct MetadataRefusal: Error, Equatable {
  let errno: Int32
  /// For the debug log; two refusals with the same errno are equal.
  let reason: String

  static func == (lhs: Self, rhs: Self) -> Bool { lhs.errno == rhs.errno }

  init(_ errno: Int32, _ reason: String) {
    self.errno = errno
    self.reason = reason
  }
}
