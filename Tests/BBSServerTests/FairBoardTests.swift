import BBSIdentity
import Foundation
import NinePProtocol
import NinePTransport
import Synchronization
import TestSupport
import XCTest

@testable import BBSServer

/// A fair board: one poster cannot fill a room for everyone, nothing empty is kept.
final class FairBoardTests: ServerTestCase {
  private func startServer(_ configure: (inout BBSServerConfiguration) -> Void = { _ in }) throws {
    var configuration = BBSServerConfiguration(listen: ["tcp!127.0.0.1!0"], rooms: ["lobby"])
    // The limits are the same on the secure channel; these clients speak plain 9P, and members
    // must be able to authenticate on it.
    configuration.secure = .off
    configure(&configuration)
    try start(try BBSServer(configuration: configuration))
  }

  private static let message = FileMode(permissions: 0o644)

  /// 10,500 messages by one user in one room of 10,000: the room drops its oldest for each
  /// new one instead of failing everyone's with `no space left on device`, and another user's
  /// message still goes in.
  func testAFullRoomDropsItsOldestMessage() throws {
    // The posting allowance is another test's business.
    try startServer { $0.postingLimits = .unlimited }
    let cap = BoardLimits.standard.messagesPerRoom
    let flooder = try connect("flooder")
    let total = cap + 500
    let batch = 500
    var failures: [String] = []
    for first in stride(from: 0, to: total, by: batch) {
      // Pipelined: walk, create, write and clunk a message per fid, then the replies.
      for index in first..<min(first + batch, total) {
        let fid = Fid(100 + index - first)
        let tag = Tag(4 * (index - first))
        try flooder.send(.twalk(fid: 0, newfid: fid, names: ["rooms", "lobby"]), tag: tag)
        try flooder.send(
          .tcreate(fid: fid, name: "\(1_000_000 + index)", perm: Self.message, mode: .write),
          tag: tag + 1)
        try flooder.send(
          .twrite(fid: fid, offset: 0, data: ArraySlice("m\(index)".utf8)), tag: tag + 2)
        try flooder.send(.tclunk(fid: fid), tag: tag + 3)
      }
      for index in first..<min(first + batch, total) {
        let tag = Tag(4 * (index - first))
        for offset in Tag(0)...3 {
          let reply = try flooder.reply(tag: tag + offset, timeout: 30)
          if case .rerror(let ename) = reply { failures.append("message \(index): \(ename)") }
        }
      }
    }
    XCTAssertEqual(failures, [], "the flooder's own messages failed")
    let messages = try XCTUnwrap(server?.board.rooms.messages(in: "lobby"))
    XCTAssertEqual(messages.count, cap)
    XCTAssertEqual(messages.first?.id, UInt32(1_000_500), "not the oldest dropped")

    let other = try connect("other")
    _ = try other.rpc(.twalk(fid: 0, newfid: 1, names: ["rooms", "lobby"]))
    guard
      case .rcreate = try other.rpc(
        .tcreate(fid: 1, name: "2000000", perm: Self.message, mode: .write))
    else { return XCTFail("another user's message was refused in a full room") }
    XCTAssertEqual(
      try other.rpc(.twrite(fid: 1, offset: 0, data: ArraySlice("mine".utf8))), .rwrite(count: 4))
    XCTAssertEqual(try other.rpc(.tclunk(fid: 1)), .rclunk)
    let after = try XCTUnwrap(server?.board.rooms.messages(in: "lobby"))
    XCTAssertEqual(after.count, cap)
    XCTAssertEqual(after.last?.id, 2_000_000)
    XCTAssertTrue(try other.readFile("rooms/lobby/2000000").contains("\n\nmine\n"))
  }

