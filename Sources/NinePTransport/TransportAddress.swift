/// The LE address type of a Bluetooth peer. Zephyr boards usually use a static random address.
public enum BluetoothAddressType: String, Sendable {
  case `public`, random
}

/// The L2CAP security level requested before connecting (`BT_SECURITY_LOW/MEDIUM/HIGH`).
public enum BluetoothSecurity: String, Sendable {
  case low, medium, high
}

/// Where a 9P server is, parsed from a dial string.
///
/// Every form has two spellings: the colon form, which needs no quoting in any shell, and the
/// Plan 9 `!` form (which bash's history expansion mangles unless quoted):
/// - `tcp:host:port`, `tcp:host` (port 564), `host:port`, `[v6addr]:port`, `tcp:[v6addr]:port`;
///   `tcp!host!port`, `tcp!host`
/// - `unix:/path`; `unix!/path`
/// - `seqpacket:/path` (SDU limit 245) and `seqpacket:/path:MTU`; `seqpacket!/path[!MTU]`:
///   a Unix `SOCK_SEQPACKET` socket standing in for an L2CAP channel
/// - `l2cap:BDADDR:PSM[:public|random]`; `l2cap!BDADDR!PSM[!public|random]` (PSM decimal or
///   `0x` hex; the BDADDR is always six colon-separated pairs, so the colon form is unambiguous);
///   `l2cap:PSM`, `l2cap!PSM`: every local adapter (``anyBluetoothAddress``), for listening
/// - `fd:N`, `fd:R:W`; `fd!N`, `fd!R!W`; and `-` (standard input and output)
public enum TransportAddress: Sendable, Hashable, CustomStringConvertible {
  /// A TCP server; `host` is a name or an IPv4/IPv6 literal (without brackets).
  case tcp(host: String, port: UInt16)
  /// A Unix stream socket.
  case unix(path: String)
  /// A Unix `SOCK_SEQPACKET` socket whose peer accepts SDUs of at most `sduLimit` bytes.
  case seqpacket(path: String, sduLimit: Int)
  /// A Bluetooth LE L2CAP connection-oriented channel; `address` is `XX:XX:XX:XX:XX:XX`.
  case l2cap(address: String, psm: UInt16, addressType: BluetoothAddressType)
  /// Inherited descriptors, as for v9fs `trans=fd`.
  case fd(read: Int32, write: Int32)

  /// The BDADDR of `l2cap:PSM`: every local adapter (BDADDR_ANY), where a server listens.
  public static let anyBluetoothAddress = "00:00:00:00:00:00"

  /// The 9P port used when a TCP dial string names none.
  public static let defaultTCPPort: UInt16 = 564
  /// The SDU limit of `seqpacket!/path` without an MTU: a typical BLE board's 245 bytes.
  public static let defaultSDULimit = 245
  /// The longest Unix socket path (`sun_path` less its terminating NUL).
  static let maxUnixPathBytes = 107

  /// Parses a dial string.
  /// - Throws: `TransportError.badDialString(string, reason:)` saying what to fix.
  public init(parsing string: String) throws(TransportError) {
    self = try DialStringParser(string).parse()
  }

  /// True for packet transports with SDU limits (seqpacket and l2cap): the default wire
  /// discipline there is one message per SDU chain, segmented to the peer's MTU.
  public var isPacketTransport: Bool {
    switch self {
    case .seqpacket, .l2cap: return true
    case .tcp, .unix, .fd: return false
    }
  }

  /// The canonical dial string in the colon form (safe to paste into a shell unquoted, as long
  /// as host and path have no shell characters); parsing it gives back an equal address.
  public var colonForm: String {
    switch self {
    case .tcp(let host, let port):
      return host.contains(":") ? "tcp:[\(host)]:\(port)" : "tcp:\(host):\(port)"
    case .unix(let path):
      return "unix:\(path)"
    case .seqpacket(let path, let sduLimit):
      return sduLimit == Self.defaultSDULimit
        ? "seqpacket:\(path)" : "seqpacket:\(path):\(sduLimit)"
    case .l2cap, .fd:
      return String(description.map { $0 == "!" ? ":" : $0 })
    }
  }

  /// The canonical dial string in the Plan 9 form; parsing it gives back an equal address.
  public var description: String {
    switch self {
    case .tcp(let host, let port):
      return "tcp!\(host)!\(port)"
    case .unix(let path):
      return "unix!\(path)"
    case .seqpacket(let path, let sduLimit):
      return sduLimit == Self.defaultSDULimit
        ? "seqpacket!\(path)" : "seqpacket!\(path)!\(sduLimit)"
    case .l2cap(let address, let psm, let addressType):
      let psmText = psmText(psm)
      if address == Self.anyBluetoothAddress && addressType == .public { return "l2cap!\(psmText)" }
      return addressType == .random
        ? "l2cap!\(address)!\(psmText)" : "l2cap!\(address)!\(psmText)!\(addressType.rawValue)"
    case .fd(let read, let write):
      return read == write ? "fd!\(read)" : "fd!\(read)!\(write)"
    }
  }
}

