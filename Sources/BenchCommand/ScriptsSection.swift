import Foundation
import Glibc
import LinkEmulation
import NinePClient
import NinePProtocol
import NinePTransport

// Section 8: chat scripts and catch-up.

/// What scripts and returning users meet: `examples/ping-bot.sh` answering `!ping` (the round
/// trip seen from a second mount), and what `tail -n N` shows right after a remount of the
/// lines said while away, and how long that open took, on loopback and over the emulated BLE
/// link.
struct ScriptsSection: BenchSection {
  static let name = "scripts"
  static let usesLoopbackServer = true
  let rig: BenchRig

  func run() throws {
    let section = "8 chat scripts and catch-up"
    let report = rig.report
    try pingBotRows(section)
    let away = 10
    do {
      let outcome = try catchUp(
        address: rig.loopbackMountAddress, poster: rig.loopbackAddress, profile: .multiplex,
        room: "r01", lines: away, label: "loopback")
      report.add(outcome.shownRow(section, "loopback", away: away))
      report.add(outcome.timeRow(section, "loopback"))
    }
    do {
      let board = try rig.startBoard(
        "catchup-board", rooms: ["r0"], sdu: rig.settings.bleSDU, seeded: true)
      defer { board.stop() }
      let profile = rig.bleProfile(sdu: board.sdu)
      let link = try rig.startLink("catchup-ble", to: board, profile: profile)
      defer { link.close() }
      let outcome = try catchUp(
        address: link.mountAddress, poster: board.address, profile: .device, room: "r0",
        lines: away, label: "BLE")
      report.add(outcome.shownRow(section, "BLE", away: away, note: "link \(profile)"))
      report.add(outcome.timeRow(section, "BLE", note: "link \(profile)"))
    }
  }

  // MARK: The ping bot

  /// Runs `examples/ping-bot.sh` on one mount and posts `!ping` from a second mount of the
  /// same server, each 1.5–2 s after the last, timing each from the write of the ping to its
  /// `pong` line on the second mount's room file.
  private func pingBotRows(_ section: String) throws {
    guard let script = pingBotScript() else {
      rig.report.add(
        Row(
          section, "ping-bot round trip p50, loopback", nil, "ms", "examples/ping-bot.sh not found")
      )
      return
    }
    let room = "r02"
    let botMount = try rig.mount("mnt-bot", address: rig.loopbackMountAddress)
    defer { rig.unmount(botMount) }
    let pinger = try rig.mount("mnt-pinger", address: rig.loopbackMountAddress)
    defer { rig.unmount(pinger) }
    // setsid: the script, its tail and its loop form one process group, stopped together.
    let bot = try Supervisor.shared.spawn(
      "/usr/bin/setsid", ["/bin/sh", script, botMount.mountpoint, room],
      log: rig.work + "/ping-bot.log")
    defer {
      kill(-bot, SIGKILL)
      Supervisor.shared.wait(bot, timeout: 3)
    }
    let roomFile = pinger.mountpoint + "/chat/" + room
    let watcher = try DescriptorFollower.roomWatcher(roomFile)
    defer {
      watcher.stop()
      watcher.waitFinished(seconds: 5)
    }
    let isPong: (String) -> Bool = { $0.contains("pong (") }

    // The bot is ready once it answers: a ping a second until the first pong, for 15 s.
    let readyBy = Clock.now + 15_000_000_000
    var ready = false
    while !ready && Clock.now < readyBy {
      let at = Clock.now
      try RoomFileWriter.echo("!ping warm-up", to: roomFile)
      ready = watcher.line(after: at, where: isPong, until: at + 1_000_000_000) != nil
    }
    guard ready else {
      rig.report.add(
        Row(section, "ping-bot round trip p50, loopback", nil, "ms", "the bot never answered"))
      return
    }
    usleep(1_500_000)
    var latencies: [Double] = []
    let pings = rig.settings.peoplePosts
    for index in 1...pings {
      let at = Clock.now
      try RoomFileWriter.echo("!ping \(index)", to: roomFile)
      if let seen = watcher.line(after: at, where: isPong, until: at + 1_500_000_000) {
        latencies.append(Double(seen - at) / 1e6)
      }
      // The next ping 1.5–2 s after this one: a quiet spell before each, as in a chat.
      let next = at + Int64.random(in: 1_500_000_000...2_000_000_000)
      let left = next - Clock.now
      if left > 0 { usleep(UInt32(left / 1000)) }
    }
    let p50 = Stats.percentile(latencies, 50)
    let p95 = Stats.percentile(latencies, 95)
    let detail =
      "\(latencies.count)/\(pings) answered within 1.5 s; pings 1.5–2 s apart from a second mount"
      + String(format: "; max %.1f ms", latencies.max() ?? .nan)
    rig.report.add(
      Row(section, "ping-bot round trip p50, loopback", p50, "ms", detail + "; target ≤ 20 ms"))
    rig.report.add(Row(section, "ping-bot round trip p95, loopback", p95, "ms", detail))
  }