  /// The ring in the SQLite store: what a restart finds is the newest messages, no more.
  func testTheStoreKeepsOnlyTheRing() throws {
    directory = try makeTemporaryDirectory("9bbs-ring")
    var limits = BoardLimits.standard
    limits.messagesPerRoom = 5
    func board() throws -> Board {
      try Board(
        configuration: BoardConfiguration(chatRooms: ["lobby"], limits: limits),
        store: try SQLiteBoardStore(directory: directory))
    }
    do {
      let first = try board()
      for index in 1...8 {
        let message = try first.rooms.createMessage(in: "lobby", name: "\(index)", author: "a")
        _ = try first.rooms.write(in: "lobby", id: message.id, offset: 0, data: Array("m".utf8))
      }
      XCTAssertEqual(try first.rooms.messages(in: "lobby").map(\.id), [4, 5, 6, 7, 8])
    }
    XCTAssertEqual(try board().rooms.messages(in: "lobby").map(\.id), [4, 5, 6, 7, 8])
  }

  /// Nothing empty is kept: an empty or blank chat post is refused (blank lines of a longer
  /// one are dropped), a write that leaves a message empty is refused, and a message created
  /// and never written is gone once its fid is clunked or its session ends.
  func testEmptyPostsAndMessagesAreRefused() throws {
    try startServer()
    let client = try connect("alice")
    XCTAssertEqual(try client.post(""), .rerror(ename: "invalid argument"))
    XCTAssertEqual(try client.post("lobby:"), .rerror(ename: "invalid argument"))
    XCTAssertEqual(try client.post("lobby: \t\n\n"), .rerror(ename: "invalid argument"))
    XCTAssertEqual(try client.post("lobby:one\n\n  \ntwo\n"), .rwrite(count: 18))
    let reader = try connect("bob")
    let lines = try reader.readFile("chat/lobby").split(separator: "\n")
    XCTAssertEqual(lines.count, 2, "\(lines)")
    XCTAssertTrue(lines.first?.hasSuffix("alice: one") == true, "\(lines)")

    // A zero-byte write and a blank one are refused; the mount writes once at close, so its
    // writer learns at close(2).
    _ = try client.rpc(.twalk(fid: 0, newfid: 1, names: ["rooms", "lobby"]))
    guard
      case .rcreate = try client.rpc(
        .tcreate(fid: 1, name: "100", perm: Self.message, mode: .write))
    else { return XCTFail("create failed") }
    XCTAssertEqual(
      try client.rpc(.twrite(fid: 1, offset: 0, data: [])), .rerror(ename: "invalid argument"))
    XCTAssertEqual(
      try client.rpc(.twrite(fid: 1, offset: 0, data: ArraySlice(" \n\n".utf8))),
      .rerror(ename: "invalid argument"))
    XCTAssertEqual(try client.rpc(.tclunk(fid: 1)), .rclunk)
    XCTAssertEqual(
      try server?.board.rooms.messages(in: "lobby").count, 0, "an empty message was kept")

    // A subject alone is something to read.
    _ = try client.rpc(.twalk(fid: 0, newfid: 2, names: ["rooms", "lobby"]))
    _ = try client.rpc(.tcreate(fid: 2, name: "200", perm: Self.message, mode: .write))
    let subject = ArraySlice("Subject: hi\n\n".utf8)
    XCTAssertEqual(try client.rpc(.twrite(fid: 2, offset: 0, data: subject)), .rwrite(count: 13))
    XCTAssertEqual(try client.rpc(.tclunk(fid: 2)), .rclunk)
    XCTAssertEqual(try server?.board.rooms.message(in: "lobby", id: 200).subject, "hi")
    // Overwriting a body with blanks is refused and keeps what was written.
    _ = try client.rpc(.twalk(fid: 0, newfid: 4, names: ["rooms", "lobby"]))
    _ = try client.rpc(.tcreate(fid: 4, name: "250", perm: Self.message, mode: .write))
    XCTAssertEqual(
      try client.rpc(.twrite(fid: 4, offset: 0, data: ArraySlice("body".utf8))), .rwrite(count: 4))
    XCTAssertEqual(
      try client.rpc(.twrite(fid: 4, offset: 0, data: ArraySlice("    ".utf8))),
      .rerror(ename: "invalid argument"))
    XCTAssertEqual(try client.rpc(.tclunk(fid: 4)), .rclunk)
    XCTAssertEqual(try server?.board.rooms.message(in: "lobby", id: 250).body, Array("body".utf8))

    // Created and left empty when the session ends.
    let leaver = try connect("leaver")
    _ = try leaver.rpc(.twalk(fid: 0, newfid: 3, names: ["rooms", "lobby"]))
    _ = try leaver.rpc(.tcreate(fid: 3, name: "300", perm: Self.message, mode: .write))
    XCTAssertEqual(try server?.board.rooms.messages(in: "lobby").map(\.id), [200, 250, 300])
    leaver.close()
    XCTAssertTrue(
      waitUntil(timeout: 5) {
        (try? self.server?.board.rooms.messages(in: "lobby").map(\.id)) == [200, 250]
      },
      "a message created and never written outlived its session")
  }

