// Section 10: what issue 24's awareness costs and how fast it tells: a post's `chat/events`
// line and its desktop notification (python-dbusmock's notification daemon on a private
// session bus), `chat/unread` right after a remount, an idle watched device board's requests,
// and `ls` and posting with watching on and off.

import Foundation
import Glibc

/// What the awareness files cost and how fast they tell (issue 24).
struct AwarenessSection: BenchSection {
  static let name = "awareness"
  static let usesLoopbackServer = true
  let rig: BenchRig

  func run() throws {
    let section = "10 awareness"
    try awarenessLatency(section)
    try unreadAfterRemount(section)
    try idleWatchedDevice(section)
    try watchingCost(section)
  }

  /// The interpreter with python-dbusmock (`MOUNT9BBS_DBUSMOCK_PYTHON`, else the package's
  /// `.venv-dbusmock`), or nil.
  private var dbusmockPython: String? {
    let path =
      ProcessInfo.processInfo.environment["MOUNT9BBS_DBUSMOCK_PYTHON"]
      ?? FileManager.default.currentDirectoryPath + "/.venv-dbusmock/bin/python"
    return FileManager.default.isExecutableFile(atPath: path) ? path : nil
  }

  /// A private session bus with the mock notification daemon: its address and log, or nil.
  private func startNotificationDaemon() throws -> (address: String, log: String, pids: [pid_t])? {
    guard let python = dbusmockPython else { return nil }
    let socket = rig.work + "/awareness-bus"
    try? FileManager.default.removeItem(atPath: socket)
    let address = "unix:path=\(socket)"
    let bus = try Supervisor.shared.spawn(
      "/usr/bin/dbus-daemon", ["--session", "--nofork", "--nopidfile", "--address=\(address)"],
      log: rig.work + "/awareness-bus.log")
    guard waitFor(seconds: 10, { FileManager.default.fileExists(atPath: socket) }) else {
      Supervisor.shared.stop(bus)
      throw BenchError("dbus-daemon did not start")
    }
    let log = rig.work + "/awareness-notify.log"
    try? FileManager.default.removeItem(atPath: log)
    setenv("DBUS_SESSION_BUS_ADDRESS", address, 1)
    defer { unsetenv("DBUS_SESSION_BUS_ADDRESS") }
    let mock = try Supervisor.shared.spawn(
      python, ["-m", "dbusmock", "--session", "-t", "notification_daemon", "-l", log],
      log: rig.work + "/awareness-mock.log")
    let deadline = Date(timeIntervalSinceNow: 15)
    while Date() < deadline {
      let check = rig.work + "/awareness-owner.txt"
      try? FileManager.default.removeItem(atPath: check)
      _ = try? Supervisor.shared.run(
        "/usr/bin/gdbus",
        [
          "call", "--session", "--dest", "org.freedesktop.DBus", "--object-path",
          "/org/freedesktop/DBus", "--method", "org.freedesktop.DBus.NameHasOwner",
          "org.freedesktop.Notifications",
        ], timeout: 5, log: check)
      if (try? String(contentsOfFile: check, encoding: .utf8))?.contains("true") == true {
        return (address, log, [mock, bus])
      }
      usleep(100_000)
    }
    Supervisor.shared.stop(mock)
    Supervisor.shared.stop(bus)
    throw BenchError("the mock notification daemon did not appear on the bus")
  }

  /// From a post by another client to the watching mount's `chat/events` line and to the
  /// Notify call on the mock notification service; posts 0.4 s apart (under the burst limit).
  private func awarenessLatency(_ section: String) throws {
    let daemon = try startNotificationDaemon()
    defer { for pid in daemon?.pids ?? [] { Supervisor.shared.stop(pid) } }
    let uname = "watcher\(rig.nextToken())"
    if let daemon { setenv("DBUS_SESSION_BUS_ADDRESS", daemon.address, 1) }
    let mounted = Result {
      try rig.mount("mnt-awareness", address: rig.loopbackMountAddress, uname: uname)
    }
    unsetenv("DBUS_SESSION_BUS_ADDRESS")
    let fs = try mounted.get()
    defer { rig.unmount(fs) }
    let (eventLatencies, posted) = try self.eventLatencies(of: fs, uname: uname)
    rig.report.add(
      Row(
        section, "post → chat/events line, p50", Stats.percentile(eventLatencies, 50), "ms",
        "\(eventLatencies.count)/\(rig.settings.posts) lines, p99 \(format(Stats.percentile(eventLatencies, 99))) ms; target ≤ 5"
      ))
    guard let daemon else {
      rig.report.add(
        Row(
          section, "mention → notification, p50", nil, "ms",
          "no python-dbusmock (.venv-dbusmock or MOUNT9BBS_DBUSMOCK_PYTHON)"))
      return
    }
    usleep(1_000_000)
    let notified = try Self.notificationLatencies(logged: daemon.log, posted: posted)
    rig.report.add(
      Row(
        section, "mention → notification (dbusmock), p50", Stats.percentile(notified, 50), "ms",
        "\(notified.count)/\(rig.settings.posts) notifications, p99 \(format(Stats.percentile(notified, 99))) ms; target ≤ 20"
      ))
  }