  /// `examples/ping-bot.sh` of the source tree the bench runs in or was built in.
  private func pingBotScript() -> String? {
    let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? ""
    var directory = (exe as NSString).deletingLastPathComponent
    var candidates = [FileManager.default.currentDirectoryPath + "/examples/ping-bot.sh"]
    for _ in 0..<4 {
      directory = (directory as NSString).deletingLastPathComponent
      candidates.append(directory + "/examples/ping-bot.sh")
    }
    return candidates.first { FileManager.default.isReadableFile(atPath: $0) }
  }

  // MARK: Catch-up after a remount

  /// `runs` times: a mount reads `room` and unmounts; `lines` lines are posted meanwhile; the
  /// same user mounts again and `tail -n lines` the room, timed.
  private func catchUp(
    address: String, poster: TransportAddress, profile: ServerProfile, room: String,
    lines: Int, label: String, runs: Int = 3
  ) throws -> CatchUpOutcome {
    var outcome = CatchUpOutcome()
    let client = try DirectClient(address: poster, profile: profile, uname: "away-poster")
    defer { client.close() }
    let fid = try client.openFile("/chat/post", mode: .write)
    let user = "returning-\(rig.nextToken())"
    let name = "mnt-catchup-\(label.lowercased())"
    for run in 1...runs {
      let before = try rig.mount(name, address: address, uname: user)
      let seen = try Supervisor.shared.run(
        "/usr/bin/timeout",
        ["10", "/usr/bin/tail", "-n", "1", before.mountpoint + "/chat/" + room],
        timeout: 15, discardingOutput: true)
      rig.unmount(before)
      guard seen.status == 0 else { throw BenchError("catch-up (\(label)): first read failed") }
      let token = "\(rig.nextToken())"
      for index in 1...lines { try client.post(fid, "\(room):away #p\(token)-\(index)#") }
      let back = try rig.mount(name, address: address, uname: user)
      defer { rig.unmount(back) }
      let output = rig.work + "/catchup-\(token).out"
      let shown = try Supervisor.shared.run(
        "/usr/bin/tail", ["-n", "\(lines)", back.mountpoint + "/chat/" + room], timeout: 15,
        log: output)
      let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
      let count = (1...lines).filter { text.contains("#p\(token)-\($0)#") }.count
      outcome.shown.append(count)
      outcome.seconds.append(shown.seconds)
      log(
        "catch-up · \(label) run \(run): \(count)/\(lines) shown in \(String(format: "%.3f", shown.seconds)) s"
      )
    }
    return outcome
  }
}

/// Catch-up runs: lines shown of those said while away, and each open's time.
private struct CatchUpOutcome {
  var shown: [Int] = []
  var seconds: [Double] = []

  func shownRow(_ section: String, _ label: String, away: Int, note: String? = nil) -> Row {
    let detail =
      "fewest over \(shown.count) remounts (each: \(shown.map(String.init).joined(separator: ", ")))"
      + (note.map { "; " + $0 } ?? "")
    return Row(
      section, "catch-up, \(label): lines tail -n \(away) shows of \(away) posted while away",
      shown.min().map(Double.init), "lines", detail)
  }

  func timeRow(_ section: String, _ label: String, note: String? = nil) -> Row {
    let ms = seconds.map { $0 * 1000 }
    let detail =
      "tail -n right after the remount (its open waits for the backlog); max "
      + String(format: "%.0f ms", ms.max() ?? .nan) + (note.map { "; " + $0 } ?? "")
    return Row(section, "catch-up, \(label): tail -n time p50", Stats.median(ms), "ms", detail)
  }
}

extension DescriptorFollower {
  /// Follows a room file as a `cat` of it would, from its end at start (no replay), opened
  /// non-blocking and polled, so ``stop()`` ends it between polls.
  static func roomWatcher(_ path: String) throws -> DescriptorFollower {
    let fd = open(path, O_RDONLY | O_NONBLOCK)
    guard fd >= 0 else { throw BenchError("open \(path): \(String(cString: strerror(errno)))") }
    lseek(fd, 0, SEEK_END)
    return DescriptorFollower(.descriptor(fd), reading: .polling)
  }
}
