import Foundation
import Glibc
import LinkEmulation
import NinePClient
import NinePProtocol
import NinePTransport

/// How a person reads a room in section 7.
enum FollowTool: String {
  case tail = "tail -f"
  case cat

  func command(_ file: String) -> (path: String, arguments: [String]) {
    switch self {
    case .tail: return ("/usr/bin/tail", ["-f", file])
    case .cat: return ("/bin/cat", [file])
    }
  }
}

/// One row of section 7: readers started, warmed up, then timed over the posts.
struct FollowOutcome {
  var latencies: [Double] = []
  var expected = 0
  var readers = 0
  /// Readers that showed a warm-up line: the ones really following.
  var following = 0
  /// Where the readers that showed no line wait in the kernel, e.g. "… in read ×8".
  var stuck = ""
}

// MARK: - 7. chat as people read it

/// Delivery as a user sees it: from another 9P client's post to the line on the output of
/// `tail -f` or `cat`, on a pty (a terminal) or a pipe, on loopback, against a device-profile
/// server over seqpacket, and over the emulated BLE link.
struct PeopleSection: BenchSection {
  static let name = "people"
  static let usesLoopbackServer = true
  let rig: BenchRig

  func run() throws {
    let section = "7 chat as people read it"
    let settings = rig.settings
    let report = rig.report
    // Processes that outlived their SIGKILL (stuck in a FUSE request): reaped once their mount
    // is gone, which ends those requests.
    var stragglers: [OutputFollower] = []
    defer { for follower in stragglers { follower.stop(seconds: 3) } }

    // Loopback TCP, multiplex profile, with section 4's bare-FUSE floor (readers blocked in
    // read(), libfuse answering from memory) beside it, run before the mount exists.
    var floors: [Int: Double] = [:]
    for readers in [1, 10] {
      floors[readers] = rig.fanoutFloor(readers: readers, posts: settings.posts)?.p50
    }
    do {
      let fs = try rig.mount("mnt-people", address: rig.loopbackMountAddress)
      defer { rig.unmount(fs) }
      let poster = try DirectClient(
        address: rig.loopbackAddress, profile: .multiplex, uname: "people")
      defer { poster.close() }
      let fid = try poster.openFile("/chat/post", mode: .write)
      let cases: [(FollowTool, OutputFollower.Output, Int)] = [
        (.tail, .pty, 1), (.tail, .pty, 10), (.cat, .pty, 1), (.cat, .pty, 10), (.tail, .pipe, 1),
      ]
      for (tool, output, readers) in cases {
        let outcome = try follow(
          tool, output: output, mountpoint: fs.mountpoint, rooms: ["r01"],
          readersPerRoom: readers, post: poster.poster(fid), stragglers: &stragglers)
        let floor =
          output == .pty
          ? floors[readers].map { String(format: "bare-FUSE floor p50 %.3f ms", $0) } : nil
        report.add(
          outcome.row(
            section, "\(tool.rawValue), \(output), \(readers) reader\(readers == 1 ? "" : "s")",
            note: floor))
      }
    }

    // Device profile on seqpacket: one reader per room, posts round-robin over the rooms.
    let deviceRooms = (0..<8).map { "r\($0)" }
    do {
      // Fresh rooms, as a new board has them: tail -f starts on an empty room file.
      let board = try rig.startBoard(
        "people-device", rooms: deviceRooms, sdu: 245, seeded: false)
      defer { board.stop() }
      let fs = try rig.mount("mnt-people-device", address: board.mountAddress)
      defer { rig.unmount(fs) }
      let poster = try DirectClient(address: board.address, profile: .device, uname: "people")
      defer { poster.close() }
      let fid = try poster.openFile("/chat/post", mode: .write)
      for tool in [FollowTool.tail, .cat] {
        let outcome = try follow(
          tool, output: .pty, mountpoint: fs.mountpoint, rooms: deviceRooms, readersPerRoom: 1,
          post: poster.poster(fid), stragglers: &stragglers)
        let note = tool == .tail ? "seqpacket; rooms empty when tail starts" : "seqpacket"
        report.add(outcome.row(section, "device: \(tool.rawValue), pty, 8 rooms", note: note))
      }
    }

    // The emulated BLE link in front of a device-profile server; the poster talks to the
    // server directly, as in section 6.
    do {
      let board = try rig.startBoard(
        "people-board", rooms: deviceRooms, sdu: settings.bleSDU, seeded: true)
      defer { board.stop() }
      let profile = rig.bleProfile(sdu: board.sdu)
      let link = try rig.startLink("people-ble", to: board, profile: profile)
      defer { link.close() }
      let fs = try rig.mount("mnt-people-ble", address: link.mountAddress)
      defer { rig.unmount(fs) }
      let poster = try DirectClient(address: board.address, profile: .device, uname: "people")
      defer { poster.close() }
      let fid = try poster.openFile("/chat/post", mode: .write)
      for rooms in [["r0"], deviceRooms] {
        for tool in [FollowTool.tail, .cat] {
          let outcome = try follow(
            tool, output: .pty, mountpoint: fs.mountpoint, rooms: rooms, readersPerRoom: 1,
            post: poster.poster(fid), stragglers: &stragglers)
          let label =
            "BLE: \(tool.rawValue), pty, \(rooms.count) room\(rooms.count == 1 ? "" : "s")"
          report.add(outcome.row(section, label, note: "link \(profile)"))
        }
      }
    }
  }

