import BBSIdentity
import Foundation
import NinePProtocol
import NinePTransport
import XCTest

@testable import BBSServer

/// Tauth as 9p4z does it (docs/board-facts.md §6), in 9bbsd: the challenge, the response, the
/// attach, every error string, the per-session limit of 4, guests, nicknames, sysops, and chat
/// cursors keyed by identity.
final class AuthenticationTests: ServerTestCase {
  private let alice = PrivateKey.generate(.ed25519)
  private let bob = PrivateKey.generate(.p256)

  private func startServer(
    _ auth: AuthPolicy = .required, profile: BBSProfile = .standard,
    _ configure: (inout BBSServerConfiguration) -> Void = { _ in }
  ) throws {
    var configuration = BBSServerConfiguration(
      listen: ["tcp!127.0.0.1!0"], profile: profile, rooms: ["lobby", "tech"])
    configuration.auth = auth
    // Tauth as a plain board does it; on the secure channel: SecureChannelServerTests.
    configuration.secure = .off
    configure(&configuration)
    let server = try BBSServer(configuration: configuration)
    try start(server)
  }

  /// A connected client that has negotiated the version.
  private func client() throws -> WireClient {
    let client = try dial()
    guard
      case .rversion = try client.rpc(.tversion(msize: 8192, version: "9P2000"), tag: NineP.noTag)
    else { throw TestError.unexpected("Rversion") }
    return client
  }

  /// Tauth and Tread on `afid`; returns the challenge.
  private func challenge(_ client: WireClient, afid: Fid, claim: String) throws
    -> ChallengeResponse.Challenge
  {
    let auth = try client.rpc(.tauth(afid: afid, uname: claim, aname: ""))
    XCTAssertEqual(auth, .rauth(aqid: Qid(type: .auth, version: 0, path: UInt64(afid))))
    guard case .rread(let challenge) = try client.rpc(.tread(fid: afid, offset: 0, count: 1024))
    else { throw TestError.unexpected("no challenge") }
    return try ChallengeResponse.Challenge(parsing: Array(challenge))
  }

  /// Tauth, Tread and Twrite on `afid` for `key` (claiming `claim`, by default the key's own
  /// identity); returns the Twrite's reply.
  private func respond(
    _ client: WireClient, afid: Fid = 7, key: PrivateKey, claim: String? = nil
  ) throws -> Message {
    let challenge = try challenge(client, afid: afid, claim: claim ?? key.identity.hex)
    XCTAssertEqual(challenge.nonce.count, 32)
    let response = try ChallengeResponse.respond(to: challenge, with: key)
    return try client.rpc(.twrite(fid: afid, offset: 0, data: response[...]))
  }

  /// A client attached as `key`'s identity (the afid clunked afterwards, as mount9bbs does).
  private func connect(as key: PrivateKey) throws -> WireClient {
    let client = try client()
    XCTAssertEqual(try respond(client, key: key), .rwrite(count: UInt32(64 + key.publicKey.count)))
    guard
      case .rattach = try client.rpc(
        .tattach(fid: 0, afid: 7, uname: key.identity.hex, aname: ""))
    else { throw TestError.unexpected("attach failed") }
    XCTAssertEqual(try client.rpc(.tclunk(fid: 7)), .rclunk)
    return client
  }

  private func guest() throws -> WireClient {
    let client = try client()
    guard
      case .rattach = try client.rpc(
        .tattach(fid: 0, afid: NineP.noFid, uname: "mallory", aname: ""))
    else { throw TestError.unexpected("guest attach failed") }
    return client
  }

  private func text(_ message: Message) -> String {
    guard case .rread(let data) = message else { return "not an Rread: \(message)" }
    return String(decoding: data, as: UTF8.self)
  }

  // MARK: The exchange

  func testBothKeyTypesPostUnderTheirIdentity() throws {
    try startServer()
    for key in [alice, bob] {
      let client = try connect(as: key)
      let payload = "lobby:hello from \(key.algorithm)"
      XCTAssertEqual(try client.post(payload), .rwrite(count: UInt32(payload.utf8.count)))
      XCTAssertTrue(
        try client.readFile("chat/lobby").hasSuffix(
          "] \(key.identity.short): hello from \(key.algorithm)\n"))
    }
  }

  func testAnEmptyUnameMeansTheAuthenticatedIdentity() throws {
    try startServer()
    let client = try client()
    XCTAssertEqual(try respond(client, key: alice), .rwrite(count: 96))
    guard case .rattach = try client.rpc(.tattach(fid: 0, afid: 7, uname: "", aname: "")) else {
      return XCTFail("attach with an empty uname failed")
    }
    _ = try client.post("lobby:me")
    XCTAssertTrue(try client.readFile("chat/lobby").hasSuffix("] \(alice.identity.short): me\n"))
  }