// MARK: - Parsing

private struct DialStringParser {
  let string: String

  init(_ string: String) { self.string = string }

  func fail(_ reason: String) -> TransportError {
    .badDialString(string, reason: reason)
  }

  func parse() throws(TransportError) -> TransportAddress {
    if string.isEmpty { throw fail("it is empty; use e.g. tcp:host:5640 or l2cap:BDADDR:PSM") }
    if string == "-" { return .fd(read: 0, write: 1) }
    if !string.contains("!") {
      if let colon = try parseColonForm() { return colon }
      return try parseHostPort()
    }
    let parts = string.split(separator: "!", omittingEmptySubsequences: false).map(String.init)
    let rest = Array(parts.dropFirst())
    switch parts[0].lowercased() {
    case "tcp": return try parseTCP(rest)
    case "unix": return .unix(path: try unixPath(rest.joined(separator: "!")))
    case "seqpacket": return try parseSeqpacket(rest)
    case "l2cap": return try parseL2CAP(rest)
    case "fd": return try parseFD(rest)
    default:
      throw fail("unknown network '\(parts[0])'; use tcp, unix, seqpacket, l2cap or fd")
    }
  }

  /// The colon form (`tcp:host:port`, `unix:/path`, `l2cap:BDADDR:PSM`…); nil when the string
  /// does not start with a network name (then it is `host:port`).
  func parseColonForm() throws(TransportError) -> TransportAddress? {
    guard let colon = string.firstIndex(of: ":") else { return nil }
    let network = string[..<colon].lowercased()
    let rest = String(string[string.index(after: colon)...])
    switch network {
    case "tcp":
      // `tcp:[v6]:port`, `tcp:host:port` or `tcp:host`.
      if rest.hasPrefix("["), let close = rest.firstIndex(of: "]") {
        let host = String(rest[rest.index(after: rest.startIndex)..<close])
        let after = rest[rest.index(after: close)...]
        if after.isEmpty { return try parseTCP([host]) }
        guard after.hasPrefix(":") else { throw fail("expected tcp:[v6addr]:port") }
        return try parseTCP([host, String(after.dropFirst())])
      }
      let pieces = rest.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
      guard pieces.count <= 2 else {
        throw fail("expected tcp:host:port (an IPv6 address goes in brackets: tcp:[::1]:564)")
      }
      return try parseTCP(pieces)
    case "unix":
      return .unix(path: try unixPath(rest))
    case "seqpacket":
      // A trailing `:digits` after a path is the SDU size.
      if let last = rest.lastIndex(of: ":"), rest[rest.index(after: last)...].allSatisfy(\.isNumber)
      {
        return try parseSeqpacket([String(rest[..<last]), String(rest[rest.index(after: last)...])])
      }
      return try parseSeqpacket([rest])
    case "l2cap":
      // Six pairs of the BDADDR, the PSM, and maybe the address type; or the PSM alone.
      let pieces = rest.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
      if pieces.count == 1 { return try parseL2CAP(pieces) }
      guard pieces.count == 7 || pieces.count == 8 else {
        if parseBluetoothAddress(rest) != nil {
          throw fail("expected l2cap:BDADDR:PSM or l2cap:BDADDR:PSM:public|random")
        }
        throw fail(
          "expected l2cap:BDADDR:PSM[:public|random], the BDADDR as six hex pairs like C0:FF:EE:00:00:01"
        )
      }
      return try parseL2CAP([pieces[0..<6].joined(separator: ":")] + pieces[6...])
    case "fd":
      return try parseFD(
        rest.split(separator: ":", omittingEmptySubsequences: false).map(String.init))
    default:
      return nil
    }
  }

  func parseHostPort() throws(TransportError) -> TransportAddress {
    if string.hasPrefix("[") {
      guard let close = string.firstIndex(of: "]") else {
        throw fail("missing ']' after the IPv6 address")
      }
      let host = String(string[string.index(after: string.startIndex)..<close])
      let after = string[string.index(after: close)...]
      guard after.hasPrefix(":") else { throw fail("missing ':port' after '[\(host)]'") }
      return .tcp(host: try tcpHost(host), port: try port(String(after.dropFirst())))
    }
    let pieces = string.split(separator: ":", omittingEmptySubsequences: false)
    if pieces.count == 1 {
      if string.hasPrefix("/") || string.hasPrefix(".") {
        throw fail("a socket path needs a network, e.g. unix:\(string) or seqpacket:\(string)")
      }
      throw fail(
        "no port given; write \(string):5640 for 9bbsd, or tcp:\(string) for a 9P server on the standard port 564"
      )
    }
    if pieces.count > 2 {
      throw fail("an IPv6 address must be written in brackets, e.g. [::1]:5640 or tcp:[::1]:564")
    }
    return .tcp(host: try tcpHost(String(pieces[0])), port: try port(String(pieces[1])))
  }

