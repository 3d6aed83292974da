import Foundation
import FuseKit
import Glibc

/// An in-memory file system for the FUSE layer's tests: a root directory with `hello.txt`,
/// `twice` (whose read replies two times) and `stream`, a chat-room-like file: offset-addressed,
/// growing by ``append(_:)``, where a read at the end waits for more.
final class ToyFileSystem: FuseFileSystem, @unchecked Sendable {
  // @unchecked: all mutable state is guarded by `cond`.

  static let helloInode: FuseInode = 2
  static let streamInode: FuseInode = 3
  static let twiceInode: FuseInode = 4
  static let hello = "Hello, world!\n"
  static let welcome = "welcome to the stream\n"

  struct Node {
    var mode: mode_t
    var data: [UInt8] = []
    var children: [String: FuseInode] = [:]
    var parent: FuseInode
    var mtime = timespec(tv_sec: time(nil), tv_nsec: 0)
    var isDirectory: Bool { mode & S_IFMT == S_IFDIR }
  }

  struct Waiter {
    let pending: PendingReply
    let offset: Int
    let size: Int
    let handle: UInt64
  }

  let usePlus: Bool
  let cond = NSCondition()
  private var nodes: [FuseInode: Node] = [:]
  private var nextInode: FuseInode = 100
  private var nextHandle: UInt64 = 1
  private var waiters: [Waiter] = []
  private var pollHandles: [UInt64: FusePollHandle] = [:]
  private var positions: [UInt64: Int] = [:]
  private(set) var counts: [String: Int] = [:]
  private(set) var interrupts = 0
  private(set) var doubleReply: (first: Bool, second: Bool)?
  private(set) var notifier: FuseNotifier?

  init(usePlus: Bool = true) {
    self.usePlus = usePlus
    nodes[FuseInode.root] = Node(mode: S_IFDIR | 0o755, parent: FuseInode.root)
    add(
      Self.helloInode, "hello.txt",
      Node(mode: S_IFREG | 0o644, data: Array(Self.hello.utf8), parent: 1))
    add(
      Self.streamInode, "stream",
      Node(mode: S_IFREG | 0o644, data: Array(Self.welcome.utf8), parent: 1))
    add(
      Self.twiceInode, "twice", Node(mode: S_IFREG | 0o444, data: Array("twice\n".utf8), parent: 1))
  }

  private func add(_ inode: FuseInode, _ name: String, _ node: Node) {
    nodes[inode] = node
    nodes[node.parent]?.children[name] = inode
  }

  // MARK: Test hooks

  /// Appends to the stream, answers the readers waiting at its end and wakes pollers.
  func append(_ text: String) {
    cond.lock()
    nodes[Self.streamInode]?.data += Array(text.utf8)
    nodes[Self.streamInode]?.mtime = timespec(tv_sec: time(nil), tv_nsec: 0)
    let data = nodes[Self.streamInode]?.data ?? []
    let ready = waiters
    waiters.removeAll()
    let handles = Array(pollHandles.values)
    for w in ready where w.offset < data.count {
      positions[w.handle] = min(data.count, w.offset + w.size)
    }
    cond.broadcast()
    cond.unlock()
    for w in ready {
      let end = min(data.count, w.offset + w.size)
      w.pending.take()?.replyData(w.offset < end ? Array(data[w.offset..<end]) : [])
    }
    for h in handles { h.notify() }
  }

  /// Waits until `n` readers are parked at the end of the stream.
  func waitForWaiters(_ n: Int, timeout: TimeInterval) -> Bool {
    wait(timeout: timeout) { $0.waiters.count == n }
  }

  /// Waits until `predicate` holds (checked under the lock at every change).
  func wait(timeout: TimeInterval, until predicate: (ToyFileSystem) -> Bool) -> Bool {
    let deadline = Date(timeIntervalSinceNow: timeout)
    cond.lock()
    defer { cond.unlock() }
    while !predicate(self) {
      if !cond.wait(until: deadline) { return predicate(self) }
    }
    return true
  }

  func count(_ op: String) -> Int { locked { $0.counts[op, default: 0] } }

  private func locked<T>(_ body: (ToyFileSystem) -> T) -> T {
    cond.lock()
    defer { cond.unlock() }
    return body(self)
  }

  private func note(_ op: String) {
    cond.lock()
    counts[op, default: 0] += 1
    cond.broadcast()
    cond.unlock()
  }

  private func dropWaiter(_ pending: PendingReply) {
    cond.lock()
    waiters.removeAll { $0.pending === pending }
    interrupts += 1
    cond.broadcast()
    cond.unlock()
  }

  // MARK: Attributes

  private func attributes(_ inode: FuseInode, _ node: Node) -> stat {
    var st = stat()
    st.st_ino = UInt(inode)
    st.st_mode = node.mode
    st.st_nlink = node.isDirectory ? 2 : 1
    st.st_size = node.isDirectory ? 0 : Int(node.data.count)
    st.st_blocks = (st.st_size + 511) / 512
    st.st_mtim = node.mtime
    st.st_ctim = node.mtime
    st.st_atim = node.mtime
    return st
  }