  // MARK: Shares

  /// A guest's share is its network: a /24, a /64, an IPv4-mapped address's /24.
  func testGuestNetworks() {
    XCTAssertEqual(SourceNetwork.key(of: "127.0.5.9"), "127.0.5.0/24")
    XCTAssertEqual(SourceNetwork.key(of: "2001:db8:1:2:3::4"), "2001:db8:1:2::/64")
    XCTAssertEqual(SourceNetwork.key(of: "::ffff:10.1.2.3"), "10.1.2.0/24")
    XCTAssertEqual(SourceNetwork.key(of: "AA:BB:CC:DD:EE:FF"), "AA:BB:CC:DD:EE:FF")
  }

  /// A client attached as `key`'s identity (a member), from 127.0.0.1.
  private func member(_ key: PrivateKey) throws -> WireClient {
    let client = try dial()
    _ = try client.rpc(.tversion(msize: 8192, version: "9P2000"), tag: NineP.noTag)
    _ = try client.rpc(.tauth(afid: 7, uname: key.identity.hex, aname: ""))
    guard case .rread(let bytes) = try client.rpc(.tread(fid: 7, offset: 0, count: 1024)) else {
      throw TestError.unexpected("no challenge")
    }
    let challenge = try ChallengeResponse.Challenge(parsing: Array(bytes))
    let response = try ChallengeResponse.respond(to: challenge, with: key)
    _ = try client.rpc(.twrite(fid: 7, offset: 0, data: response[...]))
    let attach = try client.rpc(.tattach(fid: 0, afid: 7, uname: key.identity.hex, aname: ""))
    guard case .rattach = attach else { throw TestError.unexpected("member attach: \(attach)") }
    return client
  }

  /// A guest from `source` that parks a chat read and sends nothing more.
  private func parkedGuest(port: Int, source: String) throws -> RawSocket {
    let socket = try RawSocket(port: port, source: source)
    guard case .rversion = try socket.rpc(.tversion(msize: 8192, version: "9P2000")),
      case .rattach = try socket.rpc(.tattach(fid: 0, afid: NineP.noFid, uname: "", aname: "")),
      case .rwalk = try socket.rpc(.twalk(fid: 0, newfid: 1, names: ["chat", "lobby"])),
      case .ropen = try socket.rpc(.topen(fid: 1, mode: .read))
    else {
      socket.close()
      throw TestError.unexpected("guest from \(source) not attached")
    }
    // Nothing is posted: the read parks.
    try socket.send(.tread(fid: 1, offset: 0, count: 4096), tag: 9)
    return socket
  }

