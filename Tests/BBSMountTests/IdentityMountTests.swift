import Foundation
import TestSupport
import XCTest

/// "Who you are", as a user meets it: `mount9bbs keygen`, then mounts of a `9bbsd --auth
/// required` that post under the key's identity (Ed25519, P-256, an ssh-agent key); two users'
/// cursors stay apart; a reconnect proves the identity again; every refusal is one clear line
/// and leaves no mount.
final class IdentityMountTests: XCTestCase {
  private var directory = ""

  override func setUpWithError() throws {
    directory = try makeTemporaryDirectory("mount9bbs-identity")
    let directory = directory
    addTeardownBlock {
      for name in ["mnt", "mnt2", "mnt3"] {
        let mountpoint = directory + "/" + name
        forceUnmount(mountpoint)
        for pid in mountDaemons(serving: mountpoint) { kill(pid, SIGKILL) }
      }
      guard !["mnt", "mnt2", "mnt3"].contains(where: { isMounted(directory + "/" + $0) }) else {
        return
      }
      try? FileManager.default.removeItem(atPath: directory)
    }
  }

  // MARK: Helpers

  /// The environment of one user: their own config (keys) and state directories.
  private func user(_ name: String) throws -> [String: String] {
    let home = directory + "/" + name
    try FileManager.default.createDirectory(
      atPath: home + "/state", withIntermediateDirectories: true)
    return ["XDG_CONFIG_HOME": home + "/config", "XDG_STATE_HOME": home + "/state"]
  }

  /// Runs `mount9bbs ARGUMENTS` to completion (bounded): status and stdout+stderr.
  private func mount9bbs(_ arguments: [String], _ environment: [String: String]) throws -> (
    status: Int32, output: String
  ) {
    try runBuilt("mount9bbs", arguments, environment: environment)
  }

  /// `mount9bbs keygen` for `user`; returns the identity it printed.
  private func keygen(_ environment: [String: String], _ extra: [String] = []) throws -> String {
    let result = try mount9bbs(["keygen"] + extra, environment)
    XCTAssertEqual(result.status, 0, result.output)
    let line = result.output.split(separator: "\n").first {
      $0.hasPrefix("Your identity on boards: ")
    }
    let identity = try XCTUnwrap(line?.split(separator: " ").last.map(String.init), result.output)
    XCTAssertEqual(identity.count, 40)
    return identity
  }

  private func mountpoint(_ name: String = "mnt") throws -> String {
    let path = directory + "/" + name
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
  }

  private func startServer(
    auth: String = "required", listen: String? = nil, extra: [String] = []
  ) throws -> ServerProcess {
    let server = try ServerProcess(
      transport: "unix", extra: ["--auth", auth] + extra, listen: listen)
    addTeardownBlock { server.stop() }
    return server
  }

  /// A foreground mount of `server` for a user, stopped with the test.
  private func mount(
    _ server: ServerProcess, _ environment: [String: String], at name: String,
    options: [String] = []
  ) throws -> MountProcess {
    let mount = try MountProcess(
      address: server.address, mountpoint: try mountpoint(name), options: options,
      environment: environment)
    addTeardownBlock { mount.stop() }
    return mount
  }

  /// Mounting fails, detached and with -f, with one line on the terminal that contains every
  /// phrase, a non-zero status, and no mount or daemon left.
  private func expectRefusal(
    _ server: ServerProcess, _ environment: [String: String], options: [String] = [],
    saying phrases: [String], file: StaticString = #filePath, line: UInt = #line
  ) throws {
    let mountpoint = try mountpoint()
    try assertMountFails(
      (options.isEmpty ? [] : ["-o", options.joined(separator: ",")])
        + [server.address, mountpoint], at: mountpoint, environment: environment,
      saying: phrases, oneLine: true, file: file, line: line)
  }

  // MARK: Tests

