import Glibc

/// A file system served through ``FuseMount``: one method per FUSE low-level operation.
///
/// Every method except ``initialize(_:notifier:)``, ``destroy()`` and
/// ``forget(inode:lookups:)`` gets a ``FuseRequest`` and must answer it exactly once, with the
/// reply that fits the op, from any thread, now or later. Methods are called on libfuse worker
/// threads, several at a time: they must not block for long (park the request and reply later
/// instead).
///
/// Defaults: `open`/`opendir` succeed with handle 0, `release`/`releasedir` succeed, `statfs`
/// reports an empty file system, `forget` does nothing, the rest answer `ENOSYS` (which the
/// kernel remembers for `flush`, `fsync` and `poll` and then stops asking).
public protocol FuseFileSystem: AnyObject, Sendable {
  /// The connection is set up: adjust `connection` (``FuseConnection/maxRead``,
  /// ``FuseConnection/maxWrite``, ``FuseConnection/maxBackground``, ``FuseConnection/want``).
  /// `readdirplus` is used only if this adds ``FuseCapabilities/readdirplus`` to `want`.
  /// Keep `notifier` to invalidate caches and wake pollers later.
  func initialize(_ connection: inout FuseConnection, notifier: FuseNotifier)
  /// The mount ends (after the last request was answered or abandoned).
  func destroy()

  /// Looks `name` up in directory `parent`: ``FuseRequest/replyEntry(_:)`` (counts one
  /// lookup) or an error (`ENOENT`).
  func lookup(_ request: FuseRequest, parent: FuseInode, name: String)
  /// The kernel drops `lookups` references to `inode` (no reply; FuseKit sends none).
  /// `forget_multi` batches arrive here one by one.
  func forget(inode: FuseInode, lookups: UInt64)
  /// ``FuseRequest/replyAttr(_:timeout:)``. `file` is set when the caller holds it open.
  func getattr(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo?)
  /// Changes the attributes in `changes` (size for truncate, times, mode…), then
  /// ``FuseRequest/replyAttr(_:timeout:)`` with the new attributes.
  func setattr(
    _ request: FuseRequest, inode: FuseInode, attributes: stat, changes: FuseSetAttributes,
    file: FuseFileInfo?)
  /// ``FuseRequest/replyReadlink(_:)``.
  func readlink(_ request: FuseRequest, inode: FuseInode)
  /// Creates a non-directory node: ``FuseRequest/replyEntry(_:)``.
  func mknod(_ request: FuseRequest, parent: FuseInode, name: String, mode: mode_t, device: dev_t)
  /// Creates a symbolic link `parent/name` to `target`: ``FuseRequest/replyEntry(_:)``.
  func symlink(_ request: FuseRequest, target: String, parent: FuseInode, name: String)
  /// Makes `newParent/newName` a hard link to `inode`: ``FuseRequest/replyEntry(_:)``.
  func link(_ request: FuseRequest, inode: FuseInode, newParent: FuseInode, newName: String)
  /// Creates a directory: ``FuseRequest/replyEntry(_:)``.
  func mkdir(_ request: FuseRequest, parent: FuseInode, name: String, mode: mode_t)
  /// Removes a file: `replyError(0)` on success.
  func unlink(_ request: FuseRequest, parent: FuseInode, name: String)
  /// Removes a directory: `replyError(0)` on success.
  func rmdir(_ request: FuseRequest, parent: FuseInode, name: String)
  /// Renames `parent/name` to `newParent/newName`: `replyError(0)` on success.
  func rename(
    _ request: FuseRequest, parent: FuseInode, name: String, newParent: FuseInode,
    newName: String, flags: FuseRenameFlags)

  /// Opens a file: ``FuseRequest/replyOpen(_:)`` with a handle and caching choices in `file`.
  /// With ``FuseCapabilities/atomicOTrunc`` in `want` (libfuse turns it on by default),
  /// `O_TRUNC` arrives here in `file.flags` instead of as a `setattr`: truncate on open.
  func open(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo)
  /// Reads up to `size` bytes at `offset`: ``FuseRequest/replyData(_:)``. May park.
  func read(_ request: FuseRequest, inode: FuseInode, size: Int, offset: Int64, file: FuseFileInfo)
  /// Writes `data` at `offset`: ``FuseRequest/replyWrite(_:)``.
  func write(
    _ request: FuseRequest, inode: FuseInode, data: [UInt8], offset: Int64, file: FuseFileInfo)
  /// A `close(2)` of one descriptor (there may be several per open): `replyError(0)`.
  func flush(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo)
  /// The last descriptor of an open file is gone: `replyError(0)`.
  func release(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo)
  /// `fsync(2)`/`fdatasync(2)`: `replyError(0)`.
  func fsync(_ request: FuseRequest, inode: FuseInode, dataOnly: Bool, file: FuseFileInfo)