  func testTheChallengeIsFreshAndCanBeReadInPieces() throws {
    try startServer()
    let client = try client()
    let first = try challenge(client, afid: 7, claim: alice.identity.hex)
    let second = try challenge(client, afid: 8, claim: alice.identity.hex)
    XCTAssertNotEqual(first, second)
    XCTAssertNil(first.boardKey, "a board without a key hands out 32 bytes")
    XCTAssertEqual(
      try client.rpc(.tread(fid: 7, offset: 16, count: 64)),
      .rread(data: ArraySlice(first.nonce[16...])))
    XCTAssertEqual(try client.rpc(.tread(fid: 7, offset: 40, count: 64)), .rread(data: []))
  }

  // MARK: The board's key

  func testAKeyedBoardPresentsItsKeyAndProvesItAfterTheResponse() throws {
    let boardKey = PrivateKey.generate(.ed25519)
    try startServer { $0.boardKey = boardKey }
    let client = try client()
    let challenge = try challenge(client, afid: 7, claim: alice.identity.hex)
    XCTAssertEqual(challenge.boardKey, BoardKey(of: boardKey))
    XCTAssertEqual(challenge.encoded.count, 32 + 16 + 32)
    let response = try ChallengeResponse.respond(to: challenge, with: alice)
    XCTAssertEqual(
      try client.rpc(.twrite(fid: 7, offset: 0, data: response[...])), .rwrite(count: 96))
    guard case .rread(let proof) = try client.rpc(.tread(fid: 7, offset: 0, count: 1024)) else {
      return XCTFail("no proof")
    }
    XCTAssertNoThrow(
      try ChallengeResponse.verifyBoardProof(
        Array(proof), boardKey: try XCTUnwrap(challenge.boardKey), nonce: challenge.nonce,
        response: response))
    // The proof is for this response only.
    var other = response
    other[0] ^= 1
    XCTAssertThrowsError(
      try ChallengeResponse.verifyBoardProof(
        Array(proof), boardKey: try XCTUnwrap(challenge.boardKey), nonce: challenge.nonce,
        response: other))
    // One response per challenge: a second write gets no second proof.
    XCTAssertEqual(
      try client.rpc(.twrite(fid: 7, offset: 0, data: response[...])),
      .rerror(ename: "authentication failed"))
    guard case .rattach = try client.rpc(.tattach(fid: 0, afid: 7, uname: "", aname: "")) else {
      return XCTFail("attach failed")
    }
  }

  func testASignatureForAnotherBoardKeyOrTheRawChallengeIsRefused() throws {
    let boardKey = PrivateKey.generate(.ed25519)
    try startServer { $0.boardKey = boardKey }
    let client = try client()
    // What a relaying board with its own key gets its victim to sign: the same challenge,
    // another board key.
    let challenge = try challenge(client, afid: 7, claim: alice.identity.hex)
    let relayed = ChallengeResponse.Challenge(
      nonce: challenge.nonce, boardKey: BoardKey(of: PrivateKey.generate(.ed25519)))
    var response = try ChallengeResponse.respond(to: relayed, with: alice)
    XCTAssertEqual(
      try client.rpc(.twrite(fid: 7, offset: 0, data: response[...])),
      .rerror(ename: "authentication failed"))
    // No board key named (bound), or the raw challenge signed.
    for (afid, form) in [(Fid(8), ChallengeResponse.Form.bound), (Fid(9), .raw)] {
      let fresh = try self.challenge(client, afid: afid, claim: alice.identity.hex)
      response = try ChallengeResponse.respond(
        to: .init(nonce: fresh.nonce, boardKey: nil), with: alice, form: form)
      XCTAssertEqual(
        try client.rpc(.twrite(fid: afid, offset: 0, data: response[...])),
        .rerror(ename: "authentication failed"), "\(form)")
    }
  }

  func testTheRawCompatibilityFormIsAcceptedOnlyWhenConfigured() throws {
    try startServer(.required, profile: .device) { $0.authSign = .raw }
    let client = try client()
    let challenge = try challenge(client, afid: 7, claim: alice.identity.hex)
    XCTAssertNil(challenge.boardKey)
    let bound = try ChallengeResponse.respond(to: challenge, with: alice, form: .bound)
    XCTAssertEqual(
      try client.rpc(.twrite(fid: 7, offset: 0, data: bound[...])),
      .rerror(ename: "authentication failed"))
    let again = try self.challenge(client, afid: 8, claim: alice.identity.hex)
    let raw = try ChallengeResponse.respond(to: again, with: alice, form: .raw)
    XCTAssertEqual(try client.rpc(.twrite(fid: 8, offset: 0, data: raw[...])), .rwrite(count: 96))
  }

