// mount9bbs: mount a 9P bulletin-board system as files.
//
//   mount9bbs [-f] [-d] [-o opt[,opt…]] ADDRESS MOUNTPOINT
//   mount9bbs --local [-f] MOUNTPOINT
//   mount9bbs -u MOUNTPOINT
//
// Without -f the command returns once the mount is ready and a detached daemon serves it,
// like sshfs: the front process re-runs itself in the foreground with a readiness pipe
// (`--ready-fd`), in a new session, and exits with the daemon's verdict.

import ArgumentParser
import BBSMount
import Foundation
import Logging
import NinePClient
import NinePTransport

@main
enum Mount9BBSMain {
  /// `mount9bbs status …` is a subcommand; everything else is the mount command, whose first
  /// positional argument is an address (so ArgumentParser's subcommands cannot tell them apart).
  static func main() {
    let arguments = Array(CommandLine.arguments.dropFirst())
    if arguments.first == "status" {
      StatusCommand.main(Array(arguments.dropFirst()))
    } else {
      Mount9BBS.main(arguments)
    }
  }
}

struct Mount9BBS: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "mount9bbs",
    abstract: "Mount a 9P bulletin-board system (a 9BBS device or any 9P2000 server) as files.",
    discussion: """
      ADDRESS is a dial string: tcp!host!port, host:port, unix!/path, seqpacket!/path[!mtu],
      l2cap!BDADDR!PSM[!public|random], fd!N, or - (stdin/stdout).

      Options (-o, comma-separated): uname=NAME, aname=PATH, msize=BYTES,
      profile=device|multiplex, sessions=N, ro, allow_other, default_permissions,
      timeout=SECONDS, stream=GLOB (repeatable), and libfuse's own options.

      Other commands:
        mount9bbs status MOUNTPOINT [--json]   link, sessions, outbox and rooms of a mount

      Examples:
        mount9bbs --local ./mnt
        mount9bbs tcp!bbs.local!564 ~/bbs
        mount9bbs l2cap!C0:FF:EE:00:00:01!0x0080 ~/bbs
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
    let address: TransportAddress?
    if local {
      address = nil
    } else {
      do {
        address = try TransportAddress(parsing: arguments[0])
      } catch {
        throw ValidationError("\(error)")
      }
    }
    if foreground || debug || readyFD != nil {
      let daemon = MountDaemon(
        address: address, mountpoint: mountpoint, options: parsed, debug: debug,
        readyFD: readyFD)
      let code = daemon.run()
      if code != 0 { throw ExitCode(code) }
      return
    }
    throw ExitCode(Detacher.spawnAndWait())
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
