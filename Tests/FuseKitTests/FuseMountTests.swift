import Foundation
import FuseKit
import Glibc
import Logging
import XCTest

/// Real mounts of ``ToyFileSystem`` exercised with the ordinary tools.
final class FuseMountTests: XCTestCase {
  struct Unavailable: Error, CustomStringConvertible {
    let description: String
  }

  override func setUpWithError() throws {
    // These tests mount for real; a machine without FUSE fails them rather than skipping.
    guard access("/dev/fuse", R_OK | W_OK) == 0 else {
      throw Unavailable(description: "/dev/fuse is not usable: \(String(cString: strerror(errno)))")
    }
  }

  // MARK: Metadata and data

  func testListStatAndRead() throws {
    let m = try MountFixture(self)
    let ls = try Command.run("ls -la \(m.mountpoint)")
    XCTAssertEqual(ls.status, 0, ls.stderr)
    for name in ["hello.txt", "stream", "twice"] {
      XCTAssertTrue(ls.stdout.contains(name), ls.stdout)
    }
    XCTAssertGreaterThan(m.fs.count("readdirplus"), 0)
    XCTAssertEqual(m.fs.count("readdir"), 0)

    let st = try Command.run("stat -c '%s %F %i' \(m.path("hello.txt"))")
    XCTAssertEqual(st.stdout, "\(ToyFileSystem.hello.utf8.count) regular file 2\n", st.stderr)
    let cat = try Command.run("cat \(m.path("hello.txt"))")
    XCTAssertEqual(cat.stdout, ToyFileSystem.hello)
    let missing = try Command.run("stat \(m.path("nope"))")
    XCTAssertNotEqual(missing.status, 0)
    XCTAssertTrue(missing.stderr.contains("No such file"), missing.stderr)
  }

  func testPlainReaddirWithoutPlus() throws {
    let m = try MountFixture(self, fs: ToyFileSystem(usePlus: false))
    let ls = try Command.run("ls -l \(m.mountpoint)")
    XCTAssertEqual(ls.status, 0, ls.stderr)
    XCTAssertTrue(ls.stdout.contains("hello.txt"), ls.stdout)
    XCTAssertGreaterThan(m.fs.count("readdir"), 0)
    XCTAssertEqual(m.fs.count("readdirplus"), 0)
  }

  func testLargeDirectoryIsListedInPieces() throws {
    let m = try MountFixture(self)
    // 300 names of ~60 bytes do not fit one 4 KiB readdir buffer: offsets must continue.
    let names = (0..<300).map { String(format: "file-with-a-rather-long-name-for-paging-%04d", $0) }
    let create = try Command.run(
      "cd \(m.mountpoint) && for i in $(seq -f %04g 0 299); do : > file-with-a-rather-long-name-for-paging-$i; done",
      timeout: 30)
    XCTAssertEqual(create.status, 0, create.stderr)
    let ls = try Command.run("ls \(m.mountpoint) | grep -c '^file-with'")
    XCTAssertEqual(ls.stdout, "\(names.count)\n", ls.stderr)
    XCTAssertGreaterThan(m.fs.count("readdirplus"), 2)
  }

  func testCreateWriteMkdirUnlink() throws {
    let m = try MountFixture(self)
    let script = """
      set -e
      cd \(m.mountpoint)
      echo 'first line' > new.txt
      echo 'second line' >> new.txt
      cat new.txt
      echo 'replaced' > hello.txt
      cat hello.txt
      mkdir sub
      echo inside > sub/f
      cat sub/f
      ls sub
      rm sub/f
      rmdir sub
      rm new.txt
      ls
      """
    let r = try Command.run(script)
    XCTAssertEqual(r.status, 0, r.stderr)
    XCTAssertEqual(
      r.stdout, "first line\nsecond line\nreplaced\ninside\nf\nhello.txt\nstream\ntwice\n")
    XCTAssertGreaterThan(m.fs.count("create"), 0)
    XCTAssertGreaterThan(m.fs.count("truncatingOpen"), 0)  // `> hello.txt`: atomic O_TRUNC
    XCTAssertEqual(m.fs.count("mkdir"), 1)
    XCTAssertEqual(m.fs.count("rmdir"), 1)
    XCTAssertEqual(m.fs.count("unlink"), 2)
    let rmdirFull = try Command.run(
      "mkdir \(m.path("d")) && touch \(m.path("d/x")) && rmdir \(m.path("d"))")
    XCTAssertTrue(rmdirFull.stderr.contains("not empty"), rmdirFull.stderr)
  }