  // MARK: Every error

  func testAuthenticationOffAnswersNotRequired() throws {
    try startServer(.off)
    let client = try client()
    XCTAssertEqual(
      try client.rpc(.tauth(afid: 7, uname: alice.identity.hex, aname: "")),
      .rerror(ename: "authentication not required"))
    // The uname is the user, unverified, as before.
    guard
      case .rattach = try client.rpc(.tattach(fid: 0, afid: NineP.noFid, uname: "carol", aname: ""))
    else { return XCTFail("attach failed") }
    _ = try client.post("lobby:hi")
    XCTAssertTrue(try client.readFile("chat/lobby").hasSuffix("] carol: hi\n"))
  }

  func testIdentityLength() throws {
    try startServer()
    let client = try client()
    XCTAssertEqual(
      try client.rpc(.tauth(afid: 7, uname: "", aname: "")), .rerror(ename: "invalid identity"))
    XCTAssertEqual(
      try client.rpc(.tauth(afid: 7, uname: String(repeating: "a", count: 64), aname: "")),
      .rerror(ename: "invalid identity"))
    // An identity is exactly 40 hex characters (issue 21): a board's 63-byte buffer is no
    // reason to keep and log anything else.
    XCTAssertEqual(
      try client.rpc(.tauth(afid: 7, uname: String(repeating: "a", count: 63), aname: "")),
      .rerror(ename: "invalid identity"))
    guard
      case .rauth = try client.rpc(
        .tauth(afid: 7, uname: String(repeating: "a", count: 40), aname: ""))
    else { return XCTFail("a 40-hex-character identity is allowed") }
    XCTAssertEqual(
      try client.rpc(.tauth(afid: 7, uname: String(repeating: "b", count: 40), aname: "")),
      .rerror(ename: "cannot allocate afid"))
  }

  func testTheChallengeMustBeReadFirst() throws {
    try startServer()
    let client = try client()
    guard case .rauth = try client.rpc(.tauth(afid: 7, uname: alice.identity.hex, aname: "")) else {
      return XCTFail("Tauth failed")
    }
    let response = try ChallengeResponse.respond(
      to: .init(nonce: [UInt8](repeating: 0, count: 32), boardKey: nil), with: alice)
    XCTAssertEqual(
      try client.rpc(.twrite(fid: 7, offset: 0, data: response[...])),
      .rerror(ename: "must read challenge first"))
  }

  func testResponseSize() throws {
    try startServer()
    let client = try client()
    _ = try challenge(client, afid: 7, claim: alice.identity.hex)
    for size in [0, 64, 95, 97, 128, 130] {
      XCTAssertEqual(
        try client.rpc(
          .twrite(fid: 7, offset: 0, data: ArraySlice<UInt8>(repeating: 1, count: size))),
        .rerror(ename: "invalid auth response size"), "\(size) bytes")
    }
  }

  func testWrongSignatureAndWrongKeyAreRefused() throws {
    try startServer()
    let client = try client()
    // A signature over something else.
    let challenge = try challenge(client, afid: 7, claim: alice.identity.hex)
    var forged = try ChallengeResponse.respond(
      to: .init(nonce: challenge.nonce.reversed(), boardKey: nil), with: alice)
    XCTAssertEqual(
      try client.rpc(.twrite(fid: 7, offset: 0, data: forged[...])),
      .rerror(ename: "authentication failed"))
    // A flipped bit.
    forged = try ChallengeResponse.respond(to: challenge, with: alice)
    forged[3] ^= 1
    XCTAssertEqual(
      try client.rpc(.twrite(fid: 7, offset: 0, data: forged[...])),
      .rerror(ename: "authentication failed"))
    // Bob's good signature, claiming Alice's identity.
    XCTAssertEqual(
      try respond(client, afid: 8, key: bob, claim: alice.identity.hex),
      .rerror(ename: "authentication failed"))
    // A failed afid is not an authenticated one.
    XCTAssertEqual(
      try client.rpc(.tattach(fid: 0, afid: 8, uname: alice.identity.hex, aname: "")),
      .rerror(ename: "authentication incomplete"))
  }

