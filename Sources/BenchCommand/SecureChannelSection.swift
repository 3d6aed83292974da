// Section 4b: what the secure channel (Noise_XX_25519_ChaChaPoly_SHA256 over TCP) costs. The
// loopback 9bbsd offers it; one mount takes it (the default) and one does not (`secure=off`),
// and rounds alternate between them, so a load that comes and goes on a shared machine touches
// both alike: a post written through the mount to the line on GNU `tail -f` of the room (a
// pseudo-terminal, where the mount holds tail's fstat until the room grows, so the channel's
// round trips are what is timed, not tail's one-second poll), and first reads of the large
// file after drop_caches with `cat` and `dd bs=1M`. Targets: tail p50 within +1 ms of plain,
// reads ≥ 0.8 × plain.

import Foundation
import Glibc

/// The secure channel against plain 9P on the same loopback board, in the same run.
struct SecureChannelSection: BenchSection {
  static let name = "secure"
  static let usesLoopbackServer = true
  let rig: BenchRig

  /// One of the two mounts, with the room its `tail -f` follows and what was measured on it.
  private final class Target {
    let name: String
    let fs: MountedFS
    /// The mount's log: `-o log=FILE` keeps its informational lines once it is mounted.
    let log: String
    let room: String
    let writer: RoomFileWriter
    var follower: OutputFollower?
    /// Post-to-line latencies, ms, per round.
    var latencies: [[Double]] = []
    var missing = 0
    /// First-read rates, MB/s, per read mode, one a round.
    var rates: [String: [Double]] = [:]

    init(name: String, fs: MountedFS, log: String, room: String) {
      self.name = name
      self.fs = fs
      self.log = log
      self.room = room
      writer = RoomFileWriter(mountpoint: fs.mountpoint)
    }
  }

  /// One way of reading the large file.
  private struct ReadMode {
    var label: String
    var program: String
    var arguments: (String) -> [String]
  }

  func run() throws {
    let settings = rig.settings
    let section = "4b secure channel"
    let token = rig.nextToken()
    var targets: [Target] = []
    defer {
      for target in targets {
        target.follower?.stop()
        rig.unmount(target.fs)
      }
    }
    /// Mounts the loopback board with `options`; both log to a file, so that they differ in
    /// `secure` alone.
    func mount(_ name: String, room: String, options: [String]) throws -> Target {
      let log = rig.work + "/mnt-secure-\(name)-\(token).daemon.log"
      let fs = try rig.mount(
        "mnt-secure-\(name)", address: rig.loopbackMountAddress, options: options + ["log=\(log)"])
      let target = Target(name: name, fs: fs, log: log, room: room)
      targets.append(target)
      return target
    }
    let plain = try mount("plain", room: "r01", options: ["secure=off"])
    let secure = try mount("secure", room: "r02", options: ["secure=auto"])

    try startFollowers(targets, run: token)
    try checkChannels(plain: plain, secure: secure)

    // Rounds alternate which mount goes first.
    let rounds = settings.runs
    for round in 0..<rounds {
      let order = round % 2 == 0 ? targets : targets.reversed()
      for target in order {
        try measureDelivery(target, run: token, round: round, posts: settings.posts)
      }
    }
    let modes = [
      ReadMode(label: "cat", program: "/bin/cat") { [$0] },
      ReadMode(label: "dd bs=1M", program: "/bin/dd") { ["if=\($0)", "of=/dev/null", "bs=1M"] },
    ]
    for round in 0..<rounds {
      for mode in modes {
        let order = round % 2 == 0 ? targets : targets.reversed()
        for target in order { measureRead(target, mode) }
      }
      let summary = targets.map { target in
        let rates = modes.map { target.rates[$0.label]?.last ?? 0 }
        return "\(target.name) \(rates.map { String(format: "%.0f", $0) }.joined(separator: "/"))"
      }
      log(
        "secure round \(round + 1) of \(rounds), first reads cat/1M MB/s: \(summary.joined(separator: "; "))"
      )
    }

    report(section, plain: plain, secure: secure, modes: modes)
  }

  // MARK: tail -f

  /// Starts a `tail -f` of each target's room on a pseudo-terminal, and posts through each
  /// mount until its tail shows a line.
  private func startFollowers(_ targets: [Target], run: Int) throws {
    for target in targets {
      let (path, arguments) = FollowTool.tail.command(target.fs.mountpoint + "/chat/" + target.room)
      target.follower = try OutputFollower(
        path, arguments, output: .pty, log: rig.work + "/secure-tail-\(run).log")
    }
    for target in targets {
      guard let follower = target.follower else { continue }
      let prefix = "\(run)-\(target.name)-w"
      var attempt = 0
      let end = Clock.now + 10_000_000_000
      var warm = false
      while !warm && Clock.now < end {
        attempt += 1
        try target.writer.post(target.room, "secure warm-up #p\(prefix)\(attempt)#")
        warm = follower.wait(until: min(end, Clock.now + 2_000_000_000)) { arrivals in
          arrivals.keys.contains { $0.hasPrefix(prefix) }
        }
      }
      guard warm else {
        throw BenchError(
          "tail -f on the \(target.name) mount showed no line in 10 s (\(follower.kernelState))")
      }
    }
  }

