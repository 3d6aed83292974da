import Glibc

/// The network a guest's address belongs to, as the board's fair shares count it: an IPv4
/// address's /24, an IPv6 address's /64 (an IPv4-mapped one's /24). One machine holds a whole
/// range (all of 127/8 on loopback; a /64 from SLAAC on a LAN), so counting by address would
/// let it be 40 guests at once.
enum SourceNetwork {
  /// `a.b.c.0/24`, `xxxx:xxxx:xxxx:xxxx::/64`, or `host` itself when it is no IP address
  /// (a Bluetooth address: one radio, one guest).
  static func key(of host: String) -> String {
    var v4 = in_addr()
    if inet_pton(AF_INET, host, &v4) == 1 { return prefix24(v4) }
    var v6 = in6_addr()
    guard inet_pton(AF_INET6, host, &v6) == 1 else { return host }
    let bytes = withUnsafeBytes(of: v6) { Array($0) }
    // ::ffff:a.b.c.d is an IPv4 client on a dual-stack listener.
    if bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xFF && bytes[11] == 0xFF {
      return "\(bytes[12]).\(bytes[13]).\(bytes[14]).0/24"
    }
    let groups = stride(from: 0, to: 8, by: 2).map {
      String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16)
    }
    return groups.joined(separator: ":") + "::/64"
  }

  private static func prefix24(_ address: in_addr) -> String {
    let bytes = withUnsafeBytes(of: address.s_addr) { Array($0) }
    return "\(bytes[0]).\(bytes[1]).\(bytes[2]).0/24"
  }
}
