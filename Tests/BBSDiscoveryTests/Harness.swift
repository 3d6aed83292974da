import Foundation
import TestSupport
import XCTest

/// The package root: three levels above this file (Tests/BBSDiscoveryTests/…).
let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
  .deletingLastPathComponent().deletingLastPathComponent()

let ninePISService = "39500001-feed-4a91-ba88-a1e0f6e4c001"

/// The UUID of a 9PIS characteristic by its number (2 description … 6 version).
func ninePIS(_ number: Int) -> String {
  "3950000\(number)-feed-4a91-ba88-a1e0f6e4c001"
}

/// All five characteristics with the given transport information.
func fullService(
  description: String = "9P Server", features: String = "chat,messaging",
  transport: String = "l2cap:psm=0x0009,mtu=4096"
) -> [String: Any] {
  [
    "uuid": ninePISService,
    "characteristics": [
      ninePIS(2): description, ninePIS(3): features, ninePIS(4): transport,
      ninePIS(5): "https://9p4z.org/clients", ninePIS(6): "9P2000;9p4z;1.0.0",
    ],
  ]
}

/// One run of a command, with what it printed and how long it took.
struct CommandRun {
  var status: Int32
  var stdout: String
  var stderr: String
  var seconds: Double
  /// The harness's own output (dbus-daemon, dbusmock), for failure messages.
  var harness: String

  /// stdout's lines parsed as JSON objects.
  var jsonLines: [[String: Any]] {
    stdout.split(separator: "\n").compactMap {
      (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
    }
  }

  var all: String {
    "status \(status)\nstdout:\n\(stdout)\nstderr:\n\(stderr)\nharness:\n\(harness)"
  }
}

/// A fake BlueZ on a private D-Bus bus: python-dbusmock with `Tests/fixtures/bluez_9pis.py`.
///
/// Each run gets a fresh bus (`dbus-run-session`) exported as the system bus, the mock owning
/// `org.bluez` before the command starts, and a fresh cache directory; the mock records every
/// BlueZ method call to `calls.jsonl`.
final class BlueZMock {
  let directory: String
  var callsPath: String { directory + "/calls.jsonl" }
  var cacheHome: String { directory + "/cache" }
  /// The scan's own state directory (its pinned board keys).
  var stateHome: String { directory + "/state" }

  static var python: String {
    PackagePaths.python(
      environment: "MOUNT9BBS_DBUSMOCK_PYTHON", fallback: ".venv-dbusmock/bin/python")
  }

  static var template: String {
    packageRoot.appendingPathComponent("Tests/fixtures/bluez_9pis.py").path
  }

  init() throws {
    directory = try makeTemporaryDirectory("bluez-mock")
  }

  func remove() {
    try? FileManager.default.removeItem(atPath: directory)
  }

  /// Checks the python with dbusmock exists; fails the test with what to do if not.
  static func requirePython(file: StaticString = #filePath, line: UInt = #line) -> Bool {
    guard FileManager.default.isExecutableFile(atPath: python) else {
      XCTFail(
        """
        The dbusmock interpreter is missing: \(python) is not an executable. Run `scripts/test` \
        (it creates .venv-dbusmock with python-dbusmock over the system's python3-dbus and \
        python3-gi), or set MOUNT9BBS_DBUSMOCK_PYTHON.
        """, file: file, line: line)
      return false
    }
    return true
  }