  /// Starts `readersPerRoom` readers of each room, waits until each shows a warm-up line, then
  /// `post`s `settings.peoplePosts` lines (text beginning `people `) round-robin over `rooms`, a random 100–300 ms apart, and
  /// times each line from its post to its appearance on each reader's output. A line not seen
  /// within `deadline` seconds of its post is undelivered.
  func follow(
    _ tool: FollowTool, output: OutputFollower.Output, mountpoint: String, rooms: [String],
    readersPerRoom: Int, post: (_ room: String, _ text: String) throws -> Void,
    stragglers: inout [OutputFollower],
    warmUp: Double = 5, deadline: Double = 5
  ) throws -> FollowOutcome {
    let run = rig.nextToken()
    let posts = rig.settings.peoplePosts
    var outcome = FollowOutcome()
    outcome.expected = posts * readersPerRoom
    var readers: [(room: String, follower: OutputFollower)] = []
    defer {
      // Kill them all first, so stuck ones are not waited for one after the other.
      for reader in readers { reader.follower.terminate() }
      let until = Clock.now + 3_000_000_000
      for reader in readers
      where !reader.follower.stop(seconds: max(0.1, Double(until - Clock.now) / 1e9)) {
        stragglers.append(reader.follower)
      }
    }
    for room in rooms {
      for _ in 0..<readersPerRoom {
        let (path, arguments) = tool.command(mountpoint + "/chat/" + room)
        let follower = try OutputFollower(
          path, arguments, output: output, log: rig.work + "/people-\(run).log")
        readers.append((room, follower))
      }
    }
    outcome.readers = readers.count

    // Let every reader reach its resting place before the first line, as a person's tail has
    // long before anyone posts: seen twice 50 ms apart, for at most 3 s.
    let settleEnd = Clock.now + 3_000_000_000
    var wasSettled = false
    while Clock.now < settleEnd {
      let settled = readers.allSatisfy { $0.follower.isSettled }
      if settled && wasSettled { break }
      wasSettled = settled
      usleep(50_000)
    }
    let warmUpStart = Clock.now
    // Warm-up: a line per room until every reader has shown one (tail -f polls once a second,
    // opening a device room can wait for a parking slot), or the time is up.
    let warmPrefix = "\(run)-w"
    let isWarm: ([String: Int64]) -> Bool = { $0.keys.contains { $0.hasPrefix(warmPrefix) } }
    let warmUpEnd = Clock.now + Int64(warmUp * 1e9)
    var attempt = 0
    var cold = readers.map(\.follower)
    while !cold.isEmpty && Clock.now < warmUpEnd {
      attempt += 1
      for room in rooms { try post(room, "warm-up #p\(warmPrefix)\(attempt)#") }
      let turnEnd = min(warmUpEnd, Clock.now + 2_000_000_000)
      cold = cold.filter { !$0.wait(until: turnEnd, for: isWarm) }
    }
    outcome.following = readers.count - cold.count
    log(
      "people · \(tool.rawValue) \(output): \(outcome.following) of \(readers.count) readers"
        + String(
          format: " followed after %.2f s, %d warm-up line(s)", Clock.seconds(since: warmUpStart),
          attempt))
    guard outcome.following > 0 else {
      outcome.stuck = Self.kernelStates(of: cold)
      log("people · \(tool.rawValue) \(output): no reader followed; \(outcome.stuck)")
      return outcome
    }

    var sent: [(token: String, room: String, at: Int64)] = []
    for seq in 1...posts {
      let room = rooms[(seq - 1) % rooms.count]
      let token = "\(run)-\(seq)"
      let at = Clock.now
      try post(room, "people #p\(token)#")
      sent.append((token, room, at))
      usleep(UInt32.random(in: 100_000...300_000))
    }
    let limit = Int64(deadline * 1e9)
    let lastDeadline = (sent.last?.at ?? Clock.now) + limit
    // Readers that showed none of their lines: where they wait says why.
    var silent: [OutputFollower] = []
    for reader in readers {
      let mine = sent.filter { $0.room == reader.room }.map(\.token)
      reader.follower.wait(until: lastDeadline) { arrivals in
        mine.allSatisfy { arrivals[$0] != nil }
      }
      if mine.allSatisfy({ reader.follower.arrival(of: $0) == nil }) {
        silent.append(reader.follower)
      }
    }
    for post in sent {
      for reader in readers where reader.room == post.room {
        if let arrival = reader.follower.arrival(of: post.token), arrival - post.at <= limit {
          outcome.latencies.append(Double(arrival - post.at) / 1e6)
        }
      }
    }
    if !silent.isEmpty { outcome.stuck = Self.kernelStates(of: silent) }
    return outcome
  }

