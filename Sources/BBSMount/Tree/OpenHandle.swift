import Foundation
import FuseKit
import NinePClient
import NinePProtocol
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// An open file or directory of the mount, behind a FUSE file handle. Each kind is a type of
/// its own: a server file (``RemoteFileHandle``), a chat room (``RoomHandle``), a post file
/// (``PostHandle``), a board message being written (``DraftHandle``), a snapshot read at open
/// (``SnapshotHandle``) and a directory listing (``DirectoryHandle``).
///
/// Each method answers its request exactly once, now or later, except ``release()``, whose
/// request the file system answers.
protocol OpenHandle: AnyObject, Sendable {
  /// Reads up to `size` bytes at `offset`.
  func read(_ request: FuseRequest, size: Int, offset: UInt64)
  /// Writes `data` at `offset`.
  func write(_ request: FuseRequest, data: [UInt8], offset: UInt64)
  /// A `close(2)` of one descriptor: what it reports.
  func flush(_ request: FuseRequest)
  /// An `fsync(2)`: answered once what was written is at the server.
  func fsync(_ request: FuseRequest)
  /// The last descriptor is gone.
  func release()
  /// The poll events ready now; keeps `handle` to wake the poller later where that matters.
  func poll(_ handle: FusePollHandle?) -> Int32
}

extension OpenHandle {
  func read(_ request: FuseRequest, size: Int, offset: UInt64) { request.replyError(EBADF) }
  func write(_ request: FuseRequest, data: [UInt8], offset: UInt64) {
    request.replyError(EBADF)
  }
  func flush(_ request: FuseRequest) { request.replyError(0) }
  func fsync(_ request: FuseRequest) { request.replyError(0) }
  func release() {}
  func poll(_ handle: FusePollHandle?) -> Int32 {
    Int32(POLLIN | POLLRDNORM | POLLOUT | POLLWRNORM)
  }
}

/// The open handles by FUSE file handle number.
final class HandleTable: Sendable {
  private struct Numbered {
    var handles: [UInt64: any OpenHandle] = [:]
    var next: UInt64 = 1
  }

  private let numbered = Mutex(Numbered())

  /// Keeps `handle`; returns its number.
  func store(_ handle: any OpenHandle) -> UInt64 {
    numbered.withLock { n in
      let id = n.next
      n.next += 1
      n.handles[id] = handle
      return id
    }
  }

  subscript(id: UInt64) -> (any OpenHandle)? {
    numbered.withLock { n in
      return n.handles[id]
    }
  }

  @discardableResult
  func remove(_ id: UInt64) -> (any OpenHandle)? {
    numbered.withLock { n in
      return n.handles.removeValue(forKey: id)
    }
  }

  /// Every open handle of one kind, with its number.
  func all<Handle: OpenHandle>(_ kind: Handle.Type) -> [(id: UInt64, handle: Handle)] {
    numbered.withLock { n in
      return n.handles.compactMap { id, handle in (handle as? Handle).map { (id, $0) } }
    }
  }
}

/// A server file open on a fid of the primary session.
final class RemoteFileHandle: OpenHandle {
  let file: RemoteFile
  let inode: FuseInode
  private let inodes: InodeTable
  private let pageCache: PageCacheLedger
  private let writes: WriteBehind
  /// Reads ahead of a sequential reader; nil on handles that write and on device links.
  private let readAhead: ReadAhead?
  /// Keeps a small file read whole for opens while the link is stalled or down.
  private let capture: SeenFiles.Capture?
  /// The small files read whole, which a write here makes stale, and this file's path.
  private let seen: (files: SeenFiles, path: [String])?

  /// - Parameters:
  ///   - size: the file's size at open (for reading ahead no further).
  ///   - seen: where a small file read whole is kept (nil: nowhere), and its path.
  ///   - capture: collects this open's reads for `seen` (read-only opens of small files).
  init(
    file: RemoteFile, inode: FuseInode, inodes: InodeTable, pageCache: PageCacheLedger,
    size: UInt64? = nil, seen: (files: SeenFiles, path: [String])? = nil,
    capture: SeenFiles.Capture? = nil
  ) {
    self.file = file
    self.inode = inode
    self.inodes = inodes
    self.pageCache = pageCache
    self.seen = seen
    self.capture = capture
    writes = WriteBehind(
      limit: file.writeBehindLimit,
      hooks: WriteBehind.Hooks(
        // Before the kernel hears a write is done: its size must never be answered smaller.
        taken: { [inodes, inode] end in inodes.writeStarted(inode, end: end) },
        settled: { [inodes, inode] writes in inodes.writeLanded(inode, writes: writes) })
    ) { [file] data, offset, done in file.write(data, at: offset, done) }
    readAhead =
      file.readsAhead && !file.mode.allowsWriting
      ? ReadAhead(file: file, depth: ReadAhead.defaultDepth, size: size) {
        [pageCache, inode] in pageCache.generation(of: inode)
      } : nil
  }

