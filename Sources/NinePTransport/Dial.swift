import Glibc

extension SocketTransport {
  /// Connects to `address`, like `dial(_:options:)`, returning the concrete type (for callers
  /// that need raw SDU access).
  public static func connect(to address: TransportAddress, options: DialOptions = DialOptions())
    throws(TransportError) -> SocketTransport
  {
    let timeout = pollMilliseconds(options.connectTimeout)
    logger.debug("dialling", metadata: ["address": "\(address)"])
    switch address {
    case .tcp(let host, let port):
      let fd = try connectTCP(host: host, port: port, timeout: timeout, address: address)
      return try adopt(fd, address: address, isPacket: false, sendSDULimit: nil)
    case .unix(let path):
      let fd = try connectUnix(
        path: path, type: Int32(SOCK_STREAM.rawValue), timeout: timeout, address: address)
      return try adopt(fd, address: address, isPacket: false, sendSDULimit: nil)
    case .seqpacket(let path, let sduLimit):
      let fd = try connectUnix(
        path: path, type: Int32(SOCK_SEQPACKET.rawValue), timeout: timeout, address: address)
      return try adopt(fd, address: address, isPacket: true, sendSDULimit: sduLimit)
    case .l2cap(let bdaddr, let psm, let addressType):
      let (fd, mtu) = try connectL2CAP(
        bdaddr: bdaddr, psm: psm, addressType: addressType, options: options, address: address)
      return try adopt(fd, address: address, isPacket: true, sendSDULimit: mtu)
    case .fd(let read, let write):
      for descriptor in Set([read, write]) {
        let flags = fcntl(descriptor, F_GETFD)
        guard flags >= 0 else {
          throw .connectFailed(address: address.description, reason: errnoText(errno))
        }
        _ = fcntl(descriptor, F_SETFD, flags | FD_CLOEXEC)
      }
      return try SocketTransport(
        address: address, readFD: read, writeFD: write, isPacket: false, sendSDULimit: nil)
    }
  }

  private static func adopt(
    _ fd: Int32, address: TransportAddress, isPacket: Bool, sendSDULimit: Int?
  ) throws(TransportError) -> SocketTransport {
    do throws(TransportError) {
      let transport = try SocketTransport(
        address: address, readFD: fd, writeFD: fd, isPacket: isPacket,
        sendSDULimit: sendSDULimit)
      logger.debug(
        "connected",
        metadata: ["address": "\(address)", "sdu": "\(sendSDULimit.map(String.init) ?? "-")"])
      return transport
    } catch {
      _ = Glibc.close(fd)
      throw error
    }
  }
}

/// Tries each resolved address in turn; reports the last failure.
private func connectTCP(host: String, port: UInt16, timeout: Int32, address: TransportAddress)
  throws(TransportError) -> Int32
{
  var lastError = TransportError.connectFailed(
    address: address.description, reason: "no usable address")
  for candidate in try SocketAddress.resolve(host: host, port: port, passive: false) {
    let fd: Int32
    switch makeSocket(family: candidate.family, type: candidate.type, proto: candidate.proto) {
    case .success(let descriptor): fd = descriptor
    case .failure(let error):
      lastError = .connectFailed(address: address.description, reason: errnoText(error.code))
      continue
    }
    switch connect(fd, to: candidate, timeoutMilliseconds: timeout) {
    case .connected:
      setOption(fd, Int32(IPPROTO_TCP), TCP_NODELAY, 1)
      return fd
    case .failed(let code):
      lastError = .connectFailed(address: address.description, reason: errnoText(code))
    case .timedOut:
      lastError = .timedOut(address: address.description)
    }
    _ = Glibc.close(fd)
  }
  throw lastError
}

private func connectUnix(path: String, type: Int32, timeout: Int32, address: TransportAddress)
  throws(TransportError) -> Int32
{
  let fd: Int32
  switch makeSocket(family: AF_UNIX, type: type, proto: 0) {
  case .success(let descriptor): fd = descriptor
  case .failure(let error):
    throw .connectFailed(address: address.description, reason: errnoText(error.code))
  }
  switch connect(fd, to: .unix(path: path, type: type), timeoutMilliseconds: timeout) {
  case .connected:
    return fd
  case .failed(let code):
    _ = Glibc.close(fd)
    let reason =
      code == EAGAIN
      ? "the server is not accepting connections (its listen queue is full)" : errnoText(code)
    throw .connectFailed(address: address.description, reason: reason)
  case .timedOut:
    _ = Glibc.close(fd)
    throw .timedOut(address: address.description)
  }
}
