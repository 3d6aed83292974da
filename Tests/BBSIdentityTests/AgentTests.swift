import Foundation
import TestSupport
import XCTest

@testable import BBSIdentity

/// A user's SSH key as their identity, through a real `ssh-agent`: listing, choosing, signing
/// (Ed25519 as is, ECDSA converted from SSH's mpints to r ‖ s), and what goes wrong.
final class AgentTests: XCTestCase {
  private var directory = ""
  private var agent: SSHAgentProcess!

  override func setUpWithError() throws {
    directory = try makeTemporaryDirectory("bbsidentity-agent")
    agent = try SSHAgentProcess()
  }

  override func tearDown() {
    agent?.stop()
    try? FileManager.default.removeItem(atPath: directory)
    super.tearDown()
  }

  private func makeKey(_ name: String, _ type: String) throws -> String {
    let path = "\(directory)/\(name)"
    let made = try shell("ssh-keygen -q -t \(type) -N '' -C \(name) -f \(path)")
    XCTAssertEqual(made.status, 0, made.output)
    return path
  }

  func testAgentKeysSignWhatTheBoardVerifies() throws {
    let rsa = try makeKey("old-rsa", "rsa -b 2048")
    let ed = try makeKey("laptop-ed", "ed25519")
    let ec = try makeKey("work-ec", "ecdsa -b 256")
    for path in [rsa, ed, ec] { try agent.add(path) }
    let client = try SSHAgent(environment: agent.environment)
    let (usable, others) = try client.keys()
    XCTAssertEqual(usable.map(\.comment), ["laptop-ed", "work-ec"])
    XCTAssertEqual(others, ["ssh-rsa 'old-rsa'"])
    for (key, file) in zip(usable, [ed, ec]) {
      // The agent's key is the file's key: same identity.
      XCTAssertEqual(key.identity, try KeyFile.load(file).identity)
      // Many challenges, so an ECDSA r or s with a leading zero byte shows up too.
      for round in 0..<40 {
        let challenge = ChallengeResponse.Challenge(
          nonce: (0..<32).map { _ in UInt8.random(in: 0...255) },
          boardKey: round % 2 == 0 ? nil : BoardKey(of: PrivateKey.generate(.ed25519)))
        let response = try ChallengeResponse.respond(to: challenge, with: key)
        XCTAssertEqual(
          try ChallengeResponse.verify(
            response, challenge: challenge, claimedIdentity: key.identity.hex), key.identity)
      }
    }
    // Choosing: the first usable key, by comment, or by identity prefix.
    XCTAssertEqual(try client.key(matching: nil).comment, "laptop-ed")
    XCTAssertEqual(try client.key(matching: "work").comment, "work-ec")
    let ecIdentity = try KeyFile.load(ec).identity
    XCTAssertEqual(try client.key(matching: ecIdentity.short).comment, "work-ec")
    XCTAssertEqual(
      try KeySource(parsing: "agent:work").load(environment: agent.environment).identity,
      ecIdentity)
    XCTAssertThrowsError(try client.key(matching: "nothing")) {
      XCTAssertEqual(
        $0 as? IdentityError,
        .agentHasNoKey(
          match: "nothing",
          seen: ["Ed25519 'laptop-ed'", "ECDSA P-256 'work-ec'", "ssh-rsa 'old-rsa'"]))
    }
  }

  func testWhatGoesWrongWithAnAgent() throws {
    XCTAssertThrowsError(try SSHAgent(environment: [:])) {
      XCTAssertTrue("\($0)".contains("SSH_AUTH_SOCK is not set"), "\($0)")
    }
    let client = try SSHAgent(environment: agent.environment)
    XCTAssertThrowsError(try client.key(matching: nil)) {
      XCTAssertEqual($0 as? IdentityError, .agentHasNoKey(match: nil, seen: []))
    }
    // A key removed from the agent after it was chosen: the agent refuses to sign.
    let ed = try makeKey("gone", "ed25519")
    try agent.add(ed)
    let key = try client.key(matching: nil)
    try agent.add("-d \(ed)")
    XCTAssertThrowsError(try key.sign(Array(repeating: 1, count: 32))) {
      XCTAssertEqual($0 as? IdentityError, .agentRefused(key: "ssh-agent key 'gone'"))
    }
    // No agent at all any more.
    agent.stop()
    XCTAssertThrowsError(try client.keys()) {
      guard case .agentUnavailable(let reason) = $0 as? IdentityError else {
        return XCTFail("\($0)")
      }
      XCTAssertTrue(reason.contains("no agent answers at \(agent.socketPath)"), reason)
    }
  }
}