  private func entry(_ inode: FuseInode, _ node: Node) -> FuseEntry {
    let timeout = inode == Self.streamInode ? 0.0 : 1.0
    return FuseEntry(
      inode: inode, attributes: attributes(inode, node), attributeTimeout: timeout,
      entryTimeout: 1)
  }

  // MARK: FuseFileSystem

  func initialize(_ connection: inout FuseConnection, notifier: FuseNotifier) {
    if usePlus { connection.want.insert(.readdirplus) }
    connection.maxBackground = 64
    locked { $0.notifier = notifier }
  }

  func lookup(_ request: FuseRequest, parent: FuseInode, name: String) {
    note("lookup")
    let found = locked { fs -> FuseEntry? in
      guard let ino = fs.nodes[parent]?.children[name], let node = fs.nodes[ino] else { return nil }
      return fs.entry(ino, node)
    }
    if let found { request.replyEntry(found) } else { request.replyError(ENOENT) }
  }

  func getattr(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo?) {
    note("getattr")
    let found = locked { fs in fs.nodes[inode].map { fs.entry(inode, $0) } }
    guard let found else {
      request.replyError(ENOENT)
      return
    }
    request.replyAttr(found.attributes, timeout: found.attributeTimeout)
  }

  func setattr(
    _ request: FuseRequest, inode: FuseInode, attributes: stat, changes: FuseSetAttributes,
    file: FuseFileInfo?
  ) {
    note("setattr")
    let found = locked { fs -> FuseEntry? in
      guard var node = fs.nodes[inode] else { return nil }
      if changes.contains(.size) {
        let size = Int(attributes.st_size)
        if size < node.data.count {
          node.data.removeSubrange(size...)
        } else {
          node.data += [UInt8](repeating: 0, count: size - node.data.count)
        }
      }
      if changes.contains(.mode) {
        node.mode = (node.mode & S_IFMT) | (attributes.st_mode & 0o7777)
      }
      if changes.contains(.mtime) { node.mtime = attributes.st_mtim }
      fs.nodes[inode] = node
      return fs.entry(inode, node)
    }
    guard let found else {
      request.replyError(ENOENT)
      return
    }
    request.replyAttr(found.attributes, timeout: found.attributeTimeout)
  }

  private func makeNode(parent: FuseInode, name: String, mode: mode_t) -> Result<
    (FuseInode, FuseEntry), POSIXError
  > {
    locked { fs in
      guard let dir = fs.nodes[parent], dir.isDirectory else {
        return .failure(POSIXError(.ENOENT))
      }
      guard dir.children[name] == nil else { return .failure(POSIXError(.EEXIST)) }
      let ino = fs.nextInode
      fs.nextInode += 1
      let node = Node(mode: mode, parent: parent)
      fs.add(ino, name, node)
      return .success((ino, fs.entry(ino, node)))
    }
  }

  func mkdir(_ request: FuseRequest, parent: FuseInode, name: String, mode: mode_t) {
    note("mkdir")
    switch makeNode(parent: parent, name: name, mode: S_IFDIR | (mode & 0o7777)) {
    case .success(let (_, e)): request.replyEntry(e)
    case .failure(let error): request.replyError(error.code)
    }
  }

  func create(
    _ request: FuseRequest, parent: FuseInode, name: String, mode: mode_t, file: FuseFileInfo
  ) {
    note("create")
    switch makeNode(parent: parent, name: name, mode: S_IFREG | (mode & 0o7777)) {
    case .success(let (_, e)):
      var f = file
      f.handle = locked { fs in
        defer { fs.nextHandle += 1 }
        return fs.nextHandle
      }
      request.replyCreate(e, f)
    case .failure(let error): request.replyError(error.code)
    }
  }

  private func remove(parent: FuseInode, name: String, directory: Bool) -> Int32 {
    locked { fs in
      guard let ino = fs.nodes[parent]?.children[name], let node = fs.nodes[ino] else {
        return ENOENT
      }
      if directory && !node.isDirectory { return ENOTDIR }
      if !directory && node.isDirectory { return EISDIR }
      if directory && !node.children.isEmpty { return ENOTEMPTY }
      fs.nodes[parent]?.children[name] = nil
      fs.nodes[ino] = nil
      return 0
    }
  }

  func unlink(_ request: FuseRequest, parent: FuseInode, name: String) {
    note("unlink")
    request.replyError(remove(parent: parent, name: name, directory: false))
  }

  func rmdir(_ request: FuseRequest, parent: FuseInode, name: String) {
    note("rmdir")
    request.replyError(remove(parent: parent, name: name, directory: true))
  }

