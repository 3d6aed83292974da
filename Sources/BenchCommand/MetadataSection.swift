// Section 3: `ls -l` of a 1000-file directory and stat() of its files, idle and while 20
// rooms are tailed on the same mount. The BLE section measures the same over its link.

import Foundation
import Glibc

struct MetadataSection: BenchSection {
  static let name = "meta"
  static let usesLoopbackServer = true
  let rig: BenchRig

  func run() throws {
    let fs = try rig.mount("mnt", address: rig.loopbackMountAddress)
    defer { rig.unmount(fs) }
    measure(
      mountpoint: fs.mountpoint, section: "3 metadata", samples: rig.settings.statSamples,
      runs: rig.settings.runs, lsTimeout: 120)
  }

  /// The rows of `section` for the mount on `mountpoint`: `runs` of `ls -l` and `samples`
  /// stats, idle, then again with a `tail -f` on every room.
  func measure(mountpoint: String, section: String, samples: Int, runs: Int, lsTimeout: Double) {
    let directory = mountpoint + "/files/dir1000"
    let paths = (0..<1000).map { directory + String(format: "/f%04d", $0) }

    func lsRuns() -> (first: Double?, median: Double?) {
      var times: [Double] = []
      for _ in 0..<runs {
        guard
          let (status, seconds) = try? Supervisor.shared.run(
            "/bin/ls", ["-l", directory], timeout: lsTimeout), status == 0
        else { break }
        times.append(seconds * 1000)
      }
      return (times.first, Stats.median(times))
    }
    let report = rig.report
    // ls -l first; then stats of distinct files once the kernel's attribute cache (1 s) has
    // expired, so every stat reaches the daemon.
    let idleLs = lsRuns()
    usleep(1_200_000)
    let idle = statLatencies(paths, samples: min(samples, paths.count))
    report.add(
      Row(
        section, "ls -l 1000 files, idle", idleLs.median, "ms",
        "first \(BenchReport.format(idleLs.first)) ms"))
    report.add(Row(section, "stat p50 idle (attr cache expired)", Stats.percentile(idle, 50), "ms"))
    report.add(Row(section, "stat p99 idle", Stats.percentile(idle, 99), "ms"))

    var tails: [pid_t] = []
    for room in rig.rooms {
      if let pid = try? Supervisor.shared.spawn(
        "/usr/bin/tail", ["-f", mountpoint + "/chat/" + room])
      {
        tails.append(pid)
      }
    }
    defer {
      for pid in tails { kill(pid, SIGKILL) }
      for pid in tails { Supervisor.shared.wait(pid, timeout: 5) }
    }
    usleep(1_500_000)
    let busyLs = lsRuns()
    usleep(1_200_000)
    let busy = statLatencies(paths, samples: min(samples, paths.count))
    report.add(
      Row(
        section, "ls -l 1000 files, 20 rooms tailed", busyLs.median, "ms",
        "first \(BenchReport.format(busyLs.first)) ms"))
    report.add(Row(section, "stat p50, 20 rooms tailed", Stats.percentile(busy, 50), "ms"))
    report.add(Row(section, "stat p99, 20 rooms tailed", Stats.percentile(busy, 99), "ms"))
    report.add(
      Row(
        section, "stat p50 ratio tailed / idle",
        Stats.ratio(Stats.percentile(busy, 50), Stats.percentile(idle, 50)), "×", "target ≤ 1.2"))
  }
}
