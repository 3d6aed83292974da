import Foundation
import TestSupport
import XCTest

@testable import BBSIdentity

/// Keys where users keep them: ours round-trip and OpenSSH reads them; OpenSSH's Ed25519 and
/// ECDSA P-256 keys (and PEM P-256) load with the identity the board computes; files others
/// can read, passphrase-protected keys, RSA keys and public keys are refused with a clear
/// reason.
final class KeyTests: XCTestCase {
  private var directory = ""

  override func setUpWithError() throws {
    directory = try makeTemporaryDirectory("bbsidentity")
  }

  override func tearDown() {
    try? FileManager.default.removeItem(atPath: directory)
    super.tearDown()
  }

  /// The identity of an OpenSSH `.pub` line, computed apart from BBSIdentity (python's
  /// hashlib over the key bytes of the blob).
  private func independentIdentity(ofPublicKeyFile path: String) throws -> String {
    let script = directory + "/identity.py"
    try """
    import base64, hashlib, struct, sys
    blob = base64.b64decode(open(sys.argv[1]).read().split()[1])
    fields = []
    while blob:
        n = struct.unpack(">I", blob[:4])[0]
        fields.append(blob[4:4 + n])
        blob = blob[4 + n:]
    print(hashlib.sha256(fields[-1]).hexdigest()[:40])
    """.write(toFile: script, atomically: true, encoding: .utf8)
    let result = try shell("python3 \(script) \(path)")
    XCTAssertEqual(result.status, 0, result.output)
    return result.output.trimmingCharacters(in: .whitespacesAndNewlines)
  }

  func testOurKeysRoundTripAndOpenSSHReadsThem() throws {
    for algorithm in KeyAlgorithm.allCases {
      let path = "\(directory)/\(algorithm.rawValue)"
      let key = PrivateKey.generate(algorithm)
      try KeyFile.write(key, to: path, comment: "test@\(algorithm)", replace: false)
      var info = stat()
      XCTAssertEqual(stat(path, &info), 0)
      XCTAssertEqual(info.st_mode & 0o777, 0o600, "the key is the owner's alone")
      let loaded = try KeyFile.load(path)
      XCTAssertEqual(loaded.algorithm, algorithm)
      XCTAssertEqual(loaded.publicKey, key.publicKey)
      XCTAssertEqual(loaded.identity, key.identity)
      XCTAssertEqual(loaded.publicKey.count, algorithm.publicKeySize)
      // ssh-keygen derives the same public key from our file, and hashes it to our identity.
      let derived = try shell("ssh-keygen -y -f \(path)")
      XCTAssertEqual(derived.status, 0, derived.output)
      let published = try String(contentsOfFile: path + ".pub", encoding: .utf8)
      XCTAssertEqual(
        derived.output.split(separator: " ").prefix(2), published.split(separator: " ").prefix(2))
      XCTAssertEqual(
        try independentIdentity(ofPublicKeyFile: path + ".pub"), key.identity.hex)
      // A key is never silently replaced.
      XCTAssertThrowsError(try KeyFile.write(key, to: path, comment: "", replace: false)) {
        XCTAssertEqual($0 as? IdentityError, .exists(path: path))
      }
      let newer = PrivateKey.generate(algorithm)
      try KeyFile.write(newer, to: path, comment: "", replace: true)
      XCTAssertEqual(try KeyFile.load(path).identity, newer.identity)
    }
  }

  func testOpenSSHKeysLoadWithTheBoardsIdentity() throws {
    for (type, algorithm, format) in [
      ("ed25519", KeyAlgorithm.ed25519, ""), ("ecdsa -b 256", .p256, ""),
      ("ecdsa -b 256", .p256, "-m PEM"),
    ] {
      let path = "\(directory)/id_\(algorithm.rawValue)\(format.isEmpty ? "" : "_pem")"
      let made = try shell("ssh-keygen -q -t \(type) \(format) -N '' -C me -f \(path)")
      XCTAssertEqual(made.status, 0, made.output)
      let key = try KeyFile.load(path)
      XCTAssertEqual(key.algorithm, algorithm, path)
      XCTAssertEqual(key.identity.hex, try independentIdentity(ofPublicKeyFile: path + ".pub"))
      // And it signs what the board verifies.
      let challenge = ChallengeResponse.Challenge(
        nonce: (0..<32).map { _ in UInt8.random(in: 0...255) }, boardKey: nil)
      let response = try ChallengeResponse.respond(to: challenge, with: key)
      XCTAssertEqual(
        try ChallengeResponse.verify(
          response, challenge: challenge, claimedIdentity: key.identity.hex), key.identity)
    }
  }

