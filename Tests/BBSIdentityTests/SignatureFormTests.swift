import Foundation
import TestSupport
import XCTest

@testable import BBSIdentity

/// What a user's key signs for a board (docs/authentication.md), checked by OpenSSH itself:
/// only 32-byte challenges are answered; the signature is an SSHSIG in our namespace that
/// `ssh-keygen -Y verify` accepts there and refuses as a git (or any other) signature, for keys
/// in memory and keys in an ssh-agent alike; a board's proof; the pin file's rules.
final class SignatureFormTests: XCTestCase {
  private var directory = ""

  override func setUpWithError() throws {
    directory = try makeTemporaryDirectory("bbsidentity-sshsig")
  }

  override func tearDown() {
    try? FileManager.default.removeItem(atPath: directory)
    super.tearDown()
  }

  /// Whether `ssh-keygen -Y verify -n namespace` accepts `signature` (raw, 64 bytes) by
  /// `signer` over `message`.
  private func sshKeygenVerifies(
    _ signature: [UInt8], by signer: any Signer, message: [UInt8], namespace: String,
    signedIn signedNamespace: String
  ) throws -> Bool {
    let armored = try XCTUnwrap(
      SSHSignature.armored(
        signature: signature, algorithm: signer.algorithm, publicKey: signer.publicKey,
        namespace: signedNamespace))
    let name = UUID().uuidString
    try armored.write(toFile: "\(directory)/\(name).sig", atomically: true, encoding: .utf8)
    try Data(message).write(to: URL(fileURLWithPath: "\(directory)/\(name).msg"))
    try ("victim@example " + signer.sshPublicKeyLine(comment: "") + "\n").write(
      toFile: "\(directory)/\(name).allowed", atomically: true, encoding: .utf8)
    let result = try shell(
      "ssh-keygen -Y verify -f \(directory)/\(name).allowed -I victim@example -n '\(namespace)' "
        + "-s \(directory)/\(name).sig < \(directory)/\(name).msg")
    return result.status == 0
  }

  func testOnlyA32ByteChallengeIsAnswered() throws {
    for size in [0, 1, 31, 33, 64, 79, 81, 1024] {
      XCTAssertThrowsError(
        try ChallengeResponse.Challenge(parsing: [UInt8](repeating: 7, count: size))
      ) {
        XCTAssertEqual($0 as? ChallengeResponse.ChallengeRefusal, .notAChallenge(size))
        XCTAssertTrue("\($0)".contains("nothing was signed"), "\($0)")
      }
    }
    let boardKey = try XCTUnwrap(BoardKey(of: PrivateKey.generate(.ed25519)))
    let keyed = ChallengeResponse.Challenge(nonce: Array(0..<32), boardKey: boardKey)
    XCTAssertEqual(try ChallengeResponse.Challenge(parsing: keyed.encoded), keyed)
    // 80 bytes without the magic are no challenge either.
    var wrongMagic = keyed.encoded
    wrongMagic[33] ^= 1
    XCTAssertThrowsError(try ChallengeResponse.Challenge(parsing: wrongMagic))
  }

