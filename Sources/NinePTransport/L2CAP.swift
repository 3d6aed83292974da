import CBlueZ
import Glibc

// Bluetooth LE L2CAP connection-oriented channels through BlueZ sockets. Header-only: the
// address is parsed here, so libbluetooth (str2ba) is not linked.

/// Opens an LE credit-based L2CAP channel and returns the socket and the peer's receive MTU
/// (our largest SDU).
func connectL2CAP(
  bdaddr: String, psm: UInt16, addressType: BluetoothAddressType, options: DialOptions,
  address: TransportAddress
) throws(TransportError) -> (fd: Int32, sendMTU: Int) {
  guard let bytes = parseBluetoothAddress(bdaddr) else {
    throw .badDialString(address.description, reason: "'\(bdaddr)' is not a Bluetooth address")
  }
  guard bdaddr != TransportAddress.anyBluetoothAddress else {
    throw .badDialString(
      address.description,
      reason: "l2cap:PSM listens on every adapter; to connect, name the board: l2cap:BDADDR:PSM")
  }
  let fd: Int32
  switch makeSocket(
    family: AF_BLUETOOTH, type: Int32(SOCK_SEQPACKET.rawValue), proto: BTPROTO_L2CAP)
  {
  case .success(let descriptor): fd = descriptor
  case .failure(let error):
    throw bluetoothSocketError(error.code)
  }
  do throws(TransportError) {
    try configureL2CAP(fd, options: options, address: address)
    var remote = sockaddr_l2()
    remote.l2_family = sa_family_t(AF_BLUETOOTH)
    remote.l2_psm = psm.littleEndian
    remote.l2_bdaddr = bluetoothAddress(bytes)
    remote.l2_bdaddr_type = UInt8(addressType == .public ? BDADDR_LE_PUBLIC : BDADDR_LE_RANDOM)
    // A board answers only to the address type it uses; say which one was tried.
    let other: BluetoothAddressType = addressType == .public ? .random : .public
    let tried =
      "\(address) as a \(addressType.rawValue) address (for a \(other.rawValue) one: add :\(other.rawValue))"
    let remoteAddress = withUnsafeBytes(of: &remote) {
      SocketAddress(
        family: AF_BLUETOOTH, type: Int32(SOCK_SEQPACKET.rawValue), proto: BTPROTO_L2CAP,
        bytes: Array($0))
    }
    switch connect(
      fd, to: remoteAddress, timeoutMilliseconds: pollMilliseconds(options.connectTimeout))
    {
    case .connected:
      break
    case .failed(let code) where code == EHOSTUNREACH || code == ENODEV:
      throw TransportError.bluetoothUnavailable(
        reason: "no Bluetooth adapter is available or powered on (\(errnoText(code)))")
    case .failed(let code):
      throw TransportError.connectFailed(address: tried, reason: errnoText(code))
    case .timedOut:
      throw TransportError.timedOut(address: tried)
    }
    let mtu = sendMTU(fd)
    logger.debug("l2cap connected", metadata: ["address": "\(address)", "sndmtu": "\(mtu)"])
    return (fd, mtu)
  } catch {
    _ = Glibc.close(fd)
    throw error
  }
}

/// The error for a failed `socket(AF_BLUETOOTH, …)`.
func bluetoothSocketError(_ code: Int32) -> TransportError {
  switch code {
  case EAFNOSUPPORT, EPROTONOSUPPORT:
    return .bluetoothUnavailable(
      reason: "this kernel has no Bluetooth support (AF_BLUETOOTH: \(errnoText(code)))")
  default:
    return .bluetoothUnavailable(
      reason: "cannot create a Bluetooth socket (AF_BLUETOOTH: \(errnoText(code)))")
  }
}

/// Binds to any local adapter (LE), then sets security, LE flow-control mode and receive MTU;
/// all before connecting.
private func configureL2CAP(_ fd: Int32, options: DialOptions, address: TransportAddress)
  throws(TransportError)
{
  var local = sockaddr_l2()
  local.l2_family = sa_family_t(AF_BLUETOOTH)
  local.l2_bdaddr = bdaddr_t()  // BDADDR_ANY
  local.l2_bdaddr_type = UInt8(BDADDR_LE_PUBLIC)
  let bound = withUnsafePointer(to: &local) {
    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
      bind(fd, $0, socklen_t(MemoryLayout<sockaddr_l2>.size))
    }
  }
  guard bound == 0 else { throw .io(operation: "L2CAP bind", errno: errno) }
  try setChannelOptions(
    fd, security: options.l2capSecurity, receiveMTU: options.l2capReceiveMTU)
}

