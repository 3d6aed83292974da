import Foundation
import NinePClient
import NinePProtocol
import NinePTransport
import TestSupport
import XCTest

#if canImport(Glibc)
  import Glibc
#endif

/// NinePClient against a real `9bbsd` process over tcp, unix and seqpacket, with the default
/// server profile (client: multiplex) and the device profile (client: device; on seqpacket the
/// server also holds each request 3 ms). Every run ends with ``BoardUnderTest/assertHealthy``:
/// all sessions still open and answering, and no wire-rule violation in the server's log.
final class ClientServerTests: XCTestCase {
  // MARK: Version, attach, plain reads and writes

  func testVersionAttachAndEtcReads() {
    forEachTarget { board in
      let session = try board.connect()
      // The device grants at most 8192; the default server grants what a multiplex client asks.
      XCTAssertEqual(
        session.msize, board.target.device ? 8192 : board.configuration(uname: "x").requestedMsize,
        "\(board.target)")
      XCTAssertTrue(session.rootQid.isDirectory, "\(board.target): attach qid \(session.rootQid)")
      XCTAssertEqual(try session.contents("etc/motd"), board.motd + "\n", "\(board.target)")
      XCTAssertEqual(try session.contents("etc/version"), "9BBS v0.1.0\n", "\(board.target)")
      // A second attach on its own connection works alongside.
      let other = try board.connect(uname: "bob")
      XCTAssertEqual(try other.contents("/etc/motd"), board.motd + "\n", "\(board.target)")
    }
  }

  func testPostsReachReadersOfTheRoom() {
    forEachTarget { board in
      let alice = try board.connect(uname: "alice")
      let bob = try board.connect(uname: "bob")
      XCTAssertEqual(try alice.post("lobby:hello from alice\n"), 23, "\(board.target)")
      XCTAssertEqual(try alice.post("tech:tech talk"), 14, "\(board.target)")

      let (lobby, _) = try bob.openPath("chat/lobby")
      let lines = try awaitResult("read lobby") {
        bob.read(lobby, offset: 0, count: 1024, mayPark: true, completion: $0)
      }
      XCTAssertTrue(
        String(decoding: lines, as: UTF8.self).hasSuffix("] alice: hello from alice\n"),
        "\(board.target): \(String(decoding: lines, as: UTF8.self))")
      let (tech, _) = try bob.openPath("chat/tech")
      let techLines = try awaitResult("read tech") {
        bob.read(tech, offset: 0, count: 1024, mayPark: true, completion: $0)
      }
      XCTAssertTrue(
        String(decoding: techLines, as: UTF8.self).hasSuffix("] alice: tech talk\n"),
        "\(board.target)")
      _ = try awaitResult("clunk") { bob.clunk(lobby, completion: $0) }
      _ = try awaitResult("clunk") { bob.clunk(tech, completion: $0) }

      // An unknown room is an error, not a silent success.
      let error = try awaitFailure("post to an unknown room") {
        (completion: @escaping @Sendable (Result<UInt32, NinePError>) -> Void) in
        guard let (fid, _) = try? alice.openPath("chat/post", mode: .write) else {
          return completion(.failure(.protocolViolation("cannot open chat/post")))
        }
        alice.write(fid, offset: 0, data: Array("nosuchroom:hi".utf8)) { result in
          alice.clunk(fid)
          completion(result)
        }
      }
      XCTAssertEqual(error.errno, ENOENT, "\(board.target): \(error)")
    }
  }

  // MARK: Walks