  /// 256 parked chat reads from 8 addresses (32 each, the per-address cap) fill the board; a
  /// member still connects and posts within 1 s: the newest session of a guest network
  /// holding the most is taken back for it.
  func testParkedReadsFromEightAddressesDoNotKeepAMemberOut() throws {
    try startServer {
      $0.auth = .optional
      // Taking a session back is this test's business: with the members' reserve, guests
      // never fill the board.
      $0.sessionsReservedForMembers = 0
    }
    let port = try RawSocket.port(of: address)
    var parked: [RawSocket] = []
    defer { for socket in parked { socket.close() } }
    for network in 1...8 {
      for _ in 0..<32 { parked.append(try parkedGuest(port: port, source: "127.0.\(network).1")) }
    }
    XCTAssertEqual(server?.sessionCount, BBSServerConfiguration.defaultConnectionCap)

    let started = Date()
    let alice = try member(PrivateKey.generate(.ed25519))
    XCTAssertEqual(try alice.post("lobby:a member got in"), .rwrite(count: 21))
    let elapsed = Date().timeIntervalSince(started)
    XCTAssertLessThan(elapsed, 1, "the member took \(elapsed) s to connect and post")
    // One guest session gave way; the member's is the 256th.
    XCTAssertEqual(server?.sessionCount, BBSServerConfiguration.defaultConnectionCap)
  }

  /// A full board: a parked chat read keeps a quiet connection no longer than the idle
  /// timeout.
  func testParkedReadsIdleOutOnAFullBoard() throws {
    try startServer {
      $0.connectionLimit = .refuse(2)
      $0.idleTimeout = .seconds(1)
    }
    let port = try RawSocket.port(of: address)
    let parked = [
      try parkedGuest(port: port, source: "127.0.1.1"),
      try parkedGuest(port: port, source: "127.0.2.1"),
    ]
    defer { for socket in parked { socket.close() } }
    XCTAssertTrue(
      waitUntil(timeout: 5) { parked.contains { $0.waitForClose(timeout: 0.1) } },
      "parked reads held a full board past the idle timeout")
  }

  // MARK: Posting allowances

  /// A guest from `source` (another address of 127/8), attached without authentication;
  /// closed after the test.
  private func guest(port: Int, source: String, msize: UInt32 = 8192) throws -> WireClient {
    let client = try WireClient(port: port, source: source)
    clients.append(client)
    try client.handshake(uname: "", msize: msize)
    return client
  }

  /// How many of `count` chat posts of `client` are accepted.
  private func accepted(_ client: WireClient, of count: Int) throws -> Int {
    var posted = 0
    for index in 0..<count {
      if case .rwrite = try client.post("lobby:post \(index)") { posted += 1 }
    }
    return posted
  }

  /// Guests post on their network's allowance (two addresses of one /24 share one) and all
  /// of them within one guest budget (`guestNetworks` networks' worth); a member posts on
  /// its own allowance, never charged to the guests' nor refused when they spent it.
  func testGuestsPostPerNetworkWithinOneBudgetAndMembersApart() throws {
    try startServer {
      $0.auth = .optional
      $0.postingLimits = PostingLimits(
        postBurst: 3, postsPerMinute: 1, byteBurst: 1 << 20, bytesPerSecond: 1 << 20,
        guestNetworks: 2)
    }
    let port = try RawSocket.port(of: address)
    // A member's posts first: were they charged to the guests' budget, the second network
    // below would find it spent.
    let alice = try member(PrivateKey.generate(.ed25519))
    XCTAssertEqual(try accepted(alice, of: 4), 3)
    let first = try guest(port: port, source: "127.0.1.1")
    let neighbour = try guest(port: port, source: "127.0.1.2")
    XCTAssertEqual(try accepted(first, of: 2), 2)
    XCTAssertEqual(try accepted(neighbour, of: 3), 1, "one /24 got more than its allowance")
    XCTAssertEqual(
      try neighbour.post("lobby:again"), .rerror(ename: "resource temporarily unavailable"))
    // Another network has its own allowance, until the guests' budget (2 networks') is spent.
    let second = try guest(port: port, source: "127.0.2.1")
    XCTAssertEqual(try accepted(second, of: 4), 3)
    let third = try guest(port: port, source: "127.0.3.1")
    XCTAssertEqual(try accepted(third, of: 3), 0, "a third network went beyond the guests' budget")
    // With the guests' budget spent, a member still posts its own allowance.
    let bob = try member(PrivateKey.generate(.ed25519))
    XCTAssertEqual(try accepted(bob, of: 4), 3)
  }

