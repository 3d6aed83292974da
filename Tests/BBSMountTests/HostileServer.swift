import Foundation
import NinePProtocol
import NinePTransport
import TestSupport
import XCTest

/// A 9P server in the test process, on a real TCP socket, that serves a small tree and
/// misbehaves on purpose, each way under its own name at the root:
///
/// - `etc/motd`: an ordinary file (the control case);
/// - `huge`: a file whose length is 2⁶⁴−1;
/// - `locked/`: a directory every read of which is refused (Rerror "permission denied");
/// - `liar`: listed as a directory by its qid, a file by its mode; reading it gives text;
/// - `badname/`: a listing with an entry whose name is not UTF-8, and `ok`;
/// - `badsize/`: a listing with an entry whose size field disagrees with it, and good ones;
/// - `endless/`: a directory every read of which brings new entries;
/// - `longname/`: a listing with a 300-byte name, then `short`;
/// - `turncoat`: an ordinary file that, while ``lie(_:)`` is on, walks, stats and listings
///   all call a directory (as a server that swapped two qids);
/// - ``stall(_:)``: while on, nothing is answered (as a server stopped with SIGSTOP); turned
///   off, what waited is answered.
///
/// Counts every request, so a test can tell a bounded listing from a loop.
final class HostileServer: @unchecked Sendable {
  private let listener: ScriptedListener
  static let longName = String(repeating: "n", count: 300)

  private let lock = NSLock()
  private var stalled: [(connection: Connection, tag: Tag, message: Message)] = []
  private var stalling = false
  private var lying = false
  private var counts: [String: Int] = [:]

  init() throws {
    listener = try ScriptedListener()
    listener.start { [self] in Connection(server: self, transport: $0).run() }
  }

  /// The dial string for `mount9bbs`.
  var address: String { listener.address }

  /// Stops listening and drops every connection.
  func stop() { listener.stop() }

  /// While on, requests (other than Tversion) go unanswered; turned off, they are answered.
  func stall(_ on: Bool) {
    let waiting = lock.withLock {
      stalling = on
      defer { if !on { stalled.removeAll() } }
      return on ? [] : stalled
    }
    for (connection, tag, message) in waiting { connection.answer(tag, message) }
  }

  /// While on, `turncoat` is a directory to every walk, stat and listing.
  func lie(_ on: Bool) { lock.withLock { lying = on } }

  /// The entry of `path` as the server tells it now ("" is the root).
  func stat(_ path: String) -> Stat? {
    guard var stat = Self.nodes[path] else { return nil }
    if path == "turncoat" && lock.withLock({ lying }) {
      stat.qid = Qid(type: .directory, path: stat.qid.path)
      stat.mode = Self.directoryMode
    }
    return stat
  }

  /// Requests left unanswered by ``stall(_:)`` so far.
  var stalledCount: Int { lock.withLock { stalled.count } }

  /// Requests received of `kind` ("Tread", "Twalk", …) for paths under `prefix` ("" is all).
  func count(_ kind: String, under prefix: String = "") -> Int {
    lock.withLock {
      counts.filter { $0.key.hasPrefix(kind + " " + prefix) }.values.reduce(0, +)
    }
  }

  fileprivate func record(_ kind: String, _ path: String) {
    lock.withLock { counts[kind + " " + path, default: 0] += 1 }
  }

  /// Whether a request is to wait (the server is stalled); it is kept for later if so.
  fileprivate func holds(_ connection: Connection, _ tag: Tag, _ message: Message) -> Bool {
    lock.withLock {
      guard stalling else { return false }
      stalled.append((connection, tag, message))
      return true
    }
  }

  // MARK: The tree

  static let directoryMode = FileMode(permissions: 0o755, .directory)
  static let fileMode = FileMode(permissions: 0o644)

