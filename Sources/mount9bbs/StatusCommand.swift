import ArgumentParser
import BBSMount
import Foundation
import FuseKit

/// `mount9bbs status MOUNTPOINT [--json]`: the link, sessions, outbox and rooms of a mount.
struct StatusCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "mount9bbs status",
    abstract: "Show the link, sessions, outbox and room feeds of a mount.")

  @Flag(help: "Print the status as JSON.")
  var json = false

  @Argument(help: "The mount point.")
  var mountpoint: String

  func run() throws {
    let record = RuntimeRecord(mountpoint: mountpoint)
    let data: Data
    do {
      data = try ControlSocket.request(record.controlPath)
    } catch {
      let reason =
        FuseSession.isFuseMount(path: mountpoint)
        ? "its daemon does not answer (\(error)); was it killed? `mount9bbs -u \(mountpoint)` removes it"
        : "nothing is mounted there by mount9bbs"
      Diagnostics.fail("mount9bbs: \(mountpoint): \(reason)")
      throw ExitCode(1)
    }
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
    print(Self.render(report), terminator: "")
  }

  static func render(_ report: StatusReport) -> String {
    let since = Int(Date().timeIntervalSince(report.link.since))
    let user =
      report.identity.map { "identity \($0), auth \(report.auth ?? "auto")" }
      ?? "user \(report.uname)"
    var text =
      "\(report.mountpoint): \(report.address) (\(report.profile) profile, \(user), pid \(report.pid))\n"
    text += "link: \(report.link.state) for \(since) s"
    if let reason = report.link.reason { text += " (\(reason))" }
    text += ", \(report.link.reconnects) reconnect(s)\n"
    if let outbox = report.outbox { text += "outbox: \(outbox) post(s) waiting\n" }
    for session in report.sessions {
      text += String(
        format:
          "session %@: %@ msize %u, %d in flight, %d queued, %d parked, rtt %.1f ms, in %llu msg/%llu B, out %llu msg/%llu B",
        session.role, session.open ? "open" : "closed", session.msize, session.requestsInFlight,
        session.requestsQueued, session.parkedReads, session.roundTripMilliseconds,
        session.messagesIn, session.bytesIn, session.messagesOut, session.bytesOut)
      if report.identity != nil, let authenticated = session.authenticated {
        text += authenticated ? ", authenticated" : ", not authenticated"
      }
      text += "\n"
    }
    for room in report.rooms {
      text +=
        "room \(room.path): \(room.readers) reader(s), \(room.lines) line(s), last \(Int(room.lastMessageAge)) s ago\n"
    }
    return text
  }
}
