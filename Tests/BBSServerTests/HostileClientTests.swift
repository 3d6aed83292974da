import Foundation
import NinePProtocol
import NinePTransport
import TestSupport
import XCTest

@testable import BBSServer

/// Hostile clients against a real `9bbsd` process (issue 21): what must never crash it or
/// reach its log raw.
final class HostileClientDaemonTests: XCTestCase {
  private var daemons: [ServerProcess] = []
  private var directories: [String] = []

  override func tearDown() {
    for daemon in daemons { daemon.stop() }
    daemons.removeAll()
    for directory in directories { try? FileManager.default.removeItem(atPath: directory) }
    directories.removeAll()
    super.tearDown()
  }

  private func launch(_ extra: [String]) throws -> ServerProcess {
    let daemon = try ServerProcess(extra: extra)
    daemons.append(daemon)
    return daemon
  }

  /// 32 pipelined 1 MiB Treads of a /files file, then a TCP reset while the replies go out
  /// with sendfile(2): once killed 9bbsd with SIGPIPE (exit 141, nothing logged).
  func testResetDuringPipelinedFileReadsIsADisconnectNotACrash() throws {
    let files = try makeTemporaryDirectory("9bbs-files")
    directories.append(files)
    let size = 8 << 20
    try Data(repeating: 0x61, count: size).write(to: URL(fileURLWithPath: files + "/big"))
    let daemon = try launch(["--files", files])
    let port = try RawSocket.port(of: daemon.address)
    let rounds = 6
    for round in 0..<rounds {
      // The previous round's session ends first (or the server died of it).
      _ = waitUntil(timeout: 2) {
        round == 0 || daemon.log.contains("session \(round): disconnected")
          || !daemon.child.isRunning
      }
      guard daemon.child.isRunning else { break }
      let raw = try RawSocket(port: port)
      guard case .rversion = try raw.rpc(.tversion(msize: (1 << 20) + 24, version: "9P2000"))
      else { return XCTFail("round \(round): no Rversion") }
      _ = try raw.rpc(.tattach(fid: 0, afid: NineP.noFid, uname: "alice", aname: ""))
      _ = try raw.rpc(.twalk(fid: 0, newfid: 1, names: ["files", "big"]))
      guard case .ropen = try raw.rpc(.topen(fid: 1, mode: .read)) else {
        return XCTFail("round \(round): open failed")
      }
      for index in 0..<32 {
        try raw.send(
          .tread(fid: 1, offset: UInt64(index % 8) << 20, count: 1 << 20), tag: Tag(10 + index))
      }
      // The first reply is on its way: the rest are being sent when the client hangs up
      // (FIN) and then resets, which leaves the server's socket in CLOSE_WAIT with EPIPE.
      _ = try raw.receive()
      raw.shutdownWriting()
      raw.reset()
    }
    XCTAssertTrue(
      waitUntil(timeout: 10) {
        !daemon.child.isRunning
          || daemon.log.components(separatedBy: "disconnected").count > rounds
      }, "disconnects not logged:\n\(daemon.log)")
    XCTAssertTrue(
      daemon.child.isRunning,
      "9bbsd died (status \(daemon.child.process.terminationStatus)):\n\(daemon.log)")
    let client = try WireClient(daemon.address)
    defer { client.close() }
    try client.handshake(uname: "bob")
    XCTAssertTrue(try client.readFile("etc/motd").hasSuffix("\n"))
  }