  /// Opens the server file `node` on a fid of its own and answers `request` with its handle.
  ///
  /// Close-to-open: a file of a files area is stat'ed on its fresh fid before the answer, so
  /// an open after another client's close sees what that client wrote (NFS's promise). If the
  /// server's entry moved since the mount last saw it, the kernel's attributes of the file are
  /// dropped (`stale`, before the answer: a read must not stop at the old size) and its
  /// cached pages are not kept.
  static func open(
    _ request: FuseRequest, node: InodeTable.Node, info: FuseFileInfo, tree: MountTree,
    remote: Remote, handles: HandleTable, stale: @escaping @Sendable (FuseInode) -> Void
  ) {
    var mode = OpenMode(fuseFlags: info.flags)
    if info.flags & O_TRUNC != 0 && mode.allowsWriting { mode = mode.truncating }
    let openMode = mode
    let boardMessage = tree.attributes.classifier.isBoardRoom(Array(node.path.dropLast()))
    remote.open(node.path, mode: openMode) { opened in
      switch opened {
      case .failure(let error):
        request.replyError(error.errno)
      case .success(let file)
      where boardMessage || openMode.truncates || (node.local?.writesInFlight ?? 0) > 0:
        // A board message's Tstat does not tell its size; a truncating open makes the file
        // anew; the mount's own writes on their way are newer than any entry.
        answer(
          request, file, node: node, openMode: openMode, info: info, tree: tree,
          remote: remote, handles: handles)
      case .success(let file):
        let asked = ContinuousClock.now
        file.stat { fresh in
          var current = tree.inodes.node(node.inode) ?? node
          if case .success(var stat) = fresh {
            stat.name = node.path.last ?? stat.name
            stat.qid.type = current.stat?.qid.type ?? stat.qid.type
            // What the kernel was told of the file (the mount's own size and time first).
            let shown = (
              length: current.local?.size ?? current.stat?.length,
              mtime: current.local?.modified ?? current.stat?.mtime,
              version: current.stat?.qid.version
            )
            let changed =
              shown.length != stat.length || shown.mtime != stat.mtime
              || shown.version != stat.qid.version
            current = tree.record(node.path, stat, asOf: asked)
            tree.listings.refresh(stat, in: Array(node.path.dropLast()))
            if changed {
              remote.pageCache.forget(node.inode)
              stale(node.inode)
            }
          }
          answer(
            request, file, node: current, openMode: openMode, info: info, tree: tree,
            remote: remote, handles: handles)
        }
      }
    }
  }

  /// Answers an open of `file` at `node`, as the entry the mount has for it now says.
  private static func answer(
    _ request: FuseRequest, _ file: RemoteFile, node: InodeTable.Node, openMode: OpenMode,
    info: FuseFileInfo, tree: MountTree, remote: Remote, handles: HandleTable
  ) {
    var info = info
    if openMode.truncates { tree.inodes.resized(node.inode, to: 0) }
    // Sizes of 9BBS files are 0 or the body only: readers bypass the page cache unless
    // the server gives a real size. A board message's listed size is its body alone, while
    // reading it gives headers, body and signature: through the page cache `cat` would
    // stop at the body's length, cutting the message short. Readers and writers go
    // through the page cache (a writer's size is the mount's own: LocalChange), so that a
    // shared writable mmap works: FUSE refuses one on a direct-I/O open (SQLite's -shm,
    // LMDB). Write-only opens stay direct: they cannot be mapped, and `cp`
    // into the mount keeps its speed without the page cache's copy.
    // The mount's own size first: a file written and closed through the mount a moment ago
    // has it before the server's entry says so (mmap of it must not fail with ENODEV).
    let length = node.local?.size ?? node.stat?.length ?? 0
    let knowsSize = length > 0 || openMode.allowsWriting
    info.directIO =
      !knowsSize || info.flags & O_ACCMODE == O_WRONLY
      || tree.attributes.classifier.isBoardRoom(Array(node.path.dropLast()))
    // Through the page cache, a second read of an unchanged file comes from memory.
    if let stat = node.stat, !info.directIO, !openMode.allowsWriting {
      info.keepCache = remote.pageCache.open(node.inode, at: .init(stat))
    } else {
      info.keepCache = false
      remote.pageCache.forget(node.inode)
    }
    let capture = node.stat.flatMap { stat -> SeenFiles.Capture? in
      guard !openMode.allowsWriting, node.local == nil, stat.length <= SeenFiles.largestFile
      else { return nil }
      return SeenFiles.Capture(files: remote.seenFiles, path: node.path, version: .init(stat))
    }
    info.handle = handles.store(
      RemoteFileHandle(
        file: file, inode: node.inode, inodes: tree.inodes, pageCache: remote.pageCache,
        size: node.stat?.length, seen: (remote.seenFiles, node.path), capture: capture))
    if openMode.allowsWriting { tree.inodes.invalidate(node.inode) }
    // Interrupted meanwhile: the kernel will never release it, so close it now.
    if !request.replyOpen(info) { handles.remove(info.handle)?.release() }
  }