  /// What a walk finds, by path ("" is the root).
  static let nodes: [String: Stat] = {
    var nodes: [String: Stat] = [:]
    var next: UInt64 = 2
    func add(_ path: String, _ mode: FileMode, qid: QidType? = nil, length: UInt64 = 0) {
      let name = path.split(separator: "/").last.map(String.init) ?? ""
      let type = qid ?? (mode.isDirectory ? .directory : .file)
      nodes[path] = Stat(
        qid: Qid(type: type, path: next), mode: mode, mtime: 1_700_000_000, length: length,
        name: name, uid: "glenda", gid: "glenda", muid: "glenda")
      next += 1
    }
    nodes[""] = Stat(qid: Qid(type: .directory, path: 1), mode: directoryMode, name: "/")
    add("etc", directoryMode)
    add("etc/motd", fileMode, length: 6)
    add("huge", fileMode, length: .max)
    add("locked", directoryMode)
    add("liar", fileMode, qid: .directory)
    add("turncoat", fileMode, length: 11)
    for directory in ["badname", "badsize", "endless", "longname"] { add(directory, directoryMode) }
    add("badname/ok", fileMode)
    add("badsize/first", fileMode)
    add("badsize/last", fileMode)
    add("longname/short", fileMode)
    return nodes
  }()

  static let contents: [String: [UInt8]] = [
    "etc/motd": Array("hello\n".utf8), "turncoat": Array("plain text\n".utf8),
    "liar": Array("this is text, not stat entries\n".utf8),
  ]

  /// Directory contents as a directory read returns them (nil: the path's children).
  func listing(_ path: String) -> [UInt8] {
    func entry(_ child: String) -> [UInt8] { stat(child)?.encoded() ?? [] }
    let nodes = Self.nodes
    let fileMode = Self.fileMode
    let longName = Self.longName
    switch path {
    case "badname":
      // Encoded with a placeholder name of the same length, then made invalid UTF-8.
      var bad = Stat(qid: Qid(path: 90), mode: fileMode, name: "XX").encoded()
      let at = 2 + 2 + 4 + Qid.wireSize + 4 + 4 + 4 + 8 + 2
      bad[at] = 0xFF
      bad[at + 1] = 0xFE
      return bad + entry("badname/ok")
    case "badsize":
      // The middle entry's size field counts four bytes more than its fields.
      var bad = Stat(qid: Qid(path: 91), mode: fileMode, name: "padded").encoded() + [0, 0, 0, 0]
      let declared = bad.count - 2
      bad[0] = UInt8(declared & 0xFF)
      bad[1] = UInt8(declared >> 8)
      return entry("badsize/first") + bad + entry("badsize/last")
    case "longname":
      return Stat(qid: Qid(path: 92), mode: fileMode, name: longName).encoded()
        + entry("longname/short")
    default:
      let prefix = path.isEmpty ? "" : path + "/"
      return nodes.keys.filter {
        $0.hasPrefix(prefix) && !$0.isEmpty && $0 != path
          && !$0.dropFirst(prefix.count).contains("/")
      }.sorted().flatMap(entry)
    }
  }

  /// One read of an endless directory: fresh names every time, as many as fit.
  static func endlessRead(offset: UInt64, count: UInt32) -> [UInt8] {
    var data: [UInt8] = []
    var index = 0
    while true {
      let stat = Stat(
        qid: Qid(path: 1000 + offset + UInt64(index)), mode: fileMode,
        name: "e\(offset)-\(index)")
      let bytes = stat.encoded()
      guard data.count + bytes.count <= Int(count) else { break }
      data += bytes
      index += 1
    }
    return data
  }
}

/// One client connection of a ``HostileServer``: its fids and its replies.
private final class Connection: @unchecked Sendable {
  unowned let server: HostileServer
  let transport: SocketTransport
  private let fids = ScriptedFids()

  init(server: HostileServer, transport: SocketTransport) {
    self.server = server
    self.transport = transport
  }

  func run() {
    while let frame = try? transport.receive(limit: 1 << 20) {
      guard let (tag, message) = try? Message.decode(frame, limits: .unbounded) else { continue }
      if case .tversion = message {
        answer(tag, message)
      } else if !server.holds(self, tag, message) {
        answer(tag, message)
      }
    }
  }

