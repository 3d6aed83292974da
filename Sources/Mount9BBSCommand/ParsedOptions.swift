import BBSIdentity
import BBSMount
import Foundation
import FuseKit
import NinePClient

/// The `-o` options, validated.
struct ParsedOptions {
  var uname: String
  var aname = ""
  /// The type's suffix (`fuse.mount9bbs`); nil mounts as plain `fuse` (`-o subtype=`, which
  /// xfstests needs: it checks the type is its FSTYP).
  var subtype: String? = "mount9bbs"
  var msize: UInt32?
  var profile: ServerProfile?
  var sessions: Int?
  var readOnly = false
  var allowOther = false
  /// With `allow_other`, other users may also write (post, create, change files), all under
  /// the mounting user's identity (`allow_other_write`). Off: they only read.
  var allowOtherWrite = false
  var defaultPermissions = false
  /// Room lines keep other users' control characters raw (`rawtext`).
  var rawText = false
  var timeout: Duration = .seconds(30)
  var streamGlobs: [String] = []
  var allowNonEmpty = false
  /// Keep posts made while the link is down on disk and send them later.
  var outbox = true
  /// Keep rooms' lines on disk, so a remounted room shows its recent history at once.
  var history = true
  var reconnect = true
  var keepalive: Duration? = .seconds(15)
  /// Readahead of the mount's page cache, KiB (0: the kernel's 128 KiB). Large files stream
  /// at link speed only with several megabyte requests in flight.
  var readaheadKiB = 8192
  /// Unanswered keepalives in a row before the link counts as dead (`ServerAliveCountMax`).
  var keepaliveMisses = 2
  /// The owner and group shown for every file (`uid=`, `gid=`); nil: the mounting user's.
  var uid: UInt32?
  var gid: UInt32?
  /// Permission bits cleared from every file's mode (`umask=`, octal).
  var umask: UInt32?
  /// Trace 9P and FUSE traffic and stay in the foreground (`-o debug`, as sshfs).
  var debug = false
  /// Where a detached daemon logs (`log=FILE`); nil: the journal, else syslog.
  var logFile: String?
  /// Largest read request (`max_read=`), also forced at FUSE init.
  var maxRead: UInt32?
  /// `identity=PATH|agent[:MATCH]` (sshfs's `IdentityFile=`): the key to authenticate with;
  /// nil: the default key file, if there is one.
  var identity: KeySource?
  /// `auth=auto|required|off`.
  var auth: AuthMode = .auto
  /// `auth-sign=bound|raw`: what the key signs (see docs/authentication.md); raw only for
  /// deployed boards that verify the raw challenge.
  var authSign: ChallengeResponse.Form = .bound
  /// `secure=auto|required|off`: the secure channel on TCP (see MountChannel.swift).
  var secure: SecureMode = .auto
  /// The key file's contents, unlocked with the passphrase the user typed (see
  /// MountIdentity.swift); the daemon gets them through an inherited pipe (`--key-fd`).
  var unlockedKey: UnlockedKey?
  var passthrough: [String] = []
  /// `relatime`, `strictatime`, `nodiratime` and the like, set on the mount once it is made.
  var accessTimes = AccessTimes()
  /// `-o remount,…`: change a mount9bbs mount's flags (`ro`, `noexec`, `noatime`…), as
  /// mount(8) asks a helper to; nothing else changes on a live mount.
  var remount: AccessTimes?
  /// `watch=`, `watch-interval=`, `highlight=`, `notify=`, `notify-command=` (see Awareness/).
  var awareness = AwarenessOptions()

  /// When to authenticate (see MountIdentity.swift).
  /// Whether to use the secure channel (docs/authentication.md §6).
  enum SecureMode: String {
    /// Ask every TCP board for it, and use it where offered.
    case auto
    /// Ask, and refuse a board that does not offer it (and any transport but TCP and Unix
    /// sockets, where it does not run).
    case required
    /// Never ask: plain 9P.
    case off
  }

  enum AuthMode: String {
    /// With a key (`identity=`, else the default key file if there is one), when the server
    /// authenticates; as a guest otherwise.
    case auto
    /// Always, or fail.
    case required
    /// Never: attach with `uname`.
    case off
  }

