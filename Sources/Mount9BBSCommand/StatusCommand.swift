import ArgumentParser
import BBSMount
import Foundation
import FuseKit
import TerminalText

/// `mount9bbs status [MOUNTPOINT] [--json]`: the link, sessions, outbox and rooms of a mount,
/// or of every mount9bbs mount of the user.
struct StatusCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "status",
    abstract: "Show the link, sessions, outbox and room feeds of a mount (or of all yours).",
    discussion: """
      Without MOUNTPOINT, shows every mount9bbs mount of the user (one JSON document a line \
      with --json). A mount point that is not mount9bbs's (an sshfs mount, say) is refused.
      """)

  @Flag(help: "Print the status as JSON.")
  var json = false

  @Argument(help: "The mount point (default: every mount9bbs mount of yours).")
  var mountpoint: String?

  func run() throws {
    guard let mountpoint else { return try showAll() }
    let absolute = MountTable.absolutePath(mountpoint)
    if let type = MountTable.type(at: absolute), !MountTable.isMount9BBS(at: absolute) {
      let kind = type.hasPrefix("fuse.") ? String(type.dropFirst(5)) : type
      Diagnostics.fail("mount9bbs: \(absolute) is not a mount9bbs mount (it is \(kind))")
      throw ExitCode(1)
    }
    if let others = MountTable.othersMount(at: absolute, asking: "status") {
      Diagnostics.fail("mount9bbs: \(others)")
      throw ExitCode(1)
    }
    let record: RuntimeRecord
    do {
      record = try RuntimeRecord(mountpoint: mountpoint)
    } catch {
      Diagnostics.fail("mount9bbs: \(error)")
      throw ExitCode(1)
    }
    let data: Data
    do {
      data = try ControlSocket.request(record.controlPath)
    } catch {
      let reason =
        MountTable.isMount9BBS(at: absolute)
        ? "its daemon does not answer (\(error)); was it killed? Remove the mount with: mount9bbs -u \(TerminalText.shellQuoted(mountpoint))"
        : "nothing is mounted there by mount9bbs"
      Diagnostics.fail("mount9bbs: \(TerminalText.escaped(mountpoint)): \(reason)")
      throw ExitCode(1)
    }
    try show(data)
  }

  /// Every mount9bbs mount of the user; a dead one says so and makes the exit status 1.
  private func showAll() throws {
    let mounts = MountTable.ownMounts()
    if mounts.isEmpty {
      if !json { Console.output("no mount9bbs mounts") }
      return
    }
    var failed = false
    for mount in mounts {
      guard let record = try? RuntimeRecord(mountpoint: mount.mountpoint),
        let data = try? ControlSocket.request(record.controlPath)
      else {
        Diagnostics.fail(
          "mount9bbs: \(TerminalText.escaped(mount.mountpoint)): its daemon does not answer; remove the mount with: mount9bbs -u \(TerminalText.shellQuoted(mount.mountpoint))"
        )
        failed = true
        continue
      }
      if json {
        // One document a line, for `jq`.
        let compact = (try? JSONSerialization.jsonObject(with: data)).flatMap {
          try? JSONSerialization.data(
            withJSONObject: $0, options: [.sortedKeys, .withoutEscapingSlashes])
        }
        FileHandle.standardOutput.write((compact ?? data) + Data("\n".utf8))
      } else {
        try show(data)
      }
    }
    if failed { throw ExitCode(1) }
  }

  private func show(_ data: Data) throws {
    if json {
      FileHandle.standardOutput.write(data)
      return
    }
    let decoder = JSONDecoder()
    decoder.dateDecodingStrategy = .iso8601
    guard let report = try? decoder.decode(StatusReport.self, from: data) else {
      Diagnostics.fail("mount9bbs: the daemon sent an unreadable status")
      throw ExitCode(1)
    }
    Console.output(Self.render(report))
  }

  /// The report as text; every string that came from the server or its address is escaped.
  static func render(_ report: StatusReport) -> String {
    let safe = { (text: String) in TerminalText.escaped(text) }
    let since = Int(Date().timeIntervalSince(report.link.since))
    let user =
      report.identity.map { "identity \(safe($0)), auth \(safe(report.auth ?? "auto"))" }
      ?? "user \(safe(report.uname))"
    var text =
      "\(safe(report.mountpoint)): \(safe(report.address)) (\(safe(report.profile)) profile, \(user), pid \(report.pid))\n"
    text += "link: \(safe(report.link.state)) for \(since) s"
    if let reason = report.link.reason { text += " (\(safe(reason)))" }
    text += ", \(report.link.reconnects) reconnect(s)\n"
    if let transport = report.link.transport, let all = report.link.transports, all.count > 1 {
      let rank = (all.firstIndex(of: transport) ?? 0) == 0 ? "preferred" : "fallback"
      text +=
        "transport: \(safe(transport)) (\(rank); of \(safe(all.joined(separator: ", "))); \(report.link.switches ?? 0) switch(es))\n"
    }
    if let outbox = report.outbox { text += "outbox: \(outbox) post(s) waiting\n" }
    for session in report.sessions {
      text += String(
        format:
          "session %@: %@ msize %u, %d in flight, %d queued, %d parked, rtt %.1f ms, in %llu msg/%llu B, out %llu msg/%llu B",
        safe(session.role), session.open ? "open" : "closed", session.msize,
        session.requestsInFlight,
        session.requestsQueued, session.parkedReads, session.roundTripMilliseconds,
        session.messagesIn, session.bytesIn, session.messagesOut, session.bytesOut)
      if report.identity != nil, let authenticated = session.authenticated {
        text += authenticated ? ", authenticated" : ", not authenticated"
      }
      if let secure = session.secure, report.address.hasPrefix("tcp") {
        text += secure ? ", secure channel" : ", plain (no secure channel)"
      }
      text += "\n"
    }
    for room in report.rooms {
      text +=
        "room \(safe(room.path)): \(room.readers) reader(s)\(room.watched == true ? ", watched" : ""), \(room.lines) line(s), \(room.unread ?? 0) unread, last \(Int(room.lastMessageAge)) s ago\n"
    }
    return text
  }
}
