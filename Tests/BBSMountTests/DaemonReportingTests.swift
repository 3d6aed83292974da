import Foundation
import TestSupport
import XCTest

/// What a mount tells the user and systemd about itself: its log says it mounted, connected
/// and unmounted; without a journal or syslog the log goes to a file it names; under systemd
/// (`NOTIFY_SOCKET`) it reports READY=1, the link in STATUS=, and STOPPING=1.
final class DaemonReportingTests: XCTestCase {
  func testLogFileTellsTheSession() throws {
    let server = try startServerProcess()
    let directory = try makeMountDirectory("mount9bbs-log")
    let mountpoint = directory + "/mnt"
    let log = directory + "/session.log"
    let mounted = try runBuilt("mount9bbs", ["-o", "log=\(log)", server.address, mountpoint])
    XCTAssertEqual(mounted.status, 0, mounted.output)
    XCTAssertEqual(try runBuilt("mount9bbs", ["-u", mountpoint]).status, 0)
    XCTAssertTrue(waitUntil(timeout: 10) { mountDaemons(serving: mountpoint).isEmpty })
    let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
    for line in ["mounted \(mountpoint) from \(server.address)", "unmounted \(mountpoint)"] {
      XCTAssertTrue(text.contains(line), "no \"\(line)\" in the log:\n\(text)")
    }
  }

  func testWithoutJournalOrSyslogTheLogGoesToTheStateDirectory() throws {
    let server = try startServerProcess()
    let directory = try makeMountDirectory("mount9bbs-fallback-log")
    let mountpoint = directory + "/mnt"
    let state = directory + "/state"
    let environment = ["XDG_STATE_HOME": state]
    let journal = FileManager.default.fileExists(atPath: "/run/systemd/journal/stdout")
    let syslog = FileManager.default.fileExists(atPath: "/dev/log")
    let mounted = try runBuilt("mount9bbs", [server.address, mountpoint], environment: environment)
    XCTAssertEqual(mounted.status, 0, mounted.output)
    XCTAssertEqual(try runBuilt("mount9bbs", ["-u", mountpoint]).status, 0)
    XCTAssertTrue(waitUntil(timeout: 10) { mountDaemons(serving: mountpoint).isEmpty })
    let path = state + "/mount9bbs/mount9bbs.log"
    if journal || syslog {
      // This machine has somewhere a log is read: nothing is said, no file is made.
      XCTAssertFalse(mounted.output.contains("the log goes to"), mounted.output)
      return
    }
    XCTAssertTrue(
      mounted.output.contains("no journal or syslog here; the log goes to \(path)"), mounted.output)
    let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    XCTAssertTrue(text.contains("mounted \(mountpoint)"), text)
    XCTAssertTrue(text.contains("unmounted \(mountpoint)"), text)
    var info = stat()
    XCTAssertEqual(stat(path, &info), 0)
    XCTAssertEqual(info.st_mode & 0o777, 0o600)
  }

  /// An unmount and a SIGTERM at once (a script's cleanup, `systemctl stop` after `umount`):
  /// the daemon still stops cleanly, exit status 0 and "unmounted" logged, having written its
  /// state. The signal could land between the end of the FUSE loop (libfuse puts the default
  /// handlers back) and the daemon's own ignoring of it, and kill it mid-shutdown (143): room
  /// histories, unread counts and fid clunks were then lost.
  func testATerminateRightAfterTheUnmountStillStopsCleanly() throws {
    let server = try startServerProcess()
    for round in 1...6 {
      let directory = try makeMountDirectory("mount9bbs-term")
      let mountpoint = directory + "/mnt"
      let mount = try MountProcess(
        address: server.address, mountpoint: mountpoint, options: [],
        environment: ["XDG_STATE_HOME": directory + "/state"])
      // A room read, so the daemon has a feed and its history to stop and write. The post
      // gives the room a line: an open of an empty room waits for its first.
      XCTAssertTrue(try shell("ls \(mountpoint)/chat").output.contains("lobby"))
      try shell("echo round \(round) > \(mountpoint)/chat/post")
      XCTAssertTrue(
        try shell("timeout 10 tail -n 1 \(mountpoint)/chat/lobby").output.contains("round"),
        "round \(round): the room read showed no line")
      let pid = mount.child.process.processIdentifier
      try shell("fusermount3 -u -z \(mountpoint); kill -TERM \(pid)")
      XCTAssertTrue(mount.child.wait(timeout: 15), "round \(round): still running")
      XCTAssertEqual(
        mount.child.process.terminationReason, .exit,
        "round \(round): killed by signal \(mount.child.process.terminationStatus)\n\(mount.child.text)"
      )
      XCTAssertEqual(mount.child.process.terminationStatus, 0, "round \(round)")
    }
  }

  func testSystemdHearsReadyTheLinkAndStopping() throws {
    let socketPath = try makeTemporaryDirectory("mount9bbs-notify") + "/notify.sock"
    // systemd's side: a datagram socket, each message printed on a line of its own.
    let listener = ChildProcess(
      "/usr/bin/python3",
      [
        "-u", "-c",
        """
        import socket, sys
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.bind(sys.argv[1])
        print("listening", flush=True)
        while True:
            print(repr(s.recv(4096).decode()), flush=True)
        """,
        socketPath,
      ])
    try listener.start()
    addTeardownBlock { listener.stop() }
    XCTAssertTrue(waitUntil(timeout: 10) { listener.text.contains("listening") }, listener.text)

    let server = try startServerProcess()
    let directory = try makeMountDirectory("mount9bbs-notified")
    let mountpoint = directory + "/mnt"
    let mount = try MountProcess(
      address: server.address, mountpoint: mountpoint, options: ["keepalive=1", "timeout=3"],
      environment: ["NOTIFY_SOCKET": socketPath])
    addTeardownBlock { mount.stop() }
    XCTAssertTrue(
      waitUntil(timeout: 10) {
        listener.text.contains("READY=1\\nSTATUS=mounted on \(mountpoint); link up")
      }, listener.text)
    // The link goes down (the server stopped) and comes back.
    server.child.signal(SIGSTOP)
    XCTAssertTrue(
      waitUntil(timeout: 15) { listener.text.contains("link down, reconnecting") }, listener.text)
    server.child.signal(SIGCONT)
    XCTAssertTrue(
      waitUntil(timeout: 15) {
        listener.text.components(separatedBy: "; link up").count >= 3
      }, listener.text)
    XCTAssertEqual(try runBuilt("mount9bbs", ["-u", mountpoint]).status, 0)
    XCTAssertTrue(waitUntil(timeout: 10) { listener.text.contains("STOPPING=1") }, listener.text)
  }
}