  private func send(_ tag: Tag, _ message: Message) {
    try? transport.send(message.encoded(tag: tag))
  }

  private func path(_ fid: Fid) -> String? { fids.path(fid) }

  func answer(_ tag: Tag, _ message: Message) {
    switch message {
    case .tversion(let size, _):
      send(tag, fids.version(size))
    case .tattach(let fid, _, _, _):
      send(tag, fids.attach(fid))
    case .tflush:
      send(tag, .rflush)
    case .twalk(let fid, let newfid, let names):
      if let base = path(fid) {
        server.record("Twalk", ([base] + names).filter { !$0.isEmpty }.joined(separator: "/"))
      }
      send(tag, fids.walk(fid, to: newfid, names, stat: server.stat))
    case .topen(let fid, _):
      guard let path = path(fid), let stat = server.stat(path) else {
        return send(tag, .rerror(ename: "unknown fid"))
      }
      server.record("Topen", path)
      send(tag, .ropen(qid: stat.qid, iounit: 0))
    case .tread(let fid, let offset, let count):
      guard let path = path(fid), let stat = server.stat(path) else {
        return send(tag, .rerror(ename: "unknown fid"))
      }
      server.record("Tread", path)
      let count = min(count, fids.readLimit)
      let data: [UInt8]
      switch path {
      case "locked": return send(tag, .rerror(ename: "permission denied"))
      case "endless":
        // Fresh entries at every offset: never an empty read.
        return send(tag, .rread(data: HostileServer.endlessRead(offset: offset, count: count)[...]))
      case _ where stat.qid.isDirectory && path != "liar":
        data = offset == 0 ? server.listing(path) : []
      default:
        data = HostileServer.contents[path] ?? []
      }
      let start = Int(min(offset, UInt64(data.count)))
      let end = min(data.count, start + Int(count))
      send(tag, .rread(data: ArraySlice(data[start..<end])))
    case .tstat(let fid):
      guard let path = path(fid), let stat = server.stat(path) else {
        return send(tag, .rerror(ename: "unknown fid"))
      }
      server.record("Tstat", path)
      send(tag, .rstat(stat: stat))
    case .tclunk(let fid):
      send(tag, fids.clunk(fid))
    default:
      send(tag, .rerror(ename: "operation not supported"))
    }
  }
}

/// A test case with a ``HostileServer`` and a real `mount9bbs -f` of it with
/// `timeout=requestTimeout`, started for each test and torn down with it (stalled requests
/// answered first, so the mount goes promptly); the mount's log is printed when the test failed.
class HostileServerTestCase: XCTestCase {
  var server: HostileServer!
  var mount: MountProcess!

  /// The mount's `timeout=`, in seconds.
  class var requestTimeout: Int { 60 }

  /// Absolute path of `relative` inside the mount.
  func path(_ relative: String) -> String { mount.mountpoint + "/" + relative }

  override func setUpWithError() throws {
    let timeout = Self.requestTimeout
    let server = try HostileServer()
    addTeardownBlock { server.stop() }
    let directory = try makeTemporaryDirectory("mount9bbs-hostile")
    let mountpoint = directory + "/mnt"
    try FileManager.default.createDirectory(atPath: mountpoint, withIntermediateDirectories: false)
    addTeardownBlock {
      guard !isMounted(mountpoint) else { return }
      try? FileManager.default.removeItem(atPath: directory)
    }
    let mount = try MountProcess(
      address: server.address, mountpoint: mountpoint, options: ["timeout=\(timeout)"])
    addTeardownBlock {
      server.stall(false)
      mount.stop()
    }
    addTeardownBlock { [weak self] in
      guard let run = self?.testRun, run.totalFailureCount > 0 else { return }
      print("--- mount9bbs log:\n\(mount.child.text)---")
    }
    self.server = server
    self.mount = mount
  }
}
