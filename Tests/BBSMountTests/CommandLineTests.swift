import Foundation
import NinePProtocol
import NinePTransport
import TestSupport
import XCTest

/// `mount9bbs` as a command: every way a mount can fail says why, exits non-zero and leaves
/// no mount and no daemon behind, whether in the foreground (-f) or detached; a detached
/// mount keeps serving after the command returns; `-u` removes live and dead mounts.
final class CommandLineTests: XCTestCase {
  // MARK: - Failures

  func testRefusedAddressFails() throws {
    let port = try ServerProcess.freePort()
    try expectFailure(
      address: "tcp!127.0.0.1!\(port)",
      saying: ["cannot reach tcp!127.0.0.1!\(port)", "Connection refused"])
  }

  func testBadDialStringsFail() throws {
    try expectFailure(address: "bogus!x", saying: ["dial string 'bogus!x'", "unknown network"])
    try expectFailure(
      address: "tcp!127.0.0.1!notaport", saying: ["port 'notaport' must be a number"])
    try expectFailure(address: "l2cap!nothex!0x80", saying: ["'nothex' is not a Bluetooth address"])
  }

  func testMissingMountpointFails() throws {
    let server = try startServer()
    let directory = try temporaryDirectory()
    try expectFailure(
      address: server.address, mountpoint: directory + "/nowhere",
      saying: ["mount point \(directory)/nowhere does not exist"])
  }

  func testNonEmptyMountpointFails() throws {
    let server = try startServer()
    let directory = try temporaryDirectory()
    XCTAssertTrue(
      FileManager.default.createFile(atPath: directory + "/mnt/occupied", contents: Data()))
    try expectFailure(
      address: server.address, saying: ["mount point \(directory)/mnt is not empty"],
      in: directory)
  }

  func testNoBluetoothFails() throws {
    try expectFailure(
      address: "l2cap!C0:FF:EE:00:00:01!0x0080",
      saying: ["cannot reach l2cap!C0:FF:EE:00:00:01!0x0080", "Bluetooth"])
  }

  func testServerOfAnotherDialectFails() throws {
    let directory = try temporaryDirectory()
    let peer = try OtherDialectServer(path: directory + "/other.sock")
    addTeardownBlock { peer.stop() }
    try expectFailure(
      address: "unix!\(directory)/other.sock",
      saying: ["does not speak 9P2000", "answered Tversion with \"unknown\""], in: directory)
    XCTAssertGreaterThanOrEqual(peer.versionsAnswered, 2, "the fake server was never asked")
  }

  func testMissingAddressFails() throws {
    let directory = try temporaryDirectory()
    for foreground in [false, true] {
      let result = try mount9bbs((foreground ? ["-f"] : []) + [directory + "/mnt"])
      XCTAssertNotEqual(result.status, 0)
      XCTAssertTrue(result.output.contains("Missing ADDRESS or MOUNTPOINT"), result.output)
      XCTAssertFalse(isMounted(directory + "/mnt"))
    }
    let nothing = try mount9bbs([])
    XCTAssertNotEqual(nothing.status, 0)
    XCTAssertTrue(nothing.output.contains("Missing MOUNTPOINT"), nothing.output)
  }

  func testBadOptionValuesFail() throws {
    let server = try startServer()
    let directory = try temporaryDirectory()
    try expectFailure(
      address: server.address, options: ["msize=abc"],
      saying: ["option msize=abc: expected a number"], in: directory)
    try expectFailure(
      address: server.address, options: ["profile=foo"],
      saying: ["option profile=foo: expected device or multiplex"], in: directory)
    try expectFailure(
      address: server.address, options: ["sessions=0"],
      saying: ["option sessions=0: expected a number from 1 to 16"], in: directory)
  }

  /// An option with no name (`-o =`) is an unknown option, said as such (the command once
  /// crashed on it).
  func testOptionWithoutNameFails() throws {
    try expectFailure(address: "tcp!127.0.0.1!1", options: ["="], saying: ["unknown option ="])
  }

  // MARK: - Detached mounts and -u

