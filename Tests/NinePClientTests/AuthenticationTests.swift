import BBSIdentity
import BBSServer
import Foundation
import NinePClient
import NinePProtocol
import NinePTransport
import TestSupport
import XCTest

/// The client's Tauth exchange against a real `9bbsd --auth …` process: Ed25519, P-256 and an
/// ssh-agent key; every session of a pool and every reconnect authenticates; failures come back
/// as typed errors; no more than 4 authentications run at once.
final class ClientAuthenticationTests: XCTestCase {
  private let alice = PrivateKey.generate(.ed25519)
  private let bob = PrivateKey.generate(.p256)

  /// A 9bbsd with `--auth auth` on a Unix socket, stopped with the test.
  private func startServer(_ auth: String, listen: String? = nil) throws -> ServerProcess {
    let server = try ServerProcess(
      transport: "unix", extra: ["--auth", auth, "--log-level", "debug"], listen: listen)
    addTeardownBlock { server.stop() }
    return server
  }

  private func configuration(
    _ signer: (any Signer)?, policy: Authentication.Policy = .required, uname: String = "carol"
  ) -> SessionConfiguration {
    var configuration = SessionConfiguration(profile: .multiplex, uname: uname)
    configuration.authentication = signer.map { signer in
      Authentication(identity: signer.identity.hex, policy: policy) {
        try answer($0, with: signer)
      }
    }
    return configuration
  }

  private func connect(_ address: String, _ configuration: SessionConfiguration) throws -> Session {
    let transport = try dial(TransportAddress(parsing: address))
    let session = try Session.connect(transport: transport, configuration: configuration)
    addTeardownBlock { session.close() }
    return session
  }

  /// The error connecting fails with.
  private func failure(_ address: String, _ configuration: SessionConfiguration) throws
    -> NinePError
  {
    let transport = try dial(TransportAddress(parsing: address))
    do {
      let session = try Session.connect(transport: transport, configuration: configuration)
      session.close()
      throw HarnessError("connecting should have failed")
    } catch let error as NinePError {
      return error
    }
  }

  /// Posts `text` to the lobby and returns the line the room shows for it.
  private func postAndRead(_ session: Session, _ text: String) throws -> String {
    XCTAssertEqual(try session.post("lobby:" + text), UInt32(6 + text.utf8.count))
    let (fid, _) = try session.openPath("chat/lobby")
    defer { session.clunk(fid) }
    let bytes = try awaitResult("read lobby") {
      session.read(fid, offset: 0, count: 8192, mayPark: true, completion: $0)
    }
    let lines = String(decoding: bytes, as: UTF8.self).split(separator: "\n")
    return String(lines.last { $0.hasSuffix(text) } ?? "")
  }

  func testEveryAuthenticationErrorStringHasItsCase() {
    let cases: [(String, AuthenticationError)] = [
      ("authentication not required", .notRequired), ("invalid identity", .invalidIdentity),
      ("authentication timeout", .expired), ("invalid auth response size", .invalidResponseSize),
      ("must read challenge first", .challengeNotRead), ("authentication failed", .refused),
      ("uname does not match authenticated identity", .unameMismatch),
      ("authentication required", .required), ("authentication incomplete", .incomplete),
      ("too many concurrent authentications", .busy),
      ("cannot allocate afid", .server("cannot allocate afid")),
      ("u9fs: authentication not required", .notRequired),
    ]
    for (ename, error) in cases {
      XCTAssertEqual(AuthenticationError(ename: ename), error, ename)
      // The user sees the server's words too.
      if case .server = error { continue }
      if ename.hasPrefix("u9fs") { continue }
      XCTAssertTrue(error.description.contains(ename), error.description)
    }
    XCTAssertEqual(NinePError.authentication(.refused).errno, EACCES)
  }