  /// Walks of every length, including 22 names under a `--files` tree (two Twalks of at most
  /// 16), misses in the first and second batch, and no fid leak on a 32-fid device.
  func testWalksIncludingPathsLongerThanSixteenNames() throws {
    let root = try makeTemporaryDirectory("itest-files")
    addTeardownBlock { try? FileManager.default.removeItem(atPath: root) }
    let dirs = (1...20).map { "d\($0)" }
    let deepest = root + "/" + dirs.joined(separator: "/")
    try FileManager.default.createDirectory(atPath: deepest, withIntermediateDirectories: true)
    try Data("deep file\n".utf8).write(to: URL(fileURLWithPath: deepest + "/leaf.txt"))
    try Data("at sixteen\n".utf8).write(
      to: URL(fileURLWithPath: root + "/" + dirs.prefix(14).joined(separator: "/") + "/f16"))

    forEachTarget(extra: { _ in ["--files", root] }) { board in
      let session = try board.connect()
      let motd = try awaitResult("walk etc/motd") { session.walk(["etc", "motd"], completion: $0) }
      XCTAssertFalse(motd.qid.isDirectory, "\(board.target)")
      session.clunk(motd.fid)

      let miss = try awaitFailure("walk chat/nope") {
        session.walk(["chat", "nope"], completion: $0)
      }
      XCTAssertEqual(miss, .notFound(path: "/chat/nope"), "\(board.target)")

      // Exactly 16 names: one Twalk.
      let sixteen = ["files"] + dirs.prefix(14) + ["f16"]
      XCTAssertEqual(sixteen.count, 16)
      XCTAssertEqual(
        try session.contents(sixteen.joined(separator: "/")), "at sixteen\n", "\(board.target)")

      // 22 names: 16 then 6, the intermediate fid clunked.
      let long = ["files"] + dirs + ["leaf.txt"]
      XCTAssertEqual(long.count, 22)
      XCTAssertEqual(
        try session.contents(long.joined(separator: "/")), "deep file\n", "\(board.target)")
      // 17 names, ending in a directory.
      let seventeen = ["files"] + dirs.prefix(16)
      let walked = try awaitResult("walk 17") { session.walk(seventeen, completion: $0) }
      XCTAssertTrue(walked.qid.isDirectory, "\(board.target)")
      session.clunk(walked.fid)

      // A miss in the second batch names the missing element.
      let missLate = ["files"] + dirs.prefix(17) + ["missing"]
      let lateError = try awaitFailure("walk late miss") { session.walk(missLate, completion: $0) }
      XCTAssertEqual(
        lateError, .notFound(path: "/" + missLate.joined(separator: "/")), "\(board.target)")
      // A miss inside the first batch (partial Rwalk).
      let earlyError = try awaitFailure("walk early miss") {
        session.walk(["files", "d1", "nope", "d3"], completion: $0)
      }
      XCTAssertEqual(earlyError, .notFound(path: "/files/d1/nope"), "\(board.target)")

      // Far more walks than the device has fids: nothing leaks, at the client or the server.
      for round in 0..<40 {
        let path = round.isMultiple(of: 2) ? long : missLate
        let result = Outcomes<WalkResult>()
        session.walk(path) { result.add($0) }
        guard result.wait(timeout: 15), let first = result.all.first else {
          throw HarnessError("walk round \(round) timed out")
        }
        switch first {
        case .success(let walked):
          XCTAssertTrue(round.isMultiple(of: 2))
          _ = try awaitResult("clunk") { session.clunk(walked.fid, completion: $0) }
        case .failure(let error):
          XCTAssertEqual(
            error, .notFound(path: "/" + missLate.joined(separator: "/")),
            "\(board.target) round \(round)")
        }
      }
      XCTAssertEqual(try session.contents("etc/version"), "9BBS v0.1.0\n")
    }
  }

  // MARK: Directories

