import Foundation
import FuseKit
import Glibc
import Logging
import XCTest

/// A toy file system mounted on a fresh temporary directory, with a teardown that always
/// stops the session, makes sure nothing stays mounted and removes the directory.
final class MountFixture: @unchecked Sendable {
  let directory: String
  let mountpoint: String
  let fs: ToyFileSystem
  let session: FuseMount

  init(
    _ test: XCTestCase, fs: ToyFileSystem = ToyFileSystem(), options: FuseMountOptions = .init(),
    logger: Logger = Logger(label: "mount9bbs.fuse.test")
  ) throws {
    directory = try makeTemporaryDirectory()
    mountpoint = directory + "/mnt"
    XCTAssertEqual(mkdir(mountpoint, 0o755), 0)
    self.fs = fs
    var options = options
    options.fsName = options.fsName ?? "toyfs"
    options.subtype = options.subtype ?? "toy"
    session = FuseMount(fileSystem: fs, mountpoint: mountpoint, options: options, logger: logger)
    test.addTeardownBlock { [self] in tearDown() }
    try session.start()
  }

  func path(_ name: String) -> String { mountpoint + "/" + name }

  func tearDown() {
    session.exit()
    if !session.waitUntilStopped(timeout: .seconds(10)) {
      XCTFail("session did not stop within 10 s")
    }
    if FuseMount.isFuseMount(path: mountpoint) {
      XCTFail("still mounted after the session stopped")
      _ = umount2(mountpoint, 2)  // MNT_DETACH
    }
    rmdir(mountpoint)
    rmdir(directory)
  }
}

func makeTemporaryDirectory() throws -> String {
  var base = NSTemporaryDirectory()
  while base.hasSuffix("/") { base.removeLast() }
  var template = Array((base + "/fusetest.XXXXXX").utf8CString)
  guard let p = mkdtemp(&template) else { throw POSIXError(.EIO) }
  return String(cString: p)
}

/// The result of a finished command.
struct CommandResult {
  var status: Int32
  var reason: Process.TerminationReason
  var stdout: String
  var stderr: String
}

/// A command run through `/bin/sh -c`, its output collected as it comes.
final class Command: @unchecked Sendable {
  let process = Process()
  private let cond = NSCondition()
  private var out = Data()
  private var err = Data()
  private var exited = false
  private var openStreams = 2

  init(_ script: String) throws {
    process.executableURL = URL(fileURLWithPath: "/bin/sh")
    process.arguments = ["-c", script]
    let o = Pipe()
    let e = Pipe()
    process.standardOutput = o
    process.standardError = e
    process.standardInput = FileHandle.nullDevice
    process.terminationHandler = { [weak self] _ in
      guard let self else { return }
      cond.lock()
      exited = true
      cond.broadcast()
      cond.unlock()
    }
    try process.run()
    for (pipe, isOut) in [(o, true), (e, false)] {
      let handle = pipe.fileHandleForReading
      Thread.detachNewThread { [self] in
        while true {
          let chunk = handle.availableData
          cond.lock()
          if chunk.isEmpty { openStreams -= 1 } else if isOut { out += chunk } else { err += chunk }
          cond.broadcast()
          cond.unlock()
          if chunk.isEmpty {
            // Closed at the end, not when the Command goes: see ChildProcess.start.
            try? handle.close()
            return
          }
        }
      }
    }
  }

  var pid: pid_t { process.processIdentifier }
  var stdout: String { cond.withLock { String(decoding: out, as: UTF8.self) } }

  /// Waits until stdout contains `text`.
  func waitForOutput(containing text: String, timeout: TimeInterval) -> Bool {
    waitFor(timeout) { String(decoding: $0.out, as: UTF8.self).contains(text) }
  }

  /// Waits for the exit and the end of its output; nil on timeout (the process is killed).
  func finish(timeout: TimeInterval) -> CommandResult? {
    guard waitFor(timeout, { $0.exited && $0.openStreams == 0 }) else {
      kill(pid, SIGKILL)
      return nil
    }
    return cond.withLock {
      CommandResult(
        status: process.terminationStatus, reason: process.terminationReason,
        stdout: String(decoding: out, as: UTF8.self), stderr: String(decoding: err, as: UTF8.self))
    }
  }

  private func waitFor(_ timeout: TimeInterval, _ done: (Command) -> Bool) -> Bool {
    let deadline = Date(timeIntervalSinceNow: timeout)
    cond.lock()
    defer { cond.unlock() }
    while !done(self) {
      if !cond.wait(until: deadline) { return done(self) }
    }
    return true
  }

  /// Runs `script` to the end (at most `timeout` seconds).
  static func run(_ script: String, timeout: TimeInterval = 10) throws -> CommandResult {
    let c = try Command(script)
    guard let r = c.finish(timeout: timeout) else {
      throw POSIXError(.ETIMEDOUT, userInfo: [NSLocalizedDescriptionKey: "timed out: \(script)"])
    }
    return r
  }
}

/// A log handler that keeps messages, for asserting on trace output.
final class CapturingLogHandler: LogHandler, @unchecked Sendable {
  final class Store: @unchecked Sendable {
    let lock = NSLock()
    var messages: [String] = []
  }
  let store: Store
  var metadata: Logger.Metadata = [:]
  var logLevel: Logger.Level = .info

  init(store: Store) { self.store = store }

  subscript(metadataKey key: String) -> Logger.Metadata.Value? {
    get { metadata[key] }
    set { metadata[key] = newValue }
  }

  func log(event: LogEvent) {
    store.lock.withLock { store.messages.append("\(event.level) \(event.message)") }
  }
}
