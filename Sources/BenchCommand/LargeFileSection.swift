// Section 1: large files through the mount next to libfuse's passthrough_ll (issue 15).
//
// Reads of the large file with 128 KiB buffers (`dd bs=128K`, what cat and cp use on most
// file systems), 1 MiB buffers (`dd bs=1M`) and plain `cat` (whose buffer follows st_blksize):
// a first read after drop_caches, then a second one with the page cache warm. Writes: `cp` of
// the large file from memory into the file area. Each round visits every target in turn
// (mount9bbs, passthrough_ll with cache=auto and cache=never, and --baseline's client when
// given), so a load that comes and goes on a shared machine touches all of them alike; the
// ratios are against the faster passthrough_ll mode for each measurement.

import Foundation
import Glibc

struct LargeFileSection: BenchSection {
  static let name = "cat"
  static let usesLoopbackServer = true
  let rig: BenchRig

  /// A file system the section reads from and writes to.
  struct LargeFileTarget {
    var name: String
    /// The large file.
    var file: String
    /// A directory to copy into.
    var writeDirectory: String
    var isPassthrough: Bool
  }

  /// One way of reading the large file.
  struct ReadMode {
    var label: String
    var program: String
    var arguments: (String) -> [String]
  }

  func run() throws {
    let settings = rig.settings
    let work = rig.work
    let area = rig.area
    let largeSize = rig.largeSize
    let section = "1 large file \(settings.sizeMiB) MiB"
    var targets: [LargeFileTarget] = []
    var mounts: [MountedFS] = []
    defer { mounts.forEach { rig.unmount($0) } }

    let ours = try rig.mount("mnt", address: rig.loopbackMountAddress)
    mounts.append(ours)
    targets.append(
      LargeFileTarget(
        name: "mount9bbs", file: ours.mountpoint + "/files/big.bin",
        writeDirectory: ours.mountpoint + "/files", isPassthrough: false))
    if let baseline = settings.baseline {
      let fs = try rig.mount("mnt-base", address: rig.loopbackMountAddress, binary: baseline)
      mounts.append(fs)
      targets.append(
        LargeFileTarget(
          name: "baseline", file: fs.mountpoint + "/files/big.bin",
          writeDirectory: fs.mountpoint + "/files", isPassthrough: false))
    }
    if let binary = rig.buildPassthrough() {
      for cache in ["auto", "never"] {
        if let fs = rig.mountPassthrough(binary, cache: cache) {
          mounts.append(fs)
          targets.append(
            LargeFileTarget(
              name: "passthrough_ll cache=\(cache)", file: fs.mountpoint + "/big.bin",
              writeDirectory: fs.mountpoint, isPassthrough: true))
        }
      }
    }

    let modes = [
      ReadMode(label: "bs=128K", program: "/bin/dd") {
        ["if=\($0)", "of=/dev/null", "bs=128K"]
      },
      ReadMode(label: "bs=1M", program: "/bin/dd") { ["if=\($0)", "of=/dev/null", "bs=1M"] },
      ReadMode(label: "cat", program: "/bin/cat") { [$0] },
    ]
    // rates[mode][pass][target]: pass 0 is the first read, 1 the second.
    var rates = [[[String: [Double]]]](
      repeating: [[:], [:]], count: modes.count)
    var writes: [String: [Double]] = [:]
    for run in 1...settings.runs {
      for (index, mode) in modes.enumerated() {
        for target in targets {
          dropCaches()
          for pass in 0..<2 {
            guard
              let (status, seconds) = try? Supervisor.shared.run(
                mode.program, mode.arguments(target.file), timeout: 300,
                log: work + "/large-read.log", discardingOutput: true),
              status == 0
            else {
              log("\(mode.label) of \(target.file) failed")
              continue
            }
            rates[index][pass][target.name, default: []].append(
              Double(largeSize) / seconds / 1e6)
          }
        }
      }
      for target in targets {
        let name = "copy-\(run)-\(target.isPassthrough ? "bare" : "ours")-\(rig.nextToken()).bin"
        dropCaches()
        if let (status, seconds) = try? Supervisor.shared.run(
          "/bin/cp", [area + "/big.bin", target.writeDirectory + "/" + name], timeout: 300,
          log: work + "/large-write.log"),
          status == 0, sameContent(area + "/big.bin", area + "/" + name)
        {
          writes[target.name, default: []].append(Double(largeSize) / seconds / 1e6)
        } else {
          log("cp into \(target.writeDirectory) failed or copied wrong bytes")
        }
        try? FileManager.default.removeItem(atPath: area + "/" + name)
      }
      let summary = targets.map { target in
        let first = modes.indices.map { rates[$0][0][target.name]?.last ?? 0 }
        let write = writes[target.name]?.last ?? 0
        return
          "\(target.name) \(first.map { String(format: "%.0f", $0) }.joined(separator: "/")) w \(String(format: "%.0f", write))"
      }
      log(
        "large-file round \(run) of \(settings.runs), first reads 128K/1M/cat and cp MB/s: \(summary.joined(separator: "; "))"
      )
    }

    let passthroughs = targets.filter(\.isPassthrough).map(\.name)
    func report(_ label: String, _ values: [String: [Double]]) {
      for target in targets {
        rig.report.add(
          Row(
            section, "\(label): \(target.name)", Stats.median(values[target.name] ?? []), "MB/s",
            "median of \(values[target.name]?.count ?? 0)"))
      }
      let best = passthroughs.max {
        Stats.median(values[$0] ?? []) ?? 0 < Stats.median(values[$1] ?? []) ?? 0
      }
      guard let best else { return }
      for target in targets where !target.isPassthrough {
        // Each round's own ratio too: a load that comes and goes hits a round's reads alike.
        let perRound = zip(values[target.name] ?? [], values[best] ?? []).map { $0 / $1 }
        let perRoundText = Stats.median(perRound).map { String(format: "%.3f", $0) } ?? "n/a"
        rig.report.add(
          Row(
            section, "\(label): \(target.name) / passthrough_ll",
            Stats.ratio(
              Stats.median(values[target.name] ?? []), Stats.median(values[best] ?? [])),
            "×", "against \(best) (the faster), per-round median \(perRoundText); target ≥ 0.8"))
      }
    }
    for (index, mode) in modes.enumerated() {
      report("first read \(mode.label)", rates[index][0])
      report("second read \(mode.label)", rates[index][1])
    }
    report("write cp", writes)
    let tcp = (1...min(3, settings.runs)).compactMap { _ in
      loopbackTCPRate(bytes: max(largeSize, 256 << 20))
    }
    rig.report.add(Row(section, "loopback TCP bulk", Stats.median(tcp), "MB/s", "reference"))
  }

  /// Whether two files hold the same bytes.
  private func sameContent(_ a: String, _ b: String) -> Bool {
    guard let (status, _) = try? Supervisor.shared.run("/usr/bin/cmp", ["-s", a, b], timeout: 60)
    else { return false }
    return status == 0
  }
}