  /// Listings of /, /chat, /etc, /rooms and /rooms/lobby, once with a large msize and once
  /// with msize 128 (one entry per Tread, so offsets and de-duplication are exercised): same
  /// names, no duplicates.
  func testDirectoryListings() {
    forEachTarget { board in
      let session = try board.connect()
      let small = try board.connect(uname: "small", msize: 128)
      XCTAssertEqual(small.msize, 128, "\(board.target)")
      for stamp in 0..<5 {
        let room = try awaitResult("walk rooms/lobby") {
          session.walk(["rooms", "lobby"], completion: $0)
        }
        let name = String(1_738_005_432_000 + UInt64(stamp))
        _ = try awaitResult("create \(name)") {
          session.create(
            room.fid, name: name, perm: FileMode(permissions: 0o644), mode: .write,
            completion: $0)
        }
        _ = try awaitResult("write") {
          session.write(
            room.fid, offset: 0, data: Array("Subject: m\(stamp)\n\nbody \(stamp)\n".utf8),
            completion: $0)
        }
        _ = try awaitResult("clunk") { session.clunk(room.fid, completion: $0) }
      }
      let expected: [String: [String]] = [
        "/": ["etc", "rooms", "chat"],
        "/chat": ["post", "users", "lobby", "tech"],
        "/etc": [
          "boardname", "sysop", "motd", "location", "description", "version", "registration",
          "nets",
        ],
        "/rooms": ["lobby", "tech"],
        "/rooms/lobby": (0..<5).map { String(UInt32(truncatingIfNeeded: 1_738_005_432_000 + $0)) },
      ]
      for (path, names) in expected.sorted(by: { $0.key < $1.key }) {
        let large = try session.list(path).map(\.name)
        let tiny = try small.list(path).map(\.name)
        XCTAssertEqual(large, names, "\(board.target) \(path)")
        XCTAssertEqual(tiny, names, "\(board.target) \(path) at msize 128")
        XCTAssertEqual(Set(tiny).count, tiny.count, "\(board.target) \(path): duplicates")
      }
      let chat = try session.list("/chat")
      XCTAssertEqual(chat.first { $0.name == "post" }?.mode.permissions, 0o200)
      XCTAssertEqual(chat.first { $0.name == "lobby" }?.mode.permissions, 0o444)
      XCTAssertTrue(try session.list("/").allSatisfy { $0.qid.isDirectory && $0.mode.isDirectory })
    }
  }

  // MARK: Board messages

  /// Tcreate + one Twrite makes a board message under its numeric id; Tremove fails (the BBS
  /// has no deletion) and the fid is clunked afterwards, so 40 failed removes leak nothing on
  /// a 32-fid device.
  func testCreateBoardMessageThenFailedRemoveAndClunk() {
    forEachTarget { board in
      let session = try board.connect(uname: "carol")
      let room = try awaitResult("walk rooms/lobby") {
        session.walk(["rooms", "lobby"], completion: $0)
      }
      let created = try awaitResult("create") {
        session.create(
          room.fid, name: "1738005432123", perm: FileMode(permissions: 0o644), mode: .write,
          completion: $0)
      }
      XCTAssertFalse(created.qid.isDirectory, "\(board.target)")
      if board.target.device { XCTAssertEqual(created.iounit, 0, "device Rcreate iounit") }
      let text = "Subject: Greetings\n\nHello board\n"
      let wrote = try awaitResult("write message") {
        session.write(room.fid, offset: 0, data: Array(text.utf8), completion: $0)
      }
      XCTAssertEqual(wrote, UInt32(text.utf8.count), "\(board.target)")
      _ = try awaitResult("clunk") { session.clunk(room.fid, completion: $0) }

      XCTAssertEqual(try session.list("rooms/lobby").map(\.name), ["2838644539"], "\(board.target)")
      let rendered = try session.contents("rooms/lobby/2838644539")
      XCTAssertTrue(rendered.contains("From: carol\n"), "\(board.target): \(rendered)")
      XCTAssertTrue(rendered.contains("Subject: Greetings\n"), "\(board.target): \(rendered)")
      XCTAssertTrue(rendered.contains("Hello board"), "\(board.target): \(rendered)")

      // The client's remove: fails with ENOTSUP and clunks the fid.
      let message = try awaitResult("walk message") {
        session.walk(["rooms", "lobby", "2838644539"], completion: $0)
      }
      let removeError = try awaitFailure("remove") { session.remove(message.fid, completion: $0) }
      XCTAssertEqual(removeError.errno, ENOTSUP, "\(board.target): \(removeError)")

      // On the wire: after a failed Tremove a device keeps the fid until Tclunk.
      let fid: Fid = 900
      XCTAssertEqual(
        try session.rpc(.twalk(fid: session.rootFid, newfid: fid, names: ["rooms", "lobby"])).type,
        .rwalk)
      XCTAssertThrowsError(try session.rpc(.tremove(fid: fid)), "\(board.target)") { error in
        XCTAssertEqual((error as? NinePError)?.errno, ENOTSUP)
      }
      let reuse = Message.twalk(fid: session.rootFid, newfid: fid, names: ["etc"])
      if board.target.device {
        XCTAssertThrowsError(try session.rpc(reuse), "device keeps the fid") { error in
          guard case .server(let ename, _)? = error as? NinePError else {
            return XCTFail("\(error)")
          }
          XCTAssertEqual(ename, "FID already in use")
        }
      }
      XCTAssertEqual(try session.rpc(.tclunk(fid: fid)), .rclunk)
      XCTAssertEqual(try session.rpc(reuse).type, .rwalk, "\(board.target): fid free after clunk")
      XCTAssertEqual(try session.rpc(.tclunk(fid: fid)), .rclunk)

      // Many more failed removes than the device has fids.
      for round in 0..<40 {
        let walked = try awaitResult("walk \(round)") {
          session.walk(["rooms", "lobby", "2838644539"], completion: $0)
        }
        _ = try awaitFailure("remove \(round)") { session.remove(walked.fid, completion: $0) }
      }
      XCTAssertEqual(try session.contents("etc/version"), "9BBS v0.1.0\n", "\(board.target)")
    }
  }

