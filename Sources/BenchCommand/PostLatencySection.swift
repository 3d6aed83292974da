import Foundation
import Glibc

// Section 7b: posts as a member writes them.

/// A member posting the way the shell does, `echo LINE > MOUNT/chat/ROOM`, from their own
/// mount while another member's mount tails eight rooms: how long the write takes to return,
/// and when the line is on the other member's `tail -f`. On a device-profile board over
/// seqpacket, and with both members behind the emulated BLE link.
struct PostLatencySection: BenchSection {
  static let name = "posts"
  static let usesLoopbackServer = false
  let rig: BenchRig

  func run() throws {
    let section = "7b posts as members write them"
    let rooms = (0..<8).map { "r\($0)" }
    var stragglers: [OutputFollower] = []
    defer { for follower in stragglers { follower.stop(seconds: 3) } }
    do {
      let board = try rig.startBoard("posts-device", rooms: rooms, sdu: 245, seeded: true)
      defer { board.stop() }
      let reader = try rig.mount("mnt-posts-reader", address: board.mountAddress)
      defer { rig.unmount(reader) }
      let poster = try rig.mount("mnt-posts-poster", address: board.mountAddress)
      defer { rig.unmount(poster) }
      try measure(
        section, "device", reader: reader, poster: poster, rooms: rooms, note: "seqpacket",
        returnTarget: "target p99 ≤ 20 ms", deliveryTarget: "target ≤ 10 ms",
        stragglers: &stragglers)
    }
    do {
      let board = try rig.startBoard(
        "posts-board", rooms: rooms, sdu: rig.settings.bleSDU, seeded: true)
      defer { board.stop() }
      let profile = rig.bleProfile(sdu: board.sdu)
      // Each member has a radio link of their own to the board.
      let readerLink = try rig.startLink("posts-ble-reader", to: board, profile: profile)
      defer { readerLink.close() }
      let posterLink = try rig.startLink("posts-ble-poster", to: board, profile: profile)
      defer { posterLink.close() }
      let reader = try rig.mount("mnt-posts-ble-reader", address: readerLink.mountAddress)
      defer { rig.unmount(reader) }
      let poster = try rig.mount("mnt-posts-ble-poster", address: posterLink.mountAddress)
      defer { rig.unmount(poster) }
      let rtt = rig.settings.bleRTTms
      try measure(
        section, "BLE", reader: reader, poster: poster, rooms: rooms, note: "link \(profile)",
        returnTarget: String(format: "target about one round trip (%.0f ms)", rtt),
        deliveryTarget: "target ≤ 45 ms", stragglers: &stragglers)
    }
  }

  /// Two rows: the writes' return times and the lines' arrival on the reader's `tail -f`.
  private func measure(
    _ section: String, _ label: String, reader: MountedFS, poster: MountedFS, rooms: [String],
    note: String, returnTarget: String, deliveryTarget: String,
    stragglers: inout [OutputFollower]
  ) throws {
    let writer = RoomFileWriter(mountpoint: poster.mountpoint)
    let outcome = try PeopleSection(rig: rig).follow(
      .tail, output: .pty, mountpoint: reader.mountpoint, rooms: rooms, readersPerRoom: 1,
      post: writer.post, stragglers: &stragglers)
    let returns = writer.durations { $0.hasPrefix("people ") }
    let p99 = Stats.percentile(returns, 99)
    rig.report.add(
      Row(
        section, "\(label): echo > chat/ROOM returns, p50", Stats.percentile(returns, 50), "ms",
        String(format: "p99 %.2f, max %.2f ms; ", p99 ?? .nan, returns.max() ?? .nan)
          + "\(returns.count) writes from a second mount; \(returnTarget); \(note)"))
    rig.report.add(
      outcome.row(
        section, "\(label): on another member's tail -f, pty, 8 rooms tailed",
        note: "\(deliveryTarget); \(note)"))
  }
}

/// Posts as `echo LINE > FILE` does (open, one write, close) and keeps how long each took.
final class RoomFileWriter {
  let mountpoint: String
  private var taken: [(text: String, ms: Double)] = []

  init(mountpoint: String) {
    self.mountpoint = mountpoint
  }

  /// Writes `text` and a newline to `chat/room`.
  func post(_ room: String, _ text: String) throws {
    let start = Clock.now
    try Self.echo(text, to: mountpoint + "/chat/" + room)
    taken.append((text, Double(Clock.now - start) / 1e6))
  }

  /// How long the posts whose text `matches` took, in milliseconds.
  func durations(_ matches: (String) -> Bool) -> [Double] {
    taken.filter { matches($0.text) }.map(\.ms)
  }

  /// Writes one line to a room file as `echo text > room` does.
  static func echo(_ text: String, to file: String) throws {
    let fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0o666)
    guard fd >= 0 else { throw BenchError("open \(file): \(String(cString: strerror(errno)))") }
    let bytes = Array((text + "\n").utf8)
    let written = write(fd, bytes, bytes.count)
    let writeError = errno
    guard close(fd) == 0 else {
      throw BenchError("close \(file): \(String(cString: strerror(errno)))")
    }
    guard written == bytes.count else {
      throw BenchError("write \(file): \(String(cString: strerror(writeError)))")
    }
  }
}