  func testAttachChecks() throws {
    try startServer()
    let client = try client()
    XCTAssertEqual(
      try client.rpc(.tattach(fid: 0, afid: NineP.noFid, uname: "x", aname: "")),
      .rerror(ename: "authentication required"))
    XCTAssertEqual(
      try client.rpc(.tattach(fid: 0, afid: 99, uname: "x", aname: "")),
      .rerror(ename: "authentication incomplete"))
    _ = try challenge(client, afid: 7, claim: alice.identity.hex)
    XCTAssertEqual(
      try client.rpc(.tattach(fid: 0, afid: 7, uname: alice.identity.hex, aname: "")),
      .rerror(ename: "authentication incomplete"))
    XCTAssertEqual(try respond(client, afid: 8, key: alice), .rwrite(count: 96))
    XCTAssertEqual(
      try client.rpc(.tattach(fid: 0, afid: 8, uname: bob.identity.hex, aname: "")),
      .rerror(ename: "uname does not match authenticated identity"))
    // A prefix of the identity is not the identity.
    XCTAssertEqual(
      try client.rpc(.tattach(fid: 0, afid: 8, uname: alice.identity.short, aname: "")),
      .rerror(ename: "uname does not match authenticated identity"))
    // An afid names no file.
    XCTAssertEqual(
      try client.rpc(.twalk(fid: 8, newfid: 9, names: ["etc"])), .rerror(ename: "unknown fid"))
    XCTAssertEqual(
      try client.rpc(.twalk(fid: 8, newfid: 8, names: [])), .rerror(ename: "unknown fid"))
  }

  func testTheChallengeExpires() throws {
    try startServer { $0.challengeLifetime = .milliseconds(200) }
    let client = try client()
    guard case .rauth = try client.rpc(.tauth(afid: 7, uname: alice.identity.hex, aname: "")) else {
      return XCTFail("Tauth failed")
    }
    let challenge = try challenge(client, afid: 8, claim: alice.identity.hex)
    let response = try ChallengeResponse.respond(to: challenge, with: alice)
    Thread.sleep(forTimeInterval: 0.3)  // the point: the challenge outlives its 200 ms
    XCTAssertEqual(
      try client.rpc(.tread(fid: 7, offset: 0, count: 64)), .rerror(ename: "authentication timeout")
    )
    XCTAssertEqual(
      try client.rpc(.twrite(fid: 8, offset: 0, data: response[...])),
      .rerror(ename: "authentication timeout"))
  }

  func testFourAuthenticationsAtOnceInASession() throws {
    try startServer()
    let client = try client()
    for afid: Fid in 10..<14 {
      guard case .rauth = try client.rpc(.tauth(afid: afid, uname: alice.identity.hex, aname: ""))
      else { return XCTFail("Tauth \(afid) failed") }
    }
    XCTAssertEqual(
      try client.rpc(.tauth(afid: 14, uname: alice.identity.hex, aname: "")),
      .rerror(ename: "too many concurrent authentications"))
    // Another session has its own four.
    let other = try self.client()
    XCTAssertEqual(try respond(other, key: bob), .rwrite(count: 129))
    // Clunking an afid frees its place; so does Tversion, for all of them.
    XCTAssertEqual(try client.rpc(.tclunk(fid: 10)), .rclunk)
    XCTAssertEqual(try respond(client, afid: 14, key: alice), .rwrite(count: 96))
    guard
      case .rversion = try client.rpc(.tversion(msize: 8192, version: "9P2000"), tag: NineP.noTag)
    else { return XCTFail("Tversion failed") }
    for afid: Fid in 20..<24 {
      guard case .rauth = try client.rpc(.tauth(afid: afid, uname: alice.identity.hex, aname: ""))
      else { return XCTFail("Tauth \(afid) after Tversion failed") }
    }
    XCTAssertEqual(
      try client.rpc(.tattach(fid: 0, afid: 14, uname: "", aname: "")),
      .rerror(ename: "authentication incomplete"), "Tversion forgot the finished afid too")
  }

  // MARK: Who the board sees

  func testOptionalAuthenticationAdmitsGuests() throws {
    try startServer(.optional)
    let guest = try guest()
    _ = try guest.post("lobby:anyone here?")
    XCTAssertTrue(try guest.readFile("chat/lobby").hasSuffix("] guest: anyone here?\n"))
    // An afid that never finished is a guest too, when guests are allowed.
    let half = try client()
    _ = try challenge(half, afid: 7, claim: alice.identity.hex)
    guard
      case .rattach = try half.rpc(.tattach(fid: 0, afid: 7, uname: alice.identity.hex, aname: ""))
    else { return XCTFail("attach failed") }
    _ = try half.post("lobby:not really alice")
    XCTAssertTrue(try half.readFile("chat/lobby").hasSuffix("] guest: not really alice\n"))
    let member = try connect(as: alice)
    _ = try member.post("lobby:alice here")
    XCTAssertTrue(
      try member.readFile("chat/lobby").hasSuffix("] \(alice.identity.short): alice here\n"))
  }