  /// Opens a directory: ``FuseRequest/replyOpen(_:)``.
  func opendir(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo)
  /// Lists a directory from `offset`, at most `size` bytes: a ``DirectoryBuffer`` reply or
  /// ``FuseRequest/replyDirectory(entries:offset:size:plus:)`` with `plus: false`.
  func readdir(
    _ request: FuseRequest, inode: FuseInode, size: Int, offset: Int64, file: FuseFileInfo)
  /// As `readdir` with full entries (`plus: true`); each entry returned counts one lookup.
  func readdirplus(
    _ request: FuseRequest, inode: FuseInode, size: Int, offset: Int64, file: FuseFileInfo)
  /// Closes a directory: `replyError(0)`.
  func releasedir(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo)

  /// ``FuseRequest/replyStatfs(_:)``.
  func statfs(_ request: FuseRequest, inode: FuseInode)
  /// Creates and opens a file: ``FuseRequest/replyCreate(_:_:)``. With `ENOSYS` the kernel
  /// falls back to mknod + open.
  func create(
    _ request: FuseRequest, parent: FuseInode, name: String, mode: mode_t, file: FuseFileInfo)
  /// Reports readiness: ``FuseRequest/replyPoll(_:)`` with the ready events now. When
  /// `handle` is set, keep it and call ``FusePollHandle/notify()`` when readiness changes.
  func poll(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo, handle: FusePollHandle?)
}

extension FuseFileSystem {
  public func initialize(_ connection: inout FuseConnection, notifier: FuseNotifier) {}
  public func destroy() {}
  public func forget(inode: FuseInode, lookups: UInt64) {}

  public func setattr(
    _ request: FuseRequest, inode: FuseInode, attributes: stat, changes: FuseSetAttributes,
    file: FuseFileInfo?
  ) { request.replyError(ENOSYS) }
  public func readlink(_ request: FuseRequest, inode: FuseInode) { request.replyError(ENOSYS) }
  public func mknod(
    _ request: FuseRequest, parent: FuseInode, name: String, mode: mode_t, device: dev_t
  ) { request.replyError(ENOSYS) }
  public func symlink(_ request: FuseRequest, target: String, parent: FuseInode, name: String) {
    request.replyError(ENOSYS)
  }
  public func link(
    _ request: FuseRequest, inode: FuseInode, newParent: FuseInode, newName: String
  ) { request.replyError(ENOSYS) }
  public func mkdir(_ request: FuseRequest, parent: FuseInode, name: String, mode: mode_t) {
    request.replyError(ENOSYS)
  }
  public func unlink(_ request: FuseRequest, parent: FuseInode, name: String) {
    request.replyError(ENOSYS)
  }
  public func rmdir(_ request: FuseRequest, parent: FuseInode, name: String) {
    request.replyError(ENOSYS)
  }
  public func rename(
    _ request: FuseRequest, parent: FuseInode, name: String, newParent: FuseInode,
    newName: String, flags: FuseRenameFlags
  ) { request.replyError(ENOSYS) }

  public func open(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo) {
    request.replyOpen(file)
  }
  public func read(
    _ request: FuseRequest, inode: FuseInode, size: Int, offset: Int64, file: FuseFileInfo
  ) { request.replyError(ENOSYS) }
  public func write(
    _ request: FuseRequest, inode: FuseInode, data: [UInt8], offset: Int64, file: FuseFileInfo
  ) { request.replyError(ENOSYS) }
  public func flush(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo) {
    request.replyError(ENOSYS)
  }
  public func release(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo) {
    request.replyError(0)
  }
  public func fsync(_ request: FuseRequest, inode: FuseInode, dataOnly: Bool, file: FuseFileInfo) {
    request.replyError(ENOSYS)
  }

  public func opendir(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo) {
    request.replyOpen(file)
  }
  public func readdir(
    _ request: FuseRequest, inode: FuseInode, size: Int, offset: Int64, file: FuseFileInfo
  ) { request.replyError(ENOSYS) }
  public func readdirplus(
    _ request: FuseRequest, inode: FuseInode, size: Int, offset: Int64, file: FuseFileInfo
  ) { request.replyError(ENOSYS) }
  public func releasedir(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo) {
    request.replyError(0)
  }

  public func statfs(_ request: FuseRequest, inode: FuseInode) {
    var s = statvfs()
    s.f_namemax = 255
    s.f_bsize = 512
    request.replyStatfs(s)
  }
  public func create(
    _ request: FuseRequest, parent: FuseInode, name: String, mode: mode_t, file: FuseFileInfo
  ) { request.replyError(ENOSYS) }
  public func poll(
    _ request: FuseRequest, inode: FuseInode, file: FuseFileInfo, handle: FusePollHandle?
  ) { request.replyError(ENOSYS) }
}
