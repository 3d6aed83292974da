import Foundation
import TestSupport
import XCTest

/// A real `mount9bbs -f` of a ``HostileServer`` with a short request timeout: `timeout=`
/// bounds what a user waits for one operation, and what a server once said wrongly is not held
/// against it after it stops.
final class ServerMisbehaviourTests: HostileServerTestCase {
  /// The mount's `timeout=`, in seconds: short, the subject of these tests.
  override class var requestTimeout: Int { 3 }

  /// Runs `command` in a shell and returns its status, output and how long it took.
  private func timed(_ command: String) throws -> (status: Int32, output: String, seconds: Double) {
    let start = ContinuousClock.now
    let result = try shell(command, timeout: 60)
    let elapsed = ContinuousClock.now - start
    let seconds =
      Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    return (result.status, result.output, seconds)
  }

  /// `timeout=3` means a user's command against a server that never answers fails after
  /// about 3 s, not once per request the command makes: `cat` of a file not looked up yet
  /// (a lookup, then an open), then `ls` and `stat` of others, each on its own.
  func testTimeoutBoundsEachCommandAgainstAServerThatNeverAnswers() throws {
    XCTAssertEqual(try shell("ls '\(mount.mountpoint)'").status, 0)
    server.stall(true)
    let bound = Double(Self.requestTimeout) + 1.5
    for command in [
      "cat '\(path("etc/motd"))'", "cat '\(path("etc/motd"))'", "ls '\(path("badsize"))'",
      "stat '\(path("badname/ok"))'",
    ] {
      let result = try timed(command)
      XCTAssertNotEqual(result.status, 0, "\(command): \(result.output)")
      XCTAssertLessThan(
        result.seconds, bound,
        "\(command) took \(result.seconds) s with timeout=\(Self.requestTimeout)")
    }
    XCTAssertTrue(mount.child.isRunning, mount.child.text)
    // Answering again: so is the mount, at once.
    server.stall(false)
    XCTAssertTrue(
      waitUntil(timeout: 15) {
        (try? shell("cat '\(self.path("etc/motd"))'").output) == "hello\n"
      }, mount.child.text)
  }

  /// A server that called a file a directory for a while (swapped qids) and then tells the
  /// truth again: the file reads again as soon as the mount's attributes expire, also while
  /// a process that saw the lie (an `fstat` of the file it holds open) keeps it open.
  func testFileReadsAgainAfterTheServerStopsLying() throws {
    XCTAssertEqual(try shell("cat '\(path("turncoat"))'").output, "plain text\n")
    let trigger = mount.mountpoint + "/../fstat-now"
    let holder = ChildProcess(
      "/usr/bin/python3",
      [
        "-c",
        """
        import os, sys, time
        fd = os.open(sys.argv[1], os.O_RDONLY)
        print("open", flush=True)
        while not os.path.exists(sys.argv[2]): time.sleep(0.01)
        try:
            os.fstat(fd)
            print("fstat answered", flush=True)
        except OSError as e:
            print("fstat failed", e.errno, flush=True)
        time.sleep(60)
        """,
        path("turncoat"), trigger,
      ])
    try holder.start()
    addTeardownBlock { holder.stop(grace: 2) }
    XCTAssertTrue(waitUntil(timeout: 15) { holder.text.contains("open") }, holder.text)
    server.lie(true)
    // What the kernel and the mount knew expires (a timeout, not an event to wait for).
    Thread.sleep(forTimeInterval: 1.5)
    FileManager.default.createFile(atPath: trigger, contents: nil)
    XCTAssertTrue(waitUntil(timeout: 15) { holder.text.contains("fstat") }, holder.text)
    _ = try shell("stat '\(path("turncoat"))'; ls '\(mount.mountpoint)'; cat '\(path("turncoat"))'")
    server.lie(false)
    XCTAssertTrue(
      waitUntil(timeout: 10) {
        (try? shell("cat '\(self.path("turncoat"))'").output) == "plain text\n"
      },
      "still refused: \((try? shell("cat '\(path("turncoat"))'").output) ?? "")")
    XCTAssertEqual(try shell("stat -c %F '\(path("turncoat"))'").output, "regular file\n")
    XCTAssertTrue(mount.child.isRunning, mount.child.text)
  }
}
