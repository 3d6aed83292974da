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
    let duration = Duration.milliseconds(Int64(seconds * 1000))
    let report = ScanReport(json: json, features: feature.map { $0.lowercased() })
    let cache = DiscoveryCache()
    let progress = ScanProgress(seconds: seconds)

    let outcome: Result<Int, DiscoveryError>
    if lan {
      let browser = LANBrowser(logger: logger)
      let interrupt = Interrupt { browser.cancel() }
      report.status(
        "Browsing the LAN for 9P servers (_9p._tcp, _9pfs._tcp) for \(Self.text(seconds)) s (Ctrl-C stops)…"
      )
      progress.start()
      outcome = Result { () throws(DiscoveryError) -> Int in
        try browser.browse(duration: duration) { event in
          progress.clear()
          if case .found(let service) = event { remember(CachedBoard(service), in: cache, logger) }
          report.lan(event)
          progress.found = report.shown
        }
      }
      withExtendedLifetime(interrupt) {}
    } else {
      let scanner = BluetoothScanner(logger: logger)
      let interrupt = Interrupt { scanner.cancel() }
      report.status(
        "Scanning for 9BBS boards over Bluetooth LE for \(Self.text(seconds)) s (Ctrl-C stops)…")
      progress.start()
      outcome = Result { () throws(DiscoveryError) -> Int in
        try scanner.scan(
          options: BluetoothScanOptions(
            duration: duration, readTimeout: .milliseconds(Int64(readTimeout * 1000)))
        ) { event in
          progress.clear()
          switch event {
          case .seen: break
          case .read(let device, let information):
            remember(CachedBoard(device, information: information), in: cache, logger)
          case .unreadable(let device, _):
            remember(CachedBoard(device, information: nil), in: cache, logger)
          }
          report.bluetooth(event)
          progress.found = report.shown
        }.seen
      }
      withExtendedLifetime(interrupt) {}
    }
    progress.stop()

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

// MARK: - Output

/// Writes scan results to stdout (text or JSON lines) and status lines to stderr.
final class ScanReport {
  let json: Bool
  let features: [String]
  /// Results shown (after the feature filter).
  private(set) var shown = 0
  /// Results left out by the feature filter.
  private(set) var skipped = 0

  init(json: Bool, features: [String]) {
    self.json = json
    self.features = features
  }

  func status(_ line: String) {
    Console.error(line)
  }

  func failure(_ line: String) {
    Console.error(line)
  }

  private func keeps(_ offered: [String]) -> Bool {
    features.allSatisfy { offered.contains($0) }
  }

  // MARK: Bluetooth

  func bluetooth(_ event: BluetoothScanEvent) {
    switch event {
    case .seen(let device):
      if json {
        emit(["event": "seen", "kind": "ble"].merging(Self.fields(device)) { $1 })
      } else {
        Console.error("  seen \(Self.heading(device)); reading its 9PIS…")
      }
    case .read(let device, let information):
      guard keeps(information.features) else {
        skipped += 1
        if !json {
          Console.error(
            "  skipped \(Self.safe(device.label)): features '\(Self.safe(information.featuresText ?? ""))' lack \(features.joined(separator: ","))"
          )
        }
        return
      }
      shown += 1
      let board = CachedBoard(device, information: information)
      if json {
        var object = ["event": "board", "kind": "ble"].merging(Self.fields(device)) { $1 }
        for characteristic in NinePInformationService.Characteristic.allCases {
          if let value = information[characteristic] {
            object[Self.jsonKey(characteristic)] = value
          }
        }
        let transport = information.transport
        object["features"] = information.features
        object["psm"] = transport.psm.map { Int($0) }
        object["mtu"] = transport.mtu
        object["missing"] = information.missing.map(Self.jsonKey)
        object["dial"] = board.dialCandidates.map(\.description)
        object["mount"] = Self.mountName(device)
        object["trust"] = trust(of: board.dialCandidates).word
        emit(object)
        return
      }
      var lines = [Self.heading(device)]
      for characteristic in NinePInformationService.Characteristic.allCases {
        var value = information[characteristic].map(Self.safe) ?? "(not served)"
        if characteristic == .transportInformation {
          value += " → " + Self.dialSummary(board.dialCandidates)
        }
        lines.append("  " + Self.padded(characteristic.label) + value)
      }
      lines.append("  " + Self.padded("trust") + "\(trust(of: board.dialCandidates))")
      lines.append(
        "  " + Self.padded("mount") + "mount9bbs \(Self.shell(Self.mountName(device))) MOUNTPOINT")
      Console.output(lines.joined(separator: "\n"))
    case .unreadable(let device, let error):
      guard features.isEmpty else {
        skipped += 1
        return
      }
      shown += 1
      let board = CachedBoard(device, information: nil)
      if json {
        var object = ["event": "error", "kind": "ble"].merging(Self.fields(device)) { $1 }
        object["error"] = "\(error)"
        object["dial"] = board.dialCandidates.map(\.description)
        object["mount"] = Self.mountName(device)
        emit(object)
        return
      }
      Console.output(
        [
          Self.heading(device),
          "  " + Self.padded("error") + Self.safe("\(error)"),
          "  " + Self.padded("mount")
            + "mount9bbs \(Self.shell(Self.mountName(device))) MOUNTPOINT  ("
            + Self.dialSummary(board.dialCandidates) + ")",
        ].joined(separator: "\n"))
    }
  }

