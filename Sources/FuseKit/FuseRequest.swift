import CFuse3
import Foundation
import Glibc

/// One kernel request (`fuse_req_t`), answered by exactly one `reply…` call from any thread,
/// now or later.
///
/// Replies are exactly-once by construction: the first reply goes to the kernel, any later one
/// is dropped and logged (a warning, or debug after shutdown, when the mount already
/// answered everything with `EIO`). Each reply method returns whether it was the one that went
/// out. A request's memory belongs to libfuse until the reply, so nothing here touches it
/// after that.
///
/// Sendable by hand (`@unchecked`, `OpaquePointer` is not Sendable): `raw` is only handed to
/// libfuse while its FuseUserdata knows it is outstanding, under the core's gate.
public struct FuseRequest: @unchecked Sendable, Hashable {
  let raw: OpaquePointer
  /// Unique within the mount (pointers are reused by libfuse; ids are not).
  public let id: UInt64
  let core: FuseUserdata

  init(raw: OpaquePointer, id: UInt64, core: FuseUserdata) {
    self.raw = raw
    self.id = id
    self.core = core
  }

  var key: UInt { UInt(bitPattern: raw) }

  public static func == (a: FuseRequest, b: FuseRequest) -> Bool { a.id == b.id && a.raw == b.raw }
  public func hash(into h: inout Hasher) { h.combine(id) }

  // MARK: Caller and interrupts

  /// The calling process. Read it before replying; after the reply it is all zero.
  public var caller: FuseCallerContext {
    let context: FuseCallerContext?? = core.whileOutstanding(self) { raw in
      fuse_req_ctx(raw).map {
        FuseCallerContext(
          uid: $0.pointee.uid, gid: $0.pointee.gid, pid: $0.pointee.pid, umask: $0.pointee.umask)
      }
    }
    return (context ?? nil) ?? FuseCallerContext(uid: 0, gid: 0, pid: 0, umask: 0)
  }

  /// Whether the kernel has interrupted this request (the caller got a signal). False once
  /// replied.
  public var isInterrupted: Bool {
    core.whileOutstanding(self) { fuse_req_interrupted($0) != 0 } ?? false
  }

  /// Whether this request still waits for its reply.
  public var isOutstanding: Bool { core.isOutstanding(self) }

  /// Calls `handler` (once, on a libfuse thread) when the kernel interrupts this request; if
  /// the interrupt already arrived, calls it before returning. The handler usually answers
  /// `EINTR` (see ``PendingReply``, which does this for you).
  ///
  /// Call it while the request is still private to the calling op (before any other thread
  /// can reply to it), and never while holding a lock that the handler takes: libfuse holds
  /// the request's own lock while it runs the handler.
  public func onInterrupt(_ handler: @escaping @Sendable (FuseRequest) -> Void) {
    core.setInterruptHandler(self, handler)
  }

  /// Says that this request may be answered before the work it started is done (with what
  /// the file system last saw, say): that work's reply, when it comes, is dropped quietly
  /// rather than logged as a second reply.
  public func allowLateReplies() { core.allowLateReplies(self) }

  // MARK: Replies

  /// Answers with an error (`ENOENT`, `EINTR`, …; positive errno). 0 means success for ops
  /// without data (unlink, flush, release, …).
  @discardableResult
  public func replyError(_ errno: Int32) -> Bool {
    core.reply(self, errno == 0 ? "ok" : "error \(errnoName(errno))") { fuse_reply_err($0, errno) }
  }

  /// Answers with an error code.
  @discardableResult
  public func replyError(_ code: POSIXErrorCode) -> Bool { replyError(code.rawValue) }

  /// Answers success for ops without data (same as `replyError(0)`).
  @discardableResult
  public func replyOK() -> Bool { replyError(0) }

  /// Answers `forget`-like requests that take no reply. FuseKit does this itself for
  /// `forget`; kept for completeness.
  @discardableResult
  public func replyNone() -> Bool {
    core.reply(self, "none") {
      fuse_reply_none($0)
      return 0
    }
  }

