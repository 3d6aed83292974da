// Section 3b: a directory of many entries through the loopback mount: creates and unlinks
// near 100 entries and near 4,000 (their ratio: what one more entry costs), and `ls -l` of
// 10,000 entries made on the server's side.

import Foundation
import Glibc

struct DirectorySection: BenchSection {
  static let name = "dirs"
  static let usesLoopbackServer = true
  let rig: BenchRig

  func run() throws {
    let fs = try rig.mount("dirs", address: rig.loopbackMountAddress)
    defer { rig.unmount(fs) }
    let section = "3b directories"
    let report = rig.report
    let directory = fs.mountpoint + "/files/many"
    guard mkdir(directory, 0o755) == 0 else {
      throw BenchError("mkdir \(directory): \(String(cString: strerror(errno)))")
    }
    // Names 0..<4100 made in order: the rate over the first 100, then over the 100 made
    // once 4,000 are there.
    var rates: [Double] = []
    var made = 0
    for (start, end) in [(0, 100), (100, 4000), (4000, 4100)] {
      let began = Clock.now
      for index in start..<end {
        let fd = open(directory + "/f\(index)", O_WRONLY | O_CREAT | O_EXCL, 0o644)
        guard fd >= 0 else { break }
        close(fd)
        made += 1
      }
      rates.append(Double(end - start) / Clock.seconds(since: began))
    }
    guard made == 4100 else { throw BenchError("made \(made) of 4100 files in \(directory)") }
    report.add(Row(section, "creates near 100 entries", rates[0], "/s"))
    report.add(Row(section, "creates near 4,000 entries", rates[2], "/s", "target ≥ 500"))
    report.add(
      Row(
        section, "creates: 4,000 / 100 entries", Stats.ratio(rates[2], rates[0]), "×",
        "target ≥ 0.8"))
    var unlinkRates: [Double] = []
    for range in [4000..<4100, 0..<100] {
      let began = Clock.now
      for index in range { unlink(directory + "/f\(index)") }
      unlinkRates.append(Double(range.count) / Clock.seconds(since: began))
    }
    report.add(Row(section, "unlinks near 4,000 entries", unlinkRates[1], "/s", "target ≥ 500"))

    // 10,000 entries made on the server's side, listed through the mount.
    let wide = "wide10000"
    let serverSide = rig.area + "/" + wide
    try FileManager.default.createDirectory(atPath: serverSide, withIntermediateDirectories: true)
    for index in 0..<10_000 {
      FileManager.default.createFile(atPath: serverSide + "/f\(index)", contents: Data("x".utf8))
    }
    var times: [Double] = []
    for _ in 0..<max(1, rig.settings.runs) {
      usleep(1_100_000)  // the listing and attributes kept for a second have expired
      guard
        let (status, seconds) = try? Supervisor.shared.run(
          "/bin/ls", ["-l", fs.mountpoint + "/files/" + wide], timeout: 120), status == 0
      else { break }
      times.append(seconds * 1000)
    }
    report.add(
      Row(
        section, "ls -l 10,000 files", Stats.median(times), "ms",
        "first \(BenchReport.format(times.first)) ms; target ≤ 500"))
  }
}