  func testDetachedMountServesUntilUnmounted() throws {
    let server = try startServer()
    let directory = try temporaryDirectory()
    let mountpoint = directory + "/mnt"
    let mounted = try mount9bbs([server.address, mountpoint])
    XCTAssertEqual(mounted.status, 0, mounted.output)
    XCTAssertEqual(mountOutput(mounted.output), "", "a successful mount prints nothing")
    XCTAssertTrue(isMounted(mountpoint), "the command returned before the mount was ready")
    let daemons = mountDaemons(serving: mountpoint)
    XCTAssertEqual(daemons.count, 1, "expected one detached daemon")

    // The daemon serves after its parent command is gone.
    XCTAssertEqual(
      Set(try sh("ls \(mountpoint)/chat").split(separator: "\n")),
      ["lobby", "tech", "post", "users", "log", "outbox", "unread", "mentions", "events"])
    try sh("echo 'detached and well' > \(mountpoint)/chat/post")
    let tail = try background(self, "/usr/bin/tail", ["-f", mountpoint + "/chat/lobby"])
    XCTAssertTrue(
      waitUntil(timeout: 10) { chatTexts(tail.text) == ["detached and well"] }, tail.text)
    try sh("echo 'still serving' > \(mountpoint)/chat/post")
    XCTAssertTrue(
      waitUntil(timeout: 10) { chatTexts(tail.text) == ["detached and well", "still serving"] },
      tail.text)
    tail.stop()

    let unmounted = try mount9bbs(["-u", mountpoint])
    XCTAssertEqual(unmounted.status, 0, unmounted.output)
    XCTAssertFalse(isMounted(mountpoint))
    XCTAssertTrue(
      waitUntil(timeout: 5) { mountDaemons(serving: mountpoint).isEmpty },
      "the daemon outlived its mount")
    XCTAssertEqual(server.violations, [])
  }

  func testUnmountRemovesMountOfKilledDaemon() throws {
    let server = try startServer()
    let directory = try temporaryDirectory()
    let mountpoint = directory + "/mnt"
    let mounted = try mount9bbs([server.address, mountpoint])
    XCTAssertEqual(mounted.status, 0, mounted.output)
    let daemon = try XCTUnwrap(mountDaemons(serving: mountpoint).first, "no daemon")
    XCTAssertEqual(kill(daemon, SIGKILL), 0)
    // Gone for good (reaped), not only without a command line: a dying process loses its
    // memory before its descriptors, and a request sent in between ends ECONNABORTED.
    XCTAssertTrue(waitUntil(timeout: 5) { kill(daemon, 0) != 0 && errno == ESRCH })
    XCTAssertTrue(isMounted(mountpoint), "the kernel should keep a dead FUSE mount")
    let dead = try shell("ls \(mountpoint)")
    XCTAssertNotEqual(dead.status, 0)
    XCTAssertTrue(dead.output.contains("Transport endpoint is not connected"), dead.output)

    let unmounted = try mount9bbs(["-u", mountpoint])
    XCTAssertEqual(unmounted.status, 0, unmounted.output)
    XCTAssertFalse(isMounted(mountpoint))
    XCTAssertEqual(try sh("ls -A \(mountpoint)"), "", "the mount point is usable again")
  }

  func testUnmountOfNothingFails() throws {
    let directory = try temporaryDirectory()
    let result = try mount9bbs(["-u", directory + "/mnt"])
    XCTAssertNotEqual(result.status, 0)
    XCTAssertTrue(result.output.contains("nothing is mounted at"), result.output)
  }

  // MARK: - Runtime records