  /// Answers lookup, mknod, mkdir (and symlink/link) with an entry.
  @discardableResult
  public func replyEntry(_ entry: FuseEntry) -> Bool {
    core.reply(self, "entry ino=\(entry.inode)") { raw in
      var e = entry.cValue
      return fuse_reply_entry(raw, &e)
    }
  }

  /// Answers `create` with the new entry and the opened file.
  @discardableResult
  public func replyCreate(_ entry: FuseEntry, _ file: FuseFileInfo) -> Bool {
    core.reply(self, "create ino=\(entry.inode) fh=\(file.handle)") { raw in
      var e = entry.cValue
      var f = file.cValue
      return fuse_reply_create(raw, &e, &f)
    }
  }

  /// Answers getattr/setattr with attributes valid for `timeout` seconds.
  @discardableResult
  public func replyAttr(_ attributes: stat, timeout: Double) -> Bool {
    core.reply(self, "attr ino=\(attributes.st_ino) size=\(attributes.st_size)") { raw in
      var st = attributes
      return fuse_reply_attr(raw, &st, timeout)
    }
  }

  /// Answers readlink.
  @discardableResult
  public func replyReadlink(_ target: String) -> Bool {
    core.reply(self, "link \(target)") { fuse_reply_readlink($0, target) }
  }

  /// Answers open/opendir with the handle and caching choices in `file`.
  @discardableResult
  public func replyOpen(_ file: FuseFileInfo) -> Bool {
    core.reply(self, "open fh=\(file.handle)\(file.directIO ? " direct_io" : "")") { raw in
      var f = file.cValue
      return fuse_reply_open(raw, &f)
    }
  }

  /// Answers read with `bytes` (fewer than asked for means end of file, for a regular file).
  @discardableResult
  public func replyData(_ bytes: some ContiguousBytes) -> Bool {
    bytes.withUnsafeBytes { buffer in
      core.reply(self, "data \(buffer.count) bytes") { raw in
        fuse_reply_buf(raw, buffer.baseAddress?.assumingMemoryBound(to: CChar.self), buffer.count)
      }
    }
  }

  /// Answers read with the concatenation of `pieces`, handed to the kernel as one gathered
  /// write (no copy into one buffer first).
  @discardableResult
  public func replyData(pieces: [some ContiguousBytes]) -> Bool {
    if pieces.count == 1 { return replyData(pieces[0]) }
    let total = pieces.reduce(0) { sum, piece in sum + piece.withUnsafeBytes { $0.count } }
    return core.reply(self, "data \(total) bytes in \(pieces.count) pieces") { raw in
      withPinned(pieces[...], into: []) { vectors in
        fuse_reply_iov(raw, vectors, Int32(vectors.count))
      }
    }
  }

  /// Answers read with the concatenation of `pieces`, some of which may wait in pipes: libfuse
  /// splices those to the kernel (with ``FuseCapabilities/spliceWrite`` wanted), so their
  /// bytes never pass through this process; it reads them out itself where it cannot splice.
  /// The pipes must stay open until this returns.
  @discardableResult
  public func replyData(_ pieces: [FuseDataPiece]) -> Bool {
    var memory: [ArraySlice<UInt8>] = []
    for piece in pieces {
      guard case .bytes(let bytes) = piece else { return replyBuffers(pieces) }
      memory.append(bytes)
    }
    return replyData(pieces: memory)
  }

