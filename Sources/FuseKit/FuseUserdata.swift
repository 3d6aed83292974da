import CFuse3
import Glibc
import Logging
import Synchronization

/// The userdata of a libfuse session: the state a ``FuseMount``, its requests, its notifier and
/// the C callbacks share. It holds the table of outstanding requests (which makes every reply
/// exactly-once), interrupt handlers, and the gate that keeps replies and notifications away
/// from a destroyed `fuse_session`.
///
/// Its address is the `fuse_session`'s userdata; it lives until the ``FuseMount`` is gone,
/// which is after `fuse_session_destroy`.
///
/// Sendable by hand (`@unchecked`): `gate` is a pthread rwlock at a fixed address, `session`
/// is written once before any request exists and cleared under the gate's write lock.
final class FuseUserdata: @unchecked Sendable {

  let fileSystem: any FuseFileSystem
  let logger: Logger
  let trace: Bool
  let maxRead: UInt32?

  /// An outstanding request: its id (pointer values are reused) and interrupt handler.
  struct Entry {
    var id: UInt64
    var onInterrupt: (@Sendable (FuseRequest) -> Void)?
  }

  struct Table {
    /// Keyed by the request's address.
    var entries: [UInt: Entry] = [:]
    var nextID: UInt64 = 1
    /// Set once the shutdown sweep ran: late replies are expected, not bugs.
    var swept = false
    /// Requests recently handed to an interrupt handler, or answered early on purpose
    /// (``FuseRequest/allowLateReplies()``): the work they started may still answer later,
    /// which is expected, not a bug. Bounded (cleared when it grows large).
    var interrupted: Set<UInt64> = []
  }

  let table = Mutex(Table())
  /// Set when the session is asked to stop; the loop may still be running.
  let exiting = Atomic<Bool>(false)
  var isExiting: Bool { exiting.load(ordering: .relaxed) }

  /// Readers: anything that calls into libfuse with the session or a request. Writer: the
  /// teardown that closes it before `fuse_session_destroy`.
  private let gate: UnsafeMutablePointer<pthread_rwlock_t>
  private var session: OpaquePointer?

  init(fileSystem: any FuseFileSystem, logger: Logger, trace: Bool, maxRead: UInt32?) {
    self.fileSystem = fileSystem
    self.logger = logger
    self.trace = trace
    self.maxRead = maxRead
    gate = .allocate(capacity: 1)
    gate.initialize(to: pthread_rwlock_t())
    pthread_rwlock_init(gate, nil)
  }

  deinit {
    pthread_rwlock_destroy(gate)
    gate.deallocate()
  }

  var userdata: UnsafeMutableRawPointer { Unmanaged.passUnretained(self).toOpaque() }

  static func from(_ userdata: UnsafeMutableRawPointer?) -> FuseUserdata? {
    guard let userdata else { return nil }
    return Unmanaged<FuseUserdata>.fromOpaque(userdata).takeUnretainedValue()
  }

  // MARK: Session pointer and gate

  func attach(_ se: OpaquePointer) {
    pthread_rwlock_wrlock(gate)
    session = se
    pthread_rwlock_unlock(gate)
  }

  /// Closes the gate: after this, replies and notifications are no-ops.
  func detach() {
    pthread_rwlock_wrlock(gate)
    session = nil
    pthread_rwlock_unlock(gate)
  }

  /// Runs `body` with the live session, or returns nil if it is gone.
  func withSession<T>(_ body: (OpaquePointer) -> T) -> T? {
    pthread_rwlock_rdlock(gate)
    defer { pthread_rwlock_unlock(gate) }
    guard let session else { return nil }
    return body(session)
  }

  // MARK: Readahead

  /// The readahead to set on the backing device once the kernel has processed the init reply
  /// (which caps it); written by the first request after init.
  private let readahead = Mutex<(kib: Int, device: String)?>(nil)
  private let readaheadPending = Atomic<Bool>(false)

