import Foundation
import NinePProtocol
import NinePTransport
import TestSupport
import XCTest

/// A 9BBS-shaped chat server in the test process, on a real TCP socket, whose room names,
/// lines and users list are whatever a test gives it: `/chat/post`, `/chat/users` and one file
/// per room.
///
/// A room's bytes are served from its offset; past its end a read is parked (as a quiet room
/// on a server that parks reads) until a line is added (``say(_:by:in:)``, a post echoed with
/// ``echoAuthor``), unless the room is ``Room/endless``, whose every read is answered at once,
/// full. Until ``release()`` every room read is held, so a test can open `chat/events` before
/// the first line arrives. Room names are bytes: a name
/// that is not UTF-8 goes on the wire as it is.
final class HostileChatServer: @unchecked Sendable {
  struct Room: Sendable {
    var name: [UInt8]
    var lines: [UInt8] = []
    /// Every read answered at once with `lines` repeated to fill it.
    var endless = false

    init(_ name: String, lines: String = "", endless: Bool = false) {
      self.init(bytes: Array(name.utf8), lines: lines, endless: endless)
    }

    init(bytes: [UInt8], lines: String = "", endless: Bool = false) {
      name = bytes
      self.lines = Array(lines.utf8)
      self.endless = endless
    }

    /// The name as a walk names it (the client decodes it the same way).
    var walkName: String { String(decoding: name, as: UTF8.self) }
  }

  private let listener: ScriptedListener
  private let lock = NSLock()
  private var rooms: [Room]
  private var users: [[UInt8]]
  private var usersReads = 0
  private var released = false
  /// A room read kept unanswered.
  fileprivate typealias WaitingRead =
    (connection: HostileChatConnection, tag: Tag, path: String, offset: UInt64, count: UInt32)
  private var held: [WaitingRead] = []
  /// Room reads past the room's end, answered when a line is added (``say(_:by:in:)``).
  private var parked: [WaitingRead] = []
  private(set) var posts: [[UInt8]] = []
  /// With it set, each post (`room:text`) comes back in its room as a line by this author
  /// (called with the post's index from 0): the name the board shows for the poster.
  var echoAuthor: (@Sendable (Int) -> String)? {
    get { lock.withLock { echoAuthorValue } }
    set { lock.withLock { echoAuthorValue = newValue } }
  }
  private var echoAuthorValue: (@Sendable (Int) -> String)?

  /// - Parameter users: the users list's successive texts: each read gives the next, the last
  ///   one for good.
  init(rooms: [Room], users: [String] = ["alice (idle: 0s)\n"]) throws {
    self.rooms = rooms
    self.users = users.map { Array($0.utf8) }
    listener = try ScriptedListener()
    listener.start { [self] in HostileChatConnection(server: self, transport: $0).run() }
  }

  /// The dial string for `mount9bbs`.
  var address: String { listener.address }

  func stop() { listener.stop() }

  /// Room reads are answered from now on (those held so far at once).
  func release() {
    let waiting = lock.withLock {
      released = true
      defer { held.removeAll() }
      return held
    }
    for read in waiting {
      read.connection.answerRead(read.tag, path: read.path, offset: read.offset, count: read.count)
    }
  }

  /// Replaces the rooms (the next listing shows the change).
  func setRooms(_ new: [Room]) { lock.withLock { rooms = new } }

  /// Adds rooms at the end of the listing (the next listing shows them).
  func addRooms(_ added: [Room]) { lock.withLock { rooms += added } }

  /// Removes the rooms named `names` (walk names); their parked reads are answered with an
  /// error, as a board answers reads of a room it deleted.
  func removeRooms(_ names: Set<String>) {
    let gone = lock.withLock {
      rooms.removeAll { names.contains($0.walkName) }
      let gone = parked.filter { names.contains(String($0.path.dropFirst(5))) }
      parked.removeAll { names.contains(String($0.path.dropFirst(5))) }
      return gone
    }
    for read in gone {
      read.connection.answerRead(read.tag, path: read.path, offset: read.offset, count: read.count)
    }
  }

  /// Appends `[12:00:00] AUTHOR: TEXT` to `room` and answers its parked reads.
  func say(_ text: String, by author: String, in room: String) {
    append(Array("[12:00:00] \(author): \(text)\n".utf8), to: room)
  }

  private func append(_ line: [UInt8], to room: String) {
    let path = "chat/" + room
    let waiting = lock.withLock {
      guard let index = rooms.firstIndex(where: { $0.walkName == room }) else {
        return [WaitingRead]()
      }
      rooms[index].lines += line
      let waiting = parked.filter { $0.path == path }
      parked.removeAll { $0.path == path }
      return waiting
    }
    for read in waiting {
      read.connection.answerRead(read.tag, path: read.path, offset: read.offset, count: read.count)
    }
  }