  func testKeysThatCannotBeUsedAreRefusedWithTheReason() throws {
    let rsa = "\(directory)/id_rsa"
    let encrypted = "\(directory)/id_locked"
    XCTAssertEqual(try shell("ssh-keygen -q -t rsa -b 2048 -N '' -f \(rsa)").status, 0)
    XCTAssertEqual(try shell("ssh-keygen -q -t ed25519 -N secret -f \(encrypted)").status, 0)
    XCTAssertThrowsError(try KeyFile.load(rsa)) {
      XCTAssertEqual($0 as? IdentityError, .unsupportedKeyType(origin: rsa, type: "ssh-rsa"))
    }
    XCTAssertThrowsError(try KeyFile.load(encrypted)) {
      XCTAssertEqual($0 as? IdentityError, .encrypted(path: encrypted))
      XCTAssertTrue("\($0)".contains("ssh-add \(encrypted)"), "\($0)")
    }
    XCTAssertThrowsError(try KeyFile.load(rsa + ".pub")) {
      XCTAssertEqual($0 as? IdentityError, .publicKeyGiven(path: rsa + ".pub"))
    }
    let garbage = "\(directory)/garbage"
    XCTAssertTrue(
      FileManager.default.createFile(
        atPath: garbage, contents: Data("hello\n".utf8), attributes: [.posixPermissions: 0o600]))
    XCTAssertThrowsError(try KeyFile.load(garbage)) {
      XCTAssertEqual($0 as? IdentityError, .notAKey(path: garbage))
    }
    XCTAssertThrowsError(try KeyFile.load("\(directory)/missing")) {
      XCTAssertTrue("\($0)".contains("No such file or directory"), "\($0)")
    }
    // A damaged block.
    let cut = "\(directory)/cut"
    let good = PrivateKey.generate(.ed25519)
    let text = OpenSSHKey.encode(good, comment: "x")
    let lines = text.split(separator: "\n")
    let damaged = (lines.prefix(3) + lines.suffix(1)).joined(separator: "\n")
    XCTAssertTrue(
      FileManager.default.createFile(
        atPath: cut, contents: Data(damaged.utf8), attributes: [.posixPermissions: 0o600]))
    XCTAssertThrowsError(try KeyFile.load(cut)) {
      guard case .malformed = $0 as? IdentityError else { return XCTFail("\($0)") }
    }
  }

  func testAKeyOthersCanReadIsRefused() throws {
    let path = "\(directory)/identity"
    try KeyFile.write(PrivateKey.generate(.ed25519), to: path, comment: "", replace: false)
    for mode in [0o644, 0o640, 0o604, 0o660] {
      XCTAssertEqual(chmod(path, mode_t(mode)), 0)
      XCTAssertThrowsError(try KeyFile.load(path)) {
        XCTAssertEqual($0 as? IdentityError, .permissionsTooOpen(path: path, mode: UInt32(mode)))
        XCTAssertTrue("\($0)".contains("chmod 600 \(path)"), "\($0)")
      }
    }
    XCTAssertEqual(chmod(path, 0o400), 0)
    XCTAssertNoThrow(try KeyFile.load(path))
    // Someone else's key (only root can make one to try).
    if getuid() == 0 {
      XCTAssertEqual(chown(path, 65534, 65534), 0)
      XCTAssertThrowsError(try KeyFile.load(path)) {
        XCTAssertEqual($0 as? IdentityError, .notOwned(path: path))
      }
    }
  }

