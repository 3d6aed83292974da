import Foundation
import TestSupport
import XCTest

/// What other local users and hostile names cannot do through a mount: post under the
/// mounting user's identity through an `allow_other` mount, or run a command hidden in a
/// mount point's name when a user pastes what `mount9bbs status` suggests.
final class MountSafetyTests: XCTestCase {
  private static let nobody = [
    "/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
  ]

  /// `command` run by `sh` as the user nobody.
  private func asNobody(_ command: String) throws -> (status: Int32, output: String) {
    let child = ChildProcess(
      Self.nobody[0], Array(Self.nobody.dropFirst()) + ["/bin/sh", "-c", command])
    try child.start()
    guard child.wait(timeout: 20) else {
      child.stop()
      throw HarnessError("as nobody, \(command) ran over 20 s: \(child.text)")
    }
    return (child.process.terminationStatus, child.text)
  }

  /// The lines of a room so far (read without waiting at its end).
  private func roomText(_ path: String) throws -> String {
    let script = """
      import os, sys
      fd = os.open(sys.argv[1], os.O_RDONLY | os.O_NONBLOCK)
      out = b""
      while True:
          try:
              chunk = os.read(fd, 65536)
          except BlockingIOError:
              break
          if not chunk:
              break
          out += chunk
      sys.stdout.write(out.decode())
      """
    return try shell("python3 -c '\(script)' '\(path)'").output
  }

  /// Mounts the server with `options`, on a mount point other users can reach.
  private func mount(_ server: ServerProcess, _ options: String) throws -> String {
    let directory = try makeMountDirectory("mount9bbs-safety")
    XCTAssertEqual(chmod(directory, 0o755), 0)
    let mountpoint = directory + "/mnt"
    let mounted = try runBuilt("mount9bbs", ["-o", options, server.address, mountpoint])
    XCTAssertEqual(mounted.status, 0, mounted.output)
    addTeardownBlock { _ = try? self.runBuilt("mount9bbs", ["-u", mountpoint]) }
    return mountpoint
  }

  /// Root mounts with `allow_other`: another user reads the board but cannot post (the post
  /// file shows it: `--w-------`), and the mounting user still posts.
  func testOtherUsersReadButCannotPostThroughAnAllowOtherMount() throws {
    let server = try startServerProcess()
    let mountpoint = try mount(server, "allow_other")

    XCTAssertEqual(try asNobody("ls '\(mountpoint)/chat'").status, 0)
    XCTAssertEqual(try asNobody("cat '\(mountpoint)/etc/boardname'").status, 0)
    XCTAssertEqual(try shell("stat -c %A '\(mountpoint)/chat/post'").output, "--w-------\n")
    for target in ["chat/post", "chat/lobby"] {
      let forged = try asNobody("echo 'forged by nobody' > '\(mountpoint)/\(target)'")
      XCTAssertNotEqual(forged.status, 0, "nobody wrote \(target): \(forged.output)")
      XCTAssertTrue(forged.output.contains("Permission denied"), forged.output)
    }
    let created = try asNobody("touch '\(mountpoint)/rooms/lobby/forged'")
    XCTAssertNotEqual(created.status, 0, created.output)

    try shell("echo 'said by the owner' > '\(mountpoint)/chat/post'")
    let lobby = mountpoint + "/chat/lobby"
    XCTAssertTrue(
      waitUntil(timeout: 10) { ((try? self.roomText(lobby)) ?? "").contains("said by the owner") })
    let text = try roomText(lobby)
    XCTAssertFalse(text.contains("forged"), text)
  }

  /// `allow_other_write` is the explicit way to let other users post (as the mounting user).
  func testAllowOtherWriteLetsOtherUsersPost() throws {
    let server = try startServerProcess()
    let mountpoint = try mount(server, "allow_other_write")
    XCTAssertEqual(try shell("stat -c %A '\(mountpoint)/chat/post'").output, "--w--w--w-\n")
    let posted = try asNobody("echo 'shared mount' > '\(mountpoint)/chat/post'")
    XCTAssertEqual(posted.status, 0, posted.output)
    let lobby = mountpoint + "/chat/lobby"
    XCTAssertTrue(
      waitUntil(timeout: 10) { ((try? self.roomText(lobby)) ?? "").contains("shared mount") })
  }