  /// Runs `mount9bbs ARGUMENTS` against the scene. With `scene` nil, no BlueZ owns the bus.
  func run(
    scene: [String: Any]?, _ arguments: [String], environment: [String: String] = [:],
    timeout: TimeInterval = 40
  ) throws -> CommandRun {
    var parameters = scene ?? [:]
    parameters["calls"] = callsPath
    let json = String(
      decoding: try JSONSerialization.data(withJSONObject: parameters), as: UTF8.self)
    let out = directory + "/stdout"
    let err = directory + "/stderr"
    let redirect = ["/bin/sh", "-c", "exec \"$0\" \"$@\" >\"$OUT\" 2>\"$ERR\""]
    let target = redirect + [BuiltProducts.path(of: "mount9bbs")] + arguments
    var inner: [String]
    if scene != nil {
      inner =
        [
          Self.python, "-m", "dbusmock", "--system", "-t", Self.template, "-l",
          directory + "/mock.log", "-p", json, "-e",
        ] + target
    } else {
      inner = target
    }
    inner =
      [
        "/bin/bash", "-c", "export DBUS_SYSTEM_BUS_ADDRESS=$DBUS_SESSION_BUS_ADDRESS; exec \"$@\"",
        "_",
      ] + inner
    var env = [
      "OUT": out, "ERR": err, "XDG_CACHE_HOME": cacheHome, "XDG_STATE_HOME": stateHome,
    ]
    env.merge(environment) { $1 }
    let child = ChildProcess("/usr/bin/dbus-run-session", ["--"] + inner, environment: env)
    let started = Date()
    try child.start()
    guard child.wait(timeout: timeout) else {
      child.stop(grace: 2)
      throw HarnessError("mount9bbs \(arguments) did not finish in \(timeout) s: \(child.text)")
    }
    let seconds = Date().timeIntervalSince(started)
    return CommandRun(
      status: child.process.terminationStatus,
      stdout: (try? String(contentsOfFile: out, encoding: .utf8)) ?? "",
      stderr: (try? String(contentsOfFile: err, encoding: .utf8)) ?? "", seconds: seconds,
      harness: child.text)
  }

  /// The BlueZ calls the mock recorded, in order.
  var calls: [(path: String, method: String, args: [Any])] {
    guard let text = try? String(contentsOfFile: callsPath, encoding: .utf8) else { return [] }
    return text.split(separator: "\n").compactMap { line in
      guard
        let object = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any],
        let path = object["path"] as? String, let method = object["method"] as? String
      else { return nil }
      return (path, method, object["args"] as? [Any] ?? [])
    }
  }

  /// The methods called, in order (`Connect`, `ReadValue`, …).
  var methods: [String] { calls.map(\.method) }

  /// The cached boards file, parsed.
  var cachedBoards: [[String: Any]] {
    let path = cacheHome + "/mount9bbs/boards.json"
    guard let data = FileManager.default.contents(atPath: path) else { return [] }
    return ((try? JSONSerialization.jsonObject(with: data)) as? [[String: Any]]) ?? []
  }
}

/// Runs a shell scenario inside `unshare --net --mount --pid --fork --mount-proc` with its
/// own dbus-daemon and avahi-daemon (`Tests/fixtures/avahi-netns.sh`). The scenario sees
/// `$WORK` (a host temporary directory it may write results to), `$BIN` (the built
/// executables) and a `start_avahi` function; every process it leaves is killed when it ends,
/// and `--kill-child` takes the whole namespace down if a run times out.
final class AvahiNamespace {
  let directory: String

  init() throws {
    directory = try makeTemporaryDirectory("avahi-ns")
  }

  func remove() {
    try? FileManager.default.removeItem(atPath: directory)
  }

  /// Runs `script`; returns its exit status and combined output.
  func run(_ script: String, startAvahi: Bool = true, timeout: TimeInterval = 90) throws
    -> (status: Int32, output: String)
  {
    let path = directory + "/scenario.sh"
    try ("set -u\n" + script).write(toFile: path, atomically: true, encoding: .utf8)
    let harness = packageRoot.appendingPathComponent("Tests/fixtures/avahi-netns.sh").path
    var arguments = [
      "--net", "--mount", "--pid", "--fork", "--mount-proc", "--kill-child", harness, directory,
      path,
    ]
    if !startAvahi { arguments.append("--no-avahi") }
    let child = ChildProcess(
      "/usr/bin/unshare", arguments,
      environment: [
        "BIN": BuiltProducts.directory.path, "XDG_CACHE_HOME": directory + "/cache",
      ])
    try child.start()
    guard child.wait(timeout: timeout) else {
      child.stop(grace: 2)
      throw HarnessError("the namespace scenario did not finish in \(timeout) s:\n\(child.text)")
    }
    return (child.process.terminationStatus, child.text)
  }

  /// A file the scenario wrote under `$WORK`.
  func file(_ name: String) -> String {
    (try? String(contentsOfFile: directory + "/" + name, encoding: .utf8)) ?? ""
  }
}
