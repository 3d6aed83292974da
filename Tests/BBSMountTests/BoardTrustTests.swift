import BBSIdentity
import Foundation
import NinePClient
import NinePTransport
import SecureChannel
import TestSupport
import XCTest

/// What a board can make a user's key sign, through real `mount9bbs` runs (issue 21): a board
/// that sends anything but a 32-byte challenge gets no signature at all; a relaying board
/// cannot log in at the real board as the user; a board whose key changed, vanished or shows
/// up at another address is refused in one clear line; `auth-sign=raw` is there for deployed
/// boards and only when asked for.
final class BoardTrustTests: XCTestCase {
  private var directory = ""
  private var mountpoint: String { directory + "/mnt" }

  override func setUpWithError() throws {
    directory = try makeMountDirectory("mount9bbs-trust")
  }

  /// A user with a `mount9bbs keygen` key: their environment and key.
  private func user(_ name: String) throws -> (environment: [String: String], key: PrivateKey) {
    let home = directory + "/" + name
    try FileManager.default.createDirectory(
      atPath: home + "/state", withIntermediateDirectories: true)
    let environment = ["XDG_CONFIG_HOME": home + "/config", "XDG_STATE_HOME": home + "/state"]
    let made = try runBuilt("mount9bbs", ["keygen"], environment: environment)
    XCTAssertEqual(made.status, 0, made.output)
    return (environment, try KeyFile.load(home + "/config/mount9bbs/identity"))
  }

  private func pinFile(_ environment: [String: String]) -> String {
    BoardPins.defaultPath(environment: environment)
  }

  /// One foreground mount attempt that must fail: its one line of output.
  private func refusal(
    _ address: String, _ environment: [String: String], options: [String] = ["auth=required"],
    file: StaticString = #filePath, line: UInt = #line
  ) throws -> String {
    let result = try runBuilt(
      "mount9bbs", ["-f", "-o", options.joined(separator: ","), address, mountpoint],
      environment: environment)
    XCTAssertNotEqual(result.status, 0, result.output, file: file, line: line)
    XCTAssertFalse(isMounted(mountpoint), file: file, line: line)
    // Log lines (timestamped: the raw form's warning) aside, one line says why.
    let lines = result.output.split(separator: "\n").filter { !($0.first?.isNumber ?? false) }
    XCTAssertEqual(lines.count, 1, "not one line: \(result.output)", file: file, line: line)
    return result.output
  }

  /// Whether `ssh-keygen -Y verify -n git` takes `response`'s signature as `key`'s git
  /// signature over `message`.
  private func verifiesAsGit(_ response: [UInt8], key: PrivateKey, message: [UInt8]) throws -> Bool
  {
    guard
      let armored = SSHSignature.armored(
        signature: Array(response.prefix(64)), algorithm: key.algorithm,
        publicKey: key.publicKey, namespace: "git")
    else { return false }
    try armored.write(toFile: directory + "/git.sig", atomically: true, encoding: .utf8)
    try Data(message).write(to: URL(fileURLWithPath: directory + "/commit"))
    try ("victim " + key.sshPublicKeyLine(comment: "") + "\n").write(
      toFile: directory + "/allowed", atomically: true, encoding: .utf8)
    return try shell(
      "ssh-keygen -Y verify -f \(directory)/allowed -I victim -n git -s \(directory)/git.sig "
        + "< \(directory)/commit"
    ).status == 0
  }

  // MARK: What a hostile board sends

  func testAChallengeOfAnyOtherSizeGetsNoSignature() throws {
    let victim = try user("victim")
    for size in [1, 31, 33, 1024] {
      let board = try HostileBoard { _ in (0..<size).map { _ in UInt8.random(in: 0...255) } }
      defer { board.stop() }
      let said = try refusal(board.address, victim.environment)
      XCTAssertTrue(said.contains("a \(size)-byte challenge"), said)
      XCTAssertTrue(said.contains("nothing was signed"), said)
      XCTAssertEqual(board.responses, [], "\(size) bytes: the key signed something")
    }
  }