/// Security level, LE credit-based flow-control mode and receive MTU: before a connect, or on
/// a listening socket (accepted channels inherit them).
private func setChannelOptions(_ fd: Int32, security level: BluetoothSecurity, receiveMTU: Int)
  throws(TransportError)
{
  var security = bt_security()
  switch level {
  case .low: security.level = UInt8(BT_SECURITY_LOW)
  case .medium: security.level = UInt8(BT_SECURITY_MEDIUM)
  case .high: security.level = UInt8(BT_SECURITY_HIGH)
  }
  guard
    setsockopt(
      fd, SOL_BLUETOOTH, BT_SECURITY, &security, socklen_t(MemoryLayout<bt_security>.size)) == 0
  else { throw .io(operation: "L2CAP security option", errno: errno) }

  var mode = UInt8(BT_MODE_LE_FLOWCTL)
  if setsockopt(fd, SOL_BLUETOOTH, BT_MODE, &mode, 1) != 0 {
    // Kernels without enhanced-credit support refuse BT_MODE; LE sockets default to LE flowctl.
    guard errno == ENOPROTOOPT else {
      throw .io(operation: "L2CAP mode option", errno: errno)
    }
  }

  var mtu = UInt16(clamping: receiveMTU)
  guard
    setsockopt(fd, SOL_BLUETOOTH, BT_RCVMTU, &mtu, socklen_t(MemoryLayout<UInt16>.size)) == 0
  else { throw .io(operation: "L2CAP receive MTU option", errno: errno) }
}

/// A listening LE L2CAP socket on `psm` of the adapter `bdaddr` (``TransportAddress/
/// anyBluetoothAddress``: every adapter), non-blocking and close-on-exec, with `receiveMTU`
/// for its channels. Errors say what a sysop can do about them.
func listenL2CAP(
  bdaddr: String, psm: UInt16, receiveMTU: Int, address: TransportAddress
) throws(TransportError) -> Int32 {
  guard let bytes = parseBluetoothAddress(bdaddr) else {
    throw .badDialString(address.description, reason: "'\(bdaddr)' is not a Bluetooth address")
  }
  let fd: Int32
  switch makeSocket(
    family: AF_BLUETOOTH, type: Int32(SOCK_SEQPACKET.rawValue | SOCK_NONBLOCK.rawValue),
    proto: BTPROTO_L2CAP)
  {
  case .success(let descriptor): fd = descriptor
  case .failure(let error): throw bluetoothSocketError(error.code)
  }
  do throws(TransportError) {
    var local = sockaddr_l2()
    local.l2_family = sa_family_t(AF_BLUETOOTH)
    local.l2_psm = psm.littleEndian
    local.l2_bdaddr = bluetoothAddress(bytes)
    local.l2_bdaddr_type = UInt8(BDADDR_LE_PUBLIC)
    let bound = withUnsafePointer(to: &local) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        bind(fd, $0, socklen_t(MemoryLayout<sockaddr_l2>.size))
      }
    }
    if bound != 0 {
      let code = errno
      let reason =
        switch code {
        case EADDRINUSE: "PSM \(psmText(psm)) is in use (another server listens on it)"
        case EACCES, EPERM:
          "PSM \(psmText(psm)) is below 0x0080 and needs CAP_NET_BIND_SERVICE (run as root, or pick a PSM from 0x0080)"
        case EADDRNOTAVAIL, ENODEV: "no Bluetooth adapter has the address \(bdaddr)"
        default: errnoText(code)
        }
      throw TransportError.listenFailed(address: address.description, reason: reason)
    }
    // A listener keeps security low: a board's channels are unencrypted (its documented
    // limit); authentication is 9P's own (Tauth).
    try setChannelOptions(fd, security: .low, receiveMTU: receiveMTU)
    guard Glibc.listen(fd, 16) == 0 else {
      throw TransportError.listenFailed(address: address.description, reason: errnoText(errno))
    }
    return fd
  } catch {
    _ = Glibc.close(fd)
    throw error
  }
}

/// `0x0080`.
func psmText(_ psm: UInt16) -> String {
  let hex = String(psm, radix: 16, uppercase: true)
  return "0x" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
}

/// The peer's receive MTU: BT_SNDMTU, or the `omtu` of L2CAP_OPTIONS on older kernels; 23 (the
/// LE minimum) if neither answers.
func sendMTU(_ fd: Int32) -> Int {
  var mtu: UInt16 = 0
  var length = socklen_t(MemoryLayout<UInt16>.size)
  if getsockopt(fd, SOL_BLUETOOTH, BT_SNDMTU, &mtu, &length) == 0, mtu > 0 { return Int(mtu) }
  var l2capOptions = l2cap_options()
  length = socklen_t(MemoryLayout<l2cap_options>.size)
  if getsockopt(fd, SOL_L2CAP, L2CAP_OPTIONS, &l2capOptions, &length) == 0, l2capOptions.omtu > 0 {
    return Int(l2capOptions.omtu)
  }
  logger.warning("cannot read the L2CAP send MTU; using 23")
  return 23
}

/// `bdaddr_t` holds the address little-endian: the last written byte first.
func bluetoothAddress(_ bytes: [UInt8]) -> bdaddr_t {
  var address = bdaddr_t()
  guard bytes.count == 6 else { return address }
  address.b = (bytes[5], bytes[4], bytes[3], bytes[2], bytes[1], bytes[0])
  return address
}

/// The address written as people read it (`bdaddr_t` holds it the other way round).
func formatBluetoothAddress(_ address: bdaddr_t) -> String {
  let b = address.b
  return formatBluetoothAddress([b.5, b.4, b.3, b.2, b.1, b.0])
}