  /// Creates the server file `directory/name`, open, and answers `request` with its entry and
  /// handle. A name that exists on the server but not yet in the mount's view of the
  /// directory is opened instead, unless `O_EXCL` says otherwise (POSIX `open(O_CREAT)`).
  static func create(
    _ request: FuseRequest, in directory: [String], name: String, permissions: UInt32,
    info: FuseFileInfo, tree: MountTree, remote: Remote, handles: HandleTable
  ) {
    var opening = OpenMode(fuseFlags: info.flags)
    if info.flags & O_TRUNC != 0 { opening = opening.truncating }
    let mode = opening
    let path = directory + [name]
    remote.create(in: directory, name: name, permissions: permissions, mode: mode) { created in
      switch created {
      case .failure(let error) where error.errno == EEXIST && info.flags & O_EXCL == 0:
        tree.listings.invalidate(directory)
        openExisting(
          request, path, mode: mode, info: info, tree: tree, remote: remote, handles: handles)
      case .failure(let error):
        tree.listings.invalidate(directory)
        request.replyError(error.errno)
      case .success(let (file, stat)):
        var entry = stat
        entry.name = name
        tree.listings.apply(.added(entry), to: directory)
        if let parent = tree.inodes.inode(for: directory) { tree.inodes.entriesChanged(parent) }
        let node = tree.inodes.record(path: path, kind: .file, stat: stat)
        // The mount made it: its size is known, and the page cache serves it (see open).
        tree.inodes.resized(node.inode, to: 0, modified: stat.mtime)
        reply(
          request, file: file, node: node, info: info, tree: tree, remote: remote, handles: handles)
      }
    }
  }

  /// The create of `path` found it made already: opens it, and learns its entry (its size)
  /// by a Tstat, since the mount's listing did not have it.
  private static func openExisting(
    _ request: FuseRequest, _ path: [String], mode: OpenMode, info: FuseFileInfo, tree: MountTree,
    remote: Remote, handles: HandleTable
  ) {
    remote.open(path, mode: mode) { opened in
      switch opened {
      case .failure(let error):
        request.replyError(error.errno)
      case .success(let file):
        let asked = ContinuousClock.now
        remote.stat(path) { found in
          switch found {
          case .failure(let error):
            file.close()
            request.replyError(error.errno)
          case .success(let stat) where stat.mode.isDirectory:
            file.close()
            request.replyError(EISDIR)
          case .success(let stat):
            let node = tree.inodes.record(path: path, kind: .file, stat: stat, asOf: asked)
            if mode.truncates { tree.inodes.resized(node.inode, to: 0) }
            reply(
              request, file: file, node: tree.inodes.node(node.inode) ?? node, info: info,
              tree: tree, remote: remote, handles: handles)
          }
        }
      }
    }
  }

  /// Answers a create with the open `file` at `node`: through the page cache unless it is
  /// write-only (see ``open(_:node:info:tree:remote:handles:)``).
  private static func reply(
    _ request: FuseRequest, file: RemoteFile, node: InodeTable.Node, info: FuseFileInfo,
    tree: MountTree, remote: Remote, handles: HandleTable
  ) {
    var info = info
    info.directIO = info.flags & O_ACCMODE == O_WRONLY
    info.keepCache = false
    remote.pageCache.forget(node.inode)
    info.handle = handles.store(
      RemoteFileHandle(
        file: file, inode: node.inode, inodes: tree.inodes, pageCache: remote.pageCache))
    let current = tree.inodes.node(node.inode) ?? node
    if !request.replyCreate(tree.attributes.entry(for: current), info) {
      handles.remove(info.handle)?.release()
    }
  }

