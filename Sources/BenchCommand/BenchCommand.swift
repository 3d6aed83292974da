// mount9bbs-bench: the benchmark of issue 5. Starts its own 9bbsd with a file area (a large
// file and a 1000-file directory), mounts it with the built mount9bbs, and measures in one run:
// large-file reads (128 KiB, 1 MiB, cat; first and second) and cp writes through the mount next
// to the bare-FUSE ceiling (libfuse's passthrough_ll, compiled here, both cache modes) and
// loopback TCP; the 9P client alone; ls -l and stat, idle and with 20 blocked room readers;
// chat delivery latency with 1/10/50 readers; daemon CPU and RSS with 100 idle streams and with
// 8 feeds against a device-profile server; cat, metadata and delivery again over an emulated
// BLE link (LinkEmulation) in front of a device-profile 9bbsd on seqpacket; and delivery as
// people see it, on the output of tail -f and cat (pty or pipe), on each of those set-ups;
// chat scripts and catch-up after a remount; and `mount9bbs chat` on a pseudo-terminal.
//
// Everything runs in the calling thread, one section after the other (`BenchSections`), each
// on set-ups of the `BenchRig`, its rows gathered in the rig's `BenchReport`; helpers start
// threads for readers and pipelined reads. Children are spawned by `Supervisor`, which unmounts
// and kills whatever is left on every way out (normal end, error, SIGINT/SIGTERM).

import ArgumentParser
import Dispatch
import Foundation
import Glibc
import NinePTransport

@main
struct BenchCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "mount9bbs-bench",
    abstract: "Benchmark mount9bbs against bare FUSE, the raw client and an emulated BLE link.",
    discussion: """
      Run as root from a release build: swift build -c release && \
      swift run -c release mount9bbs-bench. Sections: \(BenchSections.all.map { $0.name }.joined(separator: ", ")).
      """,
    version: ProductVersion.current)

  @Option(help: "Comma-separated sections: \(BenchSections.names) (default: all).")
  var sections = BenchSections.names

  @Option(help: "Runs per throughput measurement (medians are reported).")
  var runs = 5

  @Flag(help: "A quick run (under a minute): 2 runs, 16 MiB, fewer samples, short windows.")
  var quick = false

  @Option(help: "Size of the large file, MiB.")
  var sizeMib = 64

  @Option(help: "Posts per chat-delivery measurement.")
  var posts = 30

  @Option(help: "Posts per row of the people section (a random 100–300 ms apart).")
  var peoplePosts = 25

  @Option(help: "stat() calls per latency measurement.")
  var statSamples = 300

  @Option(help: "Seconds of each CPU/RSS window.")
  var window = 3.0

  @Option(help: "Size of the file read over the emulated BLE link, KiB.")
  var bleKib = 256

  @Option(help: "Runs over the emulated BLE link.")
  var bleRuns = 3

  @Option(help: "Emulated link round-trip time, ms.")
  var bleRtt = 30.0

  @Option(help: "Emulated link rate, bytes/s.")
  var bleRate = 125_000

  @Option(help: "Emulated link SDU size, bytes.")
  var bleSdu = 245

  @Option(help: "Directory for mount points, sockets and logs (default /tmp/mount9bbs-bench.PID).")
  var workDir: String?

  @Option(help: "The 9bbsd executable (default: next to this one).")
  var bbsd: String?

  @Option(help: "The mount9bbs executable (default: next to this one).")
  var mount9bbs: String?

  @Option(
    help:
      "Another mount9bbs executable (e.g. the one before a change) to run next to this one in the large-file section."
  )
  var baseline: String?

  @Flag(help: "Print the results as JSON instead of a table.")
  var json = false

  func run() throws {
    // The client section's reads, like the mount's, keep their megabyte buffers on the heap.
    keepLargeBuffersOnTheHeap()
    var empty = sigset_t()
    sigemptyset(&empty)
    pthread_sigmask(SIG_SETMASK, &empty, nil)
    signal(SIGPIPE, SIG_IGN)
    guard getuid() == 0 else { throw BenchError("run as root (FUSE mounts, drop_caches)") }

    var settings = BenchSettings(command: self)
    if quick {
      settings.runs = min(runs, 2)
      settings.sizeMiB = min(sizeMib, 16)
      settings.posts = min(posts, 10)
      settings.peoplePosts = min(peoplePosts, 8)
      settings.statSamples = min(statSamples, 100)
      settings.window = min(window, 1.5)
      settings.bleKiB = min(bleKib, 64)
      settings.bleRuns = 1
    }
    let rig = try BenchRig(settings: settings)

    let signals = DispatchQueue(label: "bench.signals")
    var sources: [any DispatchSourceSignal] = []
    for number in [SIGINT, SIGTERM, SIGHUP] {
      signal(number, SIG_IGN)
      let source = DispatchSource.makeSignalSource(signal: number, queue: signals)
      source.setEventHandler {
        log("interrupted: cleaning up")
        rig.cleanUp()
        Glibc.exit(130)
      }
      source.resume()
      sources.append(source)
    }
    defer { withExtendedLifetime(sources) {} }

    do {
      try BenchSections.run(settings.sections, on: rig)
    } catch {
      rig.cleanUp()
      throw error
    }
    rig.cleanUp()
    print(json ? try rig.report.json(settings: rig.settingsDescription) : rig.report.table())
  }
}

struct BenchSettings: Sendable {
  var sections: Set<String>
  var runs: Int
  var sizeMiB: Int
  var posts: Int
  var peoplePosts: Int
  var statSamples: Int
  var window: Double
  var bleKiB: Int
  var bleRuns: Int
  var bleRTTms: Double
  var bleRate: Int
  var bleSDU: Int
  var workDir: String?
  var bbsd: String?
  var mount9bbs: String?
  var baseline: String?

  init(command: BenchCommand) {
    sections = Set(command.sections.split(separator: ",").map { String($0) })
    runs = max(1, command.runs)
    sizeMiB = max(1, command.sizeMib)
    posts = max(1, command.posts)
    peoplePosts = max(1, command.peoplePosts)
    statSamples = max(10, command.statSamples)
    window = max(0.5, command.window)
    bleKiB = max(8, command.bleKib)
    bleRuns = max(1, command.bleRuns)
    bleRTTms = command.bleRtt
    bleRate = command.bleRate
    bleSDU = command.bleSdu
    workDir = command.workDir
    bbsd = command.bbsd
    mount9bbs = command.mount9bbs
    baseline = command.baseline
  }
}

/// Progress on stderr.
func log(_ message: String) {
  let line = "bench: " + message + "\n"
  _ = line.utf8CString.withUnsafeBufferPointer { write(2, $0.baseAddress, $0.count - 1) }
}
