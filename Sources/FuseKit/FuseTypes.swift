import CFuse3
import Glibc

/// A FUSE inode number (`fuse_ino_t`). The root directory is ``FuseInode/root``.
public typealias FuseInode = UInt64

extension FuseInode {
  /// The inode number of the mount's root directory (`FUSE_ROOT_ID`).
  public static let root: FuseInode = 1
}

// MARK: - Entries and file info

/// What `lookup`, `mkdir`, `mknod`, `create` and `readdirplus` tell the kernel about a name
/// (`struct fuse_entry_param`). Every entry replied increments the inode's lookup count by
/// one; the kernel gives it back through `forget`.
public struct FuseEntry: Sendable {
  /// The inode number; also written into `attributes.st_ino`.
  public var inode: FuseInode
  /// Generation number; (inode, generation) must be unique over the file system's lifetime.
  public var generation: UInt64
  /// The inode's attributes.
  public var attributes: stat
  /// How long (seconds) the kernel may cache `attributes`.
  public var attributeTimeout: Double
  /// How long (seconds) the kernel may cache the name → inode binding.
  public var entryTimeout: Double

  /// Creates an entry; `attributes.st_ino` is set to `inode`.
  public init(
    inode: FuseInode, attributes: stat, attributeTimeout: Double = 1, entryTimeout: Double = 1,
    generation: UInt64 = 0
  ) {
    self.inode = inode
    self.generation = generation
    self.attributes = attributes
    self.attributes.st_ino = UInt(inode)
    self.attributeTimeout = attributeTimeout
    self.entryTimeout = entryTimeout
  }

  /// A negative entry: "no such name", cached by the kernel for `timeout` seconds.
  public static func negative(timeout: Double) -> FuseEntry {
    FuseEntry(inode: 0, attributes: stat(), attributeTimeout: 0, entryTimeout: timeout)
  }

  var cValue: fuse_entry_param {
    var e = fuse_entry_param()
    e.ino = inode
    e.generation = generation
    e.attr = attributes
    e.attr_timeout = attributeTimeout
    e.entry_timeout = entryTimeout
    return e
  }
}

/// Per-open-file state (`struct fuse_file_info`), in both directions: the kernel's open flags
/// and the handle in, and the handle and caching choices out (``FuseRequest/replyOpen(_:)``).
public struct FuseFileInfo: Sendable, Equatable {
  /// `open(2)` flags (`O_RDONLY`, `O_NONBLOCK`, …). Valid in open, create and release.
  public var flags: Int32
  /// The file system's handle for this open file; set it in open/create/opendir.
  public var handle: UInt64
  /// Out: bypass the page cache (reads and writes go straight to the file system).
  public var directIO: Bool
  /// Out: keep cached data from previous opens.
  public var keepCache: Bool
  /// Out: the file is not seekable (a stream).
  public var nonSeekable: Bool
  /// Out (opendir): let the kernel cache readdir results.
  public var cacheDirectory: Bool
  /// Out: no flush is needed on close.
  public var noFlush: Bool
  /// In (write): the write comes from the page cache (writeback), caller context is invalid.
  public var isWritePage: Bool
  /// In (release): the release also flushes.
  public var isFlush: Bool
  /// In (flush, locks): the lock owner id.
  public var lockOwner: UInt64
  /// In (poll): the requested poll events.
  public var pollEvents: UInt32

  /// Creates file info with everything off.
  public init(
    flags: Int32 = 0, handle: UInt64 = 0, directIO: Bool = false, keepCache: Bool = false,
    nonSeekable: Bool = false, cacheDirectory: Bool = false, noFlush: Bool = false
  ) {
    self.flags = flags
    self.handle = handle
    self.directIO = directIO
    self.keepCache = keepCache
    self.nonSeekable = nonSeekable
    self.cacheDirectory = cacheDirectory
    self.noFlush = noFlush
    self.isWritePage = false
    self.isFlush = false
    self.lockOwner = 0
    self.pollEvents = 0
  }

  init(_ fi: UnsafePointer<fuse_file_info>) {
    let f = fi.pointee
    self.init(
      flags: f.flags, handle: f.fh, directIO: f.direct_io != 0, keepCache: f.keep_cache != 0,
      nonSeekable: f.nonseekable != 0, cacheDirectory: f.cache_readdir != 0,
      noFlush: f.noflush != 0)
    isWritePage = f.writepage != 0
    isFlush = f.flush != 0
    lockOwner = f.lock_owner
    pollEvents = f.poll_events
  }

  /// The access mode part of ``flags`` (`O_RDONLY`, `O_WRONLY` or `O_RDWR`).
  public var accessMode: Int32 { flags & O_ACCMODE }

  var cValue: fuse_file_info {
    var f = fuse_file_info()
    f.flags = flags
    f.fh = handle
    f.direct_io = directIO ? 1 : 0
    f.keep_cache = keepCache ? 1 : 0
    f.nonseekable = nonSeekable ? 1 : 0
    f.cache_readdir = cacheDirectory ? 1 : 0
    f.noflush = noFlush ? 1 : 0
    f.lock_owner = lockOwner
    f.poll_events = pollEvents
    return f
  }
}

/// The process that made a request (`struct fuse_ctx`). Zero for requests the kernel makes on
/// its own behalf (writeback, forget).
public struct FuseCallerContext: Sendable, Hashable {
  /// Effective user id of the caller.
  public var uid: uid_t
  /// Effective group id of the caller.
  public var gid: gid_t
  /// Thread id of the caller.
  public var pid: pid_t
  /// The caller's umask (only meaningful for create/mkdir/mknod).
  public var umask: mode_t
}

