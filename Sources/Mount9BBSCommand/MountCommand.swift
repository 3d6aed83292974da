// `mount9bbs mount ADDRESS MOUNTPOINT`, the default subcommand: checks the arguments, resolves
// a board's name into addresses, and runs the mount (MountDaemon) detached or in the
// foreground.

import ArgumentParser
import BBSDiscovery
import BBSMount
import Foundation
import FuseKit
import Logging
import NinePClient
import NinePTransport

struct MountCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "mount",
    abstract: "Mount a board (the default subcommand).",
    usage: """
      mount9bbs [-f] [-d] [-o opt[,opt…]] ADDRESS MOUNTPOINT
      mount9bbs --local [-f] MOUNTPOINT
      mount9bbs -u [--force] MOUNTPOINT
      """,
    discussion: """
      ADDRESS is a dial string: tcp:HOST:PORT (or HOST:PORT, [V6ADDR]:PORT), unix:/PATH, \
      seqpacket:/PATH[:MTU], l2cap:BDADDR:PSM[:public|random], fd:N, or - (stdin/stdout); \
      or a board's name: ble:NAME or ble:BDADDR (Bluetooth LE, 9PIS) or mdns:NAME (LAN), \
      looked up in the cache of `mount9bbs scan`, else found by a short scan. The Plan 9 \
      forms with ! (tcp!HOST!PORT and so on) work too, quoted: bash expands an unquoted !. 9bbsd \
      listens on port 5640; 564 is 9P's standard port. Several transports of one BBS, \
      comma-separated (ADDR1,ADDR2), are tried in order: the mount fails over when the one in \
      use dies and goes back to an earlier one when it answers again.

      Options (-o, comma-separated, repeatable):
        uname=NAME            9P user name (default: your login name)
        aname=PATH            attach to a subtree
        msize=BYTES           largest 9P message asked for
        profile=device|multiplex   wire discipline (default from the transport)
        sessions=N            most connections to the server, 1-16
        timeout=SECONDS       how long a request may wait (30)
        stream=GLOB           more paths to treat as streams (repeatable)
        reconnect[=on|off]    re-dial a lost link (on)
        keepalive=SECONDS     probe an idle link (15; 0: off); alias ServerAliveInterval
        ServerAliveCountMax=N unanswered probes before the link is dead (2)
        outbox=on|off         keep posts made offline and send them later (on)
        history=on|off        keep rooms' lines on disk for the next mount (on)
        watch=all|mine|none|ROOM[:ROOM...]   rooms read in the background for \
      chat/unread, chat/mentions and chat/events (all on a multiplex server; mine on a 9BBS \
      board: the 3 rooms you read last)
        watch-interval=SECONDS   how often the room list and chat/users are read again \
      for rooms and users coming and going (10; 60 on a device board; 1-3600)
        highlight=WORD[:WORD...]   more words that make a line a mention (whole words, any \
      case; your user name and identity always do)
        notify=mentions|all|off   desktop notifications on the session bus (mentions)
        notify-command=CMD    run CMD (a program and its arguments, no shell) per mention \
      with ROOM, AUTHOR, TEXT and BOARD in its environment
        readahead=KIB         page-cache readahead of the mount (8192; 0: the kernel's)
        uid=N, gid=N          owner and group shown for every file (default: yours)
        umask=MODE            permission bits to clear, octal (e.g. 077)
        idmap=user            accepted for sshfs: files are always shown as yours
        ro, rw                read-only or read-write mount
        allow_other           let other users read (turns on default_permissions); only \
      you write and post
        allow_other_write     let other users in to write and post too, as you
        rawtext               room lines keep other users' control characters and escape \
      sequences raw (default: shown as visible text, e.g. \\x1B)
        default_permissions   let the kernel check the modes
        nonempty              allow a non-empty mount point
        debug                 as -d
        log=FILE              a detached daemon logs here (default: the journal, else syslog)
        subtype=NAME          the type's suffix (default fuse.mount9bbs); empty: plain fuse, \
      as xfstests needs. status, chat and -u know the mount by its 9bbs: source either way
        identity=PATH|agent[:MATCH]   the key that proves who you are (default: the key of \
      mount9bbs keygen, if there is one); alias IdentityFile
        auth=auto|required|off   when to prove it: where the board wants it (auto), always, \
      or never
        secure=auto|required|off   the secure channel (encrypted, bound to the board's key) \
      on TCP: used where the board offers it (auto), else refused (required), or never (off). \
      Bluetooth and Unix-socket boards are plain
        auth-sign=bound|raw   what the key signs: bound (default) names the board's key and \
      this authentication; raw signs the board's 32-byte challenge as it is, only for a \
      deployed board that verifies that (warned each mount). Board keys are pinned per \
      address in $XDG_STATE_HOME/mount9bbs/known_boards (default ~/.local/state/...)
        libfuse's and the kernel's: fsname=, max_read=, auto_unmount, dev, nodev, suid, \
      nosuid, exec, noexec, atime, noatime, sync, async, dirsync and the like; relatime, \
      strictatime, nodiratime and their opposites are set on the mount once made (root only, \
      unless they are what the mount has already).
      fstab's own (noauto, nofail, _netdev, user, x-*, ...) are ignored. Any other option is an \
      error that names it.

      Examples:
        mount9bbs --local ./mnt
        mount9bbs tcp:bbs.local:5640 ~/bbs
        mount9bbs -o uname=alice,reconnect unix:/run/9bbs.sock ~/bbs
        mount9bbs ble:THE_GRID ~/bbs
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

  @Flag(help: "With -u: unmount even a mount that is not mount9bbs's.")
  var force = false

  @Option(name: .customLong("ready-fd"), help: .hidden)
  var readyFD: Int32?

  /// A pipe holding the key the front process unlocked with the user's passphrase.
  @Option(name: .customLong("key-fd"), help: .hidden)
  var keyFD: Int32?

  /// Dial strings the front process resolved a board name to (for the detached daemon).
  @Option(name: .customLong("resolved"), help: .hidden)
  var resolved: [String] = []

  @Argument(help: "ADDRESS MOUNTPOINT, or just MOUNTPOINT with --local or -u.")
  var arguments: [String] = []

  func validate() throws {
    let wanted = (local || unmount) ? 1 : 2
    if local && unmount { throw ValidationError("--local and -u cannot be used together.") }
    if force && !unmount { throw ValidationError("--force goes with -u.") }
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
      return try Unmounter.unmount(arguments[0], force: force)
    }
    let mountpoint = arguments[arguments.count - 1]
    var parsed: ParsedOptions
    do {
      parsed = try ParsedOptions(options)
    } catch {
      throw ValidationError("\(error)")
    }
    if let remount = parsed.remount {
      return try Self.remount(mountpoint, remount)
    }
    // Notifications say which board, by the name the user gave it.
    parsed.awareness.board = local ? "local" : arguments[0]
    if let keyFD {
      parsed.unlockedKey = UnlockedKeyPipe.receive(from: keyFD)
    } else if !local {
      // A passphrase is asked for here, while the terminal is ours.
      do throws(MountError) {
        parsed = try parsed.unlockingKey()
      } catch {
        Diagnostics.fail("mount9bbs: \(error)")
        throw ExitCode(1)
      }
    }
    let debug = debug || parsed.debug
    var addresses: [TransportAddress] = []
    if !local {
      do {
        addresses = try resolveAddress(arguments[0], debug: debug)
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
    var handOver = resolved.isEmpty ? addresses.flatMap { ["--resolved", $0.description] } : []
    var kept: [Int32] = []
    if let unlockedKey = parsed.unlockedKey {
      guard let descriptor = UnlockedKeyPipe.send(unlockedKey) else {
        Diagnostics.fail("mount9bbs: cannot hand the unlocked key to the daemon")
        throw ExitCode(1)
      }
      handOver += ["--key-fd", String(descriptor)]
      kept.append(descriptor)
    }
    throw ExitCode(
      Detacher.spawnAndWait(arguments: Mount9BBSMain.arguments + handOver, keeping: kept))
  }

  /// `l2cap:BDADDR:PSM` with no address type names a random address; a board a scan saw on a
  /// public one (the cache says so) is dialled as public.
  static func withCachedAddressType(_ address: TransportAddress, _ text: String)
    -> TransportAddress
  {
    guard case .l2cap(let bdaddr, let psm, .random) = address,
      !["public", "random"].contains(where: { text.lowercased().hasSuffix($0) }),
      let board = DiscoveryCache().board(named: bdaddr, kind: .bluetooth),
      board.addressType == "public"
    else { return address }
    return .l2cap(address: bdaddr, psm: psm, addressType: .public)
  }

  /// `-o remount,…`: sets the flags on the live mount9bbs mount at `mountpoint`.
  private static func remount(_ mountpoint: String, _ flags: AccessTimes) throws {
    let absolute = MountTable.absolutePath(mountpoint)
    guard MountTable.isMount9BBS(at: absolute) else {
      Diagnostics.fail("mount9bbs: cannot remount \(absolute): it is not a mount9bbs mount")
      throw ExitCode(1)
    }
    do {
      try flags.apply(to: absolute)
    } catch {
      let reason =
        error.errno == EPERM
        ? "only root may change a mount's flags" : String(cString: strerror(error.errno))
      Diagnostics.fail("mount9bbs: cannot remount \(absolute): \(reason)")
      throw ExitCode(1)
    }
  }

  /// The addresses to dial for ADDRESS, most preferred first: `ADDR1,ADDR2,…` lists
  /// several transports of one BBS; each is a dial string or a board name, which resolves to
  /// its addresses (handed over in `--resolved`, else from the cache or a short scan).
  private func resolveAddress(_ text: String, debug: Bool) throws -> [TransportAddress] {
    if !resolved.isEmpty {
      return try resolved.map { try TransportAddress(parsing: $0) }
    }
    var addresses: [TransportAddress] = []
    // A mount table's source (`9bbs:tcp!host!5640`) mounts as what it names: xfstests' TEST_DEV
    // is one, as findmnt must show it.
    let text =
      text.hasPrefix(MountTable.sourcePrefix)
      ? String(text.dropFirst(MountTable.sourcePrefix.count)) : text
    for item in text.split(separator: ",").map(String.init) {
      guard let reference = try BoardReference(parsing: item) else {
        addresses.append(Self.withCachedAddressType(try TransportAddress(parsing: item), item))
        continue
      }
      var logger = Logger(label: "mount9bbs") { StreamLogHandler.standardError(label: $0) }
      logger.logLevel = debug ? .trace : .notice
      addresses += try BoardResolver(logger: logger).resolve(reference).addresses
    }
    guard !addresses.isEmpty else { throw ValidationError("Missing ADDRESS.") }
    return addresses
  }
}
