import Foundation
import FuseKit
import TestSupport
import XCTest

/// The conventions sshfs users rely on (issue 13): shell-safe dial strings, subcommands,
/// `--version` and help, sshfs's option names, failures that reach the terminal, a detached
/// daemon's log, `status` of every mount, and `-u`/`status` refusing other file systems.
final class CommandConventionsTests: XCTestCase {
  // MARK: - Item 1: dial strings that survive an interactive shell

  /// Every example in the help text pastes into bash as it is: no `!` outside quotes (bash's
  /// history expansion turns `tcp!bbs!564` into "event not found").
  func testHelpExamplesNeedNoQuoting() throws {
    for arguments in [["--help"], ["help", "mount"]] {
      let help = try run("mount9bbs", arguments)
      XCTAssertEqual(help.status, 0, help.output)
      let examples = help.output.split(separator: "\n").filter {
        $0.trimmingCharacters(in: .whitespaces).hasPrefix("mount9bbs ")
      }
      XCTAssertFalse(examples.isEmpty, "no examples in \(arguments): \(help.output)")
      for example in examples {
        XCTAssertFalse(unquotedBang(in: String(example)), "needs quoting: \(example)")
      }
    }
  }

  /// The colon form mounts, typed into an interactive bash (history expansion on).
  func testColonDialStringMountsFromInteractiveBash() throws {
    let server = try startServer()
    let directory = try temporaryDirectory()
    let colon = server.address.replacingOccurrences(of: "!", with: ":")
    let result = try shell(
      "bash --norc -i -c 'set -H; \(binary("mount9bbs")) \(colon) \(directory)/mnt' 2>&1")
    XCTAssertEqual(result.status, 0, result.output)
    XCTAssertFalse(result.output.contains("event not found"), result.output)
    XCTAssertTrue(isMounted(directory + "/mnt"))
    XCTAssertEqual(try sh("cat \(directory)/mnt/etc/boardname").isEmpty, false)
    XCTAssertEqual(try run("mount9bbs", ["unmount", directory + "/mnt"]).status, 0)
  }

  // MARK: - Item 6: version, help, completions