  private func replyBuffers(_ pieces: [FuseDataPiece]) -> Bool {
    let total = pieces.reduce(0) { $0 + $1.count }
    let memory = pieces.compactMap { piece -> ArraySlice<UInt8>? in
      if case .bytes(let bytes) = piece { return bytes }
      return nil
    }
    return core.reply(self, "data \(total) bytes in \(pieces.count) pieces, spliced") { raw in
      withPinned(memory[...], into: []) { vectors in
        // struct fuse_bufvec ends in buf[1]: room for the other buffers goes after it.
        let size =
          MemoryLayout<fuse_bufvec>.size + max(0, pieces.count - 1) * MemoryLayout<fuse_buf>.stride
        let storage = UnsafeMutableRawPointer.allocate(
          byteCount: size, alignment: MemoryLayout<fuse_bufvec>.alignment)
        defer { storage.deallocate() }
        storage.initializeMemory(as: UInt8.self, repeating: 0, count: size)
        let vector = storage.bindMemory(to: fuse_bufvec.self, capacity: 1)
        vector.pointee.count = pieces.count
        guard let offset = MemoryLayout<fuse_bufvec>.offset(of: \.buf) else {
          return fuse_reply_err(raw, EIO)
        }
        let buffers = (storage + offset).bindMemory(to: fuse_buf.self, capacity: pieces.count)
        var nextMemory = 0
        for (index, piece) in pieces.enumerated() {
          buffers[index].size = piece.count
          switch piece {
          case .bytes:
            buffers[index].mem = vectors[nextMemory].iov_base
            nextMemory += 1
          case .pipe(let descriptor, _):
            buffers[index].flags = FUSE_BUF_IS_FD
            buffers[index].fd = descriptor
          }
        }
        return fuse_reply_data(raw, vector, fuse_buf_copy_flags(0))
      }
    }
  }

  /// Pins every piece's storage for the duration of `body`, which gets their `iovec`s.
  private func withPinned(
    _ pieces: ArraySlice<some ContiguousBytes>, into vectors: [iovec], _ body: ([iovec]) -> Int32
  ) -> Int32 {
    guard let first = pieces.first else { return body(vectors) }
    return first.withUnsafeBytes { buffer in
      let vector = iovec(
        iov_base: UnsafeMutableRawPointer(mutating: buffer.baseAddress), iov_len: buffer.count)
      return withPinned(pieces.dropFirst(), into: vectors + [vector], body)
    }
  }

  /// Answers write with the number of bytes written.
  @discardableResult
  public func replyWrite(_ count: Int) -> Bool {
    core.reply(self, "wrote \(count)") { fuse_reply_write($0, count) }
  }

  /// Answers statfs.
  @discardableResult
  public func replyStatfs(_ info: statvfs) -> Bool {
    core.reply(self, "statfs") { raw in
      var s = info
      return fuse_reply_statfs(raw, &s)
    }
  }

  /// Answers poll with the ready events (`POLLIN`, `POLLOUT`, …).
  @discardableResult
  public func replyPoll(_ revents: Int32) -> Bool {
    core.reply(self, "poll revents=\(revents)") { fuse_reply_poll($0, UInt32(bitPattern: revents)) }
  }

  /// Answers readdir/readdirplus with the entries collected in `buffer`.
  @discardableResult
  public func replyDirectory(_ buffer: DirectoryBuffer) -> Bool {
    buffer.bytes.withUnsafeBytes { b in
      core.reply(self, "dir \(buffer.count) entries, \(buffer.used) bytes") { raw in
        fuse_reply_buf(raw, b.baseAddress?.assumingMemoryBound(to: CChar.self), buffer.used)
      }
    }
  }

  /// Answers readdir/readdirplus from a complete listing: entry `i` of `entries` lives at
  /// directory offset `i`, so the reply starts at `offset` and holds as many entries as fit in
  /// `size` bytes. With `plus`, each returned entry (except "." and "..") counts as a lookup.
  @discardableResult
  public func replyDirectory(
    entries: some Collection<DirectoryEntry>, offset: Int64, size: Int, plus: Bool
  ) -> Bool {
    var buffer = DirectoryBuffer(request: self, size: size, plus: plus)
    for (i, entry) in entries.enumerated().dropFirst(Int(max(0, offset))) {
      if !buffer.add(entry, nextOffset: Int64(i + 1)) { break }
    }
    return replyDirectory(buffer)
  }
}

extension FuseRequest: CustomStringConvertible {
  public var description: String { "#\(id)" }
}