  func testTheSignatureIsAnSSHSIGInOurNamespaceOnly() throws {
    let agent = try SSHAgentProcess()
    defer { agent.stop() }
    for type in ["ed25519", "ecdsa -b 256"] {
      let path = "\(directory)/agent-\(type.prefix(5))"
      XCTAssertEqual(try shell("ssh-keygen -q -t \(type) -N '' -C agent -f \(path)").status, 0)
      try agent.add(path)
    }
    let (agentKeys, _) = try SSHAgent(environment: agent.environment).keys()
    XCTAssertEqual(agentKeys.count, 2)
    let signers: [any Signer] =
      [PrivateKey.generate(.ed25519), PrivateKey.generate(.p256)] + agentKeys
    let boardKey = BoardKey(of: PrivateKey.generate(.ed25519))
    for signer in signers {
      for key in [boardKey, nil] {
        let challenge = ChallengeResponse.Challenge(
          nonce: (0..<32).map { _ in UInt8.random(in: 0...255) }, boardKey: key)
        let response = try ChallengeResponse.respond(to: challenge, with: signer)
        XCTAssertEqual(response.count, 64 + signer.publicKey.count)
        let signature = Array(response.prefix(64))
        let message = ChallengeResponse.clientMessage(
          identity: signer.identity, challenge: challenge)
        XCTAssertTrue(
          try sshKeygenVerifies(
            signature, by: signer, message: message, namespace: ChallengeResponse.clientNamespace,
            signedIn: ChallengeResponse.clientNamespace), signer.origin)
        // Presented as a git signature (namespace and all), OpenSSH refuses it.
        XCTAssertFalse(
          try sshKeygenVerifies(
            signature, by: signer, message: message, namespace: "git", signedIn: "git"),
          signer.origin)
        XCTAssertFalse(
          try sshKeygenVerifies(
            signature, by: signer, message: message, namespace: "git",
            signedIn: ChallengeResponse.clientNamespace), signer.origin)
        // The board checks it the same way.
        XCTAssertEqual(
          try ChallengeResponse.verify(
            response, challenge: challenge, claimedIdentity: signer.identity.hex),
          signer.identity)
      }
    }
  }

  func testTheRawFormSignsTheChallengeAsItIs() throws {
    let key = PrivateKey.generate(.ed25519)
    let challenge = ChallengeResponse.Challenge(nonce: Array(0..<32), boardKey: nil)
    XCTAssertEqual(
      ChallengeResponse.signedData(identity: key.identity, challenge: challenge, form: .raw),
      challenge.nonce)
    let raw = try ChallengeResponse.respond(to: challenge, with: key, form: .raw)
    XCTAssertNoThrow(
      try ChallengeResponse.verify(
        raw, challenge: challenge, claimedIdentity: key.identity.hex, form: .raw))
    // Neither form passes for the other.
    XCTAssertThrowsError(
      try ChallengeResponse.verify(raw, challenge: challenge, claimedIdentity: key.identity.hex))
    let bound = try ChallengeResponse.respond(to: challenge, with: key)
    XCTAssertThrowsError(
      try ChallengeResponse.verify(
        bound, challenge: challenge, claimedIdentity: key.identity.hex, form: .raw))
  }

  func testABoardProofVerifiesOnlyForItsKeyChallengeAndResponse() throws {
    let board = PrivateKey.generate(.ed25519)
    let boardKey = try XCTUnwrap(BoardKey(of: board))
    let nonce = Array(UInt8(0)..<32)
    let response = try ChallengeResponse.respond(
      to: .init(nonce: nonce, boardKey: boardKey), with: PrivateKey.generate(.p256))
    let proof = try ChallengeResponse.proveBoard(nonce: nonce, response: response, with: board)
    XCTAssertNoThrow(
      try ChallengeResponse.verifyBoardProof(
        proof, boardKey: boardKey, nonce: nonce, response: response))
    let impostor = try XCTUnwrap(BoardKey(of: PrivateKey.generate(.ed25519)))
    for (key, otherNonce, otherResponse) in [
      (impostor, nonce, response), (boardKey, nonce.reversed(), response),
      (boardKey, nonce, Array(response.dropLast()) + [response[response.count - 1] ^ 1]),
    ] {
      XCTAssertThrowsError(
        try ChallengeResponse.verifyBoardProof(
          proof, boardKey: key, nonce: otherNonce, response: otherResponse))
    }
    // OpenSSH reads the proof as an SSHSIG in the board's namespace.
    XCTAssertTrue(
      try sshKeygenVerifies(
        proof, by: board,
        message: ChallengeResponse.boardMessage(
          boardKey: boardKey, nonce: nonce, response: response),
        namespace: ChallengeResponse.boardNamespace, signedIn: ChallengeResponse.boardNamespace))
    // The fingerprint is OpenSSH's.
    try (boardKey.sshText + "\n").write(
      toFile: "\(directory)/board.pub", atomically: true, encoding: .utf8)
    let printed = try shell("ssh-keygen -l -f \(directory)/board.pub")
    XCTAssertTrue(printed.output.contains(boardKey.fingerprint), printed.output)
  }