  func parseTCP(_ rest: [String]) throws(TransportError) -> TransportAddress {
    guard rest.count == 1 || rest.count == 2 else {
      throw fail("expected tcp!host or tcp!host!port")
    }
    var host = rest[0]
    if host.hasPrefix("["), host.hasSuffix("]"), host.count >= 2 {
      host = String(host.dropFirst().dropLast())
    }
    let portNumber = rest.count == 2 ? try port(rest[1]) : TransportAddress.defaultTCPPort
    return .tcp(host: try tcpHost(host), port: portNumber)
  }

  func parseSeqpacket(_ rest: [String]) throws(TransportError) -> TransportAddress {
    guard rest.count == 1 || rest.count == 2 else {
      throw fail("expected seqpacket!/path or seqpacket!/path!MTU")
    }
    let path = try unixPath(rest[0])
    guard rest.count == 2 else {
      return .seqpacket(path: path, sduLimit: TransportAddress.defaultSDULimit)
    }
    guard let mtu = Int(rest[1]), (1...65535).contains(mtu) else {
      throw fail("the SDU size '\(rest[1])' must be a decimal number from 1 to 65535")
    }
    return .seqpacket(path: path, sduLimit: mtu)
  }

  func parseL2CAP(_ rest: [String]) throws(TransportError) -> TransportAddress {
    if rest.count == 1, parseBluetoothAddress(rest[0]) == nil {
      return .l2cap(
        address: TransportAddress.anyBluetoothAddress, psm: try parsePSM(rest[0]),
        addressType: .public)
    }
    guard rest.count == 2 || rest.count == 3 else {
      throw fail("expected l2cap!BDADDR!PSM or l2cap!BDADDR!PSM!public|random")
    }
    guard let bytes = parseBluetoothAddress(rest[0]) else {
      throw fail(
        "'\(rest[0])' is not a Bluetooth address; write six hex pairs like C0:FF:EE:00:00:01")
    }
    let psm = try parsePSM(rest[1])
    var type = BluetoothAddressType.random
    if rest.count == 3 {
      guard let parsed = BluetoothAddressType(rawValue: rest[2].lowercased()) else {
        throw fail("the address type '\(rest[2])' must be public or random")
      }
      type = parsed
    }
    return .l2cap(address: formatBluetoothAddress(bytes), psm: psm, addressType: type)
  }

  func parsePSM(_ text: String) throws(TransportError) -> UInt16 {
    let lower = text.lowercased()
    let value: Int? =
      lower.hasPrefix("0x") ? Int(lower.dropFirst(2), radix: 16) : Int(lower, radix: 10)
    guard let value, (1...0xFFFF).contains(value) else {
      throw fail("the PSM '\(text)' must be a number from 1 to 0xFFFF (decimal or 0x hex)")
    }
    return UInt16(value)
  }

  func parseFD(_ rest: [String]) throws(TransportError) -> TransportAddress {
    guard rest.count == 1 || rest.count == 2 else {
      throw fail("expected fd!N or fd!READ!WRITE")
    }
    var descriptors: [Int32] = []
    for text in rest {
      guard let value = Int32(text), value >= 0 else {
        throw fail("the descriptor '\(text)' must be a non-negative number")
      }
      descriptors.append(value)
    }
    return .fd(read: descriptors[0], write: descriptors[descriptors.count - 1])
  }

  func tcpHost(_ host: String) throws(TransportError) -> String {
    if host.isEmpty { throw fail("the host name is empty") }
    return host
  }

  func port(_ text: String) throws(TransportError) -> UInt16 {
    guard let value = UInt16(text) else {
      throw fail("the port '\(text)' must be a number from 0 to 65535")
    }
    return value
  }

  func unixPath(_ path: String) throws(TransportError) -> String {
    if path.isEmpty { throw fail("the socket path is empty") }
    if path.utf8.count > TransportAddress.maxUnixPathBytes {
      throw fail(
        "the socket path is longer than \(TransportAddress.maxUnixPathBytes) bytes; use a shorter path"
      )
    }
    return path
  }
}

// MARK: - Bluetooth addresses

/// Parses `XX:XX:XX:XX:XX:XX` into its six bytes in written (most significant first) order.
func parseBluetoothAddress(_ text: String) -> [UInt8]? {
  let pairs = text.split(separator: ":", omittingEmptySubsequences: false)
  guard pairs.count == 6 else { return nil }
  var bytes: [UInt8] = []
  for pair in pairs {
    guard pair.count == 2, pair.allSatisfy(\.isHexDigit), let byte = UInt8(pair, radix: 16)
    else { return nil }
    bytes.append(byte)
  }
  return bytes
}

/// Formats six bytes (most significant first) as `XX:XX:XX:XX:XX:XX`, upper case.
func formatBluetoothAddress(_ bytes: [UInt8]) -> String {
  bytes.map { byte in
    let hex = String(byte, radix: 16, uppercase: true)
    return byte < 16 ? "0" + hex : hex
  }.joined(separator: ":")
}