  /// "wchan in syscall ×count" of each distinct state of `followers`.
  private static func kernelStates(of followers: [OutputFollower]) -> String {
    var counts: [String: Int] = [:]
    for follower in followers { counts[follower.kernelState, default: 0] += 1 }
    return counts.sorted { $0.key < $1.key }.map { "\($0.key) ×\($0.value)" }
      .joined(separator: ", ")
  }
}

extension DirectClient {
  /// A `follow` poster: `room:text` written to `fid`, an open `/chat/post`.
  func poster(_ fid: Fid) -> (String, String) throws -> Void {
    { room, text in try self.post(fid, "\(room):\(text)") }
  }
}

extension FollowOutcome {
  /// The table row: p50 as the value; p99, max and delivered/expected beside it.
  func row(_ section: String, _ label: String, note: String?) -> Row {
    let delivery = Delivery(latencies: latencies, expected: expected)
    func ms(_ value: Double?) -> String {
      value.map { String(format: $0 >= 100 ? "%.0f" : "%.2f", $0) } ?? "n/a"
    }
    var parts = [
      "p99 \(ms(delivery.p99)), max \(ms(delivery.max)) ms; \(delivery.delivered)/\(expected) delivered"
    ]
    if following < readers { parts.append("\(following)/\(readers) readers followed") }
    if !stuck.isEmpty { parts.append("waiting: \(stuck)") }
    if let note { parts.append(note) }
    var row = Row(section, "p50, " + label, delivery.p50, "ms", parts.joined(separator: "; "))
    row.delivery = delivery
    return row
  }
}