  // MARK: Stat quirks

  /// The device reproduces `bbs_create_node`: walks and Tstat call /chat/lobby, /chat/post and
  /// /rooms QTDIR with mode 0755 and no DMDIR, while the listing says files; the default
  /// profile is consistent.
  func testStatQuirks() {
    forEachTarget { board in
      let session = try board.connect()
      let device = board.target.device
      let lobby = try awaitResult("walk chat/lobby") {
        session.walk(["chat", "lobby"], completion: $0)
      }
      XCTAssertEqual(lobby.qid.isDirectory, device, "\(board.target): walk qid \(lobby.qid)")
      let lobbyStat = try awaitResult("stat") { session.stat(lobby.fid, completion: $0) }
      session.clunk(lobby.fid)
      XCTAssertEqual(lobbyStat.qid.isDirectory, device, "\(board.target)")
      XCTAssertFalse(lobbyStat.mode.isDirectory, "\(board.target): \(lobbyStat.mode)")
      XCTAssertEqual(lobbyStat.mode.permissions, device ? 0o755 : 0o444, "\(board.target)")
      XCTAssertEqual(lobbyStat.uid, "zephyr")

      let rooms = try awaitResult("stat rooms") { completion in
        session.walk(["rooms"]) { walked in
          switch walked {
          case .success(let result):
            session.stat(result.fid) { stat in
              session.clunk(result.fid)
              completion(stat)
            }
          case .failure(let error): completion(.failure(error))
          }
        }
      }
      XCTAssertTrue(rooms.qid.isDirectory, "\(board.target)")
      XCTAssertEqual(rooms.mode.isDirectory, !device, "\(board.target): \(rooms.mode)")

      let post = try awaitResult("walk chat/post") {
        session.walk(["chat", "post"], completion: $0)
      }
      session.clunk(post.fid)
      XCTAssertEqual(post.qid.isDirectory, device, "\(board.target)")
      let listed = try session.list("chat")
      let listedPost = try XCTUnwrap(listed.first { $0.name == "post" })
      let listedLobby = try XCTUnwrap(listed.first { $0.name == "lobby" })
      XCTAssertFalse(listedPost.qid.isDirectory)
      XCTAssertFalse(listedLobby.qid.isDirectory)
      // The device's walk qid.path for /chat/post is a "pointer", the listing's an index.
      XCTAssertEqual(listedPost.qid.path == post.qid.path, !device, "\(board.target)")

      let motd = try awaitResult("walk etc/motd") { session.walk(["etc", "motd"], completion: $0) }
      session.clunk(motd.fid)
      XCTAssertFalse(motd.qid.isDirectory, "\(board.target)")
    }
  }

  // MARK: Parked reads