  /// Posts by another client, each naming `uname`, 0.4 s apart: how long (ms) each took to
  /// reach `chat/events` of the mount `fs`, and when (Unix time) each was posted, by index.
  private func eventLatencies(of fs: MountedFS, uname: String) throws -> (
    latencies: [Double], posted: [Int: Double]
  ) {
    // The reader is blocked in read() at stop(): unmounting ends that read, and the reader.
    let events = DescriptorFollower(.file(fs.mountpoint + "/chat/events", fromItsEnd: false))
    defer { events.stop() }
    let isMessage: (String) -> Bool = { $0.contains("\tmessage\tlobby\t") }
    let poster = try DirectClient(
      address: rig.loopbackAddress, profile: .multiplex, uname: "teller")
    defer { poster.close() }
    let fid = try poster.openFile("/chat/post", mode: .write)
    // Warm up: the events reader sees lines.
    var warm = 0
    while events.lineCount(where: isMessage) == 0 && warm < 50 {
      warm += 1
      try poster.post(fid, "lobby:warm up \(warm)")
      usleep(200_000)
    }
    usleep(500_000)
    var latencies: [Double] = []
    var posted: [Int: Double] = [:]
    for index in 0..<rig.settings.posts {
      let before = events.lineCount(where: isMessage)
      let start = Clock.now
      posted[index] = Date().timeIntervalSince1970
      try poster.post(fid, "lobby:\(uname) lat \(index)")
      if let at = events.line(before, where: isMessage, until: Clock.now + 5_000_000_000) {
        latencies.append(Double(at - start) / 1e6)
      }
      usleep(400_000)
    }
    return (latencies, posted)
  }