  func testDefaultPathAndSources() {
    XCTAssertEqual(
      KeyFile.defaultPath(environment: ["XDG_CONFIG_HOME": "/c", "HOME": "/h"]),
      "/c/mount9bbs/identity")
    XCTAssertEqual(
      KeyFile.defaultPath(environment: ["HOME": "/h"]), "/h/.config/mount9bbs/identity")
    XCTAssertEqual(
      KeyFile.defaultPath(environment: ["XDG_CONFIG_HOME": "relative", "HOME": "/h"]),
      "/h/.config/mount9bbs/identity", "a relative XDG_CONFIG_HOME is ignored, as the spec says")
    XCTAssertEqual(KeySource(parsing: "agent"), .agent(match: nil))
    XCTAssertEqual(KeySource(parsing: "agent:work"), .agent(match: "work"))
    XCTAssertEqual(
      KeySource(parsing: "~/.ssh/id_ed25519", environment: ["HOME": "/h"]),
      .file("/h/.ssh/id_ed25519"))
    XCTAssertEqual(KeySource(parsing: "/k"), .file("/k"))
  }

  // MARK: Identities and responses

  func testIdentityForm() {
    let key = PrivateKey.generate(.ed25519)
    XCTAssertEqual(key.identity.hex.count, 40)
    XCTAssertEqual(Identity(parsing: key.identity.hex.uppercased()), key.identity)
    XCTAssertEqual(key.identity.short, String(key.identity.hex.prefix(8)))
    XCTAssertNil(Identity(parsing: "alice"))
    XCTAssertNil(Identity(parsing: String(key.identity.hex.dropLast())))
    XCTAssertNil(Identity(parsing: String(key.identity.hex.dropLast()) + "g"))
    // The well-known SHA-256 of 32 zero bytes, cut to 20.
    XCTAssertEqual(
      Identity(publicKey: [UInt8](repeating: 0, count: 32)).hex,
      "66687aadf862bd776c8fc18b8e9f8e2008971485")
  }

  func testResponsesVerifyOnlyForTheirChallengeKeyAndIdentity() throws {
    let challenge = ChallengeResponse.Challenge(
      nonce: (0..<32).map { UInt8($0) }, boardKey: BoardKey(of: PrivateKey.generate(.ed25519)))
    let reversed = ChallengeResponse.Challenge(
      nonce: challenge.nonce.reversed(), boardKey: challenge.boardKey)
    let otherBoard = ChallengeResponse.Challenge(
      nonce: challenge.nonce, boardKey: BoardKey(of: PrivateKey.generate(.ed25519)))
    for algorithm in KeyAlgorithm.allCases {
      let key = PrivateKey.generate(algorithm)
      let other = PrivateKey.generate(algorithm)
      let response = try ChallengeResponse.respond(to: challenge, with: key)
      XCTAssertEqual(response.count, 64 + algorithm.publicKeySize)
      XCTAssertTrue(ChallengeResponse.sizes.contains(response.count))
      XCTAssertEqual(
        try ChallengeResponse.verify(
          response, challenge: challenge, claimedIdentity: key.identity.hex), key.identity)
      func rejection(
        _ response: [UInt8], _ challenge: ChallengeResponse.Challenge, _ claim: String
      )
        -> ChallengeResponse.Rejection?
      {
        do {
          _ = try ChallengeResponse.verify(response, challenge: challenge, claimedIdentity: claim)
          return nil
        } catch {
          return error
        }
      }
      XCTAssertEqual(rejection(response, reversed, key.identity.hex), .badSignature(algorithm))
      // The same challenge from a board with another key: the signature names this one's.
      XCTAssertEqual(rejection(response, otherBoard, key.identity.hex), .badSignature(algorithm))
      XCTAssertEqual(
        rejection(response, challenge, other.identity.hex),
        .identityMismatch(claimed: other.identity.hex, key: key.identity))
      var flipped = response
      flipped[10] ^= 0x40
      XCTAssertEqual(rejection(flipped, challenge, key.identity.hex), .badSignature(algorithm))
      XCTAssertEqual(
        rejection(Array(response.dropLast()), challenge, key.identity.hex),
        .wrongSize(response.count - 1))
    }
    // A P-256 "key" that is no point on the curve.
    var bogus = try ChallengeResponse.respond(to: challenge, with: PrivateKey.generate(.p256))
    bogus.replaceSubrange(64..., with: [4] + [UInt8](repeating: 7, count: 64))
    let claim = Identity(publicKey: Array(bogus[64...])).hex
    XCTAssertThrowsError(
      try ChallengeResponse.verify(bogus, challenge: challenge, claimedIdentity: claim)
    ) {
      XCTAssertEqual($0 as? ChallengeResponse.Rejection, .badKey(.p256))
    }
  }
}