  static func heading(_ device: BluetoothDevice) -> String {
    var text =
      (device.name.map(Self.safe) ?? "(no name)")
      + "  \(Self.safe(device.address)) (\(device.addressType.rawValue))"
    if let rssi = device.rssi { text += "  RSSI \(rssi) dBm" }
    return text
  }

  static func fields(_ device: BluetoothDevice) -> [String: Any] {
    var object: [String: Any] = [
      "address": device.address, "addressType": device.addressType.rawValue,
    ]
    object["name"] = device.name
    object["rssi"] = device.rssi
    return object
  }

  static func jsonKey(_ characteristic: NinePInformationService.Characteristic) -> String {
    switch characteristic {
    case .serviceDescription: return "description"
    case .features: return "featuresText"
    case .transportInformation: return "transport"
    case .appLink: return "appLink"
    case .protocolVersion: return "protocolVersion"
    }
  }

  static func mountName(_ device: BluetoothDevice) -> String {
    "ble:" + (device.name ?? device.address)
  }

  static func dialSummary(_ candidates: [TransportAddress]) -> String {
    let psms = candidates.compactMap { address -> String? in
      guard case .l2cap(_, let psm, _) = address else { return nil }
      let hex = String(psm, radix: 16)
      return "0x" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
    }
    return psms.count == 1 ? "PSM \(psms[0])" : "PSM " + psms.joined(separator: ", then ")
  }

  static func padded(_ label: String) -> String {
    label.padding(toLength: 13, withPad: " ", startingAt: 0)
  }

  // MARK: LAN

  func lan(_ event: LANScanEvent) {
    switch event {
    case .found(let service):
      guard keeps(service.features) else {
        skipped += 1
        if !json {
          Console.error(
            "  skipped \(Self.safe(service.name)): features '\(Self.safe(service.txt["features"] ?? ""))' lack \(features.joined(separator: ","))"
          )
        }
        return
      }
      shown += 1
      if json {
        emit([
          "event": "board", "kind": "mdns", "name": service.name, "type": service.type,
          "host": service.host, "address": service.address, "port": Int(service.port),
          "txt": service.txt, "features": service.features,
          "dial": [service.dialAddress.description], "mount": "mdns:" + service.name,
          "trust": trust(of: service).word,
        ])
        return
      }
      var lines = [
        "\(Self.safe(service.name))  \(Self.safe(service.address)) port \(service.port)  (\(Self.safe(service.host)), \(Self.safe(service.type)))"
      ]
      for key in service.txt.keys.sorted() {
        lines.append("  " + Self.padded(Self.safe(key)) + Self.safe(service.txt[key] ?? ""))
      }
      lines.append("  " + Self.padded("trust") + Self.safe("\(trust(of: service))"))
      lines.append(
        "  " + Self.padded("mount") + "mount9bbs \(Self.shell("mdns:" + service.name)) MOUNTPOINT")
      Console.output(lines.joined(separator: "\n"))
    case .removed(let name):
      if json {
        emit(["event": "removed", "kind": "mdns", "name": name])
      } else {
        Console.output("gone: \(Self.safe(name)) (no longer advertised)")
      }
    case .unresolved(let name, let error):
      if json {
        emit(["event": "error", "kind": "mdns", "name": name, "error": "\(error)"])
      } else {
        Console.error("  " + Self.safe("\(error)"))
      }
    }
  }