  func testAGitCommitOrSSHLoginAsChallengeGetsNoSignature() throws {
    let victim = try user("victim")
    let commit = Array(
      "tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nauthor v <v@x> 1 +0000\n\nevil\n".utf8)
    let gitBlob = SSHSignature.signedData(namespace: "git", message: commit)
    // What an SSH server has a client sign for a publickey login (RFC 4252 §7).
    var login: [UInt8] = []
    func string(_ bytes: [UInt8]) {
      let count = UInt32(bytes.count)
      login += [
        UInt8(count >> 24), UInt8(count >> 16 & 0xFF), UInt8(count >> 8 & 0xFF),
        UInt8(count & 0xFF),
      ]
      login += bytes
    }
    string((0..<32).map { _ in UInt8.random(in: 0...255) })
    login.append(50)
    string(Array("victim".utf8))
    string(Array("ssh-connection".utf8))
    string(Array("publickey".utf8))
    login.append(1)
    string(Array("ssh-ed25519".utf8))
    string(victim.key.sshPublicKeyBlob)

    for blob in [gitBlob, login] {
      let board = try HostileBoard { _ in blob }
      defer { board.stop() }
      let said = try refusal(board.address, victim.environment)
      XCTAssertTrue(said.contains("nothing was signed"), said)
      XCTAssertEqual(board.responses, [])
      for response in board.responses where blob == gitBlob {
        XCTAssertFalse(
          try verifiesAsGit(response, key: victim.key, message: commit),
          "the board got a git signature over its commit")
      }
    }
  }

  // MARK: Relays

  /// A board that relays the real board's challenge to its victim and the victim's response
  /// to the real board, logging in there as the victim if it can. With `ownKey` it presents
  /// its own key (and proves it); without, the real board's key and proof, unchanged. With
  /// `secure`, it logs in at the real board over the secure channel, as a real client would.
  private final class Relay: @unchecked Sendable {
    var board: HostileBoard!
    let realChallenge = Handover<[UInt8]>()
    let victimResponse = Handover<[UInt8]>()
    let realProof = Handover<[UInt8]>()
    /// "attached" once logged in at the real board as the victim, else why not.
    let outcome = Handover<String>()

    init(real: String, ownKey: PrivateKey?, secure: Bool = false) throws {
      board = try HostileBoard(
        challenge: { [self] identity in
          startLogin(at: real, as: identity, secure: secure)
          guard let bytes = realChallenge.take(),
            let challenge = try? ChallengeResponse.Challenge(parsing: bytes)
          else { return [] }
          guard let ownKey, let key = BoardKey(of: ownKey) else { return bytes }
          return ChallengeResponse.Challenge(nonce: challenge.nonce, boardKey: key).encoded
        },
        received: { [self] in victimResponse.put($0) },
        proof: { [self] response in
          guard let ownKey else { return realProof.take() ?? [] }
          let nonce = Array((realChallenge.take() ?? []).prefix(32))
          return (try? ChallengeResponse.proveBoard(nonce: nonce, response: response, with: ownKey))
            ?? []
        })
    }

    private func startLogin(at real: String, as identity: String, secure: Bool) {
      Thread { [self] in
        var configuration = SessionConfiguration(profile: .multiplex, uname: identity)
        configuration.authentication = Authentication(identity: identity, policy: .required) {
          [self] challenge in
          realChallenge.put(challenge.bytes)
          guard let response = victimResponse.take() else { throw HarnessError("no response") }
          return .init(response: response) { [self] proof in realProof.put(proof) }
        }
        do {
          var transport = try dial(TransportAddress(parsing: real))
          if secure {
            guard
              case .secure(let channel) = try SecureChannel.ask(
                over: transport, timeout: .seconds(10), accept: { _, _ in nil })
            else { throw HarnessError("the real board offers no secure channel") }
            transport = channel
          }
          let session = try Session.connect(
            transport: transport, configuration: configuration, handshakeTimeout: .seconds(10))
          outcome.put("attached")
          session.close()
        } catch {
          outcome.put("\(error)")
          // Nothing more will come from the real board: let the victim's side go on.
          realChallenge.put([])
          realProof.put([])
        }
      }.start()
    }
  }