  func read(_ request: FuseRequest, size: Int, offset: UInt64) {
    // A read sees this handle's earlier writes: they land first.
    writes.drain { [self] _ in
      let group = RequestGroup()
      let pending = PendingReply(request) { [file] _ in file.cancel(group) }
      guard !pending.isAnswered else { return }
      let answer: ReadAhead.Completion = { [capture] result in
        guard let request = pending.take() else { return }
        switch result {
        case .success(let pieces):
          capture?.read(at: offset, size: size, got: pieces)
          request.replyData(pieces.map(\.fuseDataPiece))
        case .failure(let error): request.replyError(error.errno)
        }
      }
      if let readAhead {
        readAhead.read(size: size, offset: offset, group: group, answer)
      } else {
        file.read(size: size, offset: offset, group: group, answer)
      }
    }
  }

  func write(_ request: FuseRequest, data: [UInt8], offset: UInt64) {
    // Ctrl-C ends a write waiting for room unwritten (WriteBehind), or one the server does
    // not answer on a link without write-behind (its Twrite may still land).
    pageCache.forget(inode)
    if let seen { seen.files.forget(seen.path) }
    writes.write(request, data: data, offset: offset)
  }

  func flush(_ request: FuseRequest) {
    // Ctrl-C ends a close that waits for writes the server does not answer.
    request.onInterrupt { $0.replyError(EINTR) }
    writes.drain { request.replyError($0) }
  }

  /// Calls `body` once this handle's writes have landed (failures stay for its close).
  func whenWritesLanded(_ body: @escaping @Sendable () -> Void) {
    writes.drain { _ in body() }
  }

  func fsync(_ request: FuseRequest) {
    request.onInterrupt { $0.replyError(EINTR) }
    writes.drain { request.replyError($0) }
  }

  func release() {
    readAhead?.close()
    writes.drain { [file] _ in file.close() }
  }
}

/// A file read whole at open (`/chat/users`, which ignores the offset), or root's empty view
/// of a post file.
final class SnapshotHandle: OpenHandle {
  let data: [UInt8]

  init(_ data: [UInt8]) { self.data = data }

  func read(_ request: FuseRequest, size: Int, offset: UInt64) {
    let start = Int(min(offset, UInt64(data.count)))
    request.replyData(Array(data[start..<min(data.count, start + size)]))
  }
}

/// A directory listing taken at opendir.
final class DirectoryHandle: OpenHandle {
  /// The listing served, when it was made, and whether any of it has been read.
  private let state: Mutex<(entries: [DirectoryEntry], listed: ContinuousClock.Instant, read: Bool)>

  init(_ entries: [DirectoryEntry]) { state = Mutex((entries, .now, false)) }

  /// The entries for a readdir at `offset`; whether they must be listed again first: at
  /// offset 0 after a read (`rewinddir(3)` sees the directory as it is now), or after the
  /// mount changed the directory's entries (`changed`, ``LocalChange/landed``) since.
  func entries(at offset: Int64, changed: ContinuousClock.Instant?) -> (
    entries: [DirectoryEntry], stale: Bool
  ) {
    state.withLock { state in
      let stale = offset == 0 && (state.read || changed.map { $0 > state.listed } ?? false)
      state.read = true
      return (state.entries, stale)
    }
  }

  /// A fresh listing, for a rewind.
  func replace(_ entries: [DirectoryEntry]) {
    state.withLock { $0 = (entries, .now, true) }
  }

  func read(_ request: FuseRequest, size: Int, offset: UInt64) { request.replyError(EISDIR) }
}

extension OpenMode {
  /// The 9P open mode for open(2) flags' access mode (O_TRUNC aside).
  init(fuseFlags flags: Int32) {
    self =
      switch flags & O_ACCMODE {
      case O_WRONLY: .write
      case O_RDWR: .readWrite
      default: .read
      }
  }
}

extension ReadData {
  /// The piece as FUSE takes it (a pipe stays open while `self` lives).
  var fuseDataPiece: FuseDataPiece {
    switch self {
    case .memory(let bytes): .bytes(bytes)
    case .pipe(let pipe): .pipe(descriptor: pipe.descriptor, count: pipe.count)
    }
  }
}