  func testAKeyPostsUnderItsIdentityOnABoardThatRequiresIt() throws {
    let server = try startServer()
    let alice = try user("alice")
    let identity = try keygen(alice)
    let key = try XCTUnwrap(alice["XDG_CONFIG_HOME"]) + "/mount9bbs/identity"
    var info = stat()
    XCTAssertEqual(stat(key, &info), 0)
    XCTAssertEqual(info.st_mode & 0o777, 0o600)

    // The way a user mounts: detached, with the key keygen made found by itself.
    let mountpoint = try mountpoint()
    let mounted = try mount9bbs([server.address, mountpoint], alice)
    XCTAssertEqual(mounted.status, 0, mounted.output)
    // The first mount pins the board's key, and says so (as ssh does a new host key).
    let said = mountOutput(mounted.output).split(separator: "\n")
    XCTAssertEqual(said.count, 1, mounted.output)
    XCTAssertTrue(
      said.first?.contains("new board key for \(server.address): SHA256:") ?? false,
      mounted.output)
    let tail = try background(self, "/usr/bin/tail", ["-f", mountpoint + "/chat/lobby"])
    try sh("echo 'hello, signed' > \(mountpoint)/chat/post")
    XCTAssertTrue(
      waitUntil(timeout: 10) {
        chatLines(tail.text) == [
          ChatLine(author: String(identity.prefix(8)), text: "hello, signed")
        ]
      }, tail.text)

    let status = try mount9bbs(["status", mountpoint], alice)
    XCTAssertEqual(status.status, 0, status.output)
    XCTAssertTrue(status.output.contains("identity \(identity), auth auto"), status.output)
    let sessions = status.output.split(separator: "\n").filter { $0.hasPrefix("session ") }
    XCTAssertFalse(sessions.isEmpty, status.output)
    for session in sessions { XCTAssertTrue(session.hasSuffix(", authenticated"), status.output) }
    XCTAssertTrue(server.log.contains("authenticated \(identity)"), server.log)
    tail.stop()
    XCTAssertEqual(try mount9bbs(["-u", mountpoint], alice).status, 0)

    // Without a key the same board turns the user away, in one line.
    try expectRefusal(
      server, try user("nobody"), saying: ["admits no guests", "mount9bbs keygen"])
  }

  /// A key with a passphrase, mounted from a terminal: the passphrase is asked for there
  /// (not echoed), the detached mount posts under the key's identity; a wrong passphrase is
  /// one clear line and no mount. (Without a terminal: see testEveryRefusalIsOneClearLine.)
  func testAKeyWithAPassphraseIsUnlockedOnTheTerminal() throws {
    let server = try startServer()
    let carol = try user("carol")
    let key = directory + "/id_locked"
    XCTAssertEqual(try shell("ssh-keygen -q -t ed25519 -N 'open sesame' -f \(key)").status, 0)
    let mountpoint = try mountpoint()
    let arguments = ["-o", "identity=" + key, server.address, mountpoint]

    let wrong = try runOnTerminal(arguments, answering: "guess", environment: carol)
    XCTAssertEqual(wrong.status, 1, wrong.output)
    XCTAssertTrue(wrong.output.contains("Passphrase for \(key): "), wrong.output)
    XCTAssertTrue(
      wrong.output.contains("mount9bbs: wrong passphrase for the key \(key)"), wrong.output)
    XCTAssertFalse(wrong.output.contains("guess"), "the passphrase was echoed")
    XCTAssertFalse(isMounted(mountpoint))

    let right = try runOnTerminal(arguments, answering: "open sesame", environment: carol)
    XCTAssertEqual(right.status, 0, right.output)
    XCTAssertFalse(right.output.contains("open sesame"), "the passphrase was echoed")
    XCTAssertTrue(isMounted(mountpoint))
    let status = try mount9bbs(["status", mountpoint], carol)
    let identity = try XCTUnwrap(
      status.output.firstRange(of: /identity ([0-9a-f]{40})/).map {
        String(status.output[$0].dropFirst("identity ".count))
      }, status.output)
    let tail = try background(self, "/usr/bin/tail", ["-f", mountpoint + "/chat/lobby"])
    try sh("echo 'unlocked' > \(mountpoint)/chat/post")
    XCTAssertTrue(
      waitUntil(timeout: 10) {
        chatLines(tail.text) == [ChatLine(author: String(identity.prefix(8)), text: "unlocked")]
      }, tail.text)
    tail.stop()
    XCTAssertEqual(try mount9bbs(["-u", mountpoint], carol).status, 0)
    // Nothing of the unlocked key stays on disk.
    let runtime = (try? FileManager.default.contentsOfDirectory(atPath: "/run/mount9bbs")) ?? []
    XCTAssertFalse(runtime.contains { $0.hasPrefix("unlock-") }, "\(runtime)")
  }