  /// A victim who has never mounted the real board mounts a relay of it: whether the relay
  /// then logged in at the real board as the victim ("attached"), else why not. The relay
  /// presents `ownKey` (nil: the real board's) and logs in over the secure channel when
  /// `secure`; the victim's mount fails either way (the relay's own board refuses the attach).
  private func relayedLogin(ownKey: PrivateKey?, secure: Bool) throws -> (
    outcome: String, responses: Int, realLog: String, victim: String
  ) {
    let real = try startServerProcess(extra: ["--auth", "required"])
    let victim = try user("victim")
    let relay = try Relay(real: real.address, ownKey: ownKey, secure: secure)
    defer { relay.board.stop() }
    _ = try runBuilt(
      "mount9bbs", ["-f", "-o", "auth=required", relay.board.address, mountpoint],
      environment: victim.environment)
    let outcome = try XCTUnwrap(relay.outcome.take(), "the relay's login never finished")
    return (outcome, relay.board.responses.count, real.log, victim.key.identity.hex)
  }

  func testARelayWithItsOwnKeyCannotLogInAtTheRealBoard() throws {
    let login = try relayedLogin(ownKey: PrivateKey.generate(.ed25519), secure: true)
    XCTAssertEqual(login.responses, 1, "the victim answered the relayed challenge")
    XCTAssertNotEqual(login.outcome, "attached", "the relay logged in as the victim")
    XCTAssertTrue(login.outcome.contains("authentication failed"), login.outcome)
    XCTAssertFalse(login.realLog.contains("authenticated \(login.victim)"), login.realLog)
  }

  /// The first-contact relay of issue 35: the victim has never mounted the real board, the
  /// relay passes the real board's challenge (and key) on unchanged and logs in there over the
  /// secure channel, as any client can. The victim's signature names the victim's own channel
  /// (here a plain one: the relay offers none), so the real board refuses it.
  func testAFirstContactRelayCannotLogInAtTheRealBoardWithDefaultOptions() throws {
    let login = try relayedLogin(ownKey: nil, secure: true)
    XCTAssertEqual(login.responses, 1, "the victim answered the relayed challenge")
    XCTAssertNotEqual(login.outcome, "attached", "the relay logged in as the victim")
    XCTAssertTrue(login.outcome.contains("authentication failed"), login.outcome)
    XCTAssertFalse(login.realLog.contains("authenticated \(login.victim)"), login.realLog)
    XCTAssertTrue(login.realLog.contains("secure channel up"), login.realLog)
  }

  /// The same relay logging in plain gets no challenge at all: a board that offers the secure
  /// channel takes no signature on a plain TCP connection.
  func testABoardOfferingTheChannelTakesNoSignatureOnPlainTCP() throws {
    let login = try relayedLogin(ownKey: nil, secure: false)
    XCTAssertTrue(login.outcome.contains("only over the secure channel"), login.outcome)
    XCTAssertEqual(login.responses, 0, "the victim signed with nothing to sign")
  }

  func testARelayPresentingTheRealBoardsKeyIsRefusedByThePin() throws {
    let real = try startServerProcess(extra: ["--auth", "required"])
    let victim = try user("victim")
    // The victim knows the real board: a first mount pins its key.
    let first = try MountProcess(
      address: real.address, mountpoint: mountpoint, environment: victim.environment)
    first.stop()
    XCTAssertTrue(waitUntil(timeout: 5) { !isMounted(self.mountpoint) })
    let logins = real.log.components(separatedBy: "authenticated \(victim.key.identity.hex)").count

    let relay = try Relay(real: real.address, ownKey: nil, secure: true)
    defer { relay.board.stop() }
    let said = try refusal(relay.board.address, victim.environment)
    XCTAssertTrue(said.contains("which is pinned for \(real.address)"), said)
    XCTAssertTrue(said.contains("relaying"), said)
    XCTAssertEqual(relay.board.responses, [], "the victim signed for the relay")
    XCTAssertEqual(
      real.log.components(separatedBy: "authenticated \(victim.key.identity.hex)").count, logins,
      real.log)
  }

