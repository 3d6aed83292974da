// mount9bbs scan: find boards over Bluetooth LE (9PIS) or servers on the LAN (mDNS).
//
// The scan runs on the main thread; results go to stdout as they arrive (text, or one JSON
// object a line with --json), progress to stderr. SIGINT ends the scan early through the
// scanner's cancel(), so discovery is still stopped properly.

import ArgumentParser
import BBSDiscovery
import BBSIdentity
import BBSMount
import Dispatch
import Foundation
import Logging
import NinePTransport
import Synchronization

struct ScanCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "scan",
    abstract: "Find 9BBS boards over Bluetooth LE (9PIS), or 9P servers on the LAN (mDNS).",
    discussion: """
      Without --lan, asks BlueZ for an LE scan filtered on the 9P Information Service, lists \
      each board as it appears, then connects and reads its description, features, transport \
      information, app link and protocol version. With --lan, browses _9p._tcp and _9pfs._tcp \
      through avahi-daemon. Each board's trust is shown against your pinned board keys \
      ($XDG_STATE_HOME/mount9bbs/known_boards): pinned, unknown, or CHANGED (a mount will \
      refuse it). Everything found is cached (under $XDG_CACHE_HOME/mount9bbs), so \
      `mount9bbs ble:NAME MOUNTPOINT` or `mount9bbs mdns:NAME MOUNTPOINT` needs no new scan.

      Exit status: 0 when something was found, 1 otherwise.
      """)

  @Option(help: "Seconds to scan (default 10, or 5 with --lan).")
  var timeout: Double?

  @Flag(help: "One JSON object per line instead of text.")
  var json = false

  @Option(help: "Keep only boards whose features include this one (repeatable), e.g. chat.")
  var feature: [String] = []

  @Flag(help: "Browse the LAN (mDNS/DNS-SD through Avahi) instead of Bluetooth.")
  var lan = false

  @Flag(name: .customShort("d"), help: "Log D-Bus and Avahi details to stderr.")
  var debug = false

  /// How long connecting to one board and resolving its services may take (tests shorten it).
  @Option(name: .customLong("read-timeout"), help: .hidden)
  var readTimeout: Double = 10

  func validate() throws {
    if let timeout, !(timeout > 0 && timeout <= 3600) {
      throw ValidationError("--timeout must be between 0 and 3600 seconds.")
    }
    if !(readTimeout > 0 && readTimeout <= 600) {
      throw ValidationError("--read-timeout must be between 0 and 600 seconds.")
    }
  }

  func run() throws {
    var logger = Logger(label: "mount9bbs") { StreamLogHandler.standardError(label: $0) }
    logger.logLevel = debug ? .trace : .warning
    let seconds = timeout ?? (lan ? 5 : 10)
    let report = ScanReport(json: json, features: feature.map { $0.lowercased() })
    let scan = Scan(
      seconds: seconds, report: report, cache: DiscoveryCache(),
      progress: ScanProgress(seconds: seconds), logger: logger)
    let outcome = lan ? browseLAN(scan) : scanBluetooth(scan)
    scan.progress.stop()
    try finish(outcome, report: report, seconds: seconds)
  }

  /// What one scan reports to and remembers in.
  private struct Scan {
    let seconds: Double
    let report: ScanReport
    let cache: DiscoveryCache
    let progress: ScanProgress
    let logger: Logger

    var duration: Duration { .milliseconds(Int64(seconds * 1000)) }
  }

  /// Browses the LAN through Avahi; the number of services seen, or why browsing failed.
  private func browseLAN(_ scan: Scan) -> Result<Int, DiscoveryError> {
    let (report, progress) = (scan.report, scan.progress)
    let browser = LANBrowser(logger: scan.logger)
    let interrupt = Interrupt { browser.cancel() }
    defer { withExtendedLifetime(interrupt) {} }
    report.status(
      "Browsing the LAN for 9P servers (_9p._tcp, _9pfs._tcp) for \(Self.text(scan.seconds)) s (Ctrl-C stops)…"
    )
    progress.start()
    return Result { () throws(DiscoveryError) -> Int in
      try browser.browse(duration: scan.duration) { event in
        progress.clear()
        if case .found(let service) = event {
          remember(CachedBoard(service), in: scan.cache, scan.logger)
        }
        report.lan(event)
        progress.found = report.shown
      }
    }
  }

  /// Scans for 9PIS over Bluetooth LE and reads each board found; the number of devices
  /// seen, or why scanning failed.
  private func scanBluetooth(_ scan: Scan) -> Result<Int, DiscoveryError> {
    let (report, progress) = (scan.report, scan.progress)
    let scanner = BluetoothScanner(logger: scan.logger)
    let interrupt = Interrupt { scanner.cancel() }
    defer { withExtendedLifetime(interrupt) {} }
    report.status(
      "Scanning for 9BBS boards over Bluetooth LE for \(Self.text(scan.seconds)) s (Ctrl-C stops)…")
    progress.start()
    return Result { () throws(DiscoveryError) -> Int in
      try scanner.scan(
        options: BluetoothScanOptions(
          duration: scan.duration, readTimeout: .milliseconds(Int64(readTimeout * 1000)))
      ) { event in
        progress.clear()
        switch event {
        case .seen: break
        case .read(let device, let information):
          remember(CachedBoard(device, information: information), in: scan.cache, scan.logger)
        case .unreadable(let device, _):
          remember(CachedBoard(device, information: nil), in: scan.cache, scan.logger)
        }
        report.bluetooth(event)
        progress.found = report.shown
      }.seen
    }
  }

  /// Says how the scan ended; exits 1 when it failed or nothing was shown.
  private func finish(
    _ outcome: Result<Int, DiscoveryError>, report: ScanReport, seconds: Double
  ) throws {
    switch outcome {
    case .failure(let error):
      report.failure("mount9bbs: \(error)")
      throw ExitCode(1)
    case .success:
      if report.shown == 0 {
        let filter = feature.isEmpty ? "" : " with feature \(feature.joined(separator: ","))"
        let message =
          report.skipped > 0
          ? "mount9bbs: nothing\(filter) found within \(Self.text(seconds)) s (\(report.skipped) found without it)"
          : "mount9bbs: \(DiscoveryError.nothingFound(seconds: seconds, lan: lan))"
        report.failure(message)
        throw ExitCode(1)
      }
      report.status("\(report.shown) found in \(Self.text(seconds)) s.")
    }
  }

  private func remember(_ board: CachedBoard, in cache: DiscoveryCache, _ logger: Logger) {
    do {
      try cache.record(board)
    } catch {
      logger.warning("\(error)")
    }
  }

  static func text(_ seconds: Double) -> String {
    seconds == seconds.rounded() ? String(Int(seconds)) : String(format: "%.1f", seconds)
  }
}

/// Cancels a scan on SIGINT (Ctrl-C), once; a second Ctrl-C kills as usual.
final class Interrupt {
  private let source: any DispatchSourceSignal

  init(_ handler: @escaping @Sendable () -> Void) {
    signal(SIGINT, SIG_IGN)
    source = DispatchSource.makeSignalSource(
      signal: SIGINT, queue: DispatchQueue(label: "mount9bbs.sigint"))
    source.setEventHandler {
      handler()
      signal(SIGINT, SIG_DFL)
    }
    source.resume()
  }

  deinit {
    source.cancel()
    signal(SIGINT, SIG_DFL)
  }
}