  func testPinsAreKeptPerAddressAndAKeyPinnedElsewhereIsARelay() throws {
    let pins = BoardPins(path: directory + "/state/mount9bbs/known_boards")
    let real = try XCTUnwrap(BoardKey(of: PrivateKey.generate(.ed25519)))
    let other = try XCTUnwrap(BoardKey(of: PrivateKey.generate(.ed25519)))
    let address = "tcp!10.0.0.5!5640"
    XCTAssertEqual(try pins.check(nil, at: address), .keyless)
    XCTAssertEqual(try pins.check(real, at: address), .new)
    try pins.pin(real, at: address)
    try pins.pin(other, at: address)  // an address keeps its first pin
    XCTAssertEqual(pins.entries().count, 1)
    XCTAssertEqual(try pins.check(real, at: address), .pinned)
    XCTAssertThrowsError(try pins.check(other, at: address)) {
      XCTAssertEqual(
        $0 as? BoardPins.Refusal,
        .changed(address: address, pinned: real, presented: other, file: pins.path))
      XCTAssertTrue("\($0)".contains("delete the line for \(address)"), "\($0)")
    }
    XCTAssertThrowsError(try pins.check(nil, at: address)) {
      XCTAssertEqual(
        $0 as? BoardPins.Refusal, .keyVanished(address: address, pinned: real, file: pins.path))
    }
    // The real board's key at another address: a relay, unless the user named both.
    let relay = "tcp!evil.example!5640"
    XCTAssertThrowsError(try pins.check(real, at: relay)) {
      XCTAssertEqual(
        $0 as? BoardPins.Refusal,
        .pinnedElsewhere(address: relay, key: real, others: [address], file: pins.path))
      XCTAssertTrue("\($0)".contains(BoardPins.line(address: relay, key: real)), "\($0)")
    }
    XCTAssertEqual(try pins.check(real, at: relay, sameBoard: [relay, address]), .new)
    // What a scan shows.
    let unpinned = "l2cap!AA:BB:CC:DD:EE:FF!0x0081"
    XCTAssertEqual(
      pins.trust(at: [address], advertised: nil, advertisesKeys: false),
      .pinned(fingerprint: real.fingerprint))
    XCTAssertEqual(
      pins.trust(at: [unpinned], advertised: nil, advertisesKeys: false), .unknown(advertised: nil))
    XCTAssertEqual(
      pins.trust(at: [address], advertised: real.fingerprint, advertisesKeys: true),
      .pinned(fingerprint: real.fingerprint))
    XCTAssertEqual(
      pins.trust(at: [address], advertised: other.fingerprint, advertisesKeys: true),
      .changed(pinned: real.fingerprint, advertised: other.fingerprint))
    XCTAssertEqual(
      pins.trust(at: [address], advertised: nil, advertisesKeys: true),
      .changed(pinned: real.fingerprint, advertised: nil))
    XCTAssertEqual(
      pins.trust(at: [relay], advertised: real.fingerprint, advertisesKeys: true),
      .keyElsewhere(fingerprint: real.fingerprint, addresses: [address]))
    XCTAssertEqual(
      pins.trust(at: [relay], advertised: other.fingerprint, advertisesKeys: true),
      .unknown(advertised: other.fingerprint))
    // Addresses with blanks survive the file; the file is the user's alone.
    let spaced = "unix!/tmp/my boards/b.sock"
    try pins.pin(other, at: spaced)
    XCTAssertEqual(try pins.check(other, at: spaced), .pinned)
    var info = stat()
    XCTAssertEqual(stat(pins.path, &info), 0)
    XCTAssertEqual(info.st_mode & 0o777, 0o600)
  }
}