  // MARK: Connection caps

  /// Connections are capped per guest network, not per address (two addresses of one /24
  /// count together, a member's attached session not at all), and guests never hold the
  /// sessions reserved for members.
  func testConnectionsAreCappedPerNetworkWithSessionsKeptForMembers() throws {
    try startServer {
      $0.auth = .optional
      $0.connectionLimit = .refuse(6)
      $0.maxConnectionsPerNetwork = 2
      $0.sessionsReservedForMembers = 2
    }
    let port = try RawSocket.port(of: address)
    _ = try guest(port: port, source: "127.0.1.1")
    _ = try guest(port: port, source: "127.0.1.2")
    let third = try RawSocket(port: port, source: "127.0.1.3")
    defer { third.close() }
    XCTAssertTrue(third.waitForClose(timeout: 5), "a third connection of one /24 was let in")
    _ = try guest(port: port, source: "127.0.2.1")
    _ = try guest(port: port, source: "127.0.2.2")
    // Four guest sessions of six: the last two are the members'.
    let late = try RawSocket(port: port, source: "127.0.3.1")
    defer { late.close() }
    guard case .rversion = try late.rpc(.tversion(msize: 8192, version: "9P2000")) else {
      return XCTFail("no Rversion")
    }
    XCTAssertEqual(
      try late.rpc(.tattach(fid: 0, afid: NineP.noFid, uname: "", aname: "")),
      .rerror(ename: "board full: the last 2 of 6 sessions are kept for members"))
    late.close()
    XCTAssertTrue(waitUntil(timeout: 5) { self.server?.sessionCount == 4 })
    let alice = try member(PrivateKey.generate(.ed25519))
    let bob = try member(PrivateKey.generate(.ed25519))
    XCTAssertEqual(try alice.post("lobby:in"), .rwrite(count: 8))
    XCTAssertEqual(try bob.post("lobby:in too"), .rwrite(count: 12))
    XCTAssertEqual(server?.sessionCount, 6)
  }

  // MARK: A guest flood