  /// A Tauth identity must be 40 hex characters; one full of escapes is refused, and the log
  /// shows it escaped.
  func testTauthIdentityWithEscapesIsRefusedAndLoggedEscaped() throws {
    // Plain, so that a well-formed identity gets its challenge (SecureChannelServerTests: on
    // the channel).
    let daemon = try launch(["--auth", "optional", "--secure", "off"])
    let client = try WireClient(daemon.address)
    defer { client.close() }
    _ = try client.rpc(.tversion(msize: 8192, version: "9P2000"), tag: NineP.noTag)
    let hostile = "\u{1B}]0;pwned\u{07}\u{1B}[2Jroot"
    XCTAssertEqual(
      try client.rpc(.tauth(afid: 1, uname: hostile, aname: "")),
      .rerror(ename: "invalid identity"))
    XCTAssertEqual(
      try client.rpc(.tauth(afid: 2, uname: String(repeating: "a", count: 41), aname: "")),
      .rerror(ename: "invalid identity"))
    XCTAssertEqual(
      try client.rpc(.tauth(afid: 3, uname: String(repeating: "g", count: 40), aname: "")),
      .rerror(ename: "invalid identity"))
    guard
      case .rauth = try client.rpc(
        .tauth(afid: 4, uname: String(repeating: "0123456789", count: 4), aname: ""))
    else { return XCTFail("a well-formed identity was refused") }
    XCTAssertTrue(
      waitUntil(timeout: 5) { daemon.log.contains("\\x1B]0;pwned\\x07\\x1B[2Jroot") },
      "refusal not logged escaped:\n\(daemon.log)")
    XCTAssertFalse(daemon.log.contains("\u{1B}"), "a raw escape reached the log")
  }
  /// Idle connections that never finish the handshake fill the cap: the next client is
  /// refused with a log line, and once the handshake timeout drops the idle ones a
  /// legitimate client gets in. An address over its own cap is refused too.
  func testConnectionCapRefusesExcessAndAdmitsOnceIdleOnesAreDropped() throws {
    let daemon = try launch([
      "--connection-cap", "8", "--max-connections-per-address", "0", "--handshake-timeout", "1",
    ])
    let port = try RawSocket.port(of: daemon.address)
    let idle = try (0..<8).map { _ in try RawSocket(port: port) }
    defer { for socket in idle { socket.close() } }
    XCTAssertTrue(
      waitUntil(timeout: 5) { daemon.log.components(separatedBy: " connected").count > 8 },
      daemon.log)
    let refused = try RawSocket(port: port)
    defer { refused.close() }
    // Refused: given 2 s to send the Tversion that would be answered "board full", then closed.
    XCTAssertTrue(refused.waitForClose(timeout: 3), "the 9th connection was not refused")
    XCTAssertTrue(
      waitUntil(timeout: 5) { daemon.log.contains("all 8 sessions in use") }, daemon.log)
    for socket in idle {
      XCTAssertTrue(socket.waitForClose(timeout: 5), "an idle connection outlived the timeout")
    }
    XCTAssertTrue(daemon.log.contains("closing: no Tversion and Tattach within"), daemon.log)
    let client = try WireClient(daemon.address)
    defer { client.close() }
    do { try client.handshake(uname: "alice") } catch { XCTFail(daemon.log); throw error }
    XCTAssertTrue(try client.readFile("etc/motd").hasSuffix("\n"))
  }

  func testConnectionsPerNetworkAreCapped() throws {
    let daemon = try launch(["--max-connections-per-network", "2"])
    let first = try WireClient(daemon.address)
    defer { first.close() }
    try first.handshake(uname: "a")
    let second = try WireClient(daemon.address)
    defer { second.close() }
    try second.handshake(uname: "b")
    let third = try RawSocket(port: try RawSocket.port(of: daemon.address))
    defer { third.close() }
    XCTAssertTrue(third.waitForClose(timeout: 2), "a third connection from 127.0.0.1 was served")
    XCTAssertTrue(
      waitUntil(timeout: 5) { daemon.log.contains("127.0.0.0/24 already has 2 connections") },
      daemon.log)
    XCTAssertTrue(try first.readFile("etc/motd").hasSuffix("\n"), "a served client was dropped")
    // A refusal does not stop the listener: once one leaves, the network gets in again.
    second.close()
    XCTAssertTrue(waitUntil(timeout: 5) { daemon.log.contains("session 2: disconnected") })
    let fourth = try WireClient(daemon.address)
    defer { fourth.close() }
    try fourth.handshake(uname: "d")
  }

