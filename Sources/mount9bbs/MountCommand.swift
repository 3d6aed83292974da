// mount9bbs: mount a 9P bulletin-board system as files.
//
//   mount9bbs [-f] [-d] [-o opt[,opt…]] ADDRESS MOUNTPOINT
//   mount9bbs --local [-f] MOUNTPOINT
//   mount9bbs -u MOUNTPOINT
//   mount9bbs scan [--timeout S] [--json] [--feature F] [--lan]   (ScanCommand)
//
// Without -f the command returns once the mount is ready and a detached daemon serves it,
// like sshfs: the front process re-runs itself in the foreground with a readiness pipe
// (`--ready-fd`), in a new session, and exits with the daemon's verdict.
//
// ADDRESS may name a board instead (`ble!NAME`, `ble!BDADDR`, `mdns!NAME`): the front process
// resolves it (discovery cache, else a short scan) into dial strings and hands them to the
// daemon with `--resolved`, so the daemon never scans.

import ArgumentParser
import BBSDiscovery
import BBSMount
import Foundation
import FuseKit
import Logging
import NinePClient
import NinePTransport

@main
enum Mount9BBSMain {
  /// `mount9bbs scan …` and `mount9bbs status …` are subcommands; everything else is the
  /// mount command, whose first positional argument is an address (so ArgumentParser's
  /// subcommands cannot tell them apart).
  static func main() {
    let arguments = Array(CommandLine.arguments.dropFirst())
    switch arguments.first {
    case "scan": ScanCommand.main(Array(arguments.dropFirst()))
    case "status": StatusCommand.main(Array(arguments.dropFirst()))
    case "keygen": KeygenCommand.main(Array(arguments.dropFirst()))
    default: Mount9BBS.main(arguments)
    }
  }
}