  /// A mount point whose name holds a command substitution, its daemon killed: what
  /// `mount9bbs status` suggests, pasted into bash, unmounts it and runs nothing else.
  func testStatusSuggestionIsSafeToPaste() throws {
    let server = try startServerProcess()
    let directory = try makeTemporaryDirectory("mount9bbs-paste")
    let mountpoint = directory + "/a $(touch PWNED) `touch PWNED2` 'b"
    try FileManager.default.createDirectory(atPath: mountpoint, withIntermediateDirectories: false)
    addTeardownBlock {
      for pid in mountDaemons(serving: mountpoint) { kill(pid, SIGKILL) }
      // Not through a shell: the name is built to break shell quoting.
      if isMounted(mountpoint) { umount2(mountpoint, Int32(MNT_DETACH)) }
    }
    let mounted = try runBuilt("mount9bbs", [server.address, mountpoint])
    XCTAssertEqual(mounted.status, 0, mounted.output)
    let daemon = try XCTUnwrap(mountDaemons(serving: mountpoint).first, "no daemon")
    XCTAssertEqual(kill(daemon, SIGKILL), 0)
    XCTAssertTrue(waitUntil(timeout: 5) { kill(daemon, 0) != 0 && errno == ESRCH })

    let status = try runBuilt("mount9bbs", ["status", mountpoint])
    XCTAssertNotEqual(status.status, 0, status.output)
    // The suggestion ends its line, after "with: ".
    guard let line = status.output.split(separator: "\n").first(where: { $0.contains("with: ") }),
      let range = line.range(of: "with: ")
    else { return XCTFail("no suggestion: \(status.output)") }
    let suggested = line[range.upperBound...]
    XCTAssertTrue(suggested.hasPrefix("mount9bbs -u "), String(line))
    let tool = BuiltProducts.path(of: "mount9bbs")
    let pasted = try shell(
      "cd '\(directory)' && bash -c \(TerminalTextForTests.quoted(tool + suggested.dropFirst("mount9bbs".count)))"
    )
    XCTAssertEqual(pasted.status, 0, "\(suggested): \(pasted.output)")
    XCTAssertFalse(
      FileManager.default.fileExists(atPath: directory + "/PWNED"), "the paste ran $(…)")
    XCTAssertFalse(
      FileManager.default.fileExists(atPath: directory + "/PWNED2"), "the paste ran `…`")
    XCTAssertFalse(isMounted(mountpoint), "the suggestion did not unmount: \(suggested)")
  }

  /// Another user's `status` and `-u` of root's mount say whose mount it is and how to ask,
  /// rather than blaming a dead daemon or fusermount's `entry … not found in /etc/mtab`; the
  /// mount is left as it was.
  func testAnotherUsersStatusAndUnmountSayWhoseMountItIs() throws {
    let server = try startServerProcess()
    let mountpoint = try mount(server, "allow_other")
    // A copy nobody can run: the build directory may be in a clone only root can enter.
    let shared = try makeTemporaryDirectory("mount9bbs-tool")
    XCTAssertEqual(chmod(shared, 0o755), 0)
    let tool = shared + "/mount9bbs"
    try FileManager.default.copyItem(atPath: BuiltProducts.path(of: "mount9bbs"), toPath: tool)
    addTeardownBlock { try? FileManager.default.removeItem(atPath: shared) }
    let status = try asNobody("'\(tool)' status '\(mountpoint)'")
    XCTAssertNotEqual(status.status, 0, status.output)
    XCTAssertTrue(
      status.output.contains(
        "is root (uid 0)'s mount: ask them, or run sudo -u root mount9bbs status"),
      status.output)
    XCTAssertFalse(status.output.contains("does not answer"), status.output)
    let unmount = try asNobody("'\(tool)' -u '\(mountpoint)'")
    XCTAssertNotEqual(unmount.status, 0, unmount.output)
    XCTAssertTrue(unmount.output.contains("is root (uid 0)'s mount"), unmount.output)
    XCTAssertFalse(unmount.output.contains("mtab"), unmount.output)
    XCTAssertTrue(isMounted(mountpoint))
    XCTAssertEqual(try runBuilt("mount9bbs", ["status", mountpoint]).status, 0)
  }
}

/// Single quotes for the test's own shell lines.
enum TerminalTextForTests {
  static func quoted(_ text: String) -> String { "'" + text.replacing("'", with: "'\\''") + "'" }
}
