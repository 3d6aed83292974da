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

extension BBSFileSystem {
  /// setattr: see the top of this file.
  func changeAttributes(
    _ request: FuseRequest, node: InodeTable.Node, attributes: stat,
    changes: FuseSetAttributes, file: FuseFileInfo?
  ) {
    let owner = (uid: options.uid, gid: options.gid)
    let asked: MetadataChange
    switch MetadataChange.make(
      for: node.kind, attributes: attributes, changes: changes, owner: owner)
    {
    case .success(let change): asked = change
    case .failure(let refusal):
      // A time out of 9P2000's range is the protocol's limit, not a mistake of the mount's:
      // said where a user looks (touch only prints "Value too large for defined data type").
      logger.log(
        level: refusal.errno == EOVERFLOW ? .notice : .debug,
        "setattr /\(node.path.joined(separator: "/")): \(refusal.reason)")
      request.replyError(refusal.errno)
      return
    }
    if let draft = draft(of: node, file: file) {
      return changeDraft(request, draft, node: node, asked, changes: changes)
    }
    if node.kind == .outbox && asked.changesAnything {
      // The mount's view of its queue: there is nothing to truncate or stamp.
      logger.notice("chat/outbox is read-only: it lists the posts waiting to be sent")
      request.replyError(EPERM)
      return
    }
    if nodes.isLocal(node.kind) { return changeLocal(request, node: node, asked) }
    guard asked.changesAnything else {
      // A chown or chgrp to the owner shown: nothing to change.
      request.replyAttr(nodes.attributes(for: node), timeout: nodes.timeout(for: node))
      return
    }
    if options.readOnly {
      request.replyError(EROFS)
      return
    }
    changeOnServer(request, node: node, asked)
  }

  /// A file of the mount's own (chat/post, a room, the streams): `echo hi > chat/post`
  /// truncates before writing, and the streams have nothing to truncate; a truncation may come
  /// with the time it happened. Anything else cannot be done.
  private func changeLocal(_ request: FuseRequest, node: InodeTable.Node, _ asked: MetadataChange) {
    var rest = asked.stat
    if rest.length == 0 { (rest.length, rest.atime, rest.mtime) = (.max, .max, .max) }
    if rest == .unchanged {
      request.replyAttr(nodes.attributes(for: node), timeout: 0)
    } else {
      request.replyError(EPERM)
    }
  }

  /// Sends the change as a Twstat and answers with the file's attributes after it.
  private func changeOnServer(
    _ request: FuseRequest, node: InodeTable.Node, _ asked: MetadataChange
  ) {
    answersInterrupts(request)
    remote.wstat(node.path, asked.stat) { [self] result in
      switch result {
      case .success:
        inodes.invalidate(node.inode)
        inodes.changed(node.inode, by: asked)
        tree.restat(node) { [self] fresh in
          switch fresh {
          case .success(let updated):
            request.replyAttr(nodes.attributes(for: updated), timeout: nodes.timeout(for: updated))
          case .failure:
            // The change is made: show it as asked, and ask the server again next time.
            var shown = node
            shown.stat = node.stat.map { asked.applied(to: $0) }
            request.replyAttr(nodes.attributes(for: shown), timeout: 0)
          }
        }
      case .failure(let error):
        logger.debug("setattr \(node.path.joined(separator: "/")): \(error)")
        // A generic "wstat failed" (a Gen-1 board) carries no errno: it is the server refusing
        // the change. A failed link stays what it is.
        if case .server = error, error.errno == EIO {
          request.replyError(EPERM)
        } else {
          request.replyError(error.errno)
        }
      }
    }
  }

  /// The draft being written at `node`: the one `file` is, or one open on its path.
  private func draft(of node: InodeTable.Node, file: FuseFileInfo?) -> DraftHandle? {
    if let file, let draft = handles[file.handle] as? DraftHandle { return draft }
    guard node.stat == nil, let name = node.path.last else { return nil }
    let room = Array(node.path.dropLast())
    return handles.all(DraftHandle.self).lazy.map(\.handle).first {
      $0.roomPath == room && $0.name == name
    }
  }

  private func changeDraft(
    _ request: FuseRequest, _ draft: DraftHandle, node: InodeTable.Node, _ asked: MetadataChange,
    changes: FuseSetAttributes
  ) {
    // A message has no mode and is dated when it is sent, which is "now" (`touch new`).
    let setsTimes =
      changes.contains(.atime) && !changes.contains(.atimeNow)
      || changes.contains(.mtime) && !changes.contains(.mtimeNow)
    guard asked.stat.mode.rawValue == .max, !setsTimes else {
      request.replyError(EPERM)
      return
    }
    if asked.stat.length != .max { draft.truncate(to: Int(clamping: asked.stat.length)) }
    var attributes = nodes.attributes(for: node)
    attributes.st_size = draft.size
    request.replyAttr(attributes, timeout: 0)
  }
}
