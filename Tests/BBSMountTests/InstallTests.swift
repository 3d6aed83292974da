import Foundation
import TestSupport
import XCTest

/// `scripts/install` into a scratch prefix, then the installed pieces used the way a system
/// uses them: mount(8) with `-t fuse.mount9bbs`, an fstab line with `mount -a -T`, the mount
/// helper called directly, and the systemd units checked by `systemd-analyze verify`.
final class InstallTests: XCTestCase {
  private var prefix = ""

  override func setUpWithError() throws {
    prefix = try makeTemporaryDirectory("mount9bbs-prefix")
    let install = try shell(
      "\(PackagePaths.path("scripts/install")) --prefix \(prefix) --build-dir \(BuiltProducts.directory.path) 2>&1",
      timeout: 120)
    XCTAssertEqual(install.status, 0, install.output)
    addTeardownBlock { [prefix] in try? FileManager.default.removeItem(atPath: prefix) }
  }

  func testInstallPutsEverythingInPlace() throws {
    for path in [
      "bin/mount9bbs", "bin/9bbsd", "bin/mount9bbs-bench", "sbin/mount.mount9bbs",
      "sbin/mount.fuse.mount9bbs", "share/man/man1/mount9bbs.1", "share/man/man1/9bbsd.1",
      "share/man/man1/mount9bbs-bench.1", "share/man/man5/mount9bbs.5",
      "share/man/man8/mount.mount9bbs.8", "share/man/man8/mount.fuse.mount9bbs.8",
      "share/bash-completion/completions/mount9bbs", "share/zsh/site-functions/_mount9bbs",
      "share/fish/vendor_completions.d/mount9bbs.fish", "share/bash-completion/completions/9bbsd",
      "lib/systemd/system/9bbsd.service", "lib/systemd/user/mount9bbs@.service",
    ] {
      XCTAssertTrue(FileManager.default.fileExists(atPath: prefix + "/" + path), path)
    }
    XCTAssertEqual(
      try sh("\(prefix)/sbin/mount.mount9bbs --version"),
      try sh("\(prefix)/bin/mount9bbs --version"))
    // The man page is readable by man(1)'s formatter and names every subcommand.
    let page = try shell("MANWIDTH=100 man -l \(prefix)/share/man/man1/mount9bbs.1 2>&1 | col -b")
    XCTAssertEqual(page.status, 0, page.output)
    for word in ["unmount", "status", "scan", "tcp:HOST:PORT", "ServerAliveInterval", "log=FILE"] {
      XCTAssertTrue(page.output.contains(word), "man page lacks \(word)")
    }
    // The bash completion offers the subcommands.
    let completion = try shell(
      "bash -c 'source \(prefix)/share/bash-completion/completions/mount9bbs; COMP_WORDS=(mount9bbs st); COMP_CWORD=1; COMP_LINE=\"mount9bbs st\"; COMP_POINT=12; _mount9bbs; echo \"${COMPREPLY[@]}\"' 2>&1"
    )
    XCTAssertTrue(completion.output.contains("status"), completion.output)
  }

  /// The units name the installed binaries and pass `systemd-analyze verify`; the user unit
  /// mounts on ~/bbs/NAME (a plain name, not an escaped dial string).
  func testSystemdUnitsVerify() throws {
    let units = ["lib/systemd/system/9bbsd.service", "lib/systemd/user/mount9bbs@.service"]
    for unit in units {
      let text = try String(contentsOfFile: prefix + "/" + unit, encoding: .utf8)
      XCTAssertTrue(text.contains("ExecStart=\(prefix)/bin/"), text)
      XCTAssertFalse(text.contains("/usr/local/bin"), text)
      XCTAssertFalse(text.contains("@BINDIR@"), text)
    }
    // The server unit is safe as installed: loopback only, and no first-user sysop (issue 21).
    let server = try String(contentsOfFile: prefix + "/" + units[0], encoding: .utf8)
    XCTAssertTrue(server.contains("NINEBBSD_LISTEN=tcp:127.0.0.1:"), server)
    XCTAssertTrue(server.contains("--sysop none"), server)
    XCTAssertFalse(server.contains("--listen tcp:0.0.0.0"), server)
    let user = try String(contentsOfFile: prefix + "/" + units[1], encoding: .utf8)
    XCTAssertTrue(user.contains("%h/bbs/%i"), user)
    XCTAssertFalse(user.contains("%I"), "the escaped instance must not name a directory")
    // systemd-analyze wants an instance of a template; board "grid".
    let scratch = try makeTemporaryDirectory("mount9bbs-units")
    defer { try? FileManager.default.removeItem(atPath: scratch) }
    try sh("cp \(prefix)/\(units[0]) \(scratch)/")
    try sh("cp \(prefix)/\(units[1]) \(scratch)/mount9bbs@grid.service")
    // The user manager's directories: a private XDG_RUNTIME_DIR and config home.
    let verify = try shell(
      "cd \(scratch) && systemd-analyze verify --man=no 9bbsd.service 2>&1 && "
        + "XDG_RUNTIME_DIR=\(scratch) XDG_CONFIG_HOME=\(scratch) "
        + "systemd-analyze --user verify --man=no mount9bbs@grid.service 2>&1")
    XCTAssertEqual(verify.status, 0, verify.output)
    XCTAssertFalse(verify.output.contains("bad-setting"), verify.output)
  }

