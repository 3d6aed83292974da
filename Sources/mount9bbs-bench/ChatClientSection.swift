import Foundation
import Glibc
import LinkEmulation
import NinePClient
import NinePProtocol
import NinePTransport

// MARK: - 9. the chat client

extension Bench {
  /// `mount9bbs chat` on a pseudo-terminal, as a person runs it (the logic of
  /// `scripts/chat-latency`): a line posted by another 9P client until its text is on the
  /// chat's terminal, on loopback and over the emulated BLE link; a key typed until it is
  /// drawn back; the chat's CPU while nothing happens.
  func chatClientSection() throws {
    let section = "9 the chat client"
    do {
      let fs = try mountServer("mnt-chatclient", address: "tcp!127.0.0.1!\(serverPort)")
      defer { unmount(fs) }
      let poster = try DirectClient(address: serverAddress, profile: .multiplex, uname: "elsewhere")
      defer { poster.close() }
      let fid = try poster.openFile("/chat/post", mode: .write)
      let screen = try startChat(fs.mountpoint, room: "r03", label: "loopback")
      defer { screen.quit() }
      let delivery = try deliveries(to: screen, room: "r03", poster: poster, fid: fid)
      add(contentsOf: delivery.rows(section, "loopback", target: "target p50 ≤ 10 ms"))
      let echo = try echoes(on: screen)
      let detail = String(
        format: "p95 %.2f ms, max %.2f ms; %d keys",
        Stats.percentile(echo, 95) ?? .nan, echo.max() ?? .nan, echo.count)
      add(Row(section, "chat: typing echo p50", Stats.percentile(echo, 50), "ms", detail))
      let seconds = max(3, settings.window * 2)
      add(
        Row(
          section, "chat: CPU while idle", screen.idleCPU(seconds: seconds), "%",
          "the chat process over \(seconds) s, nothing arriving or typed; target 0 %"))
    }
    do {
      let sdu = settings.bleSDU
      let (pid, socket) = try startDeviceServer(
        "chatclient-board", rooms: ["r0"], sdu: sdu, seeded: true)
      defer { Supervisor.shared.stop(pid) }
      let board = TransportAddress.seqpacket(path: socket, sduLimit: sdu)
      let profile = LinkProfile(
        roundTrip: .microseconds(Int64(settings.bleRTTms * 1000)),
        bytesPerSecond: settings.bleRate, sduSize: sdu)
      let link = try LinkEmulator(
        listen: .seqpacket(path: work + "/chatclient-ble.sock", sduLimit: sdu),
        server: board, profile: profile)
      link.start()
      defer { link.close() }
      let fs = try mountServer(
        "mnt-chatclient-ble", address: "seqpacket!\(work)/chatclient-ble.sock!\(sdu)")
      defer { unmount(fs) }
      // The poster talks to the board directly: only the chat's mount is behind the link.
      let poster = try DirectClient(address: board, profile: .device, uname: "elsewhere")
      defer { poster.close() }
      let fid = try poster.openFile("/chat/post", mode: .write)
      let screen = try startChat(fs.mountpoint, room: "r0", label: "BLE")
      defer { screen.quit() }
      let delivery = try deliveries(to: screen, room: "r0", poster: poster, fid: fid)
      let target = settings.bleRTTms / 2 + 20
      add(
        contentsOf: delivery.rows(
          section, "BLE",
          target: String(
            format: "target ≤ one-way delay + 20 ms = %.0f ms; link \(profile)", target)
        ))
    }
  }

  private func add(contentsOf rows: [Row]) {
    for row in rows { add(row) }
  }