  func testVersionOnEveryExecutable() throws {
    for name in ["mount9bbs", "9bbsd", "mount9bbs-bench"] {
      let result = try run(name, ["--version"])
      XCTAssertEqual(result.status, 0, "\(name): \(result.output)")
      XCTAssertNotNil(
        result.output.range(of: #"^\d+\.\d+\.\d+\n$"#, options: .regularExpression),
        "\(name) --version: \(result.output)")
    }
  }

  func testHelpSubcommandAndCompletions() throws {
    let help = try run("mount9bbs", ["help"])
    XCTAssertEqual(help.status, 0, help.output)
    for subcommand in ["mount", "unmount", "status", "scan"] {
      XCTAssertTrue(help.output.contains(subcommand), help.output)
    }
    let status = try run("mount9bbs", ["help", "status"])
    XCTAssertEqual(status.status, 0, status.output)
    XCTAssertTrue(status.output.contains("every mount9bbs mount"), status.output)
    for shellName in ["bash", "zsh", "fish"] {
      let script = try run("mount9bbs", ["--generate-completion-script", shellName])
      XCTAssertEqual(script.status, 0, script.output)
      for word in ["unmount", "status", "scan", "local", "force"] {
        XCTAssertTrue(script.output.contains(word), "\(shellName) completion lacks \(word)")
      }
    }
  }

  /// The checked-in man pages (generated from the commands by `scripts/generate-man`) still
  /// say what `--help` says: every long option of every (sub)command is in its page.
  func testManPagesCoverEveryOption() throws {
    let pages: [(String, [[String]])] = [
      (
        "mount9bbs",
        [
          ["--help"], ["help", "mount"], ["help", "unmount"], ["help", "status"],
          ["help", "scan"],
        ]
      ),
      ("9bbsd", [["--help"]]),
      ("mount9bbs-bench", [["--help"]]),
    ]
    for (name, helps) in pages {
      let page = try String(
        contentsOfFile: PackagePaths.path("contrib/man/\(name).1"), encoding: .utf8)
      for arguments in helps {
        let help = try run(name, arguments)
        XCTAssertEqual(help.status, 0, help.output)
        let options = help.output.split(separator: "\n")
          .filter { $0.hasPrefix("  -") }
          .flatMap { line in
            // The option column only: it ends where two spaces start the description.
            let column = line.trimmingCharacters(in: .whitespaces).components(separatedBy: "  ")[0]
            return column.split(separator: " ").filter { $0.hasPrefix("--") }.map {
              $0.trimmingCharacters(in: CharacterSet(charactersIn: ","))
            }
          }
        XCTAssertFalse(options.isEmpty, "\(name) \(arguments): no options in \(help.output)")
        for option in options {
          XCTAssertTrue(
            page.contains("Fl \(option.dropFirst())"),
            "contrib/man/\(name).1 lacks \(option) (run scripts/generate-man)")
        }
      }
    }
  }

  /// docs/options.md says it lists every option: each `-o` option `mount9bbs help mount`
  /// names has its row (`watch=`, `highlight=`, `notify=` and `notify-command=` had none).
  func testTheOptionsPageListsEveryOption() throws {
    let page = try String(contentsOfFile: PackagePaths.path("docs/options.md"), encoding: .utf8)
    let help = try run("mount9bbs", ["help", "mount"])
    XCTAssertEqual(help.status, 0, help.output)
    let lines = help.output.split(separator: "\n", omittingEmptySubsequences: false)
    guard let start = lines.firstIndex(where: { $0.hasPrefix("Options (-o") }) else {
      return XCTFail("no options in \(help.output)")
    }
    // The option lines are indented two spaces; a description's wrapped lines are not.
    let keys = lines[(start + 1)...].prefix { !$0.isEmpty }
      .filter { $0.hasPrefix("  ") && !$0.hasPrefix("   ") }
      .compactMap { line in
        line.dropFirst(2).split(whereSeparator: { "=, [|".contains($0) }).first.map(String.init)
      }
    XCTAssertGreaterThan(keys.count, 20, "\(keys)")
    for key in keys where key != "libfuse's" && key != "fstab's" {
      let listed = ["=", "`", "[", ","].contains { page.contains("`\(key)\($0)") }
      XCTAssertTrue(listed, "docs/options.md has no row for \(key)")
    }
  }

  // MARK: - Item 4: sshfs's option names; unknown options named

  func testUnknownAndSshfsOnlyOptionsAreNamed() throws {
    let server = try startServer()
    let directory = try temporaryDirectory()
    for (option, phrase) in [
      ("frobnicate", "unknown option frobnicate"),
      ("kernel_cache", "option kernel_cache is sshfs's"),
      ("uid=abc", "option uid=abc: expected a number"),
      ("umask=999", "option umask=999: expected octal"),
      ("idmap=file", "option idmap=file"),
      ("lazytime", "option lazytime has no meaning here"),
      ("blkdev", "option blkdev has no meaning here"),
    ] {
      for foreground in [false, true] {
        let result = try run(
          "mount9bbs",
          (foreground ? ["-f"] : []) + ["-o", option, server.address, directory + "/mnt"])
        XCTAssertNotEqual(result.status, 0, result.output)
        XCTAssertTrue(result.output.contains(phrase), "\(option): \(result.output)")
        XCTAssertFalse(result.output.contains("libfuse rejected"), result.output)
        XCTAssertFalse(result.output.contains("fsname="), result.output)
        XCTAssertFalse(isMounted(directory + "/mnt"))
      }
    }
  }

  func testSshfsOptionsWork() throws {
    let server = try startServer()
    let directory = try temporaryDirectory()
    let mountpoint = directory + "/mnt"
    let options =
      "reconnect,ServerAliveInterval=5,ServerAliveCountMax=3,idmap=user,uid=1234,gid=4321,umask=077"
    let mounted = try run("mount9bbs", ["-o", options, server.address, mountpoint])
    XCTAssertEqual(mounted.status, 0, mounted.output)
    XCTAssertEqual(
      try sh("stat -c '%u %g %a' \(mountpoint)/etc/motd").trimmingCharacters(in: .newlines),
      "1234 4321 600")
    XCTAssertEqual(
      try sh("stat -c '%u %g %a' \(mountpoint)/chat").trimmingCharacters(in: .newlines),
      "1234 4321 700")
    XCTAssertEqual(try run("mount9bbs", ["-u", mountpoint]).status, 0)
  }

  // MARK: - Item 2: a mount that fails never reports success

  /// `-o max_read=4096` used to exit 0 with nothing mounted (the FUSE INIT failed after the
  /// command had reported success). Now it mounts and serves.
  func testMaxReadMountsAndServes() throws {
    let server = try startServer()
    let directory = try temporaryDirectory()
    let mountpoint = directory + "/mnt"
    let mounted = try run("mount9bbs", ["-o", "max_read=4096", server.address, mountpoint])
    XCTAssertEqual(mounted.status, 0, mounted.output)
    XCTAssertTrue(isMounted(mountpoint), "reported success but mounted nothing")
    XCTAssertFalse(try sh("cat \(mountpoint)/etc/motd").isEmpty)
    XCTAssertEqual(try run("mount9bbs", ["-u", mountpoint]).status, 0)
  }

  /// The access-time options libfuse does not take (`relatime`, `strictatime`, `nodiratime`…;
  /// `-o relatime` once failed with "libfuse rejected the options") are set on the mount, a
  /// later one winning as with mount(8).
  func testAccessTimeOptionsAreSetOnTheMount() throws {
    let server = try startServer()
    let directory = try temporaryDirectory()
    let mountpoint = directory + "/mnt"
    for (options, present, absent) in [
      ("relatime", ["relatime"], ["noatime", "nodiratime"]),
      ("strictatime,nodiratime", ["nodiratime"], ["relatime", "noatime"]),
      ("norelatime", [String](), ["relatime", "noatime"]),
      ("noatime,nodiratime,diratime", ["noatime"], ["relatime", "nodiratime"]),
      ("noatime,relatime", ["relatime"], ["noatime"]),
    ] {
      let mounted = try run("mount9bbs", ["-o", options, server.address, mountpoint])
      XCTAssertEqual(mounted.status, 0, "\(options): \(mounted.output)")
      let flags = try sh("findmnt -n -o VFS-OPTIONS \(mountpoint)")
        .trimmingCharacters(in: .whitespacesAndNewlines).split(separator: ",").map(String.init)
      for flag in present { XCTAssertTrue(flags.contains(flag), "\(options): \(flags)") }
      for flag in absent { XCTAssertFalse(flags.contains(flag), "\(options): \(flags)") }
      XCTAssertFalse(try sh("cat \(mountpoint)/etc/motd").isEmpty, options)
      XCTAssertEqual(try run("mount9bbs", ["-u", mountpoint]).status, 0)
    }
  }

  /// `-o subtype=` mounts as plain `fuse` (xfstests checks the type is its FSTYP) and
  /// `subtype=NAME` as `fuse.NAME`; either is still a mount9bbs mount to `status` and `-u`,
  /// by its `9bbs:` source, which mounts again as an address (xfstests' TEST_DEV is one).
  func testSubtypesAndTheSourceAsAnAddress() throws {
    let server = try startServer()
    let directory = try temporaryDirectory()
    let mountpoint = directory + "/mnt"
    for (subtype, type) in [("", "fuse"), ("bbs", "fuse.bbs")] {
      let mounted = try run(
        "mount9bbs", ["-o", "subtype=\(subtype)", "9bbs:" + server.address, mountpoint])
      XCTAssertEqual(mounted.status, 0, mounted.output)
      let columns = try sh("findmnt -n -o FSTYPE,SOURCE \(mountpoint)")
        .split(separator: " ", omittingEmptySubsequences: true).map(String.init)
      XCTAssertEqual(columns.first, type, "\(columns)")
      XCTAssertEqual(
        columns.last?.trimmingCharacters(in: .whitespacesAndNewlines), "9bbs:" + server.address)
      let status = try run("mount9bbs", ["status", mountpoint])
      XCTAssertEqual(status.status, 0, status.output)
      XCTAssertTrue(try run("mount9bbs", ["status"]).output.contains(mountpoint))
      XCTAssertEqual(try run("mount9bbs", ["-u", mountpoint]).status, 0)
      XCTAssertFalse(isMounted(mountpoint))
    }
    let refused = try run("mount9bbs", ["-o", "subtype=a/b", server.address, mountpoint])
    XCTAssertNotEqual(refused.status, 0)
    XCTAssertTrue(refused.output.contains("option subtype=a/b"), refused.output)
  }

  /// `-o remount,…` (as mount(8) hands a helper, with the mount's present options and the
  /// kernel's) changes a live mount's flags: `ro` makes writes fail with EROFS, `rw` lets them
  /// through again; the mount's own options repeated stay as they are, and an invalid one is
  /// refused by name.
  func testRemountChangesTheMountsFlags() throws {
    let server = try startServer()
    let directory = try temporaryDirectory()
    let mountpoint = directory + "/mnt"
    XCTAssertEqual(try run("mount9bbs", [server.address, mountpoint]).status, 0)
    let source = "9bbs:" + server.address
    let readOnly = try run(
      "mount9bbs",
      ["-o", "ro,nosuid,nodev,relatime,remount,user_id=0,group_id=0", source, mountpoint])
    XCTAssertEqual(readOnly.status, 0, readOnly.output)
    XCTAssertTrue(try sh("findmnt -n -o VFS-OPTIONS \(mountpoint)").hasPrefix("ro,"))
    let write = try shell("echo hi > \(mountpoint)/chat/post")
    XCTAssertNotEqual(write.status, 0, "a write on a ro remount")
    XCTAssertTrue(write.output.contains("Read-only file system"), write.output)
    XCTAssertEqual(try run("mount9bbs", ["-o", "remount,rw", source, mountpoint]).status, 0)
    XCTAssertTrue(try sh("findmnt -n -o VFS-OPTIONS \(mountpoint)").hasPrefix("rw,"))
    // The options the mount was made with come again (fstab's, xfstests' MOUNT_OPTIONS):
    // they stay as they are; an invalid one is still an error.
    let repeated = try run(
      "mount9bbs", ["-o", "remount,ro,uname=alice,aname=/,subtype=", source, mountpoint])
    XCTAssertEqual(repeated.status, 0, repeated.output)
    let refused = try run("mount9bbs", ["-o", "remount,rw,frobnicate", source, mountpoint])
    XCTAssertNotEqual(refused.status, 0)
    XCTAssertTrue(refused.output.contains("unknown option frobnicate"), refused.output)
    XCTAssertEqual(try run("mount9bbs", ["-u", mountpoint]).status, 0)
  }

  /// fusermount3's own reason reaches the terminal of a detached mount, with a non-zero
  /// status (`auto_unmount` makes libfuse mount through fusermount3 even for root; the
  /// option it rejects stands for any refusal, such as `allow_other` without
  /// `user_allow_other`).
  func testFusermountReasonReachesTerminal() throws {
    let server = try startServer()
    let directory = try temporaryDirectory()
    let result = try run(
      "mount9bbs", ["-o", "auto_unmount,context=bogus", server.address, directory + "/mnt"])
    XCTAssertNotEqual(result.status, 0, result.output)
    XCTAssertTrue(result.output.contains("fusermount3: unknown option"), result.output)
    XCTAssertTrue(result.output.contains("mount9bbs: mounting on"), result.output)
    XCTAssertFalse(isMounted(directory + "/mnt"))
    XCTAssertTrue(waitUntil(timeout: 5) { mountDaemons(serving: directory + "/mnt").isEmpty })
  }

  // MARK: - Item 3: the daemon's messages

  /// A detached daemon logs to `-o log=FILE`: losing the server is written there.
  func testDetachedDaemonLogsToFile() throws {
    let server = try startServer()
    let directory = try temporaryDirectory()
    let mountpoint = directory + "/mnt"
    let log = directory + "/mount.log"
    let mounted = try run("mount9bbs", ["-o", "log=\(log)", server.address, mountpoint])
    XCTAssertEqual(mounted.status, 0, mounted.output)
    XCTAssertEqual(mountOutput(mounted.output), "", "a successful mount prints nothing")
    server.stop()
    XCTAssertTrue(
      waitUntil(timeout: 30) {
        ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("lost")
      }, (try? String(contentsOfFile: log, encoding: .utf8)) ?? "no log file")
    XCTAssertEqual(try run("mount9bbs", ["-u", mountpoint]).status, 0)
  }

  /// Without `log=`, a detached daemon logs to the journal: a stand-in journald (a listener on
  /// the journal's stream socket, in a private mount namespace with its own /run) receives the
  /// daemon's lines with their syslog priority, here the warning that the server went away.
  func testDetachedDaemonLogsToJournal() throws {
    let server = try startServer()
    let directory = try temporaryDirectory()
    let mountpoint = directory + "/mnt"
    let received = directory + "/journal.txt"
    let listener = directory + "/journald.py"
    try """
    import os, socket, sys, threading
    # Inherited descriptors (the test's output pipe among them) must not outlive the script.
    os.closerange(3, 65536)
    path, out = sys.argv[1], sys.argv[2]
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(8)
    open(out + ".pid", "w").write(str(os.getpid()))
    def serve(connection):
        with open(out, "ab", buffering=0) as log:
            while True:
                data = connection.recv(4096)
                if not data:
                    return
                log.write(data)
    while True:
        connection, _ = server.accept()
        threading.Thread(target=serve, args=(connection,), daemon=True).start()
    """.write(toFile: listener, atomically: true, encoding: .utf8)
    addTeardownBlock {
      if let text = try? String(contentsOfFile: received + ".pid", encoding: .utf8),
        let pid = pid_t(text)
      {
        kill(pid, SIGKILL)
      }
    }
    let script = """
      set -e
      mount -t tmpfs tmpfs /run
      mkdir -p /run/systemd/journal
      python3 \(listener) /run/systemd/journal/stdout \(received) >/dev/null 2>&1 &
      while [ ! -S /run/systemd/journal/stdout ]; do sleep 0.05; done
      XDG_RUNTIME_DIR=\(directory) XDG_STATE_HOME=\(directory) \(binary("mount9bbs")) \(server.address) \(mountpoint)
      ls \(mountpoint)/etc >/dev/null
      """
    let mounted = try shell(
      "timeout 60 unshare --mount --propagation private sh -c '\(script)' 2>&1", timeout: 90)
    XCTAssertEqual(mounted.status, 0, mounted.output)
    let journal = { (try? String(contentsOfFile: received, encoding: .utf8)) ?? "" }
    // The stream's header names the program; then the daemon's own first line.
    XCTAssertTrue(waitUntil(timeout: 10) { journal().hasPrefix("mount9bbs\n") }, journal())
    server.stop()
    XCTAssertTrue(
      waitUntil(timeout: 30) { journal().contains("<4>link to \(server.address) lost") }, journal())
    for pid in mountDaemons(serving: mountpoint) { kill(pid, SIGTERM) }
    XCTAssertTrue(waitUntil(timeout: 10) { mountDaemons(serving: mountpoint).isEmpty })
  }

  /// A mount made without XDG_RUNTIME_DIR (an ssh or su shell: root's records go to
  /// /run/mount9bbs) is found by `status` and `-u` run with one (a desktop terminal), which
  /// once said a live daemon was probably killed and suggested `-u`.
  func testStatusAndUnmountFindAMountMadeWithAnotherRuntimeDirectory() throws {
    let server = try startServer()
    let directory = try temporaryDirectory()
    let mountpoint = directory + "/mnt"
    let mount9bbs = binary("mount9bbs")
    let mounted = try shell("env -u XDG_RUNTIME_DIR \(mount9bbs) \(server.address) \(mountpoint)")
    XCTAssertEqual(mounted.status, 0, mounted.output)
    addTeardownBlock { forceUnmount(mountpoint) }
    let desktop = try makeTemporaryDirectory("runtime")
    let status = try shell("XDG_RUNTIME_DIR=\(desktop) \(mount9bbs) status \(mountpoint) 2>&1")
    XCTAssertEqual(status.status, 0, status.output)
    XCTAssertFalse(status.output.contains("killed"), status.output)
    let unmounted = try shell("XDG_RUNTIME_DIR=\(desktop) \(mount9bbs) -u \(mountpoint) 2>&1")
    XCTAssertEqual(unmounted.status, 0, unmounted.output)
    XCTAssertTrue(waitUntil(timeout: 10) { !isMounted(mountpoint) })
    XCTAssertTrue(waitUntil(timeout: 10) { mountDaemons(serving: mountpoint).isEmpty })
  }

  func testUnwritableLogFileFailsTheMount() throws {
    let server = try startServer()
    let directory = try temporaryDirectory()
    let result = try run(
      "mount9bbs", ["-o", "log=\(directory)/no/such/dir/log", server.address, directory + "/mnt"])
    XCTAssertNotEqual(result.status, 0)
    XCTAssertTrue(result.output.contains("cannot open the log file"), result.output)
    XCTAssertFalse(isMounted(directory + "/mnt"))
  }

  /// A log file in a directory others may write (as /tmp): a link planted there is not
  /// followed, and another user's file is not written to; the mount fails saying so.
  func testALogFilePlantedInASharedDirectoryIsRefused() throws {
    let server = try startServer()
    let directory = try temporaryDirectory()
    let shared = directory + "/tmp"
    try FileManager.default.createDirectory(atPath: shared, withIntermediateDirectories: true)
    XCTAssertEqual(chmod(shared, 0o1777), 0)
    let victim = directory + "/victim"
    XCTAssertTrue(FileManager.default.createFile(atPath: victim, contents: Data("mine\n".utf8)))
    try FileManager.default.createSymbolicLink(
      atPath: shared + "/m.log", withDestinationPath: victim)
    let linked = try run(
      "mount9bbs", ["-o", "log=\(shared)/m.log", server.address, directory + "/mnt"])
    XCTAssertNotEqual(linked.status, 0)
    XCTAssertTrue(
      linked.output.contains("is a symbolic link in a directory others may write"), linked.output)
    XCTAssertEqual(try String(contentsOfFile: victim, encoding: .utf8), "mine\n")
    let theirs = shared + "/theirs.log"
    XCTAssertTrue(FileManager.default.createFile(atPath: theirs, contents: Data()))
    XCTAssertEqual(chown(theirs, 65534, 65534), 0, "the tests run as root")
    let owned = try run("mount9bbs", ["-o", "log=\(theirs)", server.address, directory + "/mnt"])
    XCTAssertNotEqual(owned.status, 0)
    XCTAssertTrue(owned.output.contains("another user's (uid 65534)"), owned.output)
    XCTAssertFalse(isMounted(directory + "/mnt"))
  }

  /// `-o debug` is sshfs's `-d`: foreground, tracing to the terminal.
  func testDebugOptionStaysInForegroundAndTraces() throws {
    let server = try startServer()
    let directory = try temporaryDirectory()
    let mountpoint = directory + "/mnt"
    let child = ChildProcess(
      binary("mount9bbs"), ["-o", "debug", server.address, mountpoint],
      environment: ["XDG_STATE_HOME": directory])
    try child.start()
    addTeardownBlock { child.stop() }
    XCTAssertTrue(waitUntil(timeout: 15) { isMounted(mountpoint) || !child.isRunning }, child.text)
    _ = try sh("ls \(mountpoint)")
    XCTAssertTrue(child.isRunning, "-o debug detached: \(child.text)")
    XCTAssertTrue(waitUntil(timeout: 10) { child.text.contains("Twalk") }, child.text)
    child.signal(SIGTERM)
    XCTAssertTrue(child.wait(timeout: 15))
    XCTAssertFalse(isMounted(mountpoint))
  }

  // MARK: - Item 7: status of every mount; -u and status refuse other mounts

  func testStatusWithoutArgumentListsEveryMount() throws {
    let server = try startServer()
    let directory = try temporaryDirectory()
    let second = directory + "/second"
    try FileManager.default.createDirectory(atPath: second, withIntermediateDirectories: false)
    addTeardownBlock { forceUnmount(second) }
    for mountpoint in [directory + "/mnt", second] {
      let mounted = try run("mount9bbs", [server.address, mountpoint])
      XCTAssertEqual(mounted.status, 0, mounted.output)
    }
    let status = try run("mount9bbs", ["status"])
    XCTAssertEqual(status.status, 0, status.output)
    XCTAssertTrue(status.output.contains("\(directory)/mnt: tcp!127.0.0.1"), status.output)
    XCTAssertTrue(status.output.contains("\(second): tcp!127.0.0.1"), status.output)
    let json = try run("mount9bbs", ["status", "--json"])
    let documents = json.output.split(separator: "\n").filter { $0.contains(directory) }
    XCTAssertEqual(documents.count, 2, json.output)
    for document in documents {
      XCTAssertNoThrow(
        try JSONSerialization.jsonObject(with: Data(document.utf8)), String(document))
    }
    for mountpoint in [directory + "/mnt", second] {
      XCTAssertEqual(try run("mount9bbs", ["-u", mountpoint]).status, 0)
    }
  }

  /// Another file system's FUSE mount (here an "sshfs" served in-process) is refused by
  /// `-u`, `unmount` and `status`, unmounted with `--force`, and mounting onto it says it is
  /// a mount, not "not empty".
  func testOtherFuseMountsAreRefused() throws {
    let directory = try temporaryDirectory()
    let mountpoint = directory + "/mnt"
    var options = FuseMountOptions()
    options.fsName = "alice@host:"
    options.subtype = "sshfs"
    let session = FuseMount(
      fileSystem: EmptyFileSystem(), mountpoint: mountpoint, options: options)
    try session.start()
    addTeardownBlock { session.exit() }
    XCTAssertTrue(waitUntil(timeout: 10) { isMounted(mountpoint) })

    for arguments in [["-u", mountpoint], ["unmount", mountpoint], ["status", mountpoint]] {
      let result = try run("mount9bbs", arguments)
      XCTAssertNotEqual(result.status, 0, "\(arguments): \(result.output)")
      XCTAssertTrue(result.output.contains("is not a mount9bbs mount (it is sshfs)"), result.output)
      XCTAssertFalse(result.output.contains("was it killed"), result.output)
      XCTAssertTrue(isMounted(mountpoint), "\(arguments) unmounted a foreign mount")
    }
    let listed = try run("mount9bbs", ["status"])
    XCTAssertFalse(listed.output.contains(mountpoint), listed.output)

    let onto = try run("mount9bbs", ["--local", mountpoint])
    XCTAssertNotEqual(onto.status, 0)
    XCTAssertTrue(onto.output.contains("is already mounted (fuse.sshfs)"), onto.output)
    XCTAssertFalse(onto.output.contains("not empty"), onto.output)

    let forced = try run("mount9bbs", ["-u", "--force", mountpoint])
    XCTAssertEqual(forced.status, 0, forced.output)
    XCTAssertTrue(waitUntil(timeout: 10) { !isMounted(mountpoint) })
  }

  // MARK: - Helpers

  private func binary(_ name: String) -> String { BuiltProducts.path(of: name) }

  /// Runs a built executable to completion (bounded); its status and stdout+stderr.
  private func run(_ name: String, _ arguments: [String], timeout: TimeInterval = 30) throws -> (
    status: Int32, output: String
  ) {
    try runBuilt(name, arguments, timeout: timeout)
  }

  /// Whether `line` has a `!` outside single or double quotes.
  private func unquotedBang(in line: String) -> Bool {
    var quote: Character?
    for character in line {
      if let open = quote {
        if character == open { quote = nil }
      } else if character == "'" || character == "\"" {
        quote = character
      } else if character == "!" {
        return true
      }
    }
    return false
  }

  private func startServer() throws -> ServerProcess { try startServerProcess() }

  private func temporaryDirectory() throws -> String { try makeMountDirectory("mount9bbs-conv") }
}

/// A FUSE file system that answers nothing: stands in for another program's mount.
final class EmptyFileSystem: FuseFileSystem, Sendable {
  func lookup(_ request: FuseRequest, parent: FuseInode, name: String) {
    _ = request.replyError(ENOENT)
  }

  func getattr(_ request: FuseRequest, inode: FuseInode, file: FuseFileInfo?) {
    var attributes = stat()
    attributes.st_ino = 1
    attributes.st_mode = S_IFDIR | 0o755
    attributes.st_nlink = 2
    _ = request.replyAttr(attributes, timeout: 1)
  }
}