  /// Keeps a read past the room's end until a line is added; false if the room has grown
  /// past `offset` meanwhile (the read is to be answered now).
  fileprivate func park(
    _ connection: HostileChatConnection, _ tag: Tag, path: String, offset: UInt64, count: UInt32
  ) -> Bool {
    lock.withLock {
      let name = String(path.dropFirst(5))
      guard let room = rooms.first(where: { $0.walkName == name }),
        offset >= UInt64(room.lines.count)
      else { return false }
      parked.append((connection, tag, path, offset, count))
      return true
    }
  }

  /// Forgets a parked read the client flushed.
  fileprivate func unpark(_ connection: HostileChatConnection, _ tag: Tag) {
    lock.withLock { parked.removeAll { $0.connection === connection && $0.tag == tag } }
  }

  /// Tread of users files so far.
  var usersReadCount: Int { lock.withLock { usersReads } }

  fileprivate func room(_ name: String) -> Room? {
    lock.withLock { rooms.first { $0.walkName == name } }
  }

  fileprivate func recordPost(_ data: [UInt8]) {
    let echo: String? = lock.withLock {
      posts.append(data)
      return echoAuthorValue?(posts.count - 1)
    }
    guard let echo, let colon = data.firstIndex(of: UInt8(ascii: ":")) else { return }
    let room = String(decoding: data[..<colon], as: UTF8.self)
    var text = Array(data[(colon + 1)...])
    while text.last == UInt8(ascii: "\n") { text.removeLast() }
    append(Array("[12:00:00] \(echo): ".utf8) + text + [UInt8(ascii: "\n")], to: room)
  }

  /// Whether a room read is to wait for ``release()``; kept for then if so.
  fileprivate func holds(
    _ connection: HostileChatConnection, _ tag: Tag, path: String, offset: UInt64, count: UInt32
  ) -> Bool {
    lock.withLock {
      guard !released else { return false }
      held.append((connection, tag, path, offset, count))
      return true
    }
  }

  fileprivate func usersText() -> [UInt8] {
    lock.withLock {
      defer { usersReads += 1 }
      return users[min(usersReads, users.count - 1)]
    }
  }

  static let directoryMode = FileMode(permissions: 0o755, .directory)

  /// Stat of a path ("" root, "chat", "chat/NAME"), nil when there is none.
  fileprivate func stat(_ path: String) -> Stat? {
    func entry(_ name: String, _ mode: FileMode, _ qid: UInt64) -> Stat {
      Stat(
        qid: Qid(type: mode.isDirectory ? .directory : .file, path: qid), mode: mode,
        mtime: 1_700_000_000, name: name, uid: "glenda", gid: "glenda", muid: "glenda")
    }
    switch path {
    case "": return entry("/", Self.directoryMode, 1)
    case "chat": return entry("chat", Self.directoryMode, 2)
    case "chat/post": return entry("post", FileMode(permissions: 0o200), 3)
    case "chat/users": return entry("users", FileMode(permissions: 0o444), 4)
    default:
      guard path.hasPrefix("chat/") else { return nil }
      let name = String(path.dropFirst(5))
      let all = lock.withLock { rooms }
      guard let index = all.firstIndex(where: { $0.walkName == name }) else { return nil }
      return entry(name, FileMode(permissions: 0o444), 100 + UInt64(index))
    }
  }

  /// The directory read of `path` (whole; the connection cuts it at the offset).
  fileprivate func listing(_ path: String) -> [UInt8] {
    switch path {
    case "": return stat("chat")!.encoded()
    case "chat":
      var data = stat("chat/post")!.encoded() + stat("chat/users")!.encoded()
      for (index, room) in lock.withLock({ rooms }).enumerated() {
        // Encoded with a placeholder of the same length, then the name's own bytes put in.
        var bytes = Stat(
          qid: Qid(path: 100 + UInt64(index)), mode: FileMode(permissions: 0o444),
          mtime: 1_700_000_000, name: String(repeating: "X", count: room.name.count),
          uid: "glenda", gid: "glenda", muid: "glenda"
        ).encoded()
        let at = 2 + 2 + 4 + Qid.wireSize + 4 + 4 + 4 + 8 + 2
        bytes.replaceSubrange(at..<(at + room.name.count), with: room.name)
        data += bytes
      }
      return data
    default: return []
    }
  }
}

/// One client connection of a ``HostileChatServer``.
private final class HostileChatConnection: @unchecked Sendable {
  unowned let server: HostileChatServer
  let transport: SocketTransport
  private let fids = ScriptedFids()
  private let lock = NSLock()
  /// Directory listings by fid, as they were at offset 0 (a listing is read in pieces).
  private var listings: [Fid: [UInt8]] = [:]

  init(server: HostileChatServer, transport: SocketTransport) {
    self.server = server
    self.transport = transport
  }

  func run() {
    while let frame = try? transport.receive(limit: 1 << 20) {
      guard let (tag, message) = try? Message.decode(frame, limits: .unbounded) else { continue }
      answer(tag, message)
    }
  }

  private func send(_ tag: Tag, _ message: Message) {
    try? transport.send(message.encoded(tag: tag))
  }