/// One element of a `forget_multi` batch.
public struct FuseForget: Sendable, Hashable {
  /// The inode.
  public var inode: FuseInode
  /// How many lookups the kernel gives back.
  public var lookups: UInt64
}

// MARK: - Flags

/// Which attributes a `setattr` changes (`FUSE_SET_ATTR_*`).
public struct FuseSetAttributes: OptionSet, Sendable, Hashable {
  public let rawValue: Int32
  public init(rawValue: Int32) { self.rawValue = rawValue }

  public static let mode = Self(rawValue: 1 << 0)
  public static let uid = Self(rawValue: 1 << 1)
  public static let gid = Self(rawValue: 1 << 2)
  public static let size = Self(rawValue: 1 << 3)
  public static let atime = Self(rawValue: 1 << 4)
  public static let mtime = Self(rawValue: 1 << 5)
  /// Set atime to now (ignore the value in the attributes).
  public static let atimeNow = Self(rawValue: 1 << 7)
  /// Set mtime to now (ignore the value in the attributes).
  public static let mtimeNow = Self(rawValue: 1 << 8)
  public static let ctime = Self(rawValue: 1 << 10)
}

/// `renameat2(2)` flags passed to `rename`.
public struct FuseRenameFlags: OptionSet, Sendable, Hashable {
  public let rawValue: UInt32
  public init(rawValue: UInt32) { self.rawValue = rawValue }

  /// Fail with `EEXIST` if the target exists (`RENAME_NOREPLACE`).
  public static let noReplace = Self(rawValue: 1 << 0)
  /// Atomically exchange source and target (`RENAME_EXCHANGE`).
  public static let exchange = Self(rawValue: 1 << 1)
}

/// A piece of the data answering a read: bytes in memory, or bytes waiting in a pipe (its read
/// end) to be spliced to the kernel.
public enum FuseDataPiece: Sendable {
  case bytes(ArraySlice<UInt8>)
  case pipe(descriptor: Int32, count: Int)

  /// How many bytes.
  public var count: Int {
    switch self {
    case .bytes(let bytes): bytes.count
    case .pipe(_, let count): count
    }
  }
}

/// Kernel capabilities (`FUSE_CAP_*`) in ``FuseConnection/capable`` and ``FuseConnection/want``.
public struct FuseCapabilities: OptionSet, Sendable, Hashable {
  public let rawValue: UInt32
  public init(rawValue: UInt32) { self.rawValue = rawValue }

  public static let asyncRead = Self(rawValue: 1 << 0)
  public static let posixLocks = Self(rawValue: 1 << 1)
  public static let atomicOTrunc = Self(rawValue: 1 << 3)
  public static let exportSupport = Self(rawValue: 1 << 4)
  public static let dontMask = Self(rawValue: 1 << 6)
  public static let spliceWrite = Self(rawValue: 1 << 7)
  public static let spliceMove = Self(rawValue: 1 << 8)
  public static let spliceRead = Self(rawValue: 1 << 9)
  public static let flockLocks = Self(rawValue: 1 << 10)
  public static let autoInvalidateData = Self(rawValue: 1 << 12)
  /// Use `readdirplus`. Off unless the file system's `initialize` turns it on.
  public static let readdirplus = Self(rawValue: 1 << 13)
  public static let readdirplusAuto = Self(rawValue: 1 << 14)
  public static let asyncDirectIO = Self(rawValue: 1 << 15)
  public static let writebackCache = Self(rawValue: 1 << 16)
  public static let parallelDirectoryOps = Self(rawValue: 1 << 18)
  public static let explicitInvalidateData = Self(rawValue: 1 << 25)
}

/// The connection parameters negotiated at `init` (`struct fuse_conn_info`). The file system
/// may change the writable fields in ``FuseFileSystem/initialize(_:notifier:)``.
public struct FuseConnection: Sendable {
  /// Kernel protocol version.
  public let protocolMajor: UInt32
  /// Kernel protocol minor version.
  public let protocolMinor: UInt32
  /// What the kernel supports.
  public let capable: FuseCapabilities
  /// What the file system wants (must be a subset of ``capable``).
  public var want: FuseCapabilities
  /// Largest write request, bytes.
  public var maxWrite: UInt32
  /// Largest read request, bytes. Forced to the session's `maxRead` option when that is set.
  public var maxRead: UInt32
  /// Largest readahead, bytes.
  public var maxReadahead: UInt32
  /// Most background requests (async reads, among others) the kernel keeps outstanding.
  /// Parked reads count against this: raise it when many readers may wait at once.
  public var maxBackground: UInt32
  /// Background requests above which the kernel considers the file system congested.
  public var congestionThreshold: UInt32
  /// Timestamp granularity in nanoseconds (1 = nanosecond resolution).
  public var timeGranularity: UInt32

  init(_ c: fuse_conn_info) {
    protocolMajor = c.proto_major
    protocolMinor = c.proto_minor
    capable = FuseCapabilities(rawValue: c.capable)
    want = FuseCapabilities(rawValue: c.want)
    maxWrite = c.max_write
    maxRead = c.max_read
    maxReadahead = c.max_readahead
    maxBackground = c.max_background
    congestionThreshold = c.congestion_threshold
    timeGranularity = c.time_gran
  }

  func apply(to c: inout fuse_conn_info) {
    c.want = want.intersection(capable).rawValue
    c.max_write = maxWrite
    c.max_read = maxRead
    c.max_readahead = maxReadahead
    c.max_background = maxBackground
    c.congestion_threshold = congestionThreshold
    c.time_gran = timeGranularity
  }
}