  func testSecondReplyIsDropped() throws {
    let m = try MountFixture(self)
    let r = try Command.run("cat \(m.path("twice"))")
    XCTAssertEqual(r.stdout, "twice\n", r.stderr)
    XCTAssertTrue(m.fs.wait(timeout: 5) { $0.doubleReply != nil })
    let replies = try XCTUnwrap(m.fs.wait(timeout: 0) { _ in true } ? m.fs.doubleReply : nil)
    XCTAssertTrue(replies.first)
    XCTAssertFalse(replies.second)
  }

  // MARK: The stream

  func testAppendWakesBlockedReader() throws {
    let m = try MountFixture(self)
    let cat = try Command("exec cat \(m.path("stream"))")
    XCTAssertTrue(cat.waitForOutput(containing: ToyFileSystem.welcome, timeout: 5))
    XCTAssertTrue(m.fs.waitForWaiters(1, timeout: 5), "cat did not park at the end")

    let start = DispatchTime.now()
    m.fs.append("news 1\n")
    XCTAssertTrue(cat.waitForOutput(containing: "news 1\n", timeout: 5), cat.stdout)
    let wake = Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e6
    XCTAssertTrue(m.fs.waitForWaiters(1, timeout: 5))
    m.fs.append("news 2\n")
    XCTAssertTrue(cat.waitForOutput(containing: "news 2\n", timeout: 5), cat.stdout)
    measurements.info("append → reader output: \(String(format: "%.2f", wake)) ms")

    kill(cat.pid, SIGTERM)
    XCTAssertNotNil(cat.finish(timeout: 5))
    XCTAssertEqual(cat.stdout, ToyFileSystem.welcome + "news 1\nnews 2\n")
  }

  func testSigintEndsBlockedReaderPromptly() throws {
    let m = try MountFixture(self)
    var latencies: [Double] = []
    for round in 1...5 {
      let cat = try Command("exec cat \(m.path("stream"))")
      XCTAssertTrue(m.fs.waitForWaiters(1, timeout: 5), "round \(round): cat did not park")
      let start = DispatchTime.now()
      kill(cat.pid, SIGINT)
      let result = try XCTUnwrap(cat.finish(timeout: 2), "cat ignored SIGINT for 2 s")
      latencies.append(Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e6)
      XCTAssertEqual(result.reason, .uncaughtSignal)
      XCTAssertEqual(result.status, SIGINT)
      XCTAssertTrue(m.fs.wait(timeout: 5) { $0.interrupts == round }, "no interrupt seen")
      XCTAssertTrue(m.fs.waitForWaiters(0, timeout: 1))
    }
    latencies.sort()
    measurements.info(
      "SIGINT → cat exit: median \(String(format: "%.2f", latencies[2])) ms, max \(String(format: "%.2f", latencies[4])) ms"
    )
    XCTAssertLessThan(latencies[4], 1000)
  }

  func testPollReportsReadableAfterAppend() throws {
    let m = try MountFixture(self)
    let fd = Glibc.open(m.path("stream"), O_RDONLY)
    XCTAssertGreaterThanOrEqual(fd, 0)
    defer { close(fd) }
    var buffer = [UInt8](repeating: 0, count: 4096)
    XCTAssertEqual(read(fd, &buffer, buffer.count), ToyFileSystem.welcome.utf8.count)

    var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
    XCTAssertEqual(Glibc.poll(&pfd, 1, 0), 0, "readable before any append")

    let done = DispatchSemaphore(value: 0)
    let result = PollResult()
    Thread.detachNewThread {
      var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
      result.set(Glibc.poll(&p, 1, 5000), p.revents)
      done.signal()
    }
    // The poll thread is waiting once the kernel asked for (and got) a poll handle.
    XCTAssertTrue(m.fs.wait(timeout: 5) { $0.counts["poll", default: 0] >= 2 })
    let start = DispatchTime.now()
    m.fs.append("ping\n")
    XCTAssertEqual(done.wait(timeout: .now() + 5), .success)
    let ms = Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e6
    measurements.info("append → poll readable: \(String(format: "%.2f", ms)) ms")
    XCTAssertEqual(result.value?.rc, 1)
    XCTAssertNotEqual((result.value?.revents ?? 0) & Int16(POLLIN), 0)
    XCTAssertEqual(read(fd, &buffer, buffer.count), 5)
    XCTAssertEqual(String(decoding: buffer.prefix(5), as: UTF8.self), "ping\n")
  }