  /// Times `posts` lines written through `target`'s mount to its `tail -f`, one at a time.
  private func measureDelivery(_ target: Target, run: Int, round: Int, posts: Int) throws {
    guard let follower = target.follower else { return }
    var samples: [Double] = []
    for seq in 0..<posts {
      let token = "\(run)-\(target.name)-\(round)-\(seq)"
      let start = Clock.now
      try target.writer.post(target.room, "secure #p\(token)#")
      let shown = follower.wait(until: start + 5_000_000_000) { $0[token] != nil }
      if shown, let arrival = follower.arrival(of: token) {
        samples.append(Double(arrival - start) / 1e6)
      } else {
        target.missing += 1
      }
      // Lets tail reach its held fstat again, as between a person's lines.
      usleep(UInt32.random(in: 20_000...50_000))
    }
    target.latencies.append(samples)
  }

  // MARK: Large-file reads

  /// One first read of the large file through `target` after drop_caches, in MB/s.
  private func measureRead(_ target: Target, _ mode: ReadMode) {
    let file = target.fs.mountpoint + "/files/big.bin"
    dropCaches()
    guard
      let (status, seconds) = try? Supervisor.shared.run(
        mode.program, mode.arguments(file), timeout: 300,
        log: rig.work + "/secure-read.log", discardingOutput: true),
      status == 0
    else {
      log("\(mode.label) of \(file) failed")
      return
    }
    target.rates[mode.label, default: []].append(Double(rig.largeSize) / seconds / 1e6)
  }

  // MARK: Checking and reporting

  /// Fails unless the secure mount's log says its connections took the channel and the plain
  /// mount's says none did. The first connection's line is written before `-f` moves the log
  /// to its file (so it is not there); the `tail -f` opened a stream session after it.
  private func checkChannels(plain: Target, secure: Target) throws {
    let marker = "secure channel to "
    func channels(_ target: Target) -> Int {
      let text = (try? String(contentsOfFile: target.log, encoding: .utf8)) ?? ""
      return text.split(separator: "\n").count { $0.contains(marker) }
    }
    let deadline = Clock.now + 5_000_000_000
    while channels(secure) == 0 && Clock.now < deadline { usleep(50_000) }
    guard channels(secure) > 0 else {
      throw BenchError(
        "the secure mount's log (\(secure.log)) has no '\(marker)' line: it did not take the secure channel"
      )
    }
    guard channels(plain) == 0 else {
      throw BenchError("the secure=off mount's log (\(plain.log)) says it took the secure channel")
    }
  }

  private func report(_ section: String, plain: Target, secure: Target, modes: [ReadMode]) {
    let report = rig.report
    for target in [plain, secure] {
      let samples = target.latencies.flatMap { $0 }
      let expected = samples.count + target.missing
      let p99 = Stats.percentile(samples, 99)
      report.add(
        Row(
          section, "tail -f p50: \(target.name)", Stats.percentile(samples, 50), "ms",
          String(format: "p99 %.2f ms; ", p99 ?? .nan)
            + "\(samples.count)/\(expected) delivered; pty, posted through the same mount"))
    }
    let plainP50 = Stats.percentile(plain.latencies.flatMap { $0 }, 50)
    let secureP50 = Stats.percentile(secure.latencies.flatMap { $0 }, 50)
    let perRound = zip(secure.latencies, plain.latencies).compactMap { secure, plain in
      Stats.percentile(secure, 50).flatMap { s in Stats.percentile(plain, 50).map { s - $0 } }
    }
    let difference = plainP50.flatMap { p in secureP50.map { $0 - p } }
    report.add(
      Row(
        section, "tail -f p50 secure − plain", difference, "ms",
        "per-round median "
          + (Stats.median(perRound).map { String(format: "%+.3f", $0) } ?? "n/a")
          + " ms over \(perRound.count) rounds; target ≤ +1 ms"))

    for mode in modes {
      let plainRates = plain.rates[mode.label] ?? []
      let secureRates = secure.rates[mode.label] ?? []
      for (target, rates) in [(plain, plainRates), (secure, secureRates)] {
        report.add(
          Row(
            section, "first read \(mode.label): \(target.name)", Stats.median(rates), "MB/s",
            "median of \(rates.count), after drop_caches"))
      }
      // Each round's own ratio too: a load that comes and goes hits a round's reads alike.
      let perRound = zip(secureRates, plainRates).map { $0 / $1 }
      report.add(
        Row(
          section, "first read \(mode.label): secure / plain",
          Stats.ratio(Stats.median(secureRates), Stats.median(plainRates)), "×",
          "per-round median "
            + (Stats.median(perRound).map { String(format: "%.3f", $0) } ?? "n/a")
            + "; target ≥ 0.8"))
    }
  }
}
