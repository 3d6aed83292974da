import CFuse3
import Glibc

/// Tells the kernel about changes it did not cause: cached attributes, data and names to drop,
/// and files that became ready for `poll`. Usable from any thread; a no-op (returning
/// `ENOTCONN`) before the mount and after it ended.
///
/// Do not call it from inside an operation on the same inode or directory: the kernel may
/// hold that inode's lock until the operation is answered.
public final class FuseNotifier: Sendable {
  // Weak: a file system keeps its notifier, and the core keeps the file system.
  weak let core: FuseUserdata?

  init(core: FuseUserdata) { self.core = core }

  /// Drops cached attributes of `inode` and its cached data in `offset..<offset+length`
  /// (`length` 0: to the end; `offset` < 0: attributes only). Returns 0 or an errno
  /// (`ENOENT`: the kernel had nothing cached).
  @discardableResult
  public func invalidateInode(_ inode: FuseInode, offset: Int64 = 0, length: Int64 = 0) -> Int32 {
    core?.withSession { -fuse_lowlevel_notify_inval_inode($0, inode, off_t(offset), off_t(length)) }
      ?? ENOTCONN
  }

  /// Drops the cached name `name` in directory `parent` (and the attributes of what it named).
  /// Returns 0 or an errno (`ENOENT`: not cached).
  @discardableResult
  public func invalidateEntry(parent: FuseInode, name: String) -> Int32 {
    core?.withSession { se in
      let n = name.utf8CString
      return n.withUnsafeBufferPointer {
        -fuse_lowlevel_notify_inval_entry(se, parent, $0.baseAddress, n.count - 1)
      }
    } ?? ENOTCONN
  }
}

/// The kernel's wish to hear when a file becomes ready (`struct fuse_pollhandle`), handed to
/// ``FuseFileSystem/poll(_:inode:file:handle:)``. Keep the newest one per open file and call
/// ``notify()`` when its readiness changes; one notification wakes every poller of that file.
/// Freed (`fuse_pollhandle_destroy`) when the last reference goes.
///
/// Sendable by hand (`@unchecked`, `OpaquePointer` is not Sendable): `raw` is immutable;
/// libfuse only reads it in notify, under the core's gate.
public final class FusePollHandle: @unchecked Sendable, Hashable {
  private let raw: OpaquePointer
  private weak let core: FuseUserdata?

  init(raw: OpaquePointer, core: FuseUserdata) {
    self.raw = raw
    self.core = core
  }

  deinit { fuse_pollhandle_destroy(raw) }

  /// Wakes the pollers (`fuse_lowlevel_notify_poll`); they poll again. Returns 0 or an errno.
  @discardableResult
  public func notify() -> Int32 {
    core?.withSession { _ in -fuse_lowlevel_notify_poll(raw) } ?? ENOTCONN
  }

  public static func == (a: FusePollHandle, b: FusePollHandle) -> Bool { a === b }
  public func hash(into h: inout Hasher) { h.combine(ObjectIdentifier(self)) }
}