  /// Eight rooms, one parked read each, placed with `Pool.session(for: .stream)`: never on the
  /// primary, and on a device four per session over two stream sessions. While they are
  /// parked, ordinary requests still work; posts from another session wake six of them, one
  /// is flushed (completion exactly once, and it did not eat the next line) and one is woken
  /// by Tclunk of its fid (Rread(0) before Rclunk).
  func testParkedReadsSpreadOverSessionsWakeFlushAndClunk() {
    let rooms = ["lobby", "tech", "r1", "r2", "r3", "r4", "r5", "r6"]
    forEachTarget(rooms: rooms) { board in
      let device = board.target.device
      let pool = try board.pool(uname: "glenda", maxSessions: device ? 3 : 2)
      let poster = try board.connect(uname: "alice")
      let chat = try pool.primary.list("chat").map(\.name)
      XCTAssertEqual(chat, ["post", "users"] + rooms, "\(board.target)")

      struct Reader {
        var room: String
        var session: Session
        var fid: Fid
        var handle: RequestHandle
        var outcomes: Outcomes<ArraySlice<UInt8>>
      }
      let order = EventLog()
      var readers: [Reader] = []
      for room in rooms {
        let session = try Session.placed(pool, .stream)
        let (fid, _) = try session.openPath("chat/\(room)")
        let outcomes = Outcomes<ArraySlice<UInt8>>()
        let handle = session.read(fid, offset: 0, count: 1024, mayPark: true) { result in
          order.record("read \(room)")
          outcomes.add(result)
        }
        readers.append(
          Reader(room: room, session: session, fid: fid, handle: handle, outcomes: outcomes))
      }
      // Placement: never the primary; a device gets four per session.
      let primary = pool.primary
      XCTAssertFalse(readers.contains { $0.session === primary }, "\(board.target)")
      var perSession: [ObjectIdentifier: Int] = [:]
      for reader in readers { perSession[ObjectIdentifier(reader.session), default: 0] += 1 }
      if device {
        XCTAssertEqual(perSession.values.sorted(), [4, 4], "\(board.target)")
        XCTAssertEqual(pool.sessions.count, 3, "\(board.target)")
      } else {
        XCTAssertEqual(perSession.count, 1, "\(board.target): one stream session is plenty")
      }
      // The server parked all eight (its debug log says so; no event announces it).
      let parkedAll = waitUntil(timeout: 15) {
        board.log.components(separatedBy: "parked read tag").count - 1 >= rooms.count
      }
      XCTAssertTrue(parkedAll, "\(board.target): not all reads parked\n\(board.log.suffix(3000))")
      XCTAssertTrue(readers.allSatisfy { $0.outcomes.count == 0 }, "\(board.target)")

      // Ordinary requests are not stuck behind the parked reads.
      XCTAssertEqual(try primary.contents("etc/motd"), board.motd + "\n")
      var streamSessions: [Session] = []
      for reader in readers where !streamSessions.contains(where: { $0 === reader.session }) {
        streamSessions.append(reader.session)
      }
      for session in streamSessions {
        XCTAssertEqual(try session.contents("etc/version"), "9BBS v0.1.0\n", "\(board.target)")
      }

      // Posts from another session wake the first six.
      for reader in readers.prefix(6) { try poster.post("\(reader.room):wake \(reader.room)") }
      for reader in readers.prefix(6) {
        XCTAssertTrue(reader.outcomes.wait(timeout: 15), "\(board.target): \(reader.room) slept")
        let text = (try? reader.outcomes.all.first?.get()).map {
          String(decoding: $0, as: UTF8.self)
        }
        XCTAssertTrue(
          text?.hasSuffix("] alice: wake \(reader.room)\n") == true,
          "\(board.target) \(reader.room): \(String(describing: text))")
      }

      // Flush (Session.cancel) of a parked read: Rread(0) then Rflush, one completion.
      let flushed = readers[6]
      flushed.session.cancel(flushed.handle)
      XCTAssertTrue(flushed.outcomes.wait(timeout: 15), "\(board.target): flush unanswered")
      // A round trip on the same session: anything left from the flush has arrived by now.
      _ = try awaitResult("stat after flush") {
        flushed.session.stat(flushed.session.rootFid, completion: $0)
      }
      XCTAssertEqual(flushed.outcomes.count, 1, "\(board.target): flush completions")
      switch flushed.outcomes.all.first {
      case .success(let data)?: XCTAssertEqual(data, [], "\(board.target)")
      case .failure(.flushed)?: break
      case let other:
        XCTFail("\(board.target): flushed read ended with \(String(describing: other))")
      }
      // The flushed read did not consume the next line: a new read on the same fid gets it.
      try poster.post("\(flushed.room):after the flush")
      let next = try awaitResult("read after flush") {
        flushed.session.read(flushed.fid, offset: 0, count: 1024, mayPark: true, completion: $0)
      }
      XCTAssertTrue(
        String(decoding: next, as: UTF8.self).hasSuffix("] alice: after the flush\n"),
        "\(board.target)")
      XCTAssertEqual(flushed.outcomes.count, 1, "\(board.target): flushed read completed twice")

      // Tclunk of a fid with a parked read: the read ends (0 bytes) before Rclunk.
      let clunked = readers[7]
      let clunkDone = Outcomes<Void>()
      clunked.session.clunk(clunked.fid) { result in
        order.record("clunk \(clunked.room)")
        clunkDone.add(result)
      }
      XCTAssertTrue(clunkDone.wait(timeout: 15), "\(board.target): Tclunk unanswered")
      XCTAssertTrue(clunked.outcomes.wait(timeout: 15), "\(board.target)")
      XCTAssertEqual(try clunked.outcomes.all.first?.get(), [], "\(board.target)")
      let tail = order.entries.filter { $0.hasSuffix(" \(clunked.room)") }
      XCTAssertEqual(tail, ["read \(clunked.room)", "clunk \(clunked.room)"], "\(board.target)")

      for reader in readers where reader.room != clunked.room {
        _ = try awaitResult("clunk") { reader.session.clunk(reader.fid, completion: $0) }
      }
      XCTAssertTrue(readers.allSatisfy { $0.outcomes.count == 1 }, "\(board.target)")
    }
  }

