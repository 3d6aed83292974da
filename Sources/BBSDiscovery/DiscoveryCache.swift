import Foundation
import NinePTransport

/// A board found by a scan, as remembered in the discovery cache.
public struct CachedBoard: Sendable, Hashable, Codable {
  /// How the board was found.
  public enum Kind: String, Sendable, Codable {
    /// Bluetooth LE (9PIS); mounted as `ble!NAME`.
    case bluetooth = "ble"
    /// LAN (mDNS/DNS-SD); mounted as `mdns!NAME`.
    case lan = "mdns"
  }

  /// How the board was found.
  public var kind: Kind
  /// The advertised name: the BLE device name, or the mDNS service instance name.
  public var name: String?
  /// The Bluetooth address, or the IP address a LAN service resolved to.
  public var address: String
  /// `public` or `random` (Bluetooth only).
  public var addressType: String?
  /// The TCP port (LAN only).
  public var port: UInt16?
  /// The host name the service resolved to (LAN only), e.g. `box.local`.
  public var host: String?
  /// The 9PIS characteristics (Bluetooth), when they could be read.
  public var information: NinePInformation?
  /// The TXT record (LAN).
  public var txt: [String: String]?
  /// When a scan first saw the board.
  public var firstSeen: Date
  /// When a scan last saw the board.
  public var lastSeen: Date

  /// A board seen now.
  public init(
    kind: Kind, name: String?, address: String, addressType: String? = nil, port: UInt16? = nil,
    host: String? = nil, information: NinePInformation? = nil, txt: [String: String]? = nil,
    seen: Date = Date()
  ) {
    self.kind = kind
    self.name = name
    self.address = address
    self.addressType = addressType
    self.port = port
    self.host = host
    self.information = information
    self.txt = txt
    firstSeen = seen
    lastSeen = seen
  }

  /// A Bluetooth device with whatever 9PIS information was read.
  public init(_ device: BluetoothDevice, information: NinePInformation?, seen: Date = Date()) {
    self.init(
      kind: .bluetooth, name: device.name, address: device.address,
      addressType: device.addressType.rawValue, information: information, seen: seen)
  }

  /// A resolved LAN service.
  public init(_ service: LANService, seen: Date = Date()) {
    self.init(
      kind: .lan, name: service.name, address: service.address, port: service.port,
      host: service.host, txt: service.txt, seen: seen)
  }

  /// The identity of the entry: one per Bluetooth address, one per LAN service name.
  var key: String {
    switch kind {
    case .bluetooth: return "ble!" + address.uppercased()
    case .lan: return "mdns!" + (name ?? address)
    }
  }

  /// Whether the board advertises the secure channel (TXT `secure=`, from `9bbsd --advertise`).
  public var advertisesSecureChannel: Bool { kind == .lan && txt?["secure"] != nil }

  /// The features the board announces (9PIS Features, or the TXT `features=`).
  public var features: [String] {
    switch kind {
    case .bluetooth: return information?.features ?? []
    case .lan: return NinePInformation.features(in: txt?["features"])
    }
  }

  /// The addresses to dial, best first: for Bluetooth one per PSM candidate (the advertised
  /// PSM, then 0x0080, then 0x0009), for the LAN the resolved address and port.
  public var dialCandidates: [TransportAddress] {
    switch kind {
    case .bluetooth:
      let type: BluetoothAddressType = addressType == "public" ? .public : .random
      let transport = information?.transport ?? TransportInfo(parsing: "")
      return transport.psmCandidates.map { .l2cap(address: address, psm: $0, addressType: type) }
    case .lan:
      return [.tcp(host: address, port: port ?? TransportAddress.defaultTCPPort)]
    }
  }

  /// Whether `text` names this board: its name, its 9PIS description or its address
  /// (case-insensitive).
  public func isNamed(_ text: String) -> Bool {
    let wanted = text.lowercased()
    return [name, information?.serviceDescription, address].contains { $0?.lowercased() == wanted }
  }
}

/// The per-user cache of boards found by scans, so a mount by name needs no fresh scan.
///
/// A JSON file (`$XDG_CACHE_HOME/mount9bbs/boards.json`, else `~/.cache/mount9bbs/…`) holding
/// one entry per board with the times it was first and last seen. Writes replace the file
/// atomically; an unreadable file counts as empty.
public struct DiscoveryCache: Sendable {
  /// The cache file.
  public let path: String

  /// The cache at `path`, or at the per-user default.
  public init(path: String? = nil) {
    self.path = path ?? Self.defaultPath
  }

  /// `$XDG_CACHE_HOME/mount9bbs/boards.json`, falling back to `$HOME/.cache`.
  public static var defaultPath: String {
    let environment = ProcessInfo.processInfo.environment
    let base: String
    if let xdg = environment["XDG_CACHE_HOME"], xdg.hasPrefix("/") {
      base = xdg
    } else {
      base = (environment["HOME"] ?? NSHomeDirectory()) + "/.cache"
    }
    return base + "/mount9bbs/boards.json"
  }

  /// Every cached board, most recently seen first.
  public func boards() -> [CachedBoard] {
    guard let data = FileManager.default.contents(atPath: path) else { return [] }
    let decoder = JSONDecoder()
    decoder.dateDecodingStrategy = .iso8601
    let boards = (try? decoder.decode([CachedBoard].self, from: data)) ?? []
    return boards.sorted { $0.lastSeen > $1.lastSeen }
  }

  /// The most recently seen board of `kind` named `name` (see ``CachedBoard/isNamed(_:)``).
  public func board(named name: String, kind: CachedBoard.Kind) -> CachedBoard? {
    boards().first { $0.kind == kind && $0.isNamed(name) }
  }

  /// Records a sighting: a new entry, or the existing one updated (its first-seen time kept,
  /// and information it had kept when the new sighting has none).
  public func record(_ board: CachedBoard) throws(DiscoveryError) {
    var boards = boards()
    if let index = boards.firstIndex(where: { $0.key == board.key }) {
      var merged = board
      merged.firstSeen = min(boards[index].firstSeen, board.firstSeen)
      merged.name = board.name ?? boards[index].name
      merged.information = board.information ?? boards[index].information
      boards[index] = merged
    } else {
      boards.append(board)
    }
    try write(boards)
  }

  private func write(_ boards: [CachedBoard]) throws(DiscoveryError) {
    let encoder = JSONEncoder()
    encoder.dateEncodingStrategy = .iso8601
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
    let directory = (path as NSString).deletingLastPathComponent
    do {
      try FileManager.default.createDirectory(
        atPath: directory, withIntermediateDirectories: true,
        attributes: [.posixPermissions: 0o700])
      let data = try encoder.encode(boards.sorted { $0.lastSeen > $1.lastSeen })
      try data.write(to: URL(fileURLWithPath: path), options: .atomic)
    } catch {
      throw .cacheUnwritable(path: path, reason: error.localizedDescription)
    }
  }
}