  /// `mount9bbs chat MOUNTPOINT ROOM` on a 100x30 pseudo-terminal, once its status line shows.
  private func startChat(_ mountpoint: String, room: String, label: String) throws -> ChatScreen {
    let screen = try ChatScreen(
      "/usr/bin/env",
      ["-u", "NO_COLOR", "TERM=xterm-256color", mount9bbs, "chat", mountpoint, room],
      log: work + "/chatclient-\(label.lowercased()).log")
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
    var outcome = ChatDeliveries(expected: settings.posts)
    for _ in 1...settings.posts {
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
    String((0..<12).map { _ in "abcdefghijkmnopqrstuvwxyz".randomElement()! })
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

/// A program on a pseudo-terminal (its standard input and output), everything it draws kept
/// with the time each read of it arrived.
final class ChatScreen: @unchecked Sendable {
  let pid: pid_t
  private let master: Int32
  private let condition = NSCondition()
  private var seen: [UInt8] = []
  /// (when, length of `seen` after that read).
  private var arrivals: [(at: Int64, end: Int)] = []
  private var finished = false

  init(_ path: String, _ arguments: [String], width: Int = 100, height: Int = 30, log: String)
    throws
  {
    let (master, slave) = try OutputFollower.makeOutput(.pty)
    defer { close(slave) }
    var size = winsize(
      ws_row: UInt16(height), ws_col: UInt16(width), ws_xpixel: 0, ws_ypixel: 0)
    _ = ioctl(master, UInt(TIOCSWINSZ), &size)
    do {
      pid = try Supervisor.shared.spawn(path, arguments, log: log, stdout: slave, stdin: slave)
    } catch {
      close(master)
      throw error
    }
    self.master = master
    Thread.detachNewThread { [self] in run() }
  }

  private func run() {
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
      let count = buffer.withUnsafeMutableBytes { read(master, $0.baseAddress, $0.count) }
      if count < 0 && errno == EINTR { continue }
      // EIO: the program and its terminal are gone.
      if count <= 0 { break }
      let now = Clock.now
      condition.lock()
      seen += buffer[0..<count]
      arrivals.append((now, seen.count))
      condition.broadcast()
      condition.unlock()
    }
    condition.lock()
    finished = true
    condition.broadcast()
    condition.unlock()
  }

  /// How many bytes the program has drawn so far.
  var count: Int { condition.withLock { seen.count } }

  /// When `bytes` were first drawn completely at or after `offset`, waiting up to `seconds`.
  func waitFor(_ bytes: [UInt8], after offset: Int, seconds: Double) -> Int64? {
    let deadline = Date(timeIntervalSinceNow: seconds)
    condition.lock()
    defer { condition.unlock() }
    while true {
      if let end = Self.end(of: bytes, in: seen, from: offset) {
        return arrivals.first { $0.end >= end }?.at
      }
      if finished || !condition.wait(until: deadline) { return nil }
    }
  }

  private static func end(of needle: [UInt8], in haystack: [UInt8], from offset: Int) -> Int? {
    guard !needle.isEmpty, haystack.count - offset >= needle.count else { return nil }
    var start = max(0, offset)
    while start + needle.count <= haystack.count {
      if haystack[start] == needle[0]
        && haystack[start..<start + needle.count].elementsEqual(needle)
      {
        return start + needle.count
      }
      start += 1
    }
    return nil
  }

  /// Types `bytes`.
  func send(_ bytes: [UInt8]) {
    _ = bytes.withUnsafeBytes { write(master, $0.baseAddress, $0.count) }
  }

  /// The program's CPU use over `seconds`, percent of one core.
  func idleCPU(seconds: Double) -> Double? {
    func ticks() -> Int? {
      guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let close = text.lastIndex(of: ")")
      else { return nil }
      let fields = text[text.index(after: close)...].split(separator: " ")
      guard fields.count > 12, let user = Int(fields[11]), let system = Int(fields[12]) else {
        return nil
      }
      return user + system
    }
    guard let before = ticks() else { return nil }
    usleep(UInt32(seconds * 1e6))
    guard let after = ticks() else { return nil }
    return Double(after - before) / Double(sysconf(Int32(_SC_CLK_TCK))) / seconds * 100
  }

  /// `/quit`, then a kill if it has not left within 3 s.
  func quit() {
    send(Array("/quit\r".utf8))
    if !Supervisor.shared.reap(pid, seconds: 3) { Supervisor.shared.stop(pid) }
    // The reader ends on EIO once the program is gone; only then is its descriptor closed.
    condition.lock()
    let until = Date(timeIntervalSinceNow: 2)
    while !finished && condition.wait(until: until) {}
    let done = finished
    condition.unlock()
    if done { close(master) }
  }
}