  // MARK: Large transfers and concurrency

  /// Files much larger than one message through a writable `--files` area: many Twrites and
  /// Treads, each spread over many 245-byte SDUs on seqpacket. Also a board message of 4000
  /// bytes in one Twrite and a chat post over the 255-byte text limit.
  func testLargeTransfersAcrossMessagesAndSDUs() throws {
    let root = try makeTemporaryDirectory("itest-rw")
    addTeardownBlock { try? FileManager.default.removeItem(atPath: root) }
    forEachTarget(extra: { target in ["--files", root, "--files-rw"] }) { board in
      let session = try board.connect(uname: "dave")
      let name = "big-\(board.target.transport)-\(board.target.serverProfile).bin"
      let payload = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 9) }
      let area = try awaitResult("walk files") { session.walk(["files"], completion: $0) }
      let created = try awaitResult("create \(name)") {
        session.create(
          area.fid, name: name, perm: FileMode(permissions: 0o644), mode: .write, completion: $0)
      }
      let wrote = try awaitResult("write \(payload.count) bytes", timeout: 60) {
        session.writeAll(
          area.fid, offset: 0, data: payload[...], iounit: created.iounit, completion: $0)
      }
      XCTAssertEqual(wrote, payload.count, "\(board.target)")
      _ = try awaitResult("clunk") { session.clunk(area.fid, completion: $0) }
      let (fid, iounit) = try session.openPath("files/\(name)")
      let back = try awaitResult("read back", timeout: 60) {
        session.readAll(fid, iounit: iounit, completion: $0)
      }
      _ = try awaitResult("clunk") { session.clunk(fid, completion: $0) }
      XCTAssertEqual(back.count, payload.count, "\(board.target)")
      XCTAssertTrue(back == payload, "\(board.target): content differs")
      let onDisk = try Data(contentsOf: URL(fileURLWithPath: root + "/" + name))
      XCTAssertEqual(onDisk.count, payload.count, "\(board.target)")

