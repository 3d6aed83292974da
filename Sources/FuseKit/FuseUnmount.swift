import Foundation
import Glibc

extension FuseMount {
  /// Unmounts the FUSE file system at `path`, also when its daemon died or hangs: a lazy
  /// unmount (`umount2(MNT_DETACH)` as root, else `fusermount3 -u -z`). Never touches the
  /// mount itself (a dead or hung mount would fail or block); it reads the mount table.
  ///
  /// To stop a mount of this process, use ``exit()``: it also answers waiting readers.
  public static func unmount(path: String) throws(FuseMountError) {
    let target = MountTable.absolutePath(path)
    guard let type = MountTable.type(at: target) else { throw .notMounted(target) }
    guard MountTable.isFuse(type) else {
      throw .notFuseMount(target, type: type)
    }
    if geteuid() == 0 {
      guard umount2(target, mntDetach) == 0 else {
        throw .unmountFailed(target, reason: String(cString: strerror(errno)))
      }
      return
    }
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/usr/bin/fusermount3")
    p.arguments = ["-u", "-z", target]
    let err = Pipe()
    p.standardError = err
    do { try p.run() } catch {
      throw .unmountFailed(target, reason: "cannot run fusermount3: \(error)")
    }
    p.waitUntilExit()
    guard p.terminationStatus == 0 else {
      let message = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
      throw .unmountFailed(target, reason: message.trimmingCharacters(in: .whitespacesAndNewlines))
    }
  }

  /// Whether a FUSE file system is mounted at `path` (from the mount table).
  public static func isFuseMount(path: String) -> Bool {
    MountTable.type(at: MountTable.absolutePath(path)).map(MountTable.isFuse) ?? false
  }

  /// `MNT_DETACH` from `<sys/mount.h>`.
  private static let mntDetach: Int32 = 2
}
