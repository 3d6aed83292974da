// Section 2: the 9P client alone, reading the large file straight from the loopback server
// with one and with four reads in flight: what the mount could reach with no FUSE in between.

import NinePClient

struct ClientSection: BenchSection {
  static let name = "client"
  static let usesLoopbackServer = true
  let rig: BenchRig

  func run() throws {
    let section = "2 client alone"
    let size = rig.largeSize
    let client = try DirectClient(address: rig.loopbackAddress, profile: .multiplex, uname: "bench")
    defer { client.close() }
    for depth in [1, 4] {
      var rates: [Double] = []
      for _ in 1...rig.settings.runs {
        let fid = try client.openFile("/files/big.bin", mode: .read)
        let start = Clock.now
        let bytes = try client.read(fid, size: size, depth: depth)
        let seconds = Clock.seconds(since: start)
        _ = try? blocking { client.session.clunk(fid, completion: $0) }
        guard bytes == size else { throw BenchError("client read \(bytes) of \(size)") }
        rates.append(Double(bytes) / seconds / 1e6)
      }
      rig.report.add(
        Row(
          section, "NinePClient, \(depth) read\(depth > 1 ? "s" : "") in flight",
          Stats.median(rates), "MB/s", "msize \(client.session.msize), tcp"))
    }
  }
}