  /// Mount points whose names differ only in `/` against `_` have records of their own:
  /// `-u` of one stops only its own daemon.
  func testRecordsOfSimilarMountPointsDoNotCollide() throws {
    let server = try startServer()
    let directory = try temporaryDirectory()
    let first = directory + "/x_y"
    let second = directory + "/x/y"
    for path in [first, second] {
      try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
      addTeardownBlock {
        forceUnmount(path)
        for pid in mountDaemons(serving: path) { kill(pid, SIGKILL) }
      }
    }
    for path in [first, second] {
      let mounted = try mount9bbs([server.address, path])
      XCTAssertEqual(mounted.status, 0, mounted.output)
    }
    let secondDaemon = try XCTUnwrap(mountDaemons(serving: second).first, "no daemon for x/y")

    let unmounted = try mount9bbs(["-u", first])
    XCTAssertEqual(unmounted.status, 0, unmounted.output)
    XCTAssertFalse(isMounted(first))
    XCTAssertTrue(isMounted(second), "unmounting x_y took x/y with it")
    XCTAssertEqual(kill(secondDaemon, 0), 0, "unmounting x_y killed the daemon of x/y")
    let status = try mount9bbs(["status", second])
    XCTAssertEqual(status.status, 0, status.output)
    XCTAssertTrue(status.output.hasPrefix(second + ": "), status.output)
    XCTAssertEqual(try sh("cat \(second)/etc/boardname").isEmpty, false)

    XCTAssertEqual(try mount9bbs(["-u", second]).status, 0)
    XCTAssertFalse(isMounted(second))
  }

  /// A runtime directory someone else owns (another user made `/tmp/mount9bbs-UID` first),
  /// or a link in its place, is refused before anything is mounted; one we own but left open
  /// to others is made private.
  func testForeignRuntimeDirectoryIsRefused() throws {
    let server = try startServer()
    let directory = try temporaryDirectory()
    let runtime = directory + "/runtime"
    try FileManager.default.createDirectory(
      atPath: runtime + "/mount9bbs", withIntermediateDirectories: true)
    XCTAssertEqual(chown(runtime + "/mount9bbs", 4321, 4321), 0)
    let environment = ["XDG_RUNTIME_DIR": runtime]
    for foreground in [false, true] {
      let arguments = (foreground ? ["-f"] : []) + [server.address, directory + "/mnt"]
      let result = try mount9bbs(arguments, environment: environment)
      XCTAssertNotEqual(result.status, 0, result.output)
      XCTAssertTrue(
        result.output.contains(
          "refusing the runtime directory \(runtime)/mount9bbs: it belongs to uid 4321"),
        result.output)
      XCTAssertFalse(isMounted(directory + "/mnt"), "mounted without a record")
    }
    let status = try mount9bbs(["status", directory + "/mnt"], environment: environment)
    XCTAssertNotEqual(status.status, 0)
    XCTAssertTrue(status.output.contains("belongs to uid 4321"), status.output)

    // A link to a directory elsewhere is not ours to trust either.
    try FileManager.default.removeItem(atPath: runtime + "/mount9bbs")
    try FileManager.default.createDirectory(
      atPath: directory + "/elsewhere", withIntermediateDirectories: false)
    try FileManager.default.createSymbolicLink(
      atPath: runtime + "/mount9bbs", withDestinationPath: directory + "/elsewhere")
    let linked = try mount9bbs([server.address, directory + "/mnt"], environment: environment)
    XCTAssertNotEqual(linked.status, 0, linked.output)
    XCTAssertTrue(linked.output.contains("it is not a directory"), linked.output)

    // Our own directory, open to all: made 0700 and used.
    try FileManager.default.removeItem(atPath: runtime + "/mount9bbs")
    XCTAssertEqual(mkdir(runtime + "/mount9bbs", 0o777), 0)
    XCTAssertEqual(chmod(runtime + "/mount9bbs", 0o777), 0)
    let mounted = try mount9bbs([server.address, directory + "/mnt"], environment: environment)
    XCTAssertEqual(mounted.status, 0, mounted.output)
    var info = stat()
    XCTAssertEqual(stat(runtime + "/mount9bbs", &info), 0)
    XCTAssertEqual(info.st_mode & 0o777, 0o700)
    XCTAssertEqual(try mount9bbs(["-u", directory + "/mnt"], environment: environment).status, 0)
    XCTAssertTrue(
      waitUntil(timeout: 5) { mountDaemons(serving: directory + "/mnt").isEmpty },
      "-u did not find the daemon through the record")
  }