  private func path(_ fid: Fid) -> String? { fids.path(fid) }

  private var readLimit: UInt32 { fids.readLimit }

  /// A room read: its bytes from `offset`, or parked past them (an endless room: always full).
  func answerRead(_ tag: Tag, path: String, offset: UInt64, count: UInt32) {
    guard let room = server.room(String(path.dropFirst(5))) else {
      return send(tag, .rerror(ename: "file not found"))
    }
    let count = Int(min(count, readLimit))
    if room.endless {
      var data: [UInt8] = []
      while data.count < count { data += room.lines.isEmpty ? [0x78] : room.lines }
      return send(tag, .rread(data: data[..<count]))
    }
    if offset >= UInt64(room.lines.count) {
      // Parked until a line is added (for good if none is).
      if server.park(self, tag, path: path, offset: offset, count: UInt32(count)) { return }
      return answerRead(tag, path: path, offset: offset, count: UInt32(count))
    }
    let start = Int(offset)
    send(tag, .rread(data: room.lines[start..<min(room.lines.count, start + count)]))
  }

  func answer(_ tag: Tag, _ message: Message) {
    switch message {
    case .tversion(let size, _):
      send(tag, fids.version(size))
    case .tattach(let fid, _, _, _):
      send(tag, fids.attach(fid))
    case .tflush(let old):
      // The flushed read (if parked) is never answered.
      server.unpark(self, old)
      send(tag, .rflush)
    case .twalk(let fid, let newfid, let names):
      send(tag, fids.walk(fid, to: newfid, names, stat: server.stat))
    case .topen(let fid, _):
      guard let path = path(fid), let stat = server.stat(path) else {
        return send(tag, .rerror(ename: "unknown fid"))
      }
      if stat.qid.isDirectory {
        let listing = server.listing(path)
        lock.withLock { listings[fid] = listing }
      }
      send(tag, .ropen(qid: stat.qid, iounit: 0))
    case .tread(let fid, let offset, let count):
      guard let path = path(fid), let stat = server.stat(path) else {
        return send(tag, .rerror(ename: "unknown fid"))
      }
      let limit = Int(min(count, readLimit))
      if stat.qid.isDirectory {
        var listing = lock.withLock { listings[fid] } ?? []
        if offset == 0 {
          listing = server.listing(path)
          lock.withLock { listings[fid] = listing }
        }
        // Whole entries only, as a 9P directory read must.
        var start = 0
        while start < listing.count && UInt64(start) < offset {
          start += 2 + Int(listing[start]) + Int(listing[start + 1]) << 8
        }
        var end = start
        while end < listing.count {
          let size = 2 + Int(listing[end]) + Int(listing[end + 1]) << 8
          guard end + size - start <= limit else { break }
          end += size
        }
        return send(tag, .rread(data: listing[start..<end]))
      }
      switch path {
      case "chat/users":
        let text = server.usersText()
        send(tag, .rread(data: text[..<min(text.count, limit)]))
      case "chat/post":
        send(tag, .rerror(ename: "read failed"))
      default:
        if !server.holds(self, tag, path: path, offset: offset, count: count) {
          answerRead(tag, path: path, offset: offset, count: count)
        }
      }
    case .twrite(let fid, _, let data):
      guard path(fid) == "chat/post" else { return send(tag, .rerror(ename: "write failed")) }
      server.recordPost(Array(data))
      send(tag, .rwrite(count: UInt32(data.count)))
    case .tstat(let fid):
      guard let path = path(fid), let stat = server.stat(path) else {
        return send(tag, .rerror(ename: "unknown fid"))
      }
      send(tag, .rstat(stat: stat))
    case .tclunk(let fid):
      lock.withLock { listings[fid] = nil }
      send(tag, fids.clunk(fid))
    default:
      send(tag, .rerror(ename: "operation not supported"))
    }
  }
}

extension XCTestCase {
  /// A real `mount9bbs -f` (user alice) of `server`, torn down with the test; its log is
  /// printed when the test failed.
  func mountHostileChat(
    _ server: HostileChatServer, options: [String] = [], state: String? = nil,
    environment: [String: String] = [:]
  ) throws -> MountProcess {
    let directory = try makeTemporaryDirectory("mount9bbs-hostile-chat")
    let mountpoint = directory + "/mnt"
    try FileManager.default.createDirectory(atPath: mountpoint, withIntermediateDirectories: false)
    var environment = environment
    if let state { environment["XDG_STATE_HOME"] = state }
    let mount = try MountProcess(
      address: server.address, mountpoint: mountpoint,
      options: ["uname=alice", "timeout=5"] + options, environment: environment)
    addTeardownBlock { [weak self] in
      if let run = self?.testRun, run.totalFailureCount > 0 {
        print("--- mount9bbs log:\n\(String(mount.child.text.suffix(20_000)))---")
      }
      mount.stop()
      if !isMounted(mountpoint) { try? FileManager.default.removeItem(atPath: directory) }
    }
    return mount
  }
}