  /// Options libfuse (or the kernel) takes as they are: the mount flags and libfuse's own.
  static let libfuseFlags: Set<String> = [
    "rw", "dev", "nodev", "suid", "nosuid", "exec", "noexec", "async", "sync", "dirsync",
    "atime", "noatime", "auto_unmount",
  ]
  /// Mount flags libfuse passes on and the kernel's FUSE has no use for, with why.
  static let meaningless: [String: String] = [
    "lazytime":
      "the kernel keeps a FUSE file's times in memory and never writes them back, lazily or not",
    "nolazytime":
      "the kernel keeps a FUSE file's times in memory and never writes them back, lazily or not",
    "blkdev": "it is for FUSE file systems on a block device (fuseblk); a board is not one",
  ]
  static let libfuseValued: Set<String> = [
    "fsname", "blksize", "context", "fscontext", "defcontext",
    "rootcontext",
  ]
  /// The kernel's own options of a FUSE mount, which mount(8) repeats to a helper's remount.
  static let kernelFuseOptions: Set<String> = [
    "user_id", "group_id", "max_read", "rootmode", "fd", "blksize", "default_permissions",
    "allow_other",
  ]
  /// What mount(8) and fstab use for themselves; a mount helper may be handed them.
  static let mountOnly: Set<String> = [
    "defaults", "auto", "noauto", "user", "nouser", "users", "owner", "group", "_netdev",
    "nofail", "loud", "silent",
  ]
  /// sshfs options with no counterpart here, each with what to do instead.
  static let sshfsOnly: [String: String] = [
    "kernel_cache": "mount9bbs already lets the kernel cache file pages while a file is open",
    "cache": "mount9bbs caches attributes and listings for a second",
    "compression": "there is nothing to compress over 9P",
    "Port": "put the port in the address, e.g. tcp:host:5640",
    "follow_symlinks": "9BBS boards have no symbolic links",
    "transform_symlinks": "9BBS boards have no symbolic links",
    "workaround": "mount9bbs needs no workarounds",
    "sftp_server": "mount9bbs speaks 9P2000",
    "ssh_command": "mount9bbs speaks 9P2000",
    "directport": "put the port in the address, e.g. tcp:host:5640",
  ]

  struct Invalid: Error, CustomStringConvertible {
    let description: String
  }

  init(_ lists: [String]) throws(Invalid) {
    uname = Self.loginName()
    let items = lists.flatMap { $0.split(separator: ",").map(String.init) }.filter { !$0.isEmpty }
    if items.contains("remount") {
      // mount(8) hands a helper's remount the options the mount was made with (fstab's, or
      // xfstests' MOUNT_OPTIONS) and the kernel's (`user_id=0,…`): only the per-mount flags
      // change; the rest must be valid options, and stay as the mount has them.
      var flags = AccessTimes(remount: true)
      var others: [String] = []
      for item in items where item != "remount" && !flags.add(item) {
        if !Self.kernelFuseOptions.contains(Option(item).key) { others.append(item) }
      }
      _ = try ParsedOptions(others)
      remount = flags
      return
    }
    for item in items {
      let option = Option(item)
      if try applyConnection(option) { continue }
      if try applyFileSystem(option) { continue }
      if try applyAwareness(option) { continue }
      try applyForeign(option)
    }
  }

  /// One `-o` item, `key` or `key=value`, and its value read as each option needs it.
  struct Option {
    let item: String
    let key: String
    let value: String?

    init(_ item: String) {
      self.item = item
      let parts = item.split(separator: "=", maxSplits: 1).map(String.init)
      // `=` alone splits into nothing: an option without a name, refused as unknown.
      key = parts.first ?? ""
      value = parts.count > 1 ? parts[1] : nil
    }

    func required() throws(Invalid) -> String {
      guard let value, !value.isEmpty else {
        throw Invalid(description: "option \(key) needs a value (\(key)=…)")
      }
      return value
    }

    func onOff() throws(Invalid) -> Bool {
      let text = try required()
      guard text == "on" || text == "off" else {
        throw Invalid(description: "option \(key)=\(text): expected on or off")
      }
      return text == "on"
    }

    func number(_ range: ClosedRange<Int>) throws(Invalid) -> Int {
      let text = try required()
      guard let parsed = Int(text), range.contains(parsed) else {
        throw Invalid(
          description:
            "option \(key)=\(text): expected a number from \(range.lowerBound) to \(range.upperBound)"
        )
      }
      return parsed
    }
  }

  /// The session's options: who attaches, how, and how the link is kept. False if `option`
  /// is none of them.
  private mutating func applyConnection(_ option: Option) throws(Invalid) -> Bool {
    switch option.key {
    case "uname": uname = try option.required()
    case "aname": aname = option.value ?? ""
    case "msize": msize = UInt32(try option.number(256...(16 << 20)))
    case "profile":
      let text = try option.required()
      guard let chosen = ServerProfile(rawValue: text) else {
        throw Invalid(description: "option profile=\(text): expected device or multiplex")
      }
      profile = chosen
    case "sessions": sessions = try option.number(1...16)
    case "timeout": timeout = .seconds(try option.number(1...86400))
    // sshfs's flag form: `-o reconnect`.
    case "reconnect": reconnect = option.value == nil ? true : try option.onOff()
    case "keepalive", "ServerAliveInterval":
      let seconds = try option.number(0...3600)
      keepalive = seconds == 0 ? nil : .seconds(seconds)
    case "ServerAliveCountMax": keepaliveMisses = try option.number(1...100)
    case "identity", "IdentityFile": identity = KeySource(parsing: try option.required())
    case "auth":
      let text = try option.required()
      guard let mode = AuthMode(rawValue: text) else {
        throw Invalid(description: "option auth=\(text): expected auto, required or off")
      }
      auth = mode
    case "secure":
      let text = try option.required()
      guard let mode = SecureMode(rawValue: text) else {
        throw Invalid(description: "option secure=\(text): expected auto, required or off")
      }
      secure = mode
    case "auth-sign":
      let text = try option.required()
      guard let form = ChallengeResponse.Form(rawValue: text) else {
        throw Invalid(description: "option auth-sign=\(text): expected bound or raw")
      }
      authSign = form
    default: return false
    }
    return true
  }