  func testABoardThatCannotProveTheKeyItPresentsIsRefusedAndNotPinned() throws {
    let victim = try user("victim")
    let stolen = try XCTUnwrap(BoardKey(of: PrivateKey.generate(.ed25519)))
    let board = try HostileBoard { _ in
      ChallengeResponse.Challenge(
        nonce: (0..<32).map { _ in UInt8.random(in: 0...255) }, boardKey: stolen
      ).encoded
    }
    defer { board.stop() }
    let said = try refusal(board.address, victim.environment)
    XCTAssertTrue(said.contains("did not prove it"), said)
    XCTAssertTrue(BoardPins(path: pinFile(victim.environment)).entries().isEmpty)
  }

  // MARK: Pins

  func testAChangedOrVanishedBoardKeyIsRefusedUntilThePinIsReset() throws {
    let victim = try user("victim")
    let listen = "unix!" + directory + "/board.sock"
    func board(_ key: String) throws -> ServerProcess {
      let server = try ServerProcess(
        transport: "unix", extra: ["--auth", "required", "--board-key", key], listen: listen)
      addTeardownBlock { server.stop() }
      return server
    }
    var server = try board(directory + "/key-a")
    let mount = try MountProcess(
      address: server.address, mountpoint: mountpoint, environment: victim.environment)
    XCTAssertTrue(mount.child.text.contains("new board key for \(listen)"), mount.child.text)
    mount.stop()
    XCTAssertTrue(waitUntil(timeout: 5) { !isMounted(self.mountpoint) })
    let pinned = try XCTUnwrap(BoardPins(path: pinFile(victim.environment)).entries().first?.key)

    // Same address, another key.
    server.stop()
    server = try board(directory + "/key-b")
    var said = try refusal(listen, victim.environment)
    XCTAssertTrue(said.contains("but the key pinned for it is \(pinned.fingerprint)"), said)
    XCTAssertTrue(
      said.contains("delete the line for \(listen) from \(pinFile(victim.environment))"), said)
    // Same address, no key at all (as a deployed board).
    server.stop()
    server = try board("none")
    said = try refusal(listen, victim.environment)
    XCTAssertTrue(said.contains("presents no board key"), said)
    // The user resets the pin: the next mount pins the new key.
    server.stop()
    server = try board(directory + "/key-b")
    try FileManager.default.removeItem(atPath: pinFile(victim.environment))
    let again = try MountProcess(
      address: server.address, mountpoint: mountpoint, environment: victim.environment)
    XCTAssertTrue(again.child.text.contains("new board key"), again.child.text)
    again.stop()
    XCTAssertNotEqual(BoardPins(path: pinFile(victim.environment)).entries().first?.key, pinned)
  }

  // MARK: Deployed boards

  func testTheRawFormIsUsedOnlyWhenAskedForAndWarned() throws {
    let device = try startServerProcess(extra: ["--auth", "required", "--auth-sign", "raw"])
    let victim = try user("victim")
    let said = try refusal(device.address, victim.environment)
    XCTAssertTrue(said.contains("authentication failed"), said)
    let mount = try MountProcess(
      address: device.address, mountpoint: mountpoint, options: ["auth-sign=raw"],
      environment: victim.environment)
    XCTAssertTrue(mount.child.text.contains("auth-sign=raw: the key signs"), mount.child.text)
    XCTAssertTrue(device.log.contains("authenticated \(victim.key.identity.hex)"), device.log)
    mount.stop()
    XCTAssertTrue(waitUntil(timeout: 5) { !isMounted(self.mountpoint) })
    // Still only for a 32-byte challenge.
    let board = try HostileBoard { _ in Array(repeating: 1, count: 64) }
    defer { board.stop() }
    let hostile = try refusal(
      board.address, victim.environment, options: ["auth=required", "auth-sign=raw"])
    XCTAssertTrue(hostile.contains("nothing was signed"), hostile)
    XCTAssertEqual(board.responses, [])
  }
}