  /// How long (ms) after each post the mock notification service logged its Notify call,
  /// from the service's log; `posted` is when each was posted, by index.
  private static func notificationLatencies(logged log: String, posted: [Int: Double]) throws
    -> [Double]
  {
    var notified: [Double] = []
    let log = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
    let pattern = try NSRegularExpression(pattern: #"^(\d+\.\d+) Notify .* lat (\d+)"#)
    var seen = Set<Int>()
    for line in log.split(separator: "\n").map(String.init) {
      guard
        let match = pattern.firstMatch(in: line, range: NSRange(line.startIndex..., in: line)),
        let time = Range(match.range(at: 1), in: line).flatMap({ Double(line[$0]) }),
        let index = Range(match.range(at: 2), in: line).flatMap({ Int(line[$0]) }),
        let sent = posted[index], seen.insert(index).inserted
      else { continue }
      notified.append((time - sent) * 1000)
    }
    return notified
  }

  /// Unread counts kept with the history: lines said while the mount was away show in
  /// `chat/unread` right after the remount. Reports how long after the mount appeared they did.
  private func unreadAfterRemount(_ section: String) throws {
    let uname = "unread\(rig.nextToken())"
    let address = rig.loopbackMountAddress
    var fs = try rig.mount("mnt-unread", address: address, options: ["watch=r05"], uname: uname)
    let poster = try DirectClient(
      address: rig.loopbackAddress, profile: .multiplex, uname: "counter")
    defer { poster.close() }
    let fid = try poster.openFile("/chat/post", mode: .write)
    let unread = fs.mountpoint + "/chat/unread"
    // Read r05 to its end, then three lines while mounted and two while away.
    _ = try? Supervisor.shared.run(
      "/usr/bin/tail", ["-n", "1", fs.mountpoint + "/chat/r05"], timeout: 10, discardingOutput: true
    )
    _ = waitFor(seconds: 10) { self.text(unread).contains("r05 0\n") }
    for index in 0..<3 { try poster.post(fid, "r05:before \(index)") }
    _ = waitFor(seconds: 10) { self.text(unread).contains("r05 3\n") }
    rig.unmount(fs)
    for index in 0..<2 { try poster.post(fid, "r05:away \(index)") }
    let start = Clock.now
    fs = try rig.mount("mnt-unread", address: address, options: ["watch=r05"], uname: uname)
    defer { rig.unmount(fs) }
    let mounted = Clock.seconds(since: start) * 1000
    let firstRead = text(unread)
    let right = waitFor(seconds: 15) { self.text(unread).contains("r05 5\n") }
    let ms = Clock.seconds(since: start) * 1000 - mounted
    rig.report.add(
      Row(
        section, "unread after a remount (5 lines, 2 said while away)", right ? ms : nil, "ms",
        "after the mount appeared; its first read said \(firstRead.split(separator: "\n").first { $0.hasPrefix("r05 ") } ?? "nothing for r05")"
      ))
  }

  /// Eight watched rooms of an idle device board (seqpacket): requests the mount sends per
  /// second once every room's read is parked.
  private func idleWatchedDevice(_ section: String) throws {
    let deviceRooms = (1...8).map { "w\($0)" }
    let board = try rig.startBoard(
      "awareness-device", rooms: deviceRooms, sdu: 245, seeded: true)
    defer { board.stop() }
    let fs = try rig.mount(
      "mnt-aware-device", address: board.mountAddress, options: ["watch=all"])
    defer { rig.unmount(fs) }
    let unread = fs.mountpoint + "/chat/unread"
    let all = waitFor(seconds: 30) {
      self.text(unread).split(separator: "\n").count >= deviceRooms.count
    }
    // Every watched room caught up: its read parked.
    _ = waitFor(seconds: 30) { (self.traffic(fs.mountpoint)?.parked ?? 0) >= deviceRooms.count }
    let window = max(rig.settings.window * 3, 5)
    guard let before = traffic(fs.mountpoint) else {
      return rig.report.add(
        Row(section, "idle device board, 8 watched rooms", nil, "req/s", "no status"))
    }
    usleep(useconds_t(window * 1e6))
    let after = traffic(fs.mountpoint)
    let rate = after.map { Double($0.sent - before.sent) / window }
    rig.report.add(
      Row(
        section, "idle device board, 8 watched rooms", rate, "req/s",
        "\(all ? "all 8 listed in chat/unread" : "NOT all rooms watched"), \(before.parked) reads parked, over \(format(window)) s; target ~0"
      ))
  }

  /// `ls -l chat` and a post through the mount, watching every room and none.
  private func watchingCost(_ section: String) throws {
    for watch in ["all", "none"] {
      let fs = try rig.mount(
        "mnt-watch-\(watch)", address: rig.loopbackMountAddress, options: ["watch=\(watch)"])
      defer { rig.unmount(fs) }
      let chat = fs.mountpoint + "/chat"
      if watch == "all" {
        _ = waitFor(seconds: 15) {
          self.text(chat + "/unread").split(separator: "\n").count >= rig.rooms.count
        }
      }
      var listings: [Double] = []
      for _ in 0..<max(5, rig.settings.runs * 3) {
        let result = try Supervisor.shared.run(
          "/bin/ls", ["-l", chat], timeout: 30, discardingOutput: true)
        listings.append(result.seconds * 1000)
      }
      var posts: [Double] = []
      for index in 0..<rig.settings.posts {
        let start = Clock.now
        let descriptor = open(chat + "/r07", O_WRONLY)
        guard descriptor >= 0 else { break }
        let line = Array("watching \(watch) \(index)\n".utf8)
        _ = line.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        close(descriptor)
        posts.append(Double(Clock.now - start) / 1e6)
      }
      rig.report.add(
        Row(
          section, "ls -l chat, watch=\(watch), p50", Stats.percentile(listings, 50), "ms",
          "\(listings.count) runs, \(rig.rooms.count) rooms"))
      rig.report.add(
        Row(
          section, "post (open, write, close), watch=\(watch), p50", Stats.percentile(posts, 50),
          "ms", "\(posts.count) posts"))
    }
  }

  // MARK: Helpers

  private func text(_ path: String) -> String {
    (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
  }

  private func format(_ value: Double?) -> String {
    value.map { String(format: "%.2f", $0) } ?? "n/a"
  }

  /// Polls `condition` every 20 ms for at most `seconds`.
  private func waitFor(seconds: Double, _ condition: () -> Bool) -> Bool {
    let deadline = Date(timeIntervalSinceNow: seconds)
    while Date() < deadline {
      if condition() { return true }
      usleep(20_000)
    }
    return condition()
  }

  /// Requests sent and reads parked now over every session of the mount at `mountpoint`,
  /// from `mount9bbs status --json`.
  private func traffic(_ mountpoint: String) -> (sent: UInt64, parked: Int)? {
    let output = rig.work + "/awareness-status.json"
    try? FileManager.default.removeItem(atPath: output)
    guard
      (try? Supervisor.shared.run(
        rig.mount9bbs, ["status", mountpoint, "--json"], timeout: 10, log: output))?
        .status == 0,
      let data = FileManager.default.contents(atPath: output),
      let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
      let sessions = object["sessions"] as? [[String: Any]]
    else { return nil }
    return (
      sessions.reduce(0) { $0 + (($1["messagesOut"] as? NSNumber)?.uint64Value ?? 0) },
      sessions.reduce(0) { $0 + (($1["parkedReads"] as? NSNumber)?.intValue ?? 0) }
    )
  }
}
