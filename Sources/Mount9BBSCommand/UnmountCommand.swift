import ArgumentParser
import Foundation
import FuseKit

#if canImport(Glibc)
  import Glibc
#endif

/// `mount9bbs unmount MOUNTPOINT`, the same as `mount9bbs -u MOUNTPOINT`.
struct UnmountCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "unmount",
    abstract: "Unmount a mount9bbs mount (also one whose daemon died).",
    discussion: """
      Asks the mount's daemon to stop (it answers waiting readers and unmounts), else \
      unmounts lazily. Refuses a mount that is not mount9bbs's (an sshfs mount, say) unless \
      --force is given.
      """,
    aliases: ["umount"])

  @Flag(help: "Unmount even a mount that is not mount9bbs's.")
  var force = false

  @Argument(help: "The mount point.")
  var mountpoint: String

  func run() throws {
    try Unmounter.unmount(mountpoint, force: force)
  }
}

/// Stops a mount: its daemon if it lives, else a lazy unmount.
enum Unmounter {
  static func unmount(_ path: String, force: Bool) throws {
    let absolute = MountTable.absolutePath(path)
    if !force, let type = MountTable.type(at: absolute), !MountTable.isMount9BBS(at: absolute) {
      let kind = type.hasPrefix("fuse.") ? String(type.dropFirst(5)) : type
      Diagnostics.fail(
        "mount9bbs: \(absolute) is not a mount9bbs mount (it is \(kind)); use --force to unmount it anyway"
      )
      throw ExitCode(1)
    }
    if getuid() != 0, let others = MountTable.othersMount(at: absolute, asking: "-u") {
      Diagnostics.fail("mount9bbs: \(others)")
      throw ExitCode(1)
    }
    // A live daemon is asked to stop: it answers blocked readers and unmounts itself.
    let record: RuntimeRecord?
    do {
      record = try RuntimeRecord(mountpoint: path)
    } catch {
      // Unmounting needs no record; only stopping the daemon politely does.
      Diagnostics.fail("mount9bbs: \(error); unmounting without asking its daemon")
      record = nil
    }
    if let pid = record?.livePID, FuseMount.isFuseMount(path: path) {
      kill(pid, SIGTERM)
      let deadline = Date(timeIntervalSinceNow: 5)
      while FuseMount.isFuseMount(path: path) && Date() < deadline {
        usleep(10_000)
      }
      if !FuseMount.isFuseMount(path: path) { return }
    }
    do {
      try FuseMount.unmount(path: path)
      record?.remove()
    } catch {
      Diagnostics.fail("mount9bbs: \(error)")
      throw ExitCode(1)
    }
  }
}
