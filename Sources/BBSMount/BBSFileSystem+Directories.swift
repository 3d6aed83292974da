// The FUSE operations over an open directory: opendir lists it once into a DirectoryHandle
// (Tree/OpenHandle), readdir and readdirplus page through that listing, releasedir drops it.

import FuseKit
import Logging
import NinePClient

#if canImport(Glibc)
  import Glibc
#endif

extension BBSFileSystem {
  public func opendir(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo) {
    guard let node = inodes.node(inode) else { return reply(request, ENOENT) }
    // A fresh listing for each `ls`; lookups in between use it.
    answersInterrupts(request)
    tree.entries(of: node) { [self] listed in
      switch listed {
      case .failure(let error):
        request.replyError(error.errno)
      case .success(let entries):
        var info = file
        info.handle = handles.store(DirectoryHandle(entries))
        // Interrupted meanwhile: nobody will release this handle.
        if !request.replyOpen(info) { handles.remove(info.handle) }
      }
    }
  }

  public func readdir(
    _ request: FuseRequest, inode: FuseInode, size: Int, offset: Int64, file: FuseFileInfo
  ) {
    list(request, inode: inode, size: size, offset: offset, file: file, plus: false)
  }

  public func readdirplus(
    _ request: FuseRequest, inode: FuseInode, size: Int, offset: Int64, file: FuseFileInfo
  ) {
    list(request, inode: inode, size: size, offset: offset, file: file, plus: true)
  }

  private func list(
    _ request: FuseRequest, inode: FuseInode, size: Int, offset: Int64, file: FuseFileInfo,
    plus: Bool
  ) {
    guard let directory = handles[file.handle] as? DirectoryHandle else {
      return reply(request, EBADF)
    }
    let node = inodes.node(inode)
    let (entries, stale) = directory.entries(at: offset, changed: node?.local?.landed)
    guard stale, let node else {
      return serve(request, entries, size: size, offset: offset, plus: plus)
    }
    // rewinddir, or a listing from before the mount's own change: list the directory again,
    // asked for now (what was listed is the answer if that fails).
    answersInterrupts(request)
    tree.entries(of: node, asOfNow: true) { [self] listed in
      var fresh = entries
      if case .success(let again) = listed {
        directory.replace(again)
        fresh = again
      }
      serve(request, fresh, size: size, offset: offset, plus: plus)
    }
  }

  private func serve(
    _ request: FuseRequest, _ entries: [DirectoryEntry], size: Int, offset: Int64, plus: Bool
  ) {
    var buffer = DirectoryBuffer(request: request, size: size, plus: plus)
    var index = Int(max(0, offset))
    while index < entries.count, buffer.add(entries[index], nextOffset: Int64(index + 1)) {
      index += 1
    }
    if index < entries.count && buffer.count == 0 {
      // Not even one entry fits: an empty reply would end the listing early, silently.
      logger.warning("readdir buffer of \(size) bytes holds no entry; answering EINVAL")
      return reply(request, EINVAL)
    }
    request.replyDirectory(buffer)
  }

  public func releasedir(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo) {
    handles.remove(file.handle)
    request.replyError(0)
  }
}