  func testBothKeyTypesAndAnAgentKeyPostUnderTheirIdentity() throws {
    let server = try startServer("required")
    let agent = try SSHAgentProcess()
    addTeardownBlock { agent.stop() }
    let keyDirectory = try makeTemporaryDirectory("agent-key")
    addTeardownBlock { try? FileManager.default.removeItem(atPath: keyDirectory) }
    XCTAssertEqual(
      try shell("ssh-keygen -q -t ecdsa -b 256 -N '' -C mine -f \(keyDirectory)/id").status, 0)
    try agent.add("\(keyDirectory)/id")
    let agentKey = try SSHAgent(environment: agent.environment).key(matching: nil)

    let signers: [any Signer] = [alice, bob, agentKey]
    for signer in signers {
      let session = try connect(server.address, configuration(signer))
      XCTAssertEqual(session.authenticatedIdentity, signer.identity.hex, signer.origin)
      XCTAssertTrue(
        try postAndRead(session, "signed by \(signer.origin)").hasSuffix(
          "] \(signer.identity.short): signed by \(signer.origin)"), signer.origin)
      XCTAssertTrue(server.log.contains("authenticated \(signer.identity.hex)"), server.log)
    }
  }

  func testFailuresAreTyped() throws {
    let server = try startServer("required")
    // No key, no guests.
    XCTAssertEqual(
      try failure(server.address, configuration(nil)), .authentication(.required))
    // Bob's signature for Alice's identity.
    var forged = configuration(alice)
    forged.authentication?.respond = { [bob] in try answer($0, with: bob) }
    XCTAssertEqual(try failure(server.address, forged), .authentication(.refused))
    // A key that cannot sign (an agent gone away, say) says why.
    var broken = configuration(alice)
    broken.authentication?.respond = { _ in throw IdentityError.agentRefused(key: "that key") }
    XCTAssertEqual(
      try failure(server.address, broken),
      .authentication(.signing(IdentityError.agentRefused(key: "that key").description)))
    // Still healthy after all that.
    XCTAssertEqual(
      try connect(server.address, configuration(alice)).authenticatedIdentity, alice.identity.hex)
  }

  func testServersThatDoNotAuthenticate() throws {
    let plain = try startServer("off")
    // auth=auto: the key is not wanted, so the uname is used as before.
    let session = try connect(plain.address, configuration(alice, policy: .auto))
    XCTAssertNil(session.authenticatedIdentity)
    XCTAssertTrue(try postAndRead(session, "plain").hasSuffix("] carol: plain"))
    // auth=required: a mount that must be authenticated does not fall back.
    XCTAssertEqual(
      try failure(plain.address, configuration(alice, policy: .required)),
      .authentication(.notRequired))
    // On a board with optional authentication a key is used, and no key is a guest.
    let optional = try startServer("optional")
    XCTAssertEqual(
      try connect(optional.address, configuration(bob, policy: .auto)).authenticatedIdentity,
      bob.identity.hex)
    let guest = try connect(optional.address, configuration(nil))
    XCTAssertNil(guest.authenticatedIdentity)
    XCTAssertTrue(try postAndRead(guest, "who am i").hasSuffix("] guest: who am i"))
  }

  func testAnExpiredChallengeIsReported() throws {
    var serverConfiguration = BBSServerConfiguration(listen: ["tcp!127.0.0.1!0"])
    serverConfiguration.auth = .required
    serverConfiguration.challengeLifetime = .milliseconds(100)
    serverConfiguration.secure = .off  // a plain TCP client
    let server = try BBSServer(configuration: serverConfiguration)
    let address = try XCTUnwrap(server.start().first)
    defer { server.stop() }
    var slow = configuration(alice)
    slow.authentication?.respond = { [alice] challenge in
      Thread.sleep(forTimeInterval: 0.3)  // the point: answer after the challenge expired
      return try answer(challenge, with: alice)
    }
    XCTAssertEqual(try failure(address, slow), .authentication(.expired))
  }