struct Mount9BBS: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "mount9bbs",
    abstract: "Mount a 9P bulletin-board system (a 9BBS device or any 9P2000 server) as files.",
    usage: """
      mount9bbs [-f] [-d] [-o opt[,opt…]] ADDRESS MOUNTPOINT
      mount9bbs --local [-f] MOUNTPOINT
      mount9bbs -u MOUNTPOINT
      mount9bbs scan [--timeout S] [--json] [--feature F] [--lan]
      mount9bbs status MOUNTPOINT [--json]
      mount9bbs keygen [--type ed25519|p256] [--file PATH] [--show]
      """,
    discussion: """
      ADDRESS is a dial string: tcp!host!port, host:port, unix!/path, seqpacket!/path[!mtu], \
      l2cap!BDADDR!PSM[!public|random], fd!N, or - (stdin/stdout); or a board's name: \
      ble!NAME or ble!BDADDR (Bluetooth LE, 9PIS) or mdns!NAME (LAN), looked up in the cache \
      of `mount9bbs scan`, else found by a short scan.

      mount9bbs scan finds boards over Bluetooth LE, or with --lan 9P servers on the LAN \
      (see mount9bbs scan --help).

      Options (-o, comma-separated): uname=NAME, aname=PATH, msize=BYTES,
      profile=device|multiplex, sessions=N, ro, allow_other, default_permissions,
      timeout=SECONDS, stream=GLOB (repeatable), reconnect=on|off, keepalive=SECONDS,
      outbox=on|off, history=on|off, identity=PATH|agent[:MATCH], auth=auto|required|off,
      and libfuse's own options.

      mount9bbs keygen makes the key that is your identity on boards that authenticate
      (see mount9bbs keygen --help).

      mount9bbs status shows a mount's link, sessions, outbox and room feeds.

      Examples:
        mount9bbs --local ./mnt
        mount9bbs tcp!bbs.local!564 ~/bbs
        mount9bbs l2cap!C0:FF:EE:00:00:01!0x0080 ~/bbs
        mount9bbs scan && mount9bbs 'ble!THE_GRID' ~/bbs
        mount9bbs scan --lan && mount9bbs 'mdns!My BBS' ~/bbs
        mount9bbs -u ~/bbs
      """)

  @Flag(name: .customShort("f"), help: "Stay in the foreground.")
  var foreground = false

  @Flag(name: .customShort("d"), help: "Trace 9P and FUSE traffic to stderr (implies -f).")
  var debug = false

  @Option(name: .customShort("o"), help: "Mount options, comma-separated (see above).")
  var options: [String] = []

  @Flag(name: .customLong("local"), help: "Serve a built-in 9BBS in-process; no device needed.")
  var local = false

  @Flag(name: .customShort("u"), help: "Unmount MOUNTPOINT (also a mount whose daemon died).")
  var unmount = false

  @Option(name: .customLong("ready-fd"), help: .hidden)
  var readyFD: Int32?

  /// Dial strings the front process resolved a board name to (for the detached daemon).
  @Option(name: .customLong("resolved"), help: .hidden)
  var resolved: [String] = []

  @Argument(help: "ADDRESS MOUNTPOINT, or just MOUNTPOINT with --local or -u.")
  var arguments: [String] = []

  func validate() throws {
    let wanted = (local || unmount) ? 1 : 2
    if local && unmount { throw ValidationError("--local and -u cannot be used together.") }
    guard arguments.count == wanted else {
      if arguments.isEmpty { throw ValidationError("Missing MOUNTPOINT.") }
      if wanted == 2 && arguments.count == 1 {
        throw ValidationError(
          "Missing ADDRESS or MOUNTPOINT (or use --local for the built-in BBS).")
      }
      throw ValidationError("Too many arguments: \(arguments.joined(separator: " ")).")
    }
  }

  func run() throws {
    if unmount {
      return try runUnmount(arguments[0])
    }
    let mountpoint = arguments[arguments.count - 1]
    let parsed: ParsedOptions
    do {
      parsed = try ParsedOptions(options)
    } catch {
      throw ValidationError("\(error)")
    }
    var addresses: [TransportAddress] = []
    if !local {
      do {
        addresses = try resolveAddress(arguments[0])
      } catch let error as DiscoveryError {
        Diagnostics.fail("mount9bbs: \(error)")
        throw ExitCode(1)
      } catch {
        throw ValidationError("\(error)")
      }
    }
    if foreground || debug || readyFD != nil {
      let daemon = MountDaemon(
        address: addresses.first, mountpoint: mountpoint, options: parsed, debug: debug,
        readyFD: readyFD, fallbacks: Array(addresses.dropFirst()))
      let code = daemon.run()
      if code != 0 { throw ExitCode(code) }
      return
    }
    let handOver = resolved.isEmpty ? addresses.flatMap { ["--resolved", $0.description] } : []
    throw ExitCode(Detacher.spawnAndWait(extraArguments: handOver))
  }

  /// The addresses to dial for ADDRESS: a dial string's one address, or those a board name
  /// resolves to (handed over in `--resolved`, else from the cache or a short scan).
  private func resolveAddress(_ text: String) throws -> [TransportAddress] {
    guard let reference = try BoardReference(parsing: text) else {
      return [try TransportAddress(parsing: text)]
    }
    if !resolved.isEmpty {
      return try resolved.map { try TransportAddress(parsing: $0) }
    }
    var logger = Logger(label: "mount9bbs") { StreamLogHandler.standardError(label: $0) }
    logger.logLevel = debug ? .trace : .notice
    let resolution = try BoardResolver(logger: logger).resolve(reference)
    return resolution.addresses
  }

  private func runUnmount(_ path: String) throws {
    // A live daemon is asked to stop: it answers blocked readers and unmounts itself.
    let record = RuntimeRecord(mountpoint: path)
    if let pid = record.livePID, FuseSession.isFuseMount(path: path) {
      kill(pid, SIGTERM)
      let deadline = Date(timeIntervalSinceNow: 5)
      while FuseSession.isFuseMount(path: path) && Date() < deadline {
        usleep(10_000)
      }
      if !FuseSession.isFuseMount(path: path) { return }
    }
    do {
      try FuseSession.unmount(path: path)
      record.remove()
    } catch {
      Diagnostics.fail("mount9bbs: \(error)")
      throw ExitCode(1)
    }
  }
}

/// Writes a line to stderr (Swift 6 rejects touching `stderr` directly).
enum Diagnostics {
  static func fail(_ message: String) {
    let line = message.hasSuffix("\n") ? message : message + "\n"
    _ = line.utf8CString.withUnsafeBufferPointer { write(2, $0.baseAddress, $0.count - 1) }
  }
}