  /// Bytes of the files in `directory` (the database, its WAL and shared memory).
  private func bytes(in directory: String) -> Int {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
    return names.reduce(0) { total, name in
      let path = directory + "/" + name
      return total + ((try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0)
    }
  }

  /// What one flooding guest got: posts and messages accepted and refused.
  private struct FloodCount {
    var accepted = 0
    var refused = 0
  }

  /// Guests from 40 addresses of 5 /24s flood chat posts and 60 KB board messages for 20 s
  /// against `--auth optional` with the default limits: the data directory grows by less
  /// than 10 MB (the guests' budget, not 5 networks' allowances, bounds them), and a member's
  /// post and the read of it take less than 1 s throughout.
  func testFortyAddressesFloodingLeaveTheDiskBoundedAndAMemberServed() throws {
    directory = try makeTemporaryDirectory("9bbs-guest-flood")
    let data = directory + "/data"
    try startServer {
      $0.auth = .optional
      $0.dataDirectory = data
    }
    let port = try RawSocket.port(of: address)
    let before = bytes(in: data)
    let alice = try member(PrivateKey.generate(.ed25519))
    let sources = (10..<15).flatMap { network in (1...8).map { "127.0.\(network).\($0)" } }
    XCTAssertEqual(sources.count, 40)
    let floodFor: TimeInterval = 20
    let deadline = Date().addingTimeInterval(floodFor)
    let body = [UInt8](repeating: 0x61, count: 60_000)
    let counts = Mutex([String: FloodCount]())
    let done = DispatchGroup()
    for (index, source) in sources.enumerated() {
      let flooder = try guest(port: port, source: source, msize: 128 << 10)
      done.enter()
      Thread.detachNewThread {
        defer { done.leave() }
        var chat = FloodCount()
        var messages = FloodCount()
        var name = 1_000_000 * (index + 1)
        while Date() < deadline {
          guard let posted = try? flooder.post("lobby:flood from \(source) \(name)") else { break }
          if case .rwrite = posted { chat.accepted += 1 } else { chat.refused += 1 }
          name += 1
          guard
            case .rwalk? = try? flooder.rpc(.twalk(fid: 0, newfid: 5, names: ["rooms", "lobby"]))
          else { break }
          var stored = false
          if case .rcreate? = try? flooder.rpc(
            .tcreate(fid: 5, name: "\(name)", perm: Self.message, mode: .write))
          {
            if case .rwrite? = try? flooder.rpc(.twrite(fid: 5, offset: 0, data: body[...])) {
              stored = true
            }
          }
          if stored { messages.accepted += 1 } else { messages.refused += 1 }
          _ = try? flooder.rpc(.tclunk(fid: 5))
          // A refused flooder keeps trying, a little less than flat out (two cores).
          if !stored { Thread.sleep(forTimeInterval: 0.005) }
        }
        counts.withLock {
          $0["chat", default: FloodCount()].accepted += chat.accepted
          $0["chat"]?.refused += chat.refused
          $0["message", default: FloodCount()].accepted += messages.accepted
          $0["message"]?.refused += messages.refused
        }
      }
    }

    // A member posts a message and reads it back, and posts to chat, every 2 s of the flood.
    var latencies: [TimeInterval] = []
    var round = 0
    while Date().addingTimeInterval(2) < deadline {
      Thread.sleep(forTimeInterval: 2)
      round += 1
      let started = Date()
      XCTAssertEqual(
        try alice.post("lobby:member round \(round)"),
        .rwrite(count: UInt32(19 + "\(round)".utf8.count)))
      _ = try alice.rpc(.twalk(fid: 0, newfid: 20, names: ["rooms", "lobby"]))
      let created = try alice.rpc(
        .tcreate(fid: 20, name: "\(round)", perm: Self.message, mode: .write))
      guard case .rcreate = created else {
        return XCTFail("the member's message \(round) was refused: \(created)")
      }
      XCTAssertEqual(
        try alice.rpc(.twrite(fid: 20, offset: 0, data: ArraySlice("member \(round)".utf8))),
        .rwrite(count: UInt32(7 + "\(round)".utf8.count)))
      XCTAssertEqual(try alice.rpc(.tclunk(fid: 20)), .rclunk)
      XCTAssertTrue(try alice.readFile("rooms/lobby/\(round)").contains("member \(round)"))
      latencies.append(Date().timeIntervalSince(started))
    }
    XCTAssertEqual(
      done.wait(timeout: .now() + floodFor + 30), .success, "the flooders did not stop")
    let grown = bytes(in: data) - before
    let flood = counts.withLock { $0 }
    let slowest = latencies.max() ?? .infinity
    let megabytes = Double(grown) / 1e6
    print(
      "guest flood: 40 addresses, \(Int(floodFor)) s: data directory grew \(String(format: "%.2f", megabytes)) MB; chat posts accepted \(flood["chat"]?.accepted ?? 0), refused \(flood["chat"]?.refused ?? 0); 60 KB messages accepted \(flood["message"]?.accepted ?? 0), refused \(flood["message"]?.refused ?? 0); member post+read latencies \(latencies.map { String(format: "%.3f", $0) }) s"
    )
    XCTAssertGreaterThan(flood["message"]?.refused ?? 0, 0, "the flood was never refused")
    XCTAssertLessThan(grown, 10_000_000, "the data directory grew by \(grown) bytes")
    XCTAssertFalse(latencies.isEmpty)
    XCTAssertLessThan(slowest, 1, "a member's post and read took \(slowest) s")
  }
}
