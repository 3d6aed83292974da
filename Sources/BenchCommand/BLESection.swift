// Section 6: over an emulated BLE link (LinkEmulation) in front of a device-profile 9bbsd on
// seqpacket: round trips of `ls mnt/chat`, cat of the BLE-sized file (rate, link utilisation,
// goodput), the same cat to a server that allows pipelining, then sections 3 and 4's
// measurements through the link.

import Foundation
import Glibc
import LinkEmulation

struct BLESection: BenchSection {
  static let name = "ble"
  static let usesLoopbackServer = false
  let rig: BenchRig

  func run() throws {
    let section = "6 BLE link"
    let report = rig.report
    let settings = rig.settings
    let board = try rig.startBoard(
      "board", rooms: rig.rooms, files: true, sdu: settings.bleSDU, seeded: true)
    defer { board.stop() }
    let profile = rig.bleProfile(sdu: settings.bleSDU)
    let link = try rig.startLink("ble", to: board, profile: profile)
    defer { link.close() }
    let fs = try rig.mount("mnt-ble", address: link.mountAddress)
    defer { rig.unmount(fs) }
    let rtt = settings.bleRTTms

    // ls mnt/chat on the fresh mount, then again.
    for label in ["first", "again"] {
      let before = link.statistics()
      let result = try? Supervisor.shared.run("/bin/ls", [fs.mountpoint + "/chat"], timeout: 60)
      let window = link.statistics().since(before)
      let ms = (result?.seconds ?? .nan) * 1000
      // The time waited less the time the link spent moving the bytes (a listing of 20 rooms
      // is seven SDUs): what is left is round trips.
      let moving = Double(window.upstream.busyNanoseconds + window.downstream.busyNanoseconds) / 1e6
      report.add(
        Row(
          section, "ls mnt/chat round trips, \(label)", (ms - moving) / rtt, "RTT",
          String(
            format: "%.0f ms, %.0f of them moving bytes; %d requests, %d link turns; target ≤ 3",
            ms, moving, window.upstream.messages, window.roundTrips)))
    }

    // cat of the BLE-sized file.
    let (rates, utilisation, goodput) = catOverLink(link, mountpoint: fs.mountpoint)
    report.add(
      Row(section, "cat \(settings.bleKiB) KiB", Stats.median(rates), "KB/s", "link \(profile)"))
    report.add(
      Row(
        section, "link utilisation during cat", Stats.median(utilisation), "×",
        "downstream link time / elapsed; target ≥ 0.85 where pipelining is allowed"))
    report.add(Row(section, "goodput / link rate", Stats.median(goodput), "×", "file bytes only"))
    try pipelinedCat(section: section, profile: profile)

    MetadataSection(rig: rig).measure(
      mountpoint: fs.mountpoint, section: section, samples: 30, runs: 1, lsTimeout: 180)
    try ChatDeliverySection(rig: rig).measure(
      mountpoint: fs.mountpoint, poster: board.address, profile: .device, section: section,
      posts: min(settings.posts, 10), withFloor: false)
  }

  /// `cat` of the BLE-sized file through a mount behind `link`, `bleRuns` times: KB/s, link
  /// utilisation (downstream link time / elapsed) and goodput (file bytes / link rate).
  private func catOverLink(_ link: BenchRig.Link, mountpoint: String) -> (
    rates: [Double], utilisation: [Double], goodput: [Double]
  ) {
    let size = rig.bleSize
    var rates: [Double] = []
    var utilisation: [Double] = []
    var goodput: [Double] = []
    for _ in 1...rig.settings.bleRuns {
      dropCaches()
      let before = link.statistics()
      guard
        let (status, seconds) = try? Supervisor.shared.run(
          "/bin/cat", [mountpoint + "/files/ble.bin"], timeout: 300), status == 0
      else { continue }
      let window = link.statistics().since(before)
      rates.append(Double(size) / seconds / 1e3)
      utilisation.append(window.utilisation(\.downstream, elapsedNanoseconds: Int64(seconds * 1e9)))
      goodput.append(Double(size) / seconds / Double(rig.settings.bleRate))
    }
    return (rates, utilisation, goodput)
  }

  /// cat over the same emulated link to a server that allows pipelining (9bbsd's default
  /// profile on seqpacket; the mount with profile=multiplex).
  private func pipelinedCat(section: String, profile: LinkProfile) throws {
    let board = try rig.startBoard(
      "pipelined", deviceProfile: false, files: true, sdu: rig.settings.bleSDU, seeded: false)
    defer { board.stop() }
    let link = try rig.startLink("ble2", to: board, profile: profile)
    defer { link.close() }
    let fs = try rig.mount(
      "mnt-ble2", address: link.mountAddress, options: ["profile=multiplex"])
    defer { rig.unmount(fs) }
    let (rates, utilisation, _) = catOverLink(link, mountpoint: fs.mountpoint)
    rig.report.add(
      Row(
        section, "cat \(rig.settings.bleKiB) KiB, pipelining allowed", Stats.median(rates), "KB/s",
        "default-profile 9bbsd, mount profile=multiplex"))
    rig.report.add(
      Row(
        section, "link utilisation, pipelining allowed", Stats.median(utilisation), "×",
        "target ≥ 0.85"))
  }
}