  func testNicknamesAndSysops() throws {
    try startServer(.optional) {
      $0.nicknames = [self.alice.identity.hex: "alice"]
      $0.sysops = [self.alice.identity.hex]
    }
    // Bob attaches first: on a device the first user would be the sysop, not with a list.
    let bobClient = try connect(as: bob)
    let aliceClient = try connect(as: alice)
    let guest = try guest()
    _ = try aliceClient.post("lobby:hi")
    XCTAssertTrue(try aliceClient.readFile("chat/lobby").hasSuffix("] alice: hi\n"))
    for (client, allowed) in [(aliceClient, true), (bobClient, false), (guest, false)] {
      _ = try client.open("etc/motd", fid: 20, mode: .write)
      let reply = try client.rpc(.twrite(fid: 20, offset: 0, data: ArraySlice("new motd\n".utf8)))
      XCTAssertEqual(reply, allowed ? .rwrite(count: 9) : .rerror(ename: "not authorized"))
      _ = try client.rpc(.tclunk(fid: 20))
    }
    XCTAssertEqual(try guest.readFile("etc/motd"), "new motd\n")
  }

  func testCursorsFollowTheIdentity() throws {
    try startServer(.optional)
    let aliceClient = try connect(as: alice)
    let aliceAgain = try connect(as: alice)
    let bobClient = try connect(as: bob)
    _ = try bobClient.post("lobby:one")
    _ = try bobClient.post("lobby:two")
    // Two people: each reads every line.
    XCTAssertEqual(try aliceClient.readFile("chat/lobby").split(separator: "\n").count, 2)
    XCTAssertEqual(try bobClient.readFile("chat/lobby").split(separator: "\n").count, 2)
    // One person on two connections: one cursor (what the first read, the second does not).
    _ = try bobClient.post("lobby:three")
    let again = try aliceAgain.readFile("chat/lobby")
    XCTAssertTrue(
      again.hasSuffix("\(bob.identity.short): three\n") && again.split(separator: "\n").count == 1,
      again)
    _ = try aliceClient.open("chat/lobby", fid: 30)
    try aliceClient.send(.tread(fid: 30, offset: 0, count: 4096), tag: 31)
    XCTAssertNil(
      aliceClient.reply(tag: 31, ifWithin: 0.2), "alice's cursor is past 'three': the read parks")
    // Presence lists people by name, once each.
    let users = try bobClient.readFile("chat/users")
    XCTAssertEqual(users.split(separator: "\n").count, 2, users)
    XCTAssertTrue(users.contains("\(alice.identity.short) (idle:"), users)
  }

  func testTheDeviceProfileKeepsItsLimitsPerIdentity() throws {
    try startServer(.required, profile: .device) { $0.connectionLimit = .unlimited }
    let keys = (0..<9).map { _ in PrivateKey.generate(.ed25519) }
    for (index, key) in keys.enumerated() {
      let client = try connect(as: key)
      if index == 0 { _ = try client.post("lobby:so reads do not park") }
      _ = try client.open("chat/lobby", fid: 40)
      let reply = try client.rpc(.tread(fid: 40, offset: 0, count: 512))
      if index < 8 {
        XCTAssertTrue(
          text(reply).hasSuffix("so reads do not park\n"), "reader \(index + 1): \(reply)")
      } else {
        XCTAssertEqual(reply, .rerror(ename: "out of memory"), "a board keeps 8 chat users")
      }
      client.close()
    }
  }

  // MARK: Configuration

  func testConfigurationsThatCannotWork() throws {
    XCTAssertThrowsError(try startServer(.required, profile: .gen1)) { error in
      XCTAssertTrue("\(error)".contains("gen1 profile has no authentication"), "\(error)")
    }
    XCTAssertThrowsError(try startServer(.required) { $0.sysops = ["alice"] }) { error in
      XCTAssertTrue("\(error)".contains("'alice' is not an identity"), "\(error)")
    }
    XCTAssertThrowsError(try startServer(.off) { $0.sysops = [self.alice.identity.hex] }) {
      error in
      XCTAssertTrue("\(error)".contains("need --auth"), "\(error)")
    }
  }
}
