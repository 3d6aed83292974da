// The FUSE operations that name a node and tell its attributes: lookup, getattr, setattr and
// statfs. What the kernel is told about a node is built by NodeAttributes (Tree/); a room's
// and a transcript's getattr are in BBSFileSystem+RoomAttributes; what a change (truncate,
// chmod, touch) means is in Remote/Metadata.

import Foundation
import FuseKit
import NinePClient
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

extension BBSFileSystem {
  public func lookup(_ request: FuseRequest, parent: FuseInode, name: String) {
    guard let directory = inodes.node(parent) else { return reply(request, ENOENT) }
    guard name.utf8.count <= ListingCache.maxNameLength else { return reply(request, ENAMETOOLONG) }
    answersInterrupts(request)
    tree.lookup(directory.path, name) { [self] found in
      switch found {
      case .success(let node): request.replyEntry(nodes.entry(for: node))
      case .failure(let error): request.replyError(error.errno)
      }
    }
  }

  public func getattr(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo?) {
    guard let node = inodes.node(inode) else { return reply(request, ENOENT) }
    if let file, let draft = handles[file.handle] as? DraftHandle {
      var attributes = nodes.attributes(for: node)
      attributes.st_size = Int(draft.size)
      request.replyAttr(attributes, timeout: 0)
      return
    }
    if case .room = node.kind { return getattrRoom(request, node, file: file) }
    if case .roomLog = node.kind { return getattrRoomLog(request, node, file: file) }
    if case .awareness(let local) = node.kind, local.isStream {
      return getattrRoom(request, node, file: file)
    }
    // An unlinked node (fstat of a file removed while open) has only what the mount knows.
    if node.inode == .root || node.unlinked
      || node.fetched.duration(to: .now) < options.attributeTimeout || nodes.isLocal(node.kind)
    {
      request.replyAttr(nodes.attributes(for: node), timeout: nodes.timeout(for: node))
      return
    }
    answersInterrupts(request)
    tree.refresh(node) { [self] result in
      switch result {
      case .success(let fresh):
        request.replyAttr(nodes.attributes(for: fresh), timeout: nodes.timeout(for: fresh))
      case .failure(let error) where error.isLinkFailure || file != nil:
        // Link down, or an open file gone from the server (fstat): what the mount knows
        // beats an error.
        let known = inodes.node(inode) ?? node
        request.replyAttr(nodes.attributes(for: known), timeout: nodes.timeout(for: known))
      case .failure(let error): request.replyError(error.errno)
      }
    }
  }

  public func setattr(
    _ request: FuseRequest, inode: FuseInode, attributes: stat, changes: FuseSetAttributes,
    file: FuseFileInfo?
  ) {
    guard let node = inodes.node(inode) else { return reply(request, ENOENT) }
    // A transcript (chat/log) is read only, for root too: a truncate or touch is refused.
    if case .roomLog = node.kind { return reply(request, EACCES) }
    // Writes still on their way (write-behind) land first: a truncate or a touch must not be
    // overtaken by them.
    whenWritesLanded(inode) { [self] in
      changeAttributes(request, node: node, attributes: attributes, changes: changes, file: file)
    }
  }

  /// Calls `body` once every write answered ahead of the server on `inode` has landed (at
  /// once, on this thread, when none is on its way).
  private func whenWritesLanded(_ inode: FuseInode, _ body: @escaping @Sendable () -> Void) {
    let writers = handles.all(RemoteFileHandle.self).map(\.handle).filter { $0.inode == inode }
    guard !writers.isEmpty else { return body() }
    let left = Mutex(writers.count)
    for writer in writers {
      writer.whenWritesLanded {
        if left.withLock({
          $0 -= 1; return $0
        }) == 0 {
          body()
        }
      }
    }
  }

  /// `df` and `statfs(2)`. 9P2000 has no request for a server's size or free space, so the
  /// mount reports a fixed, large, empty file system: 1 TiB of blocks and 2³² inodes, all
  /// free. Counts of 0 read as "no space" to programs that check before writing (installers,
  /// databases, `cp` of a sparse file), and a full server still answers a write ENOSPC, which
  /// reaches the writer. The numbers are a stand-in, not the server's disk.
  public func statfs(_ request: FuseRequest, inode: FuseInode) {
    var info = statvfs()
    info.f_bsize = 4096
    info.f_frsize = 4096
    info.f_blocks = 1 << 28
    info.f_bfree = info.f_blocks
    info.f_bavail = info.f_blocks
    info.f_files = 1 << 32
    info.f_ffree = info.f_files
    info.f_favail = info.f_files
    info.f_namemax = UInt(nameLimit)
    if options.readOnly { info.f_flag |= UInt(ST_RDONLY) }
    request.replyStatfs(info)
  }

  /// The longest name a new entry may have: a board's walk takes names of at most 63 bytes
  /// (docs/board-facts.md §1.7), other servers what Linux allows (NAME_MAX).
  var nameLimit: Int {
    pool.configuration.profile == .device ? 63 : ListingCache.maxNameLength
  }
}

extension BBSFileSystem {
  /// setattr: one Twstat (see Remote/Metadata.swift).
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
