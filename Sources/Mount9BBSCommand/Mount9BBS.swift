// mount9bbs: mount a 9P bulletin-board system as files.
//
//   mount9bbs [mount] [-f] [-d] [-o opt[,opt…]] ADDRESS MOUNTPOINT
//   mount9bbs [mount] --local [-f] MOUNTPOINT
//   mount9bbs unmount [--force] MOUNTPOINT        (also: mount9bbs -u MOUNTPOINT)
//   mount9bbs status [MOUNTPOINT] [--json]         (StatusCommand)
//   mount9bbs scan [--timeout S] [--json] [--feature F] [--lan]   (ScanCommand)
//   mount9bbs keygen [--type ed25519|p256] [--file PATH] [--show]   (KeygenCommand)
//
// Without -f the command returns once the mount is ready and a detached daemon serves it,
// like sshfs: the front process re-runs itself in the foreground with a readiness pipe
// (`--ready-fd`), in a new session, and exits with the daemon's verdict.
//
// Installed as `mount.mount9bbs` or `mount.fuse.mount9bbs`, it follows mount(8)'s helper
// convention (`mount.TYPE SOURCE DIR [-sfnv] [-o OPTIONS]`), so `mount -t fuse.mount9bbs` and
// fstab lines work.
//
// ADDRESS may name a board instead (`ble:NAME`, `ble:BDADDR`, `mdns:NAME`): the front process
// resolves it (discovery cache, else a short scan) into dial strings and hands them to the
// daemon with `--resolved`, so the daemon never scans.

import ArgumentParser
import Foundation
import NinePTransport

@main
enum Mount9BBSMain {
  /// The arguments as parsed (after translating a mount helper's call): what the detached
  /// daemon is started with.
  // Written once by main() before the command runs; only read after that.
  nonisolated(unsafe) static var arguments: [String] = []

  static func main() {
    let name = (CommandLine.arguments.first ?? "").split(separator: "/").last.map(String.init)
    var given = Array(CommandLine.arguments.dropFirst())
    if let name, name.hasPrefix("mount.") {
      switch MountHelperCall.translate(given) {
      case .mount(let translated): given = translated
      case .fake: exit(0)
      case .invalid(let reason):
        Diagnostics.fail("\(name): \(reason)")
        // mount(8)'s "usage or syntax error".
        exit(1)
      }
    }
    arguments = given
    Mount9BBS.main(given)
  }
}

/// The `mount9bbs` command: its subcommands, `mount` being the default, so the sshfs-like
/// `mount9bbs ADDRESS MOUNTPOINT` works as it always did.
struct Mount9BBS: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "mount9bbs",
    abstract: "Mount a 9P bulletin-board system (a 9BBS device or any 9P2000 server) as files.",
    usage: """
      mount9bbs [mount] [-f] [-d] [-o opt[,opt…]] ADDRESS MOUNTPOINT
      mount9bbs [mount] --local [-f] MOUNTPOINT
      mount9bbs unmount [--force] MOUNTPOINT     (or: mount9bbs -u MOUNTPOINT)
      mount9bbs status [MOUNTPOINT] [--json]
      mount9bbs chat [MOUNTPOINT] [ROOM]
      mount9bbs scan [--timeout S] [--json] [--feature F] [--lan]
      mount9bbs keygen [--type ed25519|p256] [--file PATH] [--show]
      mount9bbs help [SUBCOMMAND]
      """,
    discussion: """
      Without a subcommand, mount9bbs mounts: `mount9bbs ADDRESS MOUNTPOINT` is \
      `mount9bbs mount ADDRESS MOUNTPOINT` (see `mount9bbs help mount` for addresses and -o \
      options).

      Examples:
        mount9bbs --local ./mnt
        mount9bbs tcp:bbs.local:5640 ~/bbs
        mount9bbs l2cap:C0:FF:EE:00:00:01:0x0080 ~/bbs
        mount9bbs scan && mount9bbs ble:THE_GRID ~/bbs
        mount9bbs status
        mount9bbs -u ~/bbs
      """,
    version: ProductVersion.current,
    subcommands: [
      MountCommand.self, UnmountCommand.self, StatusCommand.self, ScanCommand.self,
      KeygenCommand.self, ChatCommand.self,
    ],
    defaultSubcommand: MountCommand.self)
}