  /// Runs `mount9bbs ARGUMENTS` with a pseudo-terminal as its controlling terminal and stdio
  /// (as from a shell), typing `answer` at the passphrase prompt; status and all it showed.
  private func runOnTerminal(
    _ arguments: [String], answering answer: String, environment: [String: String]
  ) throws -> (status: Int32, output: String) {
    let script = """
      import os, pty, select, sys, time
      answer, argv = sys.argv[1], sys.argv[2:]
      pid, fd = pty.fork()
      if pid == 0:
          os.execv(argv[0], argv)
      out, sent, deadline = b"", False, time.time() + 30
      while time.time() < deadline:
          ready, _, _ = select.select([fd], [], [], 0.2)
          if not ready:
              continue
          try:
              data = os.read(fd, 4096)
          except OSError:
              break
          if not data:
              break
          out += data
          if not sent and b"Passphrase for" in out:
              os.write(fd, (answer + "\\n").encode())
              sent = True
      _, status = os.waitpid(pid, 0)
      sys.stdout.write(out.decode(errors="replace"))
      sys.exit(os.waitstatus_to_exitcode(status))
      """
    let path = directory + "/terminal.py"
    try script.write(toFile: path, atomically: true, encoding: .utf8)
    let child = ChildProcess(
      "/usr/bin/python3", [path, answer, BuiltProducts.path(of: "mount9bbs")] + arguments,
      environment: environment)
    try child.start()
    guard child.wait(timeout: 40) else {
      child.stop()
      throw HarnessError("mount9bbs on a terminal ran over 40 s: \(child.text)")
    }
    return (child.process.terminationStatus, child.text)
  }

  func testAP256KeyAndAnSSHAgentKey() throws {
    let server = try startServer()
    // Carol: a P-256 key made by keygen at a path of her choosing.
    let carol = try user("carol")
    let p256 = directory + "/carol.key"
    let carolIdentity = try keygen(carol, ["--type", "p256", "--file", p256])
    // Dave: his existing SSH key, held by his ssh-agent.
    let agent = try SSHAgentProcess()
    addTeardownBlock { agent.stop() }
    XCTAssertEqual(
      try shell("ssh-keygen -q -t ed25519 -N '' -C dave -f \(directory)/dave.key").status, 0)
    try agent.add(directory + "/dave.key")
    let dave = try user("dave").merging(agent.environment) { $1 }
    let shown = try mount9bbs(["keygen", "--show", "--file", "agent"], dave)
    XCTAssertEqual(shown.status, 0, shown.output)
    let daveIdentity = shown.output.trimmingCharacters(in: .whitespacesAndNewlines)

    // sshfs's spelling works too.
    let carolMount = try mount(server, carol, at: "mnt", options: ["IdentityFile=" + p256])
    let daveMount = try mount(server, dave, at: "mnt2", options: ["identity=agent"])
    let tail = try background(self, "/usr/bin/tail", ["-f", carolMount.mountpoint + "/chat/lobby"])
    try sh("echo 'from carol' > \(carolMount.mountpoint)/chat/post")
    XCTAssertTrue(waitUntil(timeout: 10) { chatTexts(tail.text) == ["from carol"] }, tail.text)
    try sh("echo 'from dave' > \(daveMount.mountpoint)/chat/post")
    XCTAssertTrue(
      waitUntil(timeout: 10) {
        chatLines(tail.text) == [
          ChatLine(author: String(carolIdentity.prefix(8)), text: "from carol"),
          ChatLine(author: String(daveIdentity.prefix(8)), text: "from dave"),
        ]
      }, tail.text)
  }

  func testTwoUsersReadTheRoomIndependently() throws {
    let server = try startServer()
    let erin = try user("erin")
    let frank = try user("frank")
    _ = try keygen(erin)
    _ = try keygen(frank)
    let erinMount = try mount(server, erin, at: "mnt")
    let frankMount = try mount(server, frank, at: "mnt2")
    let erinTail = try background(
      self, "/usr/bin/tail", ["-f", erinMount.mountpoint + "/chat/lobby"])
    let frankTail = try background(
      self, "/usr/bin/tail", ["-f", frankMount.mountpoint + "/chat/lobby"])
    let texts = (1...6).map { "line \($0)" }
    for (index, text) in texts.enumerated() {
      let poster = index % 2 == 0 ? erinMount : frankMount
      try sh("echo '\(text)' > \(poster.mountpoint)/chat/post")
    }
    // Each has their own cursor at the board, so neither takes lines from the other.
    XCTAssertTrue(waitUntil(timeout: 10) { chatTexts(erinTail.text) == texts }, erinTail.text)
    XCTAssertTrue(waitUntil(timeout: 10) { chatTexts(frankTail.text) == texts }, frankTail.text)
    let users = try sh("cat \(erinMount.mountpoint)/chat/users")
    XCTAssertEqual(users.split(separator: "\n").count, 2, users)
  }