  func open(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo) {
    note("open")
    var f = file
    f.handle = locked { fs in
      defer { fs.nextHandle += 1 }
      return fs.nextHandle
    }
    f.directIO = inode == Self.streamInode
    if file.flags & O_TRUNC != 0 {
      // libfuse asks for atomic O_TRUNC by default: the truncate comes with the open.
      locked { fs in
        fs.nodes[inode]?.data = []
        fs.counts["truncatingOpen", default: 0] += 1
      }
    }
    request.replyOpen(f)
  }

  func read(
    _ request: FuseRequest, inode: FuseInode, size: Int, offset: Int64, file: FuseFileInfo
  ) {
    note("read")
    let offset = Int(offset)
    if inode == Self.twiceInode {
      let first = request.replyData(Array("twice\n".utf8).prefix(offset == 0 ? 6 : 0))
      let second = request.replyError(EIO)
      locked { $0.doubleReply = (first, second) }
      return
    }
    guard inode == Self.streamInode else {
      let bytes = locked { fs -> [UInt8]? in
        guard let data = fs.nodes[inode]?.data else { return nil }
        guard offset < data.count else { return [] }
        return Array(data[offset..<min(data.count, offset + size)])
      }
      if let bytes { request.replyData(bytes) } else { request.replyError(ENOENT) }
      return
    }
    // The stream: below the end answer at once, at the end wait for more.
    let pending = PendingReply(request) { [weak self] in self?.dropWaiter($0) }
    cond.lock()
    let data = nodes[inode]?.data ?? []
    if offset < data.count {
      let end = min(data.count, offset + size)
      positions[file.handle] = end
      cond.unlock()
      pending.take()?.replyData(Array(data[offset..<end]))
      return
    }
    if file.flags & O_NONBLOCK != 0 {
      cond.unlock()
      pending.take()?.replyError(EAGAIN)
      return
    }
    if !pending.isAnswered {
      waiters.append(Waiter(pending: pending, offset: offset, size: size, handle: file.handle))
      cond.broadcast()
    }
    cond.unlock()
  }

  func write(
    _ request: FuseRequest, inode: FuseInode, data: [UInt8], offset: Int64, file: FuseFileInfo
  ) {
    note("write")
    if inode == Self.streamInode {
      append(String(decoding: data, as: UTF8.self))
      request.replyWrite(data.count)
      return
    }
    let ok = locked { fs -> Bool in
      guard var node = fs.nodes[inode] else { return false }
      let offset = Int(offset)
      if node.data.count < offset + data.count {
        node.data += [UInt8](repeating: 0, count: offset + data.count - node.data.count)
      }
      node.data.replaceSubrange(offset..<offset + data.count, with: data)
      node.mtime = timespec(tv_sec: time(nil), tv_nsec: 0)
      fs.nodes[inode] = node
      return true
    }
    if ok { request.replyWrite(data.count) } else { request.replyError(ENOENT) }
  }

  func flush(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo) {
    request.replyError(0)
  }

  func release(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo) {
    locked { fs in
      fs.pollHandles[file.handle] = nil
      fs.positions[file.handle] = nil
    }
    request.replyError(0)
  }

  private func listing(_ inode: FuseInode) -> [DirectoryEntry]? {
    locked { fs in
      guard let dir = fs.nodes[inode], dir.isDirectory else { return nil }
      var out = [
        DirectoryEntry(name: ".", entry: fs.entry(inode, dir)),
        DirectoryEntry(name: "..", inode: dir.parent, mode: S_IFDIR),
      ]
      for (name, ino) in dir.children.sorted(by: { $0.key < $1.key }) {
        if let node = fs.nodes[ino] {
          out.append(DirectoryEntry(name: name, entry: fs.entry(ino, node)))
        }
      }
      return out
    }
  }

  func readdir(
    _ request: FuseRequest, inode: FuseInode, size: Int, offset: Int64, file: FuseFileInfo
  ) {
    note("readdir")
    guard let entries = listing(inode) else {
      request.replyError(ENOTDIR)
      return
    }
    request.replyDirectory(entries: entries, offset: offset, size: size, plus: false)
  }

  func readdirplus(
    _ request: FuseRequest, inode: FuseInode, size: Int, offset: Int64, file: FuseFileInfo
  ) {
    note("readdirplus")
    guard let entries = listing(inode) else {
      request.replyError(ENOTDIR)
      return
    }
    request.replyDirectory(entries: entries, offset: offset, size: size, plus: true)
  }

  func poll(
    _ request: FuseRequest, inode: FuseInode, file: FuseFileInfo, handle: FusePollHandle?
  ) {
    note("poll")
    let readable = locked { fs -> Bool in
      if let handle { fs.pollHandles[file.handle] = handle }
      let size = fs.nodes[inode]?.data.count ?? 0
      return inode != Self.streamInode || size > fs.positions[file.handle, default: 0]
    }
    request.replyPoll(readable ? Int32(POLLIN) : 0)
  }
}