  /// mount(8) and fstab mount through the installed mount9bbs: `mount -t fuse.mount9bbs` and
  /// `mount -a -T FSTAB`; `umount` unmounts. mount(8) runs /sbin/mount.fuse with a clean PATH,
  /// which finds `mount9bbs` in /usr/local/bin: a private mount namespace puts the scratch
  /// prefix's binaries there, and the checks run inside it.
  func testMountCommandAndFstab() throws {
    let server = try ServerProcess(transport: "tcp")
    addTeardownBlock { server.stop() }
    let address = server.address.replacingOccurrences(of: "!", with: ":")
    let directory = try mountDirectory()
    let mountpoint = directory + "/mnt"
    let fstab = directory + "/fstab"
    try "\(address) \(mountpoint) fuse.mount9bbs defaults,_netdev,nofail,uname=bob,reconnect 0 0\n"
      .write(toFile: fstab, atomically: true, encoding: .utf8)
    let script = """
      set -e
      mount --bind \(prefix)/bin /usr/local/bin
      export XDG_STATE_HOME=\(directory)
      mount -t fuse.mount9bbs -o uname=alice \(address) \(mountpoint)
      echo "type: $(findmnt -n -o FSTYPE \(mountpoint))"
      mount9bbs status \(mountpoint)
      cat \(mountpoint)/etc/boardname >/dev/null
      umount \(mountpoint)
      echo "after umount: $(findmnt -n -o FSTYPE \(mountpoint) || echo none)"
      mount -a -T \(fstab)
      echo "type: $(findmnt -n -o FSTYPE \(mountpoint))"
      mount9bbs status \(mountpoint)
      umount \(mountpoint)
      echo done
      """
    let result = try shell(
      "unshare --mount --propagation private sh -c '\(script)' 2>&1", timeout: 60)
    XCTAssertEqual(result.status, 0, result.output)
    XCTAssertEqual(
      result.output.components(separatedBy: "type: fuse.mount9bbs").count - 1, 2, result.output)
    XCTAssertTrue(result.output.contains("user alice"), result.output)
    XCTAssertTrue(result.output.contains("user bob"), result.output)
    XCTAssertTrue(result.output.contains("after umount: none"), result.output)
    XCTAssertTrue(result.output.hasSuffix("done\n"), result.output)
    XCTAssertTrue(
      waitUntil(timeout: 10) { mountDaemons(serving: mountpoint).isEmpty },
      "umount left a daemon")
  }

  /// The helper called as mount(8) calls it (`mount.mount9bbs SOURCE DIR -o OPTIONS`), and
  /// its fake mode (`-f`).
  func testMountHelperCall() throws {
    let server = try ServerProcess(transport: "tcp")
    addTeardownBlock { server.stop() }
    let address = server.address.replacingOccurrences(of: "!", with: ":")
    let directory = try mountDirectory()
    let mountpoint = directory + "/mnt"
    let helper = "\(prefix)/sbin/mount.mount9bbs"
    let fake = try shell("\(helper) \(address) \(mountpoint) -f -o rw 2>&1")
    XCTAssertEqual(fake.status, 0, fake.output)
    XCTAssertFalse(isMounted(mountpoint), "-f (fake) mounted")
    let mounted = try shell(
      "XDG_STATE_HOME=\(directory) \(helper) \(address) \(mountpoint) -o rw,nosuid,nodev,uname=carol 2>&1"
    )
    XCTAssertEqual(mounted.status, 0, mounted.output)
    try expectServing(mountpoint, as: "carol")
    XCTAssertEqual(try shell("umount \(mountpoint) 2>&1").status, 0)
    XCTAssertTrue(waitUntil(timeout: 10) { mountDaemons(serving: mountpoint).isEmpty })
  }

  /// A private directory with an empty `mnt`, cleaned up (mount and daemons too) on teardown.
  private func mountDirectory() throws -> String { try makeMountDirectory("mount9bbs-fstab") }

  /// The mount serves, under `uname`, with the mount9bbs type.
  private func expectServing(
    _ mountpoint: String, as uname: String, file: StaticString = #filePath, line: UInt = #line
  ) throws {
    XCTAssertTrue(isMounted(mountpoint), file: file, line: line)
    let type = try sh("findmnt -n -o FSTYPE \(mountpoint)").trimmingCharacters(
      in: .whitespacesAndNewlines)
    XCTAssertEqual(type, "fuse.mount9bbs", file: file, line: line)
    let status = try sh("\(prefix)/bin/mount9bbs status \(mountpoint)")
    XCTAssertTrue(status.contains("user \(uname)"), status, file: file, line: line)
  }
}
