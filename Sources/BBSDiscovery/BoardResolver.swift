import Foundation
import Logging
import NinePTransport

/// A board named instead of dialled: `ble:NAME`, `ble:BDADDR` or `mdns:NAME` (or with `!`:
/// `ble!NAME`…).
public struct BoardReference: Sendable, Hashable, CustomStringConvertible {
  /// Where to look for the board.
  public var kind: CachedBoard.Kind
  /// The name (or, for Bluetooth, the address) asked for.
  public var name: String

  /// Parses `ble:…`, `mdns:…`, `ble!…` or `mdns!…`; nil for any other string (an ordinary
  /// dial string).
  /// - Throws: ``DiscoveryError/badBoardName(_:reason:)`` when the name part is empty.
  public init?(parsing text: String) throws(DiscoveryError) {
    // The first separator decides: `ble:C0:FF:…` and `ble!C0:FF:…` both name an address.
    guard let bang = text.firstIndex(where: { $0 == "!" || $0 == ":" }) else { return nil }
    let scheme = text[..<bang].lowercased()
    let rest = String(text[text.index(after: bang)...])
    switch scheme {
    case "ble": kind = .bluetooth
    case "mdns": kind = .lan
    default: return nil
    }
    guard !rest.isEmpty else {
      throw .badBoardName(
        text,
        reason:
          "no name after '\(text[bang])'; list boards with: mount9bbs scan\(kind == .lan ? " --lan" : "")"
      )
    }
    name = rest
  }

  /// Whether the name is a Bluetooth address (`XX:XX:XX:XX:XX:XX`).
  public var isBluetoothAddress: Bool {
    let parts = name.split(separator: ":", omittingEmptySubsequences: false)
    return kind == .bluetooth && parts.count == 6
      && parts.allSatisfy { $0.count == 2 && $0.allSatisfy(\.isHexDigit) }
  }

  public var description: String { kind.rawValue + "!" + name }
}

/// Turns a ``BoardReference`` into addresses to dial: from the discovery cache when it knows
/// the board, else from a short scan (whose findings are cached too).
public struct BoardResolver: Sendable {
  /// Where a resolution came from.
  public enum Source: Sendable, Equatable {
    /// The discovery cache (the board was last seen at `lastSeen`).
    case cache(lastSeen: Date)
    /// A scan just now.
    case scan
    /// Nothing found: a Bluetooth address tried with the fallback PSMs.
    case fallback
  }

  /// The outcome: dial `addresses` in order until one connects.
  public struct Resolution: Sendable {
    /// Addresses to try, best first (never empty).
    public var addresses: [TransportAddress]
    /// Where they came from.
    public var source: Source
  }

  /// The cache consulted and updated.
  public var cache: DiscoveryCache
  /// How long a scan may take when the cache has no answer.
  public var scanDuration: Duration
  /// Where progress and problems are logged.
  public var logger: Logger

  /// A resolver over `cache`.
  public init(
    cache: DiscoveryCache = DiscoveryCache(), scanDuration: Duration = .seconds(8),
    logger: Logger = Logger(label: "mount9bbs.discovery")
  ) {
    self.cache = cache
    self.scanDuration = scanDuration
    self.logger = logger
  }

  /// Resolves `reference`, scanning if the cache has no entry for it.
  /// - Parameter useCache: false forces a scan.
  public func resolve(_ reference: BoardReference, useCache: Bool = true) throws(DiscoveryError)
    -> Resolution
  {
    if useCache, let board = cache.board(named: reference.name, kind: reference.kind) {
      logger.info("\(reference) is \(board.dialCandidates[0]) (cached, seen \(board.lastSeen))")
      return Resolution(addresses: board.dialCandidates, source: .cache(lastSeen: board.lastSeen))
    }
    switch reference.kind {
    case .bluetooth: return try scanBluetooth(for: reference)
    case .lan: return try scanLAN(for: reference)
    }
  }

  private func remember(_ board: CachedBoard) {
    do {
      try cache.record(board)
    } catch {
      logger.warning("\(error)")
    }
  }

  private func scanBluetooth(for reference: BoardReference) throws(DiscoveryError) -> Resolution {
    let scanner = BluetoothScanner(logger: logger)
    var match: CachedBoard?
    let options = BluetoothScanOptions(duration: scanDuration, readTimeout: .seconds(10))
    logger.notice(
      "looking for \(reference.name) over Bluetooth LE (up to \(DiscoveryError.format(scanDuration.timeInterval)) s)…"
    )
    try scanner.scan(options: options) { event in
      let board: CachedBoard
      switch event {
      case .seen:
        return
      case .read(let device, let information):
        board = CachedBoard(device, information: information)
      case .unreadable(let device, let error):
        logger.warning("\(error)")
        board = CachedBoard(device, information: nil)
      }
      remember(board)
      if board.isNamed(reference.name) {
        match = board
        scanner.cancel()
      }
    }
    if let match {
      return Resolution(addresses: match.dialCandidates, source: .scan)
    }
    if reference.isBluetoothAddress {
      let address = reference.name.uppercased()
      logger.notice(
        "\(address) was not seen advertising 9PIS; trying it as a random address on PSM 0x0080, then 0x0009"
      )
      let fallback = CachedBoard(kind: .bluetooth, name: nil, address: address)
      return Resolution(addresses: fallback.dialCandidates, source: .fallback)
    }
    throw .boardNotFound(name: reference.name, lan: false, seconds: scanDuration.timeInterval)
  }

  private func scanLAN(for reference: BoardReference) throws(DiscoveryError) -> Resolution {
    let browser = LANBrowser(logger: logger)
    var match: CachedBoard?
    logger.notice(
      "looking for \(reference.name) on the LAN (up to \(DiscoveryError.format(scanDuration.timeInterval)) s)…"
    )
    try browser.browse(duration: scanDuration) { event in
      guard case .found(let service) = event else { return }
      let board = CachedBoard(service)
      remember(board)
      if board.isNamed(reference.name) {
        match = board
        browser.cancel()
      }
    }
    guard let match else {
      throw .boardNotFound(name: reference.name, lan: true, seconds: scanDuration.timeInterval)
    }
    return Resolution(addresses: match.dialCandidates, source: .scan)
  }
}