  func testAReconnectProvesTheIdentityAgain() throws {
    let socket = "unix!" + directory + "/board.sock"
    // The board keeps its key across the restart, as a real board would (a new key would be
    // refused: see BoardTrustTests).
    let boardKey = ["--board-key", directory + "/board_key"]
    var server = try startServer(listen: socket, extra: boardKey)
    let grace = try user("grace")
    let identity = try keygen(grace)
    let mount = try mount(server, grace, at: "mnt")
    let tail = try background(self, "/usr/bin/tail", ["-f", mount.mountpoint + "/chat/lobby"])
    try sh("echo 'before' > \(mount.mountpoint)/chat/post")
    XCTAssertTrue(waitUntil(timeout: 10) { chatTexts(tail.text) == ["before"] }, tail.text)

    // The board restarts (it keeps nothing: no --data); the mount re-dials and must prove who
    // it is to a board that has never seen it.
    server.stop()
    server = try startServer(listen: socket, extra: boardKey)
    try sh("echo 'after' > \(mount.mountpoint)/chat/post")
    XCTAssertTrue(
      waitUntil(timeout: 15) {
        chatLines(tail.text).last == ChatLine(author: String(identity.prefix(8)), text: "after")
      }, tail.text + "\n--- mount:\n" + mount.child.text)
    XCTAssertTrue(server.log.contains("authenticated \(identity)"), server.log)
    XCTAssertFalse(server.log.contains("guest"), server.log)
  }

  func testEveryRefusalIsOneClearLine() throws {
    let server = try startServer()
    let henry = try user("henry")
    // A key others can read, given or found where keygen put it: refused, not a guest mount.
    _ = try keygen(henry)
    let key = try XCTUnwrap(henry["XDG_CONFIG_HOME"]) + "/mount9bbs/identity"
    XCTAssertEqual(chmod(key, 0o644), 0)
    try expectRefusal(
      server, henry,
      saying: ["the key \(key) is readable by others (permissions 0644)", "chmod 600"])
    try expectRefusal(
      server, henry, options: ["identity=" + key], saying: ["readable by others"])
    // auth=required with no key at all.
    try expectRefusal(
      server, try user("ivy"), options: ["auth=required"],
      saying: ["auth=required needs a key", "mount9bbs keygen"])
    // Keys a board cannot take.
    XCTAssertEqual(try shell("ssh-keygen -q -t rsa -b 2048 -N '' -f \(directory)/rsa").status, 0)
    try expectRefusal(
      server, henry, options: ["identity=\(directory)/rsa"], saying: ["is a ssh-rsa key"])
    XCTAssertEqual(try shell("ssh-keygen -q -t ed25519 -N pw -f \(directory)/locked").status, 0)
    try expectRefusal(
      server, henry, options: ["identity=\(directory)/locked"],
      saying: ["protected by a passphrase", "identity=agent"])
    // No agent to ask.
    var noAgent = henry
    noAgent["SSH_AUTH_SOCK"] = ""
    try expectRefusal(
      server, noAgent, options: ["identity=agent"], saying: ["SSH_AUTH_SOCK is not set"])
    // auth=required, but the board does not authenticate.
    XCTAssertEqual(chmod(key, 0o600), 0)
    let plain = try startServer(auth: "off")
    try expectRefusal(
      plain, henry, options: ["auth=required"], saying: ["does not authenticate"])
    // auth=auto with a key on that board: mounted with the uname, as before.
    let mount = try self.mount(plain, henry, at: "mnt3", options: ["uname=henry"])
    let tail = try background(self, "/usr/bin/tail", ["-f", mount.mountpoint + "/chat/lobby"])
    try sh("echo 'plain board' > \(mount.mountpoint)/chat/post")
    XCTAssertTrue(
      waitUntil(timeout: 10) {
        chatLines(tail.text) == [ChatLine(author: "henry", text: "plain board")]
      },
      tail.text)
  }
}
