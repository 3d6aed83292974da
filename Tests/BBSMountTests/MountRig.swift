import Foundation
import TestSupport
import XCTest

/// The two ways the mount meets a server in these tests.
enum Setup: String {
  /// The reference server's default profile over TCP: pipelined requests.
  case multiplexTCP
  /// The same over a Unix stream socket.
  case multiplexUnix
  /// The device profile over seqpacket (an emulated L2CAP link): one request at a time per
  /// session, 245-byte SDUs, 4 parked reads per session, 2 ms per request; breaking a rule
  /// gets the session dropped and logged ("… — disconnecting").
  case deviceSeqpacket
  /// `--profile gen1` over TCP: the older board, whose chat reads never wait (a caught-up read
  /// is 0 bytes at once), with a 49-line ring and one chat cursor for every reader.
  case gen1TCP
}

/// A real `9bbsd`, a real `mount9bbs -f` of it, and a private directory, all torn down with
/// the test (mount first, then server, then directory), whatever the test's fate.
struct MountRig {
  let setup: Setup
  let server: ServerProcess
  let mount: MountProcess
  /// Private directory holding the mount point and any fixtures.
  let directory: String

  var mountpoint: String { mount.mountpoint }

  /// Absolute path of `relative` inside the mount.
  func path(_ relative: String) -> String { mountpoint + "/" + relative }

  /// Starts a server for `setup` and mounts it. `files` are served under /files (relative
  /// path → contents).
  static func start(
    _ setup: Setup, for test: XCTestCase, rooms: [String] = ["lobby", "tech"],
    files: [String: String]? = nil, serverArguments: [String] = [], mountOptions: [String] = []
  ) throws -> MountRig {
    let directory = try makeTemporaryDirectory("mount9bbs-itest")
    test.addTeardownBlock {
      // Never recurse into a mount that is somehow still there.
      guard !isMounted(directory + "/mnt") else { return }
      try? FileManager.default.removeItem(atPath: directory)
    }
    var extra = serverArguments
    if let files {
      let root = directory + "/files"
      for (relative, contents) in files {
        let url = URL(fileURLWithPath: root + "/" + relative)
        try FileManager.default.createDirectory(
          at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(contents.utf8).write(to: url)
      }
      extra += ["--files", root]
    }
    let server: ServerProcess
    switch setup {
    case .multiplexTCP:
      server = try ServerProcess(transport: "tcp", rooms: rooms, extra: extra)
    case .multiplexUnix:
      server = try ServerProcess(transport: "unix", rooms: rooms, extra: extra)
    case .deviceSeqpacket:
      server = try ServerProcess(
        transport: "seqpacket", profile: "device", rooms: rooms,
        extra: extra + ["--processing-delay", "2"])
    case .gen1TCP:
      server = try ServerProcess(transport: "tcp", profile: "gen1", rooms: rooms, extra: extra)
    }
    test.addTeardownBlock { server.stop() }
    let mountpoint = directory + "/mnt"
    try FileManager.default.createDirectory(atPath: mountpoint, withIntermediateDirectories: false)
    let mount = try MountProcess(
      address: server.address, mountpoint: mountpoint, options: mountOptions)
    test.addTeardownBlock { mount.stop() }
    test.addTeardownBlock { [weak test] in
      // Runs first: on failure, show what both sides logged.
      guard let run = test?.testRun, run.totalFailureCount > 0 else { return }
      print("--- 9bbsd (\(setup)) log:\n\(server.log)--- mount9bbs log:\n\(mount.child.text)---")
    }
    return MountRig(setup: setup, server: server, mount: mount, directory: directory)
  }

  /// A second mount of the same server (another client), torn down with the test.
  func secondMount(for test: XCTestCase, options: [String]) throws -> MountProcess {
    let mountpoint = directory + "/mnt2"
    try FileManager.default.createDirectory(atPath: mountpoint, withIntermediateDirectories: false)
    let mount = try MountProcess(address: server.address, mountpoint: mountpoint, options: options)
    test.addTeardownBlock { mount.stop() }
    return mount
  }

  /// Another mount of the server as `user` on `DIRECTORY/away`, keeping its state (room
  /// history) in `state`: a mount after it, given the same `state`, is the same user coming
  /// back. Torn down with the test.
  func mountAway(as user: String, state: String, for test: XCTestCase) throws -> MountProcess {
    let mountpoint = directory + "/away"
    try FileManager.default.createDirectory(atPath: mountpoint, withIntermediateDirectories: true)
    let mount = try MountProcess(
      address: server.address, mountpoint: mountpoint, options: ["uname=\(user)"],
      environment: ["XDG_STATE_HOME": state])
    test.addTeardownBlock { mount.stop() }
    return mount
  }

  /// Fails the test if 9bbsd dropped a session: in the device profile, that is the client
  /// breaking a board's wire rules.
  func assertNoViolations(file: StaticString = #filePath, line: UInt = #line) {
    XCTAssertEqual(
      server.violations, [], "9bbsd (\(setup)) dropped a session:\n\(server.log)", file: file,
      line: line)
    XCTAssertTrue(
      mount.child.isRunning, "mount9bbs died:\n\(mount.child.text)", file: file, line: line)
  }
}

/// Runs a program (not through a shell) in the background, stopped with the test.
func background(
  _ test: XCTestCase, _ program: String, _ arguments: [String]
) throws -> ChildProcess {
  let child = ChildProcess(program, arguments)
  try child.start()
  test.addTeardownBlock { child.stop(grace: 2) }
  return child
}

/// Runs `/bin/sh -c command` to completion (bounded), failing the test on a non-zero exit.
@discardableResult
func sh(
  _ command: String, timeout: TimeInterval = 20, file: StaticString = #filePath,
  line: UInt = #line
) throws -> String {
  let result = try shell(command, timeout: timeout)
  XCTAssertEqual(
    result.status, 0, "`\(command)` failed:\n\(result.output)", file: file, line: line)
  return result.output
}

/// One chat line as a reader prints it: `[HH:MM:SS] author: text`.
struct ChatLine: Equatable, CustomStringConvertible {
  var author: String
  var text: String

  var description: String { "\(author): \(text)" }

  /// Parses one line; a line of another shape keeps its text whole under author "?", so a
  /// garbled line shows up in a comparison.
  init(_ line: Substring) {
    guard line.hasPrefix("["), let close = line.firstIndex(of: "]"),
      line[close...].hasPrefix("] ")
    else {
      self.init(author: "?", text: String(line))
      return
    }
    let rest = line[line.index(close, offsetBy: 2)...]
    guard let colon = rest.range(of: ": ") else {
      self.init(author: "?", text: String(line))
      return
    }
    self.init(author: String(rest[..<colon.lowerBound]), text: String(rest[colon.upperBound...]))
  }

  init(author: String, text: String) {
    self.author = author
    self.text = text
  }
}

/// The complete lines (ended by a newline) of a reader's output, parsed.
func chatLines(_ output: String) -> [ChatLine] {
  var lines = output.split(separator: "\n", omittingEmptySubsequences: false)
  lines.removeLast()  // after the last newline: empty, or a line still arriving
  return lines.map(ChatLine.init)
}

/// Texts of the complete chat lines in a reader's output.
func chatTexts(_ output: String) -> [String] {
  chatLines(output).map(\.text)
}