  func testNonBlockingReadAtEndGetsEAGAIN() throws {
    let m = try MountFixture(self)
    let r = try Command.run("dd if=\(m.path("stream")) iflag=nonblock bs=4096 skip=0 count=2 2>&1")
    XCTAssertTrue(r.stdout.contains("Resource temporarily unavailable"), r.stdout)
  }

  // MARK: Shutdown and unmount

  func testExitWhileReaderBlockedAnswersEIO() throws {
    let m = try MountFixture(self)
    let cat = try Command("exec cat \(m.path("stream"))")
    XCTAssertTrue(m.fs.waitForWaiters(1, timeout: 5))
    let start = DispatchTime.now()
    m.session.exit()
    XCTAssertTrue(m.session.waitUntilStopped(timeout: .seconds(5)))
    let ms = Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e6
    measurements.info("exit() with a blocked reader → stopped: \(String(format: "%.2f", ms)) ms")
    let result = try XCTUnwrap(cat.finish(timeout: 5), "cat still blocked after unmount")
    XCTAssertEqual(result.reason, .exit)
    XCTAssertNotEqual(result.status, 0)
    XCTAssertTrue(result.stderr.contains("Input/output error"), result.stderr)
    XCTAssertFalse(FuseMount.isFuseMount(path: m.mountpoint))
  }

  func testExternalUnmountStopsSession() throws {
    let m = try MountFixture(self)
    XCTAssertTrue(FuseMount.isFuseMount(path: m.mountpoint))
    XCTAssertEqual(try Command.run("cat \(m.path("hello.txt"))").stdout, ToyFileSystem.hello)
    try FuseMount.unmount(path: m.mountpoint + "/./")
    XCTAssertTrue(m.session.waitUntilStopped(timeout: .seconds(5)), "loop did not notice")
    XCTAssertFalse(FuseMount.isFuseMount(path: m.mountpoint))
  }

  func testAbortedConnectionStopsSession() throws {
    let connections = "/sys/fs/fuse/connections"
    // fusectl is where connections are aborted; mount it (as root) when nobody has (with no
    // FUSE mount it is an empty directory either way, so ask /proc/mounts).
    let mounts = (try? String(contentsOfFile: "/proc/mounts", encoding: .utf8)) ?? ""
    if !mounts.split(separator: "\n").contains(where: { $0.contains(" \(connections) fusectl ") }) {
      guard Glibc.mount("fusectl", connections, "fusectl", 0, nil) == 0 else {
        throw Unavailable(
          description: "cannot mount fusectl on \(connections): \(String(cString: strerror(errno)))"
        )
      }
      addTeardownBlock { umount2(connections, 2) }
    }
    let m = try MountFixture(self)
    var st = stat()
    XCTAssertEqual(stat(m.mountpoint, &st), 0)
    let connection = (st.st_dev & 0xff) | ((st.st_dev >> 12) & 0xfff00)  // minor(st_dev)
    let abort = Glibc.open("\(connections)/\(connection)/abort", O_WRONLY)
    XCTAssertGreaterThanOrEqual(abort, 0)
    XCTAssertEqual(write(abort, "1", 1), 1)
    close(abort)
    XCTAssertTrue(m.session.waitUntilStopped(timeout: .seconds(5)))
    XCTAssertFalse(FuseMount.isFuseMount(path: m.mountpoint))
  }