  /// The mounted file system's options: access, ownership, caching, what is kept on disk,
  /// logging. False if `option` is none of them.
  private mutating func applyFileSystem(_ option: Option) throws(Invalid) -> Bool {
    switch option.key {
    case "ro": readOnly = true
    case "rw": readOnly = false
    case "allow_other":
      allowOther = true
      // Other users reach the files: let the kernel check the modes.
      defaultPermissions = true
    case "allow_other_write":
      allowOtherWrite = true
      allowOther = true
      defaultPermissions = true
    case "default_permissions": defaultPermissions = true
    case "rawtext": rawText = true
    case "stream": streamGlobs.append(try option.required())
    case "nonempty": allowNonEmpty = true
    case "outbox": outbox = try option.onOff()
    case "history": history = try option.onOff()
    case "readahead": readaheadKiB = try option.number(0...(1 << 20))
    case "uid": uid = UInt32(try option.number(0...Int(Int32.max)))
    case "gid": gid = UInt32(try option.number(0...Int(Int32.max)))
    case "umask":
      let text = try option.required()
      guard let mask = UInt32(text, radix: 8), mask <= 0o777 else {
        throw Invalid(
          description: "option umask=\(text): expected octal permission bits, e.g. 022")
      }
      umask = mask
    case "idmap":
      // Every file already shows as the mounting user's (or uid=/gid=): sshfs's idmap=user.
      guard option.value == "user" || option.value == "none" else {
        throw Invalid(description: "option idmap=\(option.value ?? ""): expected user or none")
      }
    case "subtype":
      let name = option.value ?? ""
      guard name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "._+-".contains($0)) })
      else {
        throw Invalid(
          description:
            "option subtype=\(name): letters, digits and . _ + - only (or empty: plain fuse)")
      }
      subtype = name.isEmpty ? nil : name
    case "debug": debug = true
    case "max_read": maxRead = UInt32(try option.number(4096...(16 << 20)))
    case "log": logFile = try option.required()
    default: return false
    }
    return true
  }

  /// `watch=`, `watch-interval=`, `highlight=`, `notify=`, `notify-command=` (Awareness/).
  /// False if `option` is none of them.
  private mutating func applyAwareness(_ option: Option) throws(Invalid) -> Bool {
    switch option.key {
    case "watch":
      let text = try option.required()
      switch text {
      case "all": awareness.watch = .all
      case "none": awareness.watch = AwarenessOptions.Watch.none
      case "mine": awareness.watch = .mine
      default:
        let rooms = text.split(separator: ":").map(String.init)
        guard !rooms.contains(where: { $0.contains("/") }) else {
          throw Invalid(
            description: "option watch=\(text): expected all, mine, none or ROOM[:ROOM…]")
        }
        awareness.watch = .rooms(Set(rooms))
      }
    case "watch-interval":
      awareness.watchInterval = .seconds(
        try option.number(1...AwarenessOptions.longestWatchInterval))
    case "highlight":
      awareness.highlights += try option.required().split(separator: ":").map(String.init)
    case "notify":
      let text = try option.required()
      guard let mode = AwarenessOptions.Notify(rawValue: text) else {
        throw Invalid(description: "option notify=\(text): expected mentions, all or off")
      }
      awareness.notify = mode
    case "notify-command": awareness.notifyCommand = try option.required()
    default: return false
    }
    return true
  }

  /// Options that are not mount9bbs's own: mount(8)'s are ignored, libfuse's passed on,
  /// sshfs's refused with what to do instead, anything else refused.
  private mutating func applyForeign(_ option: Option) throws(Invalid) {
    let key = option.key
    switch key {
    case _ where Self.mountOnly.contains(key) || key.hasPrefix("x-") || key == "comment":
      break
    case _ where Self.libfuseFlags.contains(key) && option.value == nil:
      passthrough.append(option.item)
    case _ where option.value == nil && accessTimes.add(key):
      break
    case _ where Self.meaningless[key] != nil:
      throw Invalid(
        description: "option \(key) has no meaning here: \(Self.meaningless[key] ?? "")")
    case _ where Self.libfuseValued.contains(key):
      _ = try option.required()
      passthrough.append(option.item)
    case _ where Self.sshfsOnly[key] != nil:
      throw Invalid(
        description:
          "option \(key) is sshfs's and has no meaning here: \(Self.sshfsOnly[key] ?? "")")
    default:
      throw Invalid(
        description: "unknown option \(option.item) (mount9bbs --help lists the options)")
    }
  }

  static func loginName() -> String {
    if let entry = getpwuid(getuid()), let name = entry.pointee.pw_name {
      return String(cString: name)
    }
    return ProcessInfo.processInfo.environment["USER"] ?? "guest"
  }
}
