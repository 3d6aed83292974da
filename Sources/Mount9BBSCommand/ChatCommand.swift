import ArgumentParser
import BBSMount
import ChatTerminal
import Foundation
import FuseKit
import TerminalText

/// `mount9bbs chat [MOUNTPOINT] [ROOM]`: the chat in one terminal, on the mount's files.
struct ChatCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "chat",
    abstract: "Chat in one terminal: rooms, unread lines, mentions, on a mount's files.",
    discussion: """
      Opens ROOM (default: lobby) of the mount at MOUNTPOINT (default: your only mount9bbs \
      mount) with its recent history, a "new" marker line where your unread lines begin, and \
      a fixed input line: lines that arrive never break what you type, and Enter posts the \
      line exactly as typed. Needs no root: it reads and writes the mount's files.

      Keys: Enter posts; Up/Down input history; Tab completes nicknames and rooms; PgUp/PgDn \
      scroll; Alt-1 to Alt-9 switch rooms; Ctrl-A/E/K/U/W edit; Ctrl-C clears the line; Ctrl-D \
      (on an empty line) leaves; Ctrl-L redraws.
      Commands: /join ROOM (/j), /rooms, /next, /prev, /users, /me TEXT, /help, /quit; \
      //text posts a line that starts with /.

      The status line shows the room, the other rooms with unread lines (@N: mentions), the \
      link (up, reconnecting, down; ? when the mount has no chat/events) and the outbox. \
      NO_COLOR turns colours off. Other users' control characters and escape sequences are \
      shown as text (\\x1B[31m). Exit status 0 after /quit or Ctrl-D, 1 when the mount went \
      away, 128+N after signal N, each saying why; the terminal is restored in every case.

      Rooms you have not joined are counted from the mount's files: chat/unread at start and \
      on /rooms, then one per line said there (chat/events) and per mention (chat/mentions, \
      @N), so only rooms the mount watches (-o watch=; on a board by default the 3 rooms you \
      read last). Your own \
      lines are never unread, and the marker at open counts back over others' lines only. \
      The outbox count is chat/outbox, read after each post and each post event; the link \
      comes from chat/events.

      Measured (mount9bbs-bench --sections chatclient, debug build, shared 2-core machine): a \
      line posted elsewhere is on the screen in p50 3.8 ms, p95 14.1 ms on loopback, p50 19.0 \
      ms, p95 23.9 ms over the emulated BLE link (30 ms RTT); a key is echoed in p50 2.1 ms; \
      idle CPU 0 %.

      The screen (78x14, two rooms joined, the other one has a line for you; the marker and \
      date lines are drawn with box-drawing dashes, and a mention's >> is a guillemet):

        -- Wed 25 Nov 2026 --
        18:58:54 carol: anyone tried the new firmware?
        -- new --
        18:58:58 >> bob: alice: can you bring the antenna tonight?
        18:58:58 carol: yes, after 8
         [2:tech] | link up | outbox 0
        > sure, the yagi
      """)

  @Argument(help: "The mount point (default: your only mount9bbs mount).")
  var mountpoint: String?

  @Argument(help: "The room to open first (default: lobby).")
  var room: String?

  @Option(
    name: .customLong("name"),
    help:
      "Your chat name, for highlighting and mentions (repeatable; default: the mount's user name, and with an identity the author your first post comes back under)."
  )
  var names: [String] = []

  func run() throws {
    var mountpoint = mountpoint
    var room = room
    // `mount9bbs chat ROOM` with one mount: a word that is not a directory is a room.
    if let first = mountpoint, room == nil, !first.contains("/"),
      !FileManager.default.fileExists(atPath: first)
    {
      room = first
      mountpoint = nil
    }
    let absolute = try resolve(mountpoint)
    let report = status(of: absolute)
    var names = names
    if let report {
      names.append(report.uname)
      if let identity = report.identity { names.append(String(identity.prefix(8))) }
    }
    let link: LinkState? =
      switch report?.link.state {
      case "up": .up
      case "stalled": .stalled
      case "down": .down
      default: nil
      }
    let colors = (ProcessInfo.processInfo.environment["NO_COLOR"] ?? "").isEmpty
    var options = ChatOptions(
      mountpoint: absolute, room: room, ownNames: names, link: link, outbox: report?.outbox,
      colors: colors)
    // A board shows an identity by the nickname its sysop gave it, which the status does not
    // know: the author of your first post is you then.
    options.learnsName = self.names.isEmpty && (report == nil || report?.identity != nil)
    // A 9BBS device stamps its uptime; 9bbsd's own profile the UTC time of day.
    options.stamps =
      switch report?.profile {
      case "device", "gen1": .uptime
      case "multiplex": .utc
      default: nil
      }
    let outcome: ChatOutcome
    do {
      outcome = try ChatClient.run(options)
    } catch {
      Diagnostics.fail("mount9bbs chat: \(error)")
      throw ExitCode(1)
    }
    switch outcome {
    case .quit:
      return
    case .mountGone(let reason):
      Diagnostics.fail(
        "mount9bbs chat: the mount at \(TerminalText.escaped(absolute)) went away (\(reason))")
      throw ExitCode(1)
    case .failed(let reason):
      Diagnostics.fail("mount9bbs chat: \(reason)")
      throw ExitCode(1)
    case .signal(let number):
      // Every exit but a quit says why, a kill or a hang-up too.
      Diagnostics.fail(
        "mount9bbs chat: \(String(cString: strsignal(number))) (signal \(number))")
      throw ExitCode(128 + number)
    }
  }

  /// MOUNTPOINT made absolute and checked, or the user's only mount.
  private func resolve(_ mountpoint: String?) throws -> String {
    if let mountpoint {
      let absolute = MountTable.absolutePath(mountpoint)
      guard MountTable.isMount9BBS(at: absolute) else {
        Diagnostics.fail(
          "mount9bbs chat: \(TerminalText.escaped(absolute)) is not a mount9bbs mount")
        throw ExitCode(1)
      }
      return absolute
    }
    let mounts = MountTable.ownMounts()
    switch mounts.count {
    case 0:
      Diagnostics.fail("mount9bbs chat: no mount9bbs mounts; mount a board first")
      throw ExitCode(1)
    case 1:
      return mounts[0].mountpoint
    default:
      let list = mounts.map { "  mount9bbs chat " + TerminalText.shellQuoted($0.mountpoint) }
      Diagnostics.fail(
        "mount9bbs chat: you have \(mounts.count) mounts; say which:\n"
          + list.joined(separator: "\n"))
      throw ExitCode(1)
    }
  }

  /// The mount's status (user name, identity, link, outbox), if its daemon answers.
  private func status(of mountpoint: String) -> StatusReport? {
    guard let record = try? RuntimeRecord(mountpoint: mountpoint),
      let data = try? ControlSocket.request(record.controlPath)
    else { return nil }
    let decoder = JSONDecoder()
    decoder.dateDecodingStrategy = .iso8601
    return try? decoder.decode(StatusReport.self, from: data)
  }
}