  /// Memory comes back after connections close: 500 attached clients, then none, and the
  /// resident size returns to near where it started (it stayed 33 MB up before: glibc kept
  /// the connection threads' arenas).
  func testMemoryReturnsAfterConnectionsClose() throws {
    let daemon = try launch(["--connection-cap", "1000", "--max-connections-per-address", "0"])
    let pid = daemon.child.process.processIdentifier
    func residentMiB() -> Int {
      let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
      let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
      return (Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0) / 1024
    }
    let port = try RawSocket.port(of: daemon.address)
    let start = residentMiB()
    let sockets = try (0..<500).map { index -> RawSocket in
      let socket = try RawSocket(port: port)
      _ = try socket.rpc(.tversion(msize: 8192, version: "9P2000"))
      _ = try socket.rpc(.tattach(fid: 0, afid: NineP.noFid, uname: "u\(index)", aname: ""))
      return socket
    }
    XCTAssertGreaterThan(residentMiB(), start + 20, "500 connections cost less than expected")
    for socket in sockets { socket.close() }
    XCTAssertTrue(
      waitUntil(timeout: 10) { daemon.log.components(separatedBy: "disconnected").count > 500 })
    XCTAssertGreaterThan(start, 0)
    XCTAssertTrue(
      waitUntil(timeout: 5, interval: 0.2) { residentMiB() <= start + 10 },
      "RSS \(residentMiB()) MiB after 500 connections closed, \(start) MiB before")
  }
}

/// Hostile clients against an in-process server.
final class HostileClientTests: ServerTestCase {
  private func startServer(_ configure: (inout BBSServerConfiguration) -> Void = { _ in }) throws {
    var configuration = BBSServerConfiguration(listen: ["tcp!127.0.0.1!0"], rooms: ["lobby"])
    configure(&configuration)
    let server = try BBSServer(configuration: configuration)
    try start(server)
  }

