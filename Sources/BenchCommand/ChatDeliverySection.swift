// Section 4: chat delivery latency, from another 9P client's post to a reader blocked in
// read() at the end of the room on the mount, with 1, 10 and 50 readers; on loopback the
// bare-FUSE floor (libfuse answering from memory, no 9P) runs beside it. The BLE section
// measures the same over its link.

import Foundation
import Glibc
import NinePClient
import NinePTransport

struct ChatDeliverySection: BenchSection {
  static let name = "chat"
  static let usesLoopbackServer = true
  let rig: BenchRig

  func run() throws {
    let fs = try rig.mount("mnt", address: rig.loopbackMountAddress)
    defer { rig.unmount(fs) }
    try measure(
      mountpoint: fs.mountpoint, poster: rig.loopbackAddress, profile: .multiplex,
      section: "4 chat delivery", posts: rig.settings.posts, withFloor: true)
  }

  /// The rows of `section` for the mount on `mountpoint`, `posts` posts a reader count, posted
  /// from a client of `poster`; `withFloor` adds the bare-FUSE floor and the ratio to it.
  func measure(
    mountpoint: String, poster address: TransportAddress, profile: ServerProfile,
    section: String, posts: Int, withFloor: Bool
  ) throws {
    let report = rig.report
    let poster = try DirectClient(address: address, profile: profile, uname: "poster")
    defer { poster.close() }
    let postFid = try poster.openFile("/chat/post", mode: .write)
    for readerCount in [1, 10, 50] {
      var readers: [DescriptorFollower] = []
      for _ in 0..<readerCount {
        readers.append(.roomReader(mountpoint + "/chat/lobby"))
      }
      let openCount = readers.filter { $0.waitOpened(seconds: 15) }.count
      guard openCount == readerCount else {
        throw BenchError("only \(openCount) of \(readerCount) readers could open the room")
      }
      usleep(300_000)  // let every reader block at the end
      var samples: [Double] = []
      var lost = 0
      for _ in 0..<posts {
        let token = rig.nextToken()
        let start = Clock.now
        try poster.post(postFid, "lobby:bench #b\(token)#")
        for reader in readers {
          if let arrival = reader.arrival(of: token, seconds: 10) {
            samples.append(Double(arrival - start) / 1e6)
          } else {
            lost += 1
          }
        }
        usleep(5_000)
      }
      try poster.post(postFid, "lobby:bench #bEND#")
      for reader in readers { _ = reader.waitFinished(seconds: 10) }
      let detail = "\(samples.count) samples" + (lost > 0 ? ", \(lost) missing" : "")
      let p50 = Stats.percentile(samples, 50)
      let p99 = Stats.percentile(samples, 99)
      report.add(Row(section, "p50, \(readerCount) reader(s)", p50, "ms", detail))
      report.add(Row(section, "p99, \(readerCount) reader(s)", p99, "ms", detail))
      // The same fan-out with nothing but libfuse behind it, in the same run.
      if withFloor, let floor = rig.fanoutFloor(readers: readerCount, posts: posts) {
        report.add(
          Row(
            section, "bare-FUSE floor p50 / p99, \(readerCount) reader(s)", floor.p50, "ms",
            String(format: "p99 %.3f ms; libfuse answering from memory, no 9P", floor.p99)))
        report.add(
          Row(
            section, "p50 ratio mount / floor, \(readerCount) reader(s)",
            Stats.ratio(p50, floor.p50), "×", ""))
      }
    }
  }
}