  /// Strings from the server reach `status` escaped: a room whose name carries an escape
  /// sequence shows it as `\x1B`, and nothing mount9bbs prints holds a control character.
  func testStatusEscapesServerStrings() throws {
    let hostile = "evil\u{1B}]0;pwned\u{07}\u{1B}[2J"
    let server = try ServerProcess(transport: "tcp", rooms: ["lobby", hostile])
    addTeardownBlock { server.stop() }
    let directory = try temporaryDirectory()
    let mountpoint = directory + "/mnt"
    XCTAssertEqual(try mount9bbs([server.address, mountpoint]).status, 0)
    let room = mountpoint + "/chat/" + hostile
    let listing = try sh("ls \(mountpoint)/chat")
    XCTAssertTrue(FileManager.default.fileExists(atPath: room), listing)
    try sh("echo hello > '\(room)'")
    let reader = try background(self, "/usr/bin/tail", ["-f", room])
    XCTAssertTrue(waitUntil(timeout: 10) { reader.text.contains("hello") }, reader.text)
    let status = try mount9bbs(["status", mountpoint])
    reader.stop()
    XCTAssertEqual(status.status, 0, status.output)
    XCTAssertTrue(
      status.output.contains("room /chat/evil\\x1B]0;pwned\\x07\\x1B[2J:"), status.output)
    let controls = status.output.unicodeScalars.filter {
      $0.value < 0x20 && $0 != "\n" || $0.value == 0x7F
    }
    XCTAssertEqual(controls.count, 0, "control characters reached the terminal")
    XCTAssertEqual(try mount9bbs(["-u", mountpoint]).status, 0)
  }

  // MARK: - Helpers

  /// Runs `mount9bbs ARGUMENTS` to completion (bounded); status and stdout+stderr.
  private func mount9bbs(
    _ arguments: [String], environment: [String: String]? = nil, timeout: TimeInterval = 20
  ) throws -> (status: Int32, output: String) {
    try runBuilt("mount9bbs", arguments, environment: environment, timeout: timeout)
  }

  /// Mounting `address` fails, detached and with -f, with every one of `phrases` in the
  /// message, a non-zero status, and no mount or daemon left behind.
  private func expectFailure(
    address: String, mountpoint: String? = nil, options: [String] = [], saying phrases: [String],
    in directory: String? = nil, file: StaticString = #filePath, line: UInt = #line
  ) throws {
    let directory = try directory ?? temporaryDirectory()
    let mountpoint = mountpoint ?? directory + "/mnt"
    let optionArguments = options.isEmpty ? [] : ["-o", options.joined(separator: ",")]
    try assertMountFails(
      optionArguments + [address, mountpoint], at: mountpoint, saying: phrases, file: file,
      line: line)
  }

  private func startServer() throws -> ServerProcess { try startServerProcess() }

  private func temporaryDirectory() throws -> String { try makeMountDirectory("mount9bbs-cli") }
}

/// A server that speaks some other 9P: it answers every Tversion with Rversion "unknown"
/// (what a 9P server says to a version it does not know), then waits for the client to go.
final class OtherDialectServer: @unchecked Sendable {
  private let listener: Listener
  private let lock = NSLock()
  private var answered = 0
  private var connections: [SocketTransport] = []

  init(path: String) throws {
    listener = try Listener(address: .unix(path: path))
    let thread = Thread { [self] in acceptLoop() }
    thread.start()
  }

  var versionsAnswered: Int { lock.withLock { answered } }

  func stop() {
    listener.close()
    for connection in lock.withLock({ connections }) { connection.close() }
  }

  private func acceptLoop() {
    while let connection = try? listener.accept() {
      lock.withLock { connections.append(connection) }
      Thread { [self] in serve(connection) }.start()
    }
  }

  private func serve(_ connection: SocketTransport) {
    defer { connection.close() }
    while let frame = try? connection.receive(limit: 1 << 16) {
      guard let (tag, message) = try? Message.decode(frame, limits: .unbounded) else { return }
      guard case .tversion(let msize, _) = message else { return }
      lock.withLock { answered += 1 }
      try? connection.send(Message.rversion(msize: msize, version: "unknown").encoded(tag: tag))
    }
  }
}
