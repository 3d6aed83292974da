import Foundation
import Glibc
import LinkEmulation
import NinePClient
import NinePProtocol
import NinePTransport

// Section 9: the chat client.

/// `mount9bbs chat` on a pseudo-terminal, as a person runs it (the logic of
/// `scripts/chat-latency`): a line posted by another 9P client until its text is on the chat's
/// terminal, on loopback and over the emulated BLE link; a key typed until it is drawn back;
/// the chat's CPU while nothing happens.
struct ChatClientSection: BenchSection {
  static let name = "chatclient"
  static let usesLoopbackServer = true
  let rig: BenchRig

  func run() throws {
    let section = "9 the chat client"
    let report = rig.report
    let settings = rig.settings
    do {
      let fs = try rig.mount("mnt-chatclient", address: rig.loopbackMountAddress)
      defer { rig.unmount(fs) }
      let poster = try DirectClient(
        address: rig.loopbackAddress, profile: .multiplex, uname: "elsewhere")
      defer { poster.close() }
      let fid = try poster.openFile("/chat/post", mode: .write)
      let screen = try startChat(fs.mountpoint, room: "r03", label: "loopback")
      defer { screen.quit() }
      let delivery = try deliveries(to: screen, room: "r03", poster: poster, fid: fid)
      report.add(contentsOf: delivery.rows(section, "loopback", target: "target p50 ≤ 10 ms"))
      let echo = try echoes(on: screen)
      let detail = String(
        format: "p95 %.2f ms, max %.2f ms; %d keys",
        Stats.percentile(echo, 95) ?? .nan, echo.max() ?? .nan, echo.count)
      report.add(Row(section, "chat: typing echo p50", Stats.percentile(echo, 50), "ms", detail))
      let seconds = max(3, settings.window * 2)
      report.add(
        Row(
          section, "chat: CPU while idle", screen.idleCPU(seconds: seconds), "%",
          "the chat process over \(seconds) s, nothing arriving or typed; target 0 %"))
    }
    do {
      let board = try rig.startBoard(
        "chatclient-board", rooms: ["r0"], sdu: settings.bleSDU, seeded: true)
      defer { board.stop() }
      let profile = rig.bleProfile(sdu: board.sdu)
      let link = try rig.startLink("chatclient-ble", to: board, profile: profile)
      defer { link.close() }
      let fs = try rig.mount("mnt-chatclient-ble", address: link.mountAddress)
      defer { rig.unmount(fs) }
      // The poster talks to the board directly: only the chat's mount is behind the link.
      let poster = try DirectClient(address: board.address, profile: .device, uname: "elsewhere")
      defer { poster.close() }
      let fid = try poster.openFile("/chat/post", mode: .write)
      let screen = try startChat(fs.mountpoint, room: "r0", label: "BLE")
      defer { screen.quit() }
      let delivery = try deliveries(to: screen, room: "r0", poster: poster, fid: fid)
      let target = settings.bleRTTms / 2 + 20
      report.add(
        contentsOf: delivery.rows(
          section, "BLE",
          target: String(
            format: "target ≤ one-way delay + 20 ms = %.0f ms; link \(profile)", target)
        ))
    }
  }

  /// `mount9bbs chat MOUNTPOINT ROOM` on a 100x30 pseudo-terminal, once its status line shows.
  private func startChat(_ mountpoint: String, room: String, label: String) throws -> ChatScreen {
    let screen = try ChatScreen(
      "/usr/bin/env",
      ["-u", "NO_COLOR", "TERM=xterm-256color", rig.mount9bbs, "chat", mountpoint, room],
      log: rig.work + "/chatclient-\(label.lowercased()).log")
    guard screen.waitFor(Array("[1:\(room)]".utf8), after: 0, seconds: 15) != nil else {
      screen.quit()
      throw BenchError("chat (\(label)): no status line within 15 s")
    }
    return screen
  }

  /// Warms up (a line until one shows, for at most 10 s), then posts `settings.posts` lines a
  /// random 100–300 ms apart, each timed from the post until its text is on the terminal.
  private func deliveries(
    to screen: ChatScreen, room: String, poster: DirectClient, fid: Fid
  ) throws -> ChatDeliveries {
    let warmUntil = Clock.now + 10_000_000_000
    var warm = false
    while !warm && Clock.now < warmUntil {
      let token = Self.randomToken()
      let offset = screen.count
      try poster.post(fid, "\(room):warm-up \(token)")
      warm = screen.waitFor(Array(token.utf8), after: offset, seconds: 2) != nil
    }
    guard warm else { throw BenchError("chat in \(room): no warm-up line shown within 10 s") }
    var outcome = ChatDeliveries(expected: rig.settings.posts)
    for _ in 1...rig.settings.posts {
      usleep(UInt32.random(in: 100_000...300_000))
      // Random letters: ncurses redraws only what differs from the row before, so a shared
      // prefix could be left out of the bytes; a random token is written whole.
      let token = Self.randomToken()
      let offset = screen.count
      let at = Clock.now
      try poster.post(fid, "\(room):said elsewhere \(token)")
      if let shown = screen.waitFor(Array(token.utf8), after: offset, seconds: 5) {
        outcome.latencies.append(Double(shown - at) / 1e6)
      }
    }
    log(
      "chat client · \(room): \(outcome.latencies.count)/\(outcome.expected) lines shown"
        + String(format: ", p50 %.2f ms", Stats.percentile(outcome.latencies, 50) ?? .nan))
    return outcome
  }

  /// 50 keys typed 10–30 ms apart, each timed until its character is drawn; then Ctrl-C
  /// clears the line.
  private func echoes(on screen: ChatScreen) throws -> [Double] {
    // Letters no escape sequence of ncurses ends with or contains (not d, h, l, m, H, K…).
    let keys = Array("qwertyuiopzxcvbn".utf8)
    var latencies: [Double] = []
    for number in 0..<50 {
      let key = keys[number % keys.count]
      let offset = screen.count
      let at = Clock.now
      screen.send([key])
      if let shown = screen.waitFor([key], after: offset, seconds: 2) {
        latencies.append(Double(shown - at) / 1e6)
      }
      usleep(UInt32.random(in: 10_000...30_000))
    }
    screen.send([0x03])
    usleep(300_000)
    return latencies
  }

  private static func randomToken() -> String {
    String((0..<12).map { _ in "abcdefghijkmnopqrstuvwxyz".randomElement() ?? "a" })
  }
}

/// Lines posted elsewhere and when each was on the chat's screen.
private struct ChatDeliveries {
  var expected: Int
  var latencies: [Double] = []

  func rows(_ section: String, _ label: String, target: String) -> [Row] {
    let detail =
      String(
        format: "max %.2f ms; %d/%d shown within 5 s; ", latencies.max() ?? .nan,
        latencies.count, expected) + target
    return [
      Row(
        section, "chat: line posted elsewhere → on screen p50, \(label)",
        Stats.percentile(latencies, 50), "ms", detail),
      Row(
        section, "chat: line posted elsewhere → on screen p95, \(label)",
        Stats.percentile(latencies, 95), "ms", detail),
    ]
  }
}