  func testEverySessionAndEveryReconnectAuthenticates() throws {
    let socketDirectory = try makeTemporaryDirectory("auth-reconnect")
    addTeardownBlock { try? FileManager.default.removeItem(atPath: socketDirectory) }
    let socket = socketDirectory + "/9bbs.sock"
    var server = try startServer("required", listen: "unix!" + socket)
    var policy = ReconnectPolicy()
    policy.initialBackoff = .milliseconds(50)
    policy.maximumBackoff = .milliseconds(200)
    let pool = Pool(
      address: try TransportAddress(parsing: "unix!" + socket), configuration: configuration(alice),
      maxSessions: 2, policy: policy)
    try pool.start()
    defer { pool.close() }
    let stream = try Session.placed(pool, .stream)
    XCTAssertFalse(stream === pool.primary, "a second session was dialled")
    XCTAssertEqual(
      pool.sessions.map(\.authenticatedIdentity), [alice.identity.hex, alice.identity.hex])
    pool.releaseStream(on: stream)

    // The server goes and comes back (a board out of range and back): the new session proves
    // the identity again, to a server that has never seen it.
    let generation = pool.generation
    server.stop()
    XCTAssertTrue(waitUntil(timeout: 5) { pool.linkState != .up })
    server = try startServer("required", listen: "unix!" + socket)
    XCTAssertTrue(waitUntil(timeout: 10) { pool.linkState == .up && pool.generation != generation })
    XCTAssertEqual(pool.primary.authenticatedIdentity, alice.identity.hex)
    XCTAssertTrue(
      try postAndRead(pool.primary, "back again").hasSuffix("\(alice.identity.short): back again"))
    XCTAssertTrue(server.log.contains("authenticated \(alice.identity.hex)"), server.log)
  }

  func testAtMostFourAuthenticationsAtOnce() throws {
    let server = try startServer("required")
    let counter = ConcurrencyCounter()
    var shared = configuration(alice)
    shared.authentication?.respond = { [alice] challenge in
      counter.enter()
      defer { counter.leave() }
      Thread.sleep(forTimeInterval: 0.1)  // long enough for the others to pile up
      return try answer(challenge, with: alice)
    }
    let outcomes = Outcomes<Session>()
    for _ in 0..<8 {
      Thread.detachNewThread { [shared] in
        outcomes.add(
          Result { () throws(NinePError) -> Session in
            let transport: any MessageTransport
            do {
              transport = try dial(TransportAddress(parsing: server.address))
            } catch {
              throw .sessionClosed(reason: "\(error)")
            }
            return try Session.connect(transport: transport, configuration: shared)
          })
      }
    }
    XCTAssertTrue(outcomes.wait(count: 8, timeout: 20))
    for outcome in outcomes.all {
      XCTAssertEqual(try outcome.get().authenticatedIdentity, alice.identity.hex)
      try? outcome.get().close()
    }
    XCTAssertEqual(counter.highest, Authentication.concurrentLimit)
  }
}

/// The answer mount9bbs gives (without its pins): refuses anything but a 32-byte challenge
/// before signing, signs in `form`, and checks a keyed board's proof.
func answer(
  _ offered: Authentication.Challenge, with signer: any Signer,
  form: ChallengeResponse.Form = .bound
) throws -> Authentication.Answer {
  let challenge = try ChallengeResponse.Challenge(parsing: offered.bytes)
  let response = try ChallengeResponse.respond(to: challenge, with: signer, form: form)
  guard let boardKey = challenge.boardKey else { return .init(response: response) }
  return .init(response: response) { proof in
    try ChallengeResponse.verifyBoardProof(
      proof, boardKey: boardKey, nonce: challenge.nonce, response: response)
  }
}

/// The most callers ever inside at once.
private final class ConcurrencyCounter: @unchecked Sendable {
  private let lock = NSLock()
  private var inside = 0
  private(set) var highest = 0

  func enter() {
    lock.withLock {
      inside += 1
      highest = max(highest, inside)
    }
  }

  func leave() { lock.withLock { inside -= 1 } }
}