      // One 4000-byte board message, written in one Twrite.
      let body = String(repeating: "0123456789abcdef", count: 250)
      let room = try awaitResult("walk rooms/tech") {
        session.walk(["rooms", "tech"], completion: $0)
      }
      _ = try awaitResult("create message") {
        session.create(
          room.fid, name: "1738005432999", perm: FileMode(permissions: 0o644), mode: .write,
          completion: $0)
      }
      let text = Array("Subject: big\n\n\(body)\n".utf8)
      XCTAssertLessThanOrEqual(text.count, session.maxWriteCount)
      let count = try awaitResult("write message") {
        session.write(room.fid, offset: 0, data: text, completion: $0)
      }
      XCTAssertEqual(Int(count), text.count, "\(board.target)")
      _ = try awaitResult("clunk") { session.clunk(room.fid, completion: $0) }
      let id = String(UInt32(truncatingIfNeeded: UInt64(1_738_005_432_999)))
      let rendered = try session.contents("rooms/tech/\(id)")
      XCTAssertTrue(rendered.contains(body), "\(board.target): body lost")

      // A post longer than the text limit: Rwrite reports all of it, the line is cut at 255.
      let long = String(repeating: "x", count: 300)
      XCTAssertEqual(try session.post("tech:\(long)"), 305, "\(board.target)")
      let (tech, _) = try session.openPath("chat/tech")
      let line = try awaitResult("read tech") {
        session.read(tech, offset: 0, count: 1024, mayPark: true, completion: $0)
      }
      _ = try awaitResult("clunk") { session.clunk(tech, completion: $0) }
      XCTAssertTrue(
        String(decoding: line, as: UTF8.self).hasSuffix("] dave: \(String(long.prefix(255)))\n"),
        "\(board.target)")
    }
  }

  /// Reads whose data is spliced into pipes (NinePTransport's Splice.swift) on stream links
  /// to 9bbsd, which sends them with sendfile(2): the pieces join to the file, interleaved
  /// with stats on the same session, and pipes come only where the link can splice.
  func testSplicedReadsMatchTheFileAmongOtherTraffic() throws {
    let root = try makeTemporaryDirectory("itest-splice")
    addTeardownBlock { try? FileManager.default.removeItem(atPath: root) }
    let content = (0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ $0 >> 10) }
    try Data(content).write(to: URL(fileURLWithPath: root + "/big.bin"))
    let targets = Target.all.filter { !$0.device }
    forEachTarget(targets, extra: { _ in ["--files", root] }) { board in
      let session = try board.connect(uname: "dave")
      let (fid, _) = try session.openPath("files/big.bin")
      let chunk = min(session.maxReadCount, UInt32(max(SplicedBytes.largestSpliced, 1 << 16)))
      let others = Outcomes<Stat>()
      var pieces: [ReadData] = []
      var offset = 0
      while offset < content.count {
        for _ in 0..<3 { session.stat(fid, completion: others.add) }
        let got = try awaitResult("read at \(offset)", timeout: 30) {
          session.readPipelined(
            fid, offset: UInt64(offset), count: 1 << 20, chunk: chunk, splicing: true,
            completion: $0)
        }
        XCTAssertFalse(got.isEmpty, "\(board.target)")
        offset += got.reduce(0) { $0 + $1.count }
        pieces += got
      }
      XCTAssertTrue(others.wait(count: 3 * 3, timeout: 15), "\(board.target)")
      _ = try awaitResult("clunk") { session.clunk(fid, completion: $0) }
      let joined = pieces.flatMap { Array($0.contents()) }
      XCTAssertTrue(joined == content, "\(board.target): content differs")
      let piped = pieces.filter { if case .pipe = $0 { true } else { false } }.count
      let splices = board.target.transport != "seqpacket" && SplicedBytes.isAvailable
      XCTAssertEqual(piped > 0, splices, "\(board.target): \(piped) of \(pieces.count) piped")
      XCTAssertTrue(
        others.all.allSatisfy { (try? $0.get())?.length == UInt64(content.count) },
        "\(board.target)")
    }
  }

  /// Many threads share one session while reads are parked on it: walks, opens, reads,
  /// listings and stats all complete, and the device discipline holds throughout.
  func testConcurrentTrafficOnOneSessionWithParkedReads() {
    forEachTarget { board in
      let session = try board.connect(uname: "erin")
      let poster = try board.connect(uname: "frank")
      // Two parked reads on the busy session (a device has 4 slots).
      var parked: [(fid: Fid, outcomes: Outcomes<ArraySlice<UInt8>>)] = []
      for room in ["lobby", "tech"] {
        let (fid, _) = try session.openPath("chat/\(room)")
        let outcomes = Outcomes<ArraySlice<UInt8>>()
        session.read(fid, offset: 0, count: 1024, mayPark: true) { outcomes.add($0) }
        parked.append((fid, outcomes))
      }
      let failures = EventLog()
      // Eight threads at once (not concurrentPerform: that runs only as many as there are cores).
      let workers = DispatchGroup()
      for worker in 0..<8 {
        DispatchQueue.global().async(group: workers) {
          for round in 0..<12 {
            do {
              switch (worker + round) % 3 {
              case 0:
                let text = try session.contents("etc/motd")
                if text != board.motd + "\n" { failures.record("motd: \(text)") }
              case 1:
                let names = try session.list("etc").map(\.name)
                if names.count != 8 { failures.record("etc listing: \(names)") }
              default:
                let stat = try awaitResult("stat") { completion in
                  session.walk(["rooms", "lobby"]) { walked in
                    guard case .success(let result) = walked else {
                      return completion(
                        walked.map { _ in Stat(qid: Qid(path: 0), mode: [], name: "") })
                    }
                    session.stat(result.fid) { stat in
                      session.clunk(result.fid)
                      completion(stat)
                    }
                  }
                }
                if stat.name != "lobby" { failures.record("stat: \(stat)") }
              }
            } catch {
              failures.record("worker \(worker) round \(round): \(error)")
            }
          }
        }
      }
      XCTAssertEqual(
        workers.wait(timeout: .now() + 120), .success, "\(board.target): workers stuck")
      XCTAssertEqual(failures.entries, [], "\(board.target)")
      XCTAssertTrue(parked.allSatisfy { $0.outcomes.count == 0 }, "\(board.target): woke early")
      try poster.post("lobby:done")
      try poster.post("tech:done")
      for (fid, outcomes) in parked {
        XCTAssertTrue(outcomes.wait(timeout: 15), "\(board.target): parked read never woke")
        let text = (try? outcomes.all.first?.get()).map { String(decoding: $0, as: UTF8.self) }
        XCTAssertTrue(
          text?.hasSuffix("] frank: done\n") == true, "\(board.target): \(String(describing: text))"
        )
        _ = try awaitResult("clunk") { session.clunk(fid, completion: $0) }
      }
    }
  }

  // MARK: The checks can fail

  /// A multiplex-profile client pipelining two requests to a device-profile server over
  /// seqpacket is disconnected, and the log check used above reports it.
  func testDeviceServerDisconnectsAClientThatPipelines() throws {
    let target = Target(transport: "seqpacket", device: true)
    let server = try ServerProcess(
      transport: "seqpacket", profile: "device", extra: ["--processing-delay", "50"])
    addTeardownBlock { server.stop() }
    let transport = try dial(try TransportAddress(parsing: server.address))
    // The wrong profile for this server: requests are pipelined.
    let session = try Session.connect(
      transport: transport,
      configuration: SessionConfiguration(
        profile: .multiplex, uname: "rude", requestTimeout: .seconds(10)))
    addTeardownBlock { session.close() }
    XCTAssertNil(session.closedReason)

    let outcomes = Outcomes<Stat>()
    session.stat(session.rootFid) { outcomes.add($0) }
    session.stat(session.rootFid) { outcomes.add($0) }
    XCTAssertTrue(outcomes.wait(count: 2, timeout: 15), "pipelined requests never completed")
    for result in outcomes.all {
      guard case .failure(.sessionClosed) = result else {
        return XCTFail("expected the device to drop the session, got \(result)")
      }
    }
    XCTAssertNotNil(session.closedReason)
    XCTAssertTrue(
      waitUntil(timeout: 10) { !wireRuleViolations(in: server.child.text).isEmpty },
      "\(target): no violation logged:\n\(server.child.text)")
    let violations = wireRuleViolations(in: server.child.text)
    XCTAssertTrue(
      violations.contains { $0.contains("SDU arrived while busy") && $0.contains("disconnecting") },
      "\(violations)")
    XCTAssertTrue(server.child.isRunning, "the server must survive a rude client")
  }
}
