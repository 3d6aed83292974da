// Section 5: the daemons' CPU and RSS with 100 idle room streams on loopback, and with 8 feeds
// against a device-profile server (4 parking slots per session) through a zero-delay emulated
// link that counts the requests.

import Foundation
import Glibc
import LinkEmulation
import NinePClient

struct DaemonSection: BenchSection {
  static let name = "daemon"
  static let usesLoopbackServer = true
  let rig: BenchRig

  func run() throws {
    let section = "5 daemons"
    let report = rig.report
    do {
      let fs = try rig.mount("mnt", address: rig.loopbackMountAddress)
      defer { rig.unmount(fs) }
      var readers: [DescriptorFollower] = []
      for index in 0..<100 {
        readers.append(.roomReader(fs.mountpoint + "/chat/" + rig.rooms[index % rig.rooms.count]))
      }
      let openCount = readers.filter { $0.waitOpened(seconds: 15) }.count
      report.add(Row(section, "room streams open", Double(openCount), "", "of 100, 20 rooms"))
      usleep(1_000_000)
      sample(
        [("mount9bbs", fs.pid), ("9bbsd", rig.loopbackServer ?? 0)], section: section,
        label: "100 streams idle")
      let poster = try DirectClient(
        address: rig.loopbackAddress, profile: .multiplex, uname: "poster")
      defer { poster.close() }
      let fid = try poster.openFile("/chat/post", mode: .write)
      for room in rig.rooms { try poster.post(fid, "\(room):bench #bEND#") }
      for reader in readers { _ = reader.waitFinished(seconds: 10) }
    }

    let deviceRooms = ["lobby"] + (1...7).map { "d\($0)" }
    let board = try rig.startBoard("device", rooms: deviceRooms, sdu: 245, seeded: true)
    defer { board.stop() }
    let counter = try rig.startLink(
      "count", to: board, profile: LinkProfile(roundTrip: .zero, bytesPerSecond: 0, sduSize: 245))
    defer { counter.close() }
    let fs = try rig.mount("mnt-device", address: counter.mountAddress)
    defer { rig.unmount(fs) }
    var readers: [DescriptorFollower] = []
    for room in deviceRooms {
      readers.append(.roomReader(fs.mountpoint + "/chat/" + room))
    }
    let openCount = readers.filter { $0.waitOpened(seconds: 5) }.count
    report.add(
      Row(
        section, "device rooms that opened within 5 s", Double(openCount), "",
        "of 8; the rest wait for a parking slot"))
    usleep(1_000_000)
    let before = counter.statistics()
    sample(
      [("mount9bbs", fs.pid), ("9bbsd device", board.pid)], section: section,
      label: "8 feeds, device")
    let window = counter.statistics().since(before)
    report.add(
      Row(
        section, "9P requests/s, 8 feeds idle, device",
        Double(window.upstream.messages)
          / (Double(window.timestamp) / 1e9), "req/s", "backoff at work when low"))
    let poster = try DirectClient(address: board.address, profile: .device, uname: "poster")
    defer { poster.close() }
    let fid = try poster.openFile("/chat/post", mode: .write)
    for room in deviceRooms { try poster.post(fid, "\(room):bench #bEND#") }
    for reader in readers { _ = reader.waitFinished(seconds: 10) }
  }

  /// CPU (% of one core) and RSS (MiB) of `pids` over the settings' window.
  private func sample(_ pids: [(String, pid_t)], section: String, label: String) {
    let before = pids.map { ProcessSample(pid: $0.1) }
    let start = Clock.now
    usleep(UInt32(rig.settings.window * 1e6))
    let seconds = Clock.seconds(since: start)
    for (index, (name, pid)) in pids.enumerated() {
      guard let first = before[index], let last = ProcessSample(pid: pid) else { continue }
      rig.report.add(
        Row(
          section, "\(name) CPU, \(label)", (last.cpuSeconds - first.cpuSeconds) / seconds * 100,
          "% core",
          String(
            format: "over %.1f s (resolution %.2f%%)", seconds,
            100 / Double(sysconf(Int32(_SC_CLK_TCK))) / seconds)))
      rig.report.add(Row(section, "\(name) RSS, \(label)", Double(last.rssKiB) / 1024, "MiB"))
    }
  }
}