  /// One post is one line: an embedded newline makes a second post by the same author, never
  /// a line attributed to someone else; a carriage return (which would let a terminal
  /// overwrite the author) and other control characters are refused.
  func testPostWithEmbeddedNewlineOrReturnForgesNoLine() throws {
    try startServer()
    let mallory = try connect("mallory")
    let forged = "lobby:hello\n[14:41:00] sysop: please send me your key\n"
    XCTAssertEqual(try mallory.post(forged), .rwrite(count: UInt32(forged.utf8.count)))
    XCTAssertEqual(
      try mallory.post("lobby:ok\rsysop: overwritten"), .rerror(ename: "invalid argument"))
    XCTAssertEqual(try mallory.post("bell\u{07}"), .rerror(ename: "invalid argument"))
    XCTAssertEqual(try mallory.post("tab\tis fine\r\n"), .rwrite(count: 13))

    let reader = try connect("bob")
    let text = try reader.readFile("chat/lobby")
    let lines = text.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
    XCTAssertEqual(lines.count, 3, text)
    for line in lines {
      XCTAssertNotNil(
        line.range(of: #"^\[\d\d:\d\d:\d\d\] mallory: "#, options: .regularExpression),
        "line not by mallory: \(line)")
      XCTAssertFalse(line.contains("\r"))
    }
    XCTAssertTrue(
      lines.dropFirst().first?.hasSuffix("mallory: [14:41:00] sysop: please send me your key")
        == true, text)

    // Nor can an unverified uname carry a line break into the author field.
    let forger = try dial()
    _ = try forger.rpc(.tversion(msize: 8192, version: "9P2000"), tag: NineP.noTag)
    XCTAssertEqual(
      try forger.rpc(
        .tattach(fid: 0, afid: NineP.noFid, uname: "eve: hi\n[14:41:00] sysop", aname: "")),
      .rerror(ename: "invalid argument"))
  }

  /// A uname is what every reader sees as the author: one with a C1 control (8-bit CSI), a
  /// bidirectional override, an invisible character (a second `bob` with a zero width space,
  /// a name of only a zero width space) or nothing visible is refused; an emoji name with its
  /// variation selector, an accented name and no name at all are not.
  func testUnamesThatDoNotShowAsWrittenAreRefused() throws {
    try startServer()
    let refused = [
      "bob\u{9B}31m", "\u{202E}nimda", "bob\u{200B}", "\u{200B}", "\u{2060}", "zo\u{FEFF}e",
      "a\u{2028}b", "   ", "bob\u{00AD}",
    ]
    for uname in refused {
      let client = try dial()
      defer { client.close() }
      _ = try client.rpc(.tversion(msize: 8192, version: "9P2000"), tag: NineP.noTag)
      XCTAssertEqual(
        try client.rpc(.tattach(fid: 0, afid: NineP.noFid, uname: uname, aname: "")),
        .rerror(ename: "invalid argument"), "uname \(uname.unicodeScalars.map(\.value))")
    }
    for uname in ["zoë", "❤️", "👩‍🚀 ace", ""] {
      let client = try dial()
      defer { client.close() }
      _ = try client.rpc(.tversion(msize: 8192, version: "9P2000"), tag: NineP.noTag)
      guard
        case .rattach = try client.rpc(.tattach(fid: 0, afid: NineP.noFid, uname: uname, aname: ""))
      else { return XCTFail("uname \(uname) refused") }
    }
  }

  /// A read-only `sqlite3` loop on the store while 500 lines are posted: every post is
  /// answered Rwrite and is still there after a restart (the journal once made writes fail
  /// with "database is locked" and the posts vanished silently).
  func testConcurrentSQLiteReaderLosesNoPost() throws {
    directory = try makeTemporaryDirectory("9bbs-wal")
    let data = directory + "/data"
    // The posting allowance is another test's business.
    try startServer {
      $0.dataDirectory = data
      $0.postingLimits = .unlimited
    }
    let writer = try connect("alice")
    _ = try writer.open("chat/post", fid: 5, mode: .write)
    let database = data + "/" + SQLiteBoardStore.fileName
    let reader = ChildProcess(
      "/bin/sh",
      [
        "-c",
        "while :; do sqlite3 -readonly '\(database)' 'SELECT count(*), sum(length(text)) FROM chatMessage;' >/dev/null 2>&1; done",
      ])
    try reader.start()
    defer { reader.stop(grace: 2) }
    let count = 500
    var refused: [String] = []
    for index in 0..<count {
      let reply = try writer.rpc(.twrite(fid: 5, offset: 0, data: ArraySlice("line \(index)".utf8)))
      if reply != .rwrite(count: UInt32("line \(index)".utf8.count)) {
        refused.append("line \(index): \(reply)")
      }
    }
    reader.stop(grace: 2)
    XCTAssertEqual(refused, [], "posts refused while a reader held the database")
    writer.close()
    server?.stop()

    try startServer { $0.dataDirectory = data }
    let check = try connect("bob", msize: 1 << 20)
    let text = try check.readFile("chat/lobby", count: 1 << 19)
    let stored = text.split(separator: "\n").map {
      $0.split(separator: " ", maxSplits: 2).last ?? ""
    }
    XCTAssertEqual(stored, (0..<count).map { "line \($0)"[...] }, "posts lost across a restart")
  }

  /// Board messages of 1 MiB as fast as possible (879 MB of SQLite in 20 s once): a message
  /// beyond the cap is refused with ENOSPC, a poster beyond the allowance with EAGAIN, and
  /// the database stays small. Chat posts have their allowance too.
  func testFloodBeyondCapsGetsErrorsAndTheDatabaseStaysBounded() throws {
    directory = try makeTemporaryDirectory("9bbs-flood")
    let data = directory + "/data"
    let limits = PostingLimits(
      postBurst: 50, postsPerMinute: 600, byteBurst: 256 << 10, bytesPerSecond: 64 << 10)
    try startServer {
      $0.dataDirectory = data
      $0.postingLimits = limits
    }
    let flooder = try connect("flooder", msize: (1 << 20) + 24)
    _ = try flooder.rpc(.twalk(fid: 0, newfid: 1, names: ["rooms", "lobby"]))
    _ = try flooder.rpc(
      .tcreate(fid: 1, name: "1000", perm: FileMode(permissions: 0o644), mode: .write))
    let huge = [UInt8](repeating: 0x41, count: 1 << 20)
    XCTAssertEqual(
      try flooder.rpc(.twrite(fid: 1, offset: 0, data: huge[...])),
      .rerror(ename: "no space left on device"))
    _ = try flooder.rpc(.tclunk(fid: 1))

    let chunk = [UInt8](repeating: 0x42, count: 64 << 10)
    var written = 0
    var refusals = 0
    let started = Date()
    var name = 2000
    while Date().timeIntervalSince(started) < 1.5 {
      name += 1
      _ = try flooder.rpc(.twalk(fid: 0, newfid: 1, names: ["rooms", "lobby"]))
      let created = try flooder.rpc(
        .tcreate(fid: 1, name: "\(name)", perm: FileMode(permissions: 0o644), mode: .write))
      if case .rcreate = created {
        switch try flooder.rpc(.twrite(fid: 1, offset: 0, data: chunk[...])) {
        case .rwrite(let count): written += Int(count)
        case .rerror(let ename):
          XCTAssertEqual(ename, "resource temporarily unavailable")
          refusals += 1
        default: XCTFail("unexpected reply")
        }
      } else {
        XCTAssertEqual(created, .rerror(ename: "resource temporarily unavailable"))
        refusals += 1
      }
      _ = try flooder.rpc(.tclunk(fid: 1))
    }
    let elapsed = Date().timeIntervalSince(started)
    XCTAssertGreaterThan(refusals, 0, "a flood was never refused")
    let allowed = Double(limits.byteBurst) + elapsed * Double(limits.bytesPerSecond) + 65536
    XCTAssertLessThanOrEqual(Double(written), allowed, "more written than the allowance")
    var stored = 0
    for suffix in ["", "-wal"] {
      let path = data + "/" + SQLiteBoardStore.fileName + suffix
      stored += (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
    }
    XCTAssertLessThan(stored, 4 << 20, "the database grew to \(stored) bytes")

    // Chat lines: the post allowance runs out, counted per address for unverified unames.
    let other = try connect("other-name")
    _ = try flooder.open("chat/post", fid: 7, mode: .write)
    _ = try other.open("chat/post", fid: 7, mode: .write)
    var posted = 0
    for index in 0..<200 {
      let client = index.isMultiple(of: 2) ? flooder : other
      if case .rwrite = try client.rpc(
        .twrite(fid: 7, offset: 0, data: ArraySlice("spam \(index)".utf8)))
      {
        posted += 1
      }
    }
    XCTAssertLessThan(posted, 80, "\(posted) of 200 chat posts accepted")
    // A board room is a post too.
    _ = try flooder.rpc(.twalk(fid: 0, newfid: 8, names: []))
    XCTAssertEqual(
      try flooder.rpc(
        .tcreate(
          fid: 8, name: "spamroom", perm: FileMode(permissions: 0o755, .directory),
          mode: .read)),
      .rerror(ename: "resource temporarily unavailable"))
  }

  /// Timeouts: a connection that never sends, or stops after Tversion, is closed after the
  /// handshake timeout; an attached one that goes quiet after the idle timeout, unless it
  /// has a parked chat read; a request left half-sent after the stall timeout, parked read
  /// or not.
  func testHandshakeIdleAndStallTimeoutsCloseConnections() throws {
    try startServer {
      $0.handshakeTimeout = .milliseconds(500)
      $0.idleTimeout = .seconds(1)
      $0.stallTimeout = .milliseconds(500)
    }
    let port = try RawSocket.port(of: address)
    let silent = try RawSocket(port: port)
    defer { silent.close() }
    let versionOnly = try RawSocket(port: port)
    defer { versionOnly.close() }
    guard case .rversion = try versionOnly.rpc(.tversion(msize: 8192, version: "9P2000")) else {
      return XCTFail("no Rversion")
    }
    let quiet = try connect("quiet")
    let waiting = try RawSocket(port: port)
    defer { waiting.close() }
    _ = try waiting.rpc(.tversion(msize: 8192, version: "9P2000"))
    _ = try waiting.rpc(.tattach(fid: 0, afid: NineP.noFid, uname: "waiting", aname: ""))
    _ = try waiting.rpc(.twalk(fid: 0, newfid: 1, names: ["chat", "lobby"]))
    _ = try waiting.rpc(.topen(fid: 1, mode: .read))
    try waiting.send(.tread(fid: 1, offset: 0, count: 4096), tag: 9)  // parks: nothing posted

    XCTAssertTrue(silent.waitForClose(timeout: 3), "a silent connection was kept")
    XCTAssertTrue(versionOnly.waitForClose(timeout: 3), "a Tversion-only connection was kept")
    XCTAssertTrue(quiet.waitForDisconnect(timeout: 4), "an idle connection was kept")
    // Past the idle timeout, the parked read keeps its connection.
    XCTAssertFalse(waiting.waitForClose(timeout: 1.5), "a connection with a parked read was closed")

    // Half a Twalk: the size prefix promises 40 bytes, 6 come.
    try waiting.send([40, 0, 0, 0, 110, 1])
    XCTAssertTrue(waiting.waitForClose(timeout: 3), "a half-sent request held its connection")
    XCTAssertTrue(waitUntil(timeout: 2) { self.server?.sessionCount == 0 })
  }

  /// A client that pipelines reads and never takes the replies leaves the server's send
  /// waiting: after the stall timeout without a byte going out, the connection is closed and
  /// its thread freed.
  func testClientThatReadsNoReplyIsClosedAfterTheStallTimeout() throws {
    directory = try makeTemporaryDirectory("9bbs-stall")
    try Data(repeating: 0x61, count: 4 << 20).write(to: URL(fileURLWithPath: directory + "/big"))
    try startServer {
      $0.filesDirectory = self.directory
      $0.stallTimeout = .milliseconds(500)
    }
    let raw = try RawSocket(port: try RawSocket.port(of: address))
    defer { raw.close() }
    _ = try raw.rpc(.tversion(msize: (1 << 20) + 24, version: "9P2000"))
    _ = try raw.rpc(.tattach(fid: 0, afid: NineP.noFid, uname: "sink", aname: ""))
    _ = try raw.rpc(.twalk(fid: 0, newfid: 1, names: ["files", "big"]))
    _ = try raw.rpc(.topen(fid: 1, mode: .read))
    // A parked chat read too: a post's wake-up then waits to send, holding the session.
    _ = try raw.rpc(.twalk(fid: 0, newfid: 2, names: ["chat", "lobby"]))
    _ = try raw.rpc(.topen(fid: 2, mode: .read))
    try raw.send(.tread(fid: 2, offset: 0, count: 4096), tag: 999)
    for index in 0..<64 {
      try raw.send(.tread(fid: 1, offset: UInt64(index % 4) << 20, count: 1 << 20), tag: Tag(index))
    }
    let poster = try connect("poster")
    XCTAssertEqual(try poster.post("wake up"), .rwrite(count: 7))
    XCTAssertTrue(
      waitUntil(timeout: 5) { self.server?.sessionCount == 1 },
      "a client that reads nothing kept its connection")
  }

  /// `9bbsd --sysop none` (the systemd unit's default): the first user to attach is not the
  /// sysop, so a stranger cannot take /etc.
  func testNoFirstUserSysop() throws {
    try startServer { $0.firstUserIsSysop = false }
    let first = try connect("first")
    _ = try first.open("etc/motd", fid: 2, mode: .write)
    XCTAssertEqual(
      try first.rpc(.twrite(fid: 2, offset: 0, data: ArraySlice("mine now\n".utf8))),
      .rerror(ename: "not authorized"))
  }

  /// Each open file of /files is a descriptor: a session may hold a few, not thousands (one
  /// client could otherwise take every descriptor of the server).
  func testOpenFilesPerSessionAreCapped() throws {
    directory = try makeTemporaryDirectory("9bbs-fds")
    try Data("x".utf8).write(to: URL(fileURLWithPath: directory + "/f"))
    try startServer {
      $0.filesDirectory = self.directory
      $0.maxOpenFilesPerSession = 4
    }
    let client = try connect("opener")
    for fid in Fid(1)...4 {
      guard case .ropen = try client.open("files/f", fid: fid) else {
        return XCTFail("open \(fid) refused")
      }
    }
    XCTAssertEqual(
      try client.open("files/f", fid: 5), .rerror(ename: "resource temporarily unavailable"))
    _ = try client.rpc(.tclunk(fid: 1))
    guard case .ropen = try client.rpc(.topen(fid: 5, mode: .read)) else {
      return XCTFail("an open after a clunk was refused")
    }
  }
}
