// The FUSE operations that make, remove and rename entries of a directory over 9P (Remote/),
// and those 9P2000 cannot do (symlink, link, mknod of anything but a regular file). Each keeps
// the InodeTable and the ListingCache (Tree/) in step with what the server did.

import FuseKit
import NinePClient

#if canImport(Glibc)
  import Glibc
#endif

extension BBSFileSystem {
  public func mkdir(_ request: FuseRequest, parent: FuseInode, name: String, mode: mode_t) {
    guard name.utf8.count <= nameLimit else { return reply(request, ENAMETOOLONG) }
    guard !options.readOnly else { return reply(request, EROFS) }
    guard let directory = inodes.node(parent) else { return reply(request, ENOENT) }
    guard !isRoomLogs(directory, name) else { return reply(request, EACCES) }
    answersInterrupts(request)
    remote.makeDirectory(in: directory.path, name: name, permissions: UInt32(mode)) {
      [self] made in
      switch made {
      case .success(var stat):
        stat.name = name
        listings.apply(.added(stat), to: directory.path)
        inodes.entriesChanged(directory.inode)
        inodes.subdirectoriesChanged(directory.inode, by: 1)
        var node = inodes.record(path: directory.path + [name], kind: .directory, stat: stat)
        // Made just now, so empty: its link count is known without a listing.
        inodes.listed(node.path, subdirectories: 0, asOf: .now)
        node.subdirectories = 0
        request.replyEntry(nodes.entry(for: node))
      case .failure(let error):
        listings.invalidate(directory.path)
        request.replyError(error.errno)
      }
    }
  }

  /// Whether the mount knows `path` as a directory.
  private func isDirectory(_ path: [String]) -> Bool {
    inodes.inode(for: path).flatMap { inodes.node($0) }?.kind == .directory
  }

  public func unlink(_ request: FuseRequest, parent: FuseInode, name: String) {
    removeEntry(request, parent: parent, name: name)
  }

  public func rmdir(_ request: FuseRequest, parent: FuseInode, name: String) {
    removeEntry(request, parent: parent, name: name)
  }

  private func removeEntry(_ request: FuseRequest, parent: FuseInode, name: String) {
    guard name.utf8.count <= ListingCache.maxNameLength else {
      return reply(request, ENAMETOOLONG)
    }
    guard !options.readOnly else { return reply(request, EROFS) }
    guard let directory = inodes.node(parent) else { return reply(request, ENOENT) }
    guard !isRoomLogs(directory, name) else { return reply(request, EACCES) }
    let removesDirectory = isDirectory(directory.path + [name])
    answersInterrupts(request)
    remote.remove(directory.path + [name]) { [self] result in
      listings.forgetSubtree(directory.path + [name])
      if case .success = result {
        listings.apply(.removed(name), to: directory.path)
        inodes.unlink(directory.path + [name])
        inodes.entriesChanged(directory.inode)
        if removesDirectory { inodes.subdirectoriesChanged(directory.inode, by: -1) }
      } else {
        listings.invalidate(directory.path)
      }
      request.replyError(result.errnoValue)
    }
  }

  public func rename(
    _ request: FuseRequest, parent: FuseInode, name: String, newParent: FuseInode,
    newName: String, flags: FuseRenameFlags
  ) {
    guard name.utf8.count <= ListingCache.maxNameLength, newName.utf8.count <= nameLimit else {
      return reply(request, ENAMETOOLONG)
    }
    guard !options.readOnly else { return reply(request, EROFS) }
    // 9P renames only within a directory (Twstat of the name).
    guard parent == newParent else { return reply(request, EXDEV) }
    guard flags.isEmpty else { return reply(request, EINVAL) }
    guard let directory = inodes.node(parent) else { return reply(request, ENOENT) }
    guard !isRoomLogs(directory, name), !isRoomLogs(directory, newName) else {
      return reply(request, EACCES)
    }
    // A directory renamed over another takes its place: one subdirectory fewer.
    let replacesDirectory =
      name != newName && isDirectory(directory.path + [name])
      && isDirectory(directory.path + [newName])
    answersInterrupts(request)
    remote.rename(in: directory.path, name, to: newName) { [self] result in
      listings.forgetSubtree(directory.path + [name])
      listings.forgetSubtree(directory.path + [newName])
      switch result {
      case .success:
        listings.apply(.renamed(from: name, to: newName), to: directory.path)
        inodes.move(from: directory.path + [name], to: directory.path + [newName])
        inodes.entriesChanged(directory.inode)
        if replacesDirectory { inodes.subdirectoriesChanged(directory.inode, by: -1) }
        request.replyError(0)
      case .failure(let error):
        listings.invalidate(directory.path)
        request.replyError(error.errno == EIO ? EPERM : error.errno)
      }
    }
  }

  /// `mknod`: a regular file is made as `create` makes one, then closed. 9P2000 has no
  /// FIFOs, sockets or device nodes: EPERM, as Linux file systems that cannot hold them say
  /// (a socket's `bind` comes here too).
  public func mknod(
    _ request: FuseRequest, parent: FuseInode, name: String, mode: mode_t, device: dev_t
  ) {
    guard name.utf8.count <= nameLimit else { return reply(request, ENAMETOOLONG) }
    guard !options.readOnly else { return reply(request, EROFS) }
    guard let directory = inodes.node(parent) else { return reply(request, ENOENT) }
    guard !isRoomLogs(directory, name) else { return reply(request, EACCES) }
    guard mode & S_IFMT == S_IFREG, !classifier.isBoardRoom(directory.path),
      !classifier.isChatDirectory(directory.path)
    else { return reply(request, EPERM) }
    answersInterrupts(request)
    remote.create(
      in: directory.path, name: name, permissions: UInt32(mode) & 0o777, mode: .read
    ) { [self] created in
      switch created {
      case .failure(let error):
        listings.invalidate(directory.path)
        request.replyError(error.errno)
      case .success(let (file, stat)):
        var entry = stat
        entry.name = name
        listings.apply(.added(entry), to: directory.path)
        file.close()
        inodes.entriesChanged(directory.inode)
        let node = inodes.record(path: directory.path + [name], kind: .file, stat: stat)
        request.replyEntry(nodes.entry(for: node))
      }
    }
  }

  /// 9P2000 has no symbolic links: EPERM, as `ln -s` hears from a Linux file system without.
  public func symlink(_ request: FuseRequest, target: String, parent: FuseInode, name: String) {
    guard name.utf8.count <= nameLimit else { return reply(request, ENAMETOOLONG) }
    reply(request, options.readOnly ? EROFS : EPERM)
  }

  /// 9P2000 has no hard links: EPERM, as `link(2)` says where a file system has none.
  public func link(
    _ request: FuseRequest, inode: FuseInode, newParent: FuseInode, newName: String
  ) {
    guard newName.utf8.count <= nameLimit else { return reply(request, ENAMETOOLONG) }
    reply(request, options.readOnly ? EROFS : EPERM)
  }

  /// Whether `name` in `directory` is `chat/log` or in it: the mount's own, read only.
  func isRoomLogs(_ directory: InodeTable.Node, _ name: String) -> Bool {
    directory.kind == .roomLogs || classifier.kind(of: directory.path + [name]) == .roomLogs
  }
}