  func testUnmountHelperCleansDeadMount() throws {
    // What a daemon that died leaves behind: a FUSE mount whose /dev/fuse is closed.
    let dir = try makeTemporaryDirectory()
    defer { rmdir(dir) }
    let fd = Glibc.open("/dev/fuse", O_RDWR | O_CLOEXEC)
    XCTAssertGreaterThanOrEqual(fd, 0)
    let options = "fd=\(fd),rootmode=40000,user_id=0,group_id=0"
    guard Glibc.mount("deadfs", dir, "fuse.dead", 0, options) == 0 else {
      close(fd)
      throw Unavailable(description: "cannot mount by hand: \(String(cString: strerror(errno)))")
    }
    close(fd)
    defer { if FuseMount.isFuseMount(path: dir) { umount2(dir, 2) } }
    var st = stat()
    XCTAssertNotEqual(stat(dir, &st), 0)
    XCTAssertEqual(errno, ENOTCONN)
    XCTAssertThrowsError(try FuseMount(fileSystem: ToyFileSystem(), mountpoint: dir).mount()) {
      XCTAssertEqual($0 as? FuseMountError, .mountpointUnusable(dir, errno: ENOTCONN))
    }
    try FuseMount.unmount(path: dir)
    XCTAssertFalse(FuseMount.isFuseMount(path: dir))
    XCTAssertEqual(stat(dir, &st), 0)
  }

  func testTraceLogsOperations() throws {
    let store = CapturingLogHandler.Store()
    let logger = Logger(label: "trace") { _ in CapturingLogHandler(store: store) }
    var options = FuseMountOptions()
    options.trace = true
    let m = try MountFixture(self, options: options, logger: logger)
    _ = try Command.run("cat \(m.path("hello.txt"))")
    let log = store.lock.withLock { store.messages }
    XCTAssertTrue(log.contains { $0.contains("lookup parent=1 name=hello.txt") }, "\(log)")
    XCTAssertTrue(log.contains { $0.contains("read ino=2") }, "\(log)")
    XCTAssertTrue(log.contains { $0.contains("← #") && $0.contains("data 14 bytes") }, "\(log)")
  }

  // MARK: Errors

  func testMountErrorsAreTyped() throws {
    let dir = try makeTemporaryDirectory()
    defer { _ = try? FileManager.default.removeItem(atPath: dir) }
    func mountError(_ path: String, _ options: FuseMountOptions = .init()) -> FuseMountError? {
      let s = FuseMount(fileSystem: ToyFileSystem(), mountpoint: path, options: options)
      do {
        try s.mount()
        s.exit()
        return nil
      } catch { return error }
    }
    XCTAssertEqual(mountError(dir + "/missing"), .mountpointMissing(dir + "/missing"))
    XCTAssertTrue(FileManager.default.createFile(atPath: dir + "/file", contents: Data()))
    XCTAssertEqual(mountError(dir + "/file"), .mountpointNotDirectory(dir + "/file"))
    XCTAssertEqual(mountError(dir), .mountpointNotEmpty(dir))
    var bad = FuseMountOptions()
    bad.extraOptions = ["no_such_option_xyz"]
    XCTAssertEqual(mkdir(dir + "/empty", 0o755), 0)
    XCTAssertEqual(mountError(dir + "/empty", bad), .invalidOptions(["no_such_option_xyz"]))
    XCTAssertTrue(
      "\(FuseMountError.mountpointMissing("/x"))".contains("does not exist"))
  }

  func testUnmountHelperRejectsNonFuse() throws {
    let dir = try makeTemporaryDirectory()
    defer { rmdir(dir) }
    XCTAssertThrowsError(try FuseMount.unmount(path: dir)) {
      XCTAssertEqual($0 as? FuseMountError, .notMounted(dir))
    }
    XCTAssertThrowsError(try FuseMount.unmount(path: "/proc")) {
      XCTAssertEqual($0 as? FuseMountError, .notFuseMount("/proc", type: "proc"))
    }
  }
}

final class PollResult: @unchecked Sendable {
  private let lock = NSLock()
  private var stored: (rc: Int32, revents: Int16)?
  func set(_ rc: Int32, _ revents: Int16) { lock.withLock { stored = (rc, revents) } }
  var value: (rc: Int32, revents: Int16)? { lock.withLock { stored } }
}

/// Where the tests report timings.
let measurements = Logger(label: "mount9bbs.fuse.test.timing")