  /// The user's pinned board keys.
  private let pins = BoardPins(path: BoardPins.defaultPath())

  /// A Bluetooth board's trust: by address only (9PIS advertises no key).
  private func trust(of addresses: [TransportAddress]) -> BoardPins.Trust {
    pins.trust(at: addresses.map(\.description), advertised: nil, advertisesKeys: false)
  }

  /// A LAN board's trust: its address and the key fingerprint in its TXT `boardkey`.
  private func trust(of service: LANService) -> BoardPins.Trust {
    pins.trust(
      at: [service.dialAddress.description], advertised: service.txt["boardkey"],
      advertisesKeys: true)
  }

  /// A server-chosen string as one visible line.
  static func safe(_ text: String) -> String { TerminalText.escaped(text) }

  /// A server-chosen word quoted for pasting into a shell.
  static func shell(_ word: String) -> String { TerminalText.shellQuoted(word) }

  private func emit(_ object: [String: Any]) {
    guard
      let data = try? JSONSerialization.data(
        withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
    else { return }
    Console.output(String(decoding: data, as: UTF8.self))
  }
}

/// A ticking "N s left" line on stderr while scanning, when stderr is a terminal.
final class ScanProgress: @unchecked Sendable {
  // @unchecked: `timer` is set and cancelled only by start() and stop() on the scanning
  // thread; what the timer's ticks read and write is in `line`.
  private let seconds: Double
  private var timer: (any DispatchSourceTimer)?
  private struct Line {
    var started = Date()
    var visible = false
    var count = 0
  }

  private let line = Mutex(Line())

  init(seconds: Double) {
    self.seconds = seconds
  }

  var found: Int {
    get { line.withLock { $0.count } }
    set { line.withLock { $0.count = newValue } }
  }

  func start() {
    guard isatty(2) != 0 else { return }
    line.withLock { $0.started = Date() }
    let timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "mount9bbs.progress"))
    timer.schedule(deadline: .now() + 1, repeating: 1)
    timer.setEventHandler { [weak self] in self?.tick() }
    timer.resume()
    self.timer = timer
  }

  private func tick() {
    line.withLock { line in
      let left = max(0, Int((seconds - Date().timeIntervalSince(line.started)).rounded()))
      Console.errorRaw("\r\u{1B}[K  scanning… \(left) s left, \(line.count) found")
      line.visible = true
    }
  }

  /// Clears the ticking line before a result is written.
  func clear() {
    line.withLock { line in
      if line.visible { Console.errorRaw("\r\u{1B}[K") }
      line.visible = false
    }
  }

  func stop() {
    timer?.cancel()
    timer = nil
    clear()
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

/// The CLI's user-facing output: whole lines to stdout or stderr, written at once.
enum Console {
  /// A line (or lines) to stdout; any control character left in it is shown escaped.
  static func output(_ text: String) {
    let safe = TerminalText.escaped(text, keepingLayout: true)
    put(safe.hasSuffix("\n") ? safe : safe + "\n", to: 1)
  }

  /// A line (or lines) to stderr; any control character left in it is shown escaped.
  static func error(_ text: String) {
    let safe = TerminalText.escaped(text, keepingLayout: true)
    put(safe.hasSuffix("\n") ? safe : safe + "\n", to: 2)
  }

  /// Text of mount9bbs's own making to stderr as it is (the progress line's cursor moves).

  static func errorRaw(_ text: String) {
    put(text, to: 2)
  }

  private static func put(_ text: String, to descriptor: Int32) {
    var bytes = Array(text.utf8)[...]
    while !bytes.isEmpty {
      let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
      if written < 0 && errno == EINTR { continue }
      if written <= 0 { return }
      bytes = bytes.dropFirst(written)
    }
  }
}
