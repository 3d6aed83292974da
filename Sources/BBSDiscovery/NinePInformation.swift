import Foundation

/// The 9P Information Service (9PIS): the GATT service a 9P board advertises, and its five
/// read-only UTF-8 characteristics.
public enum NinePInformationService {
  /// The service UUID boards advertise (in ADV or SCAN_RSP) and serve over GATT.
  public static let serviceUUID = "39500001-feed-4a91-ba88-a1e0f6e4c001"

  /// The characteristics, by UUID.
  public enum Characteristic: String, CaseIterable, Sendable, Codable {
    /// Free text, at most 64 bytes (`9P Server` when the firmware sets none).
    case serviceDescription = "39500002-feed-4a91-ba88-a1e0f6e4c001"
    /// Comma-separated features, e.g. `chat,messaging` (`file-sharing` by default).
    case features = "39500003-feed-4a91-ba88-a1e0f6e4c001"
    /// How to reach the 9P server, e.g. `l2cap:psm=0x0009,mtu=4096`.
    case transportInformation = "39500004-feed-4a91-ba88-a1e0f6e4c001"
    /// A URL where a client app can be found.
    case appLink = "39500005-feed-4a91-ba88-a1e0f6e4c001"
    /// `<version>;<implementation>;<implementation version>`, e.g. `9P2000;9p4z;1.0.0`.
    case protocolVersion = "39500006-feed-4a91-ba88-a1e0f6e4c001"

    /// A short label for listings.
    public var label: String {
      switch self {
      case .serviceDescription: return "description"
      case .features: return "features"
      case .transportInformation: return "transport"
      case .appLink: return "app link"
      case .protocolVersion: return "version"
      }
    }
  }

  /// PSMs tried in order when the transport information names none (docs/board-facts.md §9.14).
  public static let fallbackPSMs: [UInt16] = [0x0080, 0x0009]
}

/// What a board's 9PIS characteristics say. A characteristic the board does not serve is nil.
public struct NinePInformation: Sendable, Hashable, Codable {
  /// The service description, e.g. `9P Server`.
  public var serviceDescription: String?
  /// The raw features text, e.g. `chat,messaging`.
  public var featuresText: String?
  /// The raw transport information, e.g. `l2cap:psm=0x0009,mtu=4096`.
  public var transportText: String?
  /// The app link URL.
  public var appLink: String?
  /// The protocol version text, e.g. `9P2000;9p4z;1.0.0`.
  public var protocolVersion: String?

  /// Information with the given characteristic values.
  public init(
    serviceDescription: String? = nil, featuresText: String? = nil, transportText: String? = nil,
    appLink: String? = nil, protocolVersion: String? = nil
  ) {
    self.serviceDescription = serviceDescription
    self.featuresText = featuresText
    self.transportText = transportText
    self.appLink = appLink
    self.protocolVersion = protocolVersion
  }

  /// The value of one characteristic.
  public subscript(characteristic: NinePInformationService.Characteristic) -> String? {
    get {
      switch characteristic {
      case .serviceDescription: return serviceDescription
      case .features: return featuresText
      case .transportInformation: return transportText
      case .appLink: return appLink
      case .protocolVersion: return protocolVersion
      }
    }
    set {
      switch characteristic {
      case .serviceDescription: serviceDescription = newValue
      case .features: featuresText = newValue
      case .transportInformation: transportText = newValue
      case .appLink: appLink = newValue
      case .protocolVersion: protocolVersion = newValue
      }
    }
  }

  /// The features, trimmed and lowercased; empty when the characteristic is missing.
  public var features: [String] { Self.features(in: featuresText) }

  /// The transport information, parsed leniently.
  public var transport: TransportInfo { TransportInfo(parsing: transportText ?? "") }

  /// The characteristics the board did not serve.
  public var missing: [NinePInformationService.Characteristic] {
    NinePInformationService.Characteristic.allCases.filter { self[$0] == nil }
  }

  /// Splits a comma-separated feature list (also used for mDNS `features=` TXT values).
  public static func features(in text: String?) -> [String] {
    (text ?? "").split(separator: ",").map {
      $0.trimmingCharacters(in: .whitespaces).lowercased()
    }.filter { !$0.isEmpty }
  }
}

/// The Transport Information characteristic, parsed leniently.
///
/// Format: `<transport>:<key>=<value>[,<key>=<value>]*`, but boards vary (docs/board-facts.md §5):
/// `l2cap:psm=0x0009,mtu=4096`, `l2cap:psm=9,mtu=4096,dynamic,sessions=4,range=80-ff`,
/// `l2cap:psm=0x%04x` without an MTU, a bare `psm=9`. Numbers may be decimal or `0x` hex;
/// unknown keys and bare tokens are kept; nothing here throws.
public struct TransportInfo: Sendable, Hashable {
  /// The transport before the colon, lowercased (`l2cap`); nil when there is no prefix.
  public var transport: String?
  /// The L2CAP PSM, if given and valid (1…0xFFFF).
  public var psm: UInt16?
  /// The MTU the board offers, if given.
  public var mtu: Int?
  /// Every `key=value` pair, keys lowercased.
  public var parameters: [String: String]
  /// Bare tokens such as `dynamic`.
  public var flags: [String]

  /// Parses `text`; anything unreadable is left out.
  public init(parsing text: String) {
    var body = Substring(text.trimmingCharacters(in: .whitespacesAndNewlines))
    transport = nil
    if let colon = body.firstIndex(of: ":") {
      let prefix = body[..<colon].trimmingCharacters(in: .whitespaces)
      if !prefix.contains("=") && !prefix.contains(",") {
        transport = prefix.isEmpty ? nil : prefix.lowercased()
        body = body[body.index(after: colon)...]
      }
    }
    var parameters: [String: String] = [:]
    var flags: [String] = []
    for token in body.split(whereSeparator: { $0 == "," || $0 == ";" }) {
      let parts = token.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
      guard let first = parts.first else { continue }
      let key = first.trimmingCharacters(in: .whitespaces).lowercased()
      guard !key.isEmpty else { continue }
      if parts.count == 2 {
        parameters[key] = parts[1].trimmingCharacters(in: .whitespaces)
      } else if transport == nil && flags.isEmpty && parameters.isEmpty
        && (key == "l2cap" || key == "tcp")
      {
        transport = key
      } else {
        flags.append(key)
      }
    }
    self.parameters = parameters
    self.flags = flags
    psm = parameters["psm"].flatMap(Self.number).flatMap { UInt16(exactly: $0) }.flatMap {
      $0 == 0 ? nil : $0
    }
    mtu = parameters["mtu"].flatMap(Self.number).flatMap { $0 > 0 ? $0 : nil }
  }

  /// The PSMs to try in order: the advertised one, then 0x0080, then 0x0009.
  public var psmCandidates: [UInt16] {
    var result: [UInt16] = []
    for candidate in [psm].compactMap({ $0 }) + NinePInformationService.fallbackPSMs
    where !result.contains(candidate) {
      result.append(candidate)
    }
    return result
  }

  /// A decimal or `0x` hexadecimal number.
  static func number(_ text: String) -> Int? {
    let trimmed = text.trimmingCharacters(in: .whitespaces).lowercased()
    if trimmed.hasPrefix("0x") { return Int(trimmed.dropFirst(2), radix: 16) }
    return Int(trimmed)
  }
}