  func setReadahead(_ kib: Int, device: String) {
    readahead.withLock { $0 = (kib, device) }
    readaheadPending.store(true, ordering: .releasing)
  }

  /// Writes the readahead to sysfs. The kernel sends no request before it has applied the init
  /// reply, so any request's arrival means the cap is behind us.
  private func applyReadahead() {
    guard readaheadPending.exchange(false, ordering: .acquiring),
      let (kib, device) = readahead.withLock({ $0 })
    else { return }
    let path = "/sys/class/bdi/\(device)/read_ahead_kb"
    let fd = Glibc.open(path, O_WRONLY | O_CLOEXEC)
    guard fd >= 0 else {
      return logger.info(
        "readahead stays at the kernel's: cannot open \(path) (\(errnoName(errno)))")
    }
    defer { close(fd) }
    let text = Array("\(kib)\n".utf8)
    if write(fd, text, text.count) == text.count {
      logger.debug("readahead \(kib) KiB on bdi \(device)")
    } else {
      logger.info("readahead stays at the kernel's: writing \(path) failed (\(errnoName(errno)))")
    }
  }

  // MARK: Requests

  /// Called by every C callback: records the request as outstanding.
  func begin(_ raw: fuse_req_t?) -> FuseRequest? {
    guard let raw else { return nil }
    if readaheadPending.load(ordering: .relaxed) { applyReadahead() }
    let id = table.withLock { t in
      let id = t.nextID
      t.nextID &+= 1
      t.entries[UInt(bitPattern: raw)] = Entry(id: id, onInterrupt: nil)
      return id
    }
    return FuseRequest(raw: raw, id: id, core: self)
  }

  /// Replies to `request` with `send` if, and only if, it is still outstanding. Returns
  /// whether the reply went out.
  func reply(
    _ request: FuseRequest, _ what: @autoclosure () -> String,
    _ send: (fuse_req_t) -> Int32
  ) -> Bool {
    pthread_rwlock_rdlock(gate)
    defer { pthread_rwlock_unlock(gate) }
    let (claimed, swept, interrupted) = table.withLock { t -> (Bool, Bool, Bool) in
      guard let e = t.entries[request.key], e.id == request.id else {
        return (false, t.swept, t.interrupted.remove(request.id) != nil)
      }
      t.entries[request.key] = nil
      return (true, t.swept, false)
    }
    guard claimed else {
      if swept || session == nil {
        logger.debug("late reply to #\(request.id) after shutdown dropped: \(what())")
      } else if interrupted {
        logger.debug("late reply to interrupted #\(request.id) dropped: \(what())")
      } else {
        logger.warning("second reply to #\(request.id) dropped: \(what())")
      }
      return false
    }
    guard session != nil else { return false }
    if trace { logger.debug("← #\(request.id) \(what())") }
    let rc = send(request.raw)
    if rc != 0 && rc != -ENOENT {
      // -ENOENT: the request was interrupted and the kernel no longer waits for it.
      logger.debug("reply to #\(request.id) failed: \(errnoName(-rc))")
    }
    return true
  }

  func isOutstanding(_ request: FuseRequest) -> Bool {
    table.withLock { $0.entries[request.key]?.id == request.id }
  }

  /// Runs `body` while `request` is known to be outstanding (so its memory is alive), with the
  /// table lock held. `body` must only take libfuse's session lock (as
  /// `fuse_req_interrupted` and `fuse_req_ctx` do), never a request lock.
  func whileOutstanding<T>(_ request: FuseRequest, _ body: (fuse_req_t) -> T) -> T? {
    pthread_rwlock_rdlock(gate)
    defer { pthread_rwlock_unlock(gate) }
    guard session != nil else { return nil }
    return table.withLock { t in
      guard t.entries[request.key]?.id == request.id else { return nil }
      return body(request.raw)
    }
  }

  // MARK: Interrupts

  func setInterruptHandler(
    _ request: FuseRequest, _ handler: @escaping @Sendable (FuseRequest) -> Void
  ) {
    pthread_rwlock_rdlock(gate)
    defer { pthread_rwlock_unlock(gate) }
    guard session != nil else { return }
    let stored = table.withLock { t -> Bool in
      guard var e = t.entries[request.key], e.id == request.id else { return false }
      e.onInterrupt = handler
      t.entries[request.key] = e
      return true
    }
    guard stored else { return }
    // Not under our lock: libfuse holds the request's lock while it calls the interrupt
    // function, and calls it right here if the interrupt already arrived.
    fuse_req_interrupt_func(request.raw, fuseUserdataInterrupt, userdata)
  }

  /// Marks `request`'s later replies as expected (see ``FuseRequest/allowLateReplies()``).
  func allowLateReplies(_ request: FuseRequest) {
    table.withLock { t in
      guard t.entries[request.key]?.id == request.id else { return }
      if t.interrupted.count >= 1024 { t.interrupted.removeAll() }
      t.interrupted.insert(request.id)
    }
  }

  /// Called by libfuse (with the request's lock held) when the kernel interrupts `raw`.
  fileprivate func interrupted(_ raw: OpaquePointer) {
    let found = table.withLock { t -> (UInt64, (@Sendable (FuseRequest) -> Void))? in
      let key = UInt(bitPattern: raw)
      guard var e = t.entries[key], let handler = e.onInterrupt else { return nil }
      e.onInterrupt = nil
      t.entries[key] = e
      if t.interrupted.count >= 1024 { t.interrupted.removeAll() }
      t.interrupted.insert(e.id)
      return (e.id, handler)
    }
    guard let (id, handler) = found else { return }
    if trace { logger.debug("interrupt #\(id)") }
    handler(FuseRequest(raw: raw, id: id, core: self))
  }

  // MARK: Shutdown

  /// Answers every outstanding request with `EIO`. Called after the loop stopped and before
  /// the unmount, so readers parked in the file system get an error instead of hanging.
  func sweep() {
    let pending = table.withLock { t -> [(UInt, UInt64)] in
      t.swept = true
      return t.entries.map { ($0.key, $0.value.id) }
    }
    if !pending.isEmpty {
      logger.debug("answering \(pending.count) outstanding request(s) with EIO")
    }
    for (key, id) in pending {
      guard let raw = OpaquePointer(bitPattern: key) else { continue }
      _ = reply(FuseRequest(raw: raw, id: id, core: self), "error EIO (shutdown)") {
        fuse_reply_err($0, EIO)
      }
    }
  }

  // MARK: Trace

  @inline(__always)
  func traceOp(_ request: FuseRequest, _ message: @autoclosure () -> String) {
    if trace { logger.debug("→ #\(request.id) \(message())") }
  }
}

private func fuseUserdataInterrupt(_ req: fuse_req_t?, _ data: UnsafeMutableRawPointer?) {
  guard let req, let core = FuseUserdata.from(data) else { return }
  core.interrupted(req)
}

/// `strerror`-style short name for an errno value, for logs.
func errnoName(_ code: Int32) -> String {
  switch code {
  case EPERM: return "EPERM"
  case ENOENT: return "ENOENT"
  case EINTR: return "EINTR"
  case EIO: return "EIO"
  case EBADF: return "EBADF"
  case EAGAIN: return "EAGAIN"
  case EACCES: return "EACCES"
  case EEXIST: return "EEXIST"
  case ENOTDIR: return "ENOTDIR"
  case EISDIR: return "EISDIR"
  case EINVAL: return "EINVAL"
  case ENOSPC: return "ENOSPC"
  case EROFS: return "EROFS"
  case ENOSYS: return "ENOSYS"
  case ENOTEMPTY: return "ENOTEMPTY"
  case ETIMEDOUT: return "ETIMEDOUT"
  case ENOTCONN: return "ENOTCONN"
  case ENODEV: return "ENODEV"
  default: return "errno \(code)"
  }
}
