import CBlueZ
import Glibc

/// A listening socket for servers (the reference server 9bbsd): tcp, unix, seqpacket or LE
/// L2CAP (`l2cap:PSM` on every adapter, `l2cap:BDADDR:PSM` on one).
///
/// `accept()` blocks until a client connects; `close()` from another thread wakes it and it
/// returns nil. Accepted seqpacket transports use the address's SDU limit as their
/// `sendSDULimit`; accepted L2CAP channels the peer's receive MTU.
public final class Listener: Sendable {
  /// The address actually bound: for tcp with port 0, the port the kernel chose.
  public let boundAddress: TransportAddress

  private let fd: Int32
  private let gate: IOGate
  private let socketType: Int32

  /// The receive MTU of accepted L2CAP channels (the largest SDU a client may send us), as the
  /// 9PIS transport characteristic announces it.
  public static let l2capReceiveMTU = 4096

  /// Binds and listens (SO_REUSEADDR; close-on-exec). A stale Unix socket file nobody listens
  /// on is removed first; the socket file is removed again on `close()`.
  /// - Throws: `listenFailed` (e.g. address in use), `resolveFailed`, `bluetoothUnavailable`
  ///   (no Bluetooth in the kernel), or `unsupported` for fd addresses.
  public convenience init(address: TransportAddress) throws(TransportError) {
    let socketAddress: SocketAddress
    var unixPath: String?
    switch address {
    case .tcp(let host, let port):
      let candidates = try SocketAddress.resolve(host: host, port: port, passive: true)
      // Resolution never returns an empty list.
      socketAddress = candidates[0]
    case .unix(let path):
      socketAddress = .unix(path: path, type: Int32(SOCK_STREAM.rawValue))
      unixPath = path
    case .seqpacket(let path, _):
      socketAddress = .unix(path: path, type: Int32(SOCK_SEQPACKET.rawValue))
      unixPath = path
    case .l2cap(let bdaddr, let psm, _):
      let fd = try listenL2CAP(
        bdaddr: bdaddr, psm: psm, receiveMTU: Self.l2capReceiveMTU, address: address)
      try self.init(
        listening: fd, boundAddress: address, socketType: Int32(SOCK_SEQPACKET.rawValue),
        unixPath: nil)
      return
    case .fd:
      throw .unsupported(operation: "listen", address: address.description)
    }
    let fail = { (code: Int32) in
      TransportError.listenFailed(address: address.description, reason: errnoText(code))
    }
    if let unixPath { try removeStaleSocket(at: unixPath, address: socketAddress, for: address) }

    let fd: Int32
    switch makeSocket(
      family: socketAddress.family,
      type: socketAddress.type | Int32(SOCK_NONBLOCK.rawValue), proto: socketAddress.proto)
    {
    case .success(let descriptor): fd = descriptor
    case .failure(let error): throw fail(error.code)
    }
    if socketAddress.family != AF_UNIX { setOption(fd, SOL_SOCKET, SO_REUSEADDR, 1) }
    let bound = socketAddress.withSockaddr { bind(fd, $0, $1) }
    guard bound == 0, listen(fd, 64) == 0 else {
      let code = errno
      _ = Glibc.close(fd)
      throw fail(code)
    }

    let boundAddress: TransportAddress
    switch address {
    case .tcp(let host, _):
      var storage = sockaddr_storage()
      var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
      let status = withUnsafeMutablePointer(to: &storage) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
      }
      let local = withUnsafeBytes(of: &storage) {
        SocketAddress(family: 0, type: 0, proto: 0, bytes: Array($0.prefix(Int(length))))
      }
      guard status == 0, let port = local.hostAndPort?.port else {
        let code = errno
        _ = Glibc.close(fd)
        throw fail(code)
      }
      boundAddress = .tcp(host: host, port: port)
    default:
      boundAddress = address
    }
    try self.init(
      listening: fd, boundAddress: boundAddress, socketType: socketAddress.type,
      unixPath: unixPath)
  }

  /// Takes over the listening socket `fd` (closed on failure).
  private init(
    listening fd: Int32, boundAddress: TransportAddress, socketType: Int32, unixPath: String?
  ) throws(TransportError) {
    self.fd = fd
    self.boundAddress = boundAddress
    self.socketType = socketType
    let identity = unixPath.flatMap(fileIdentity)
    let release: @Sendable () -> Void = {
      _ = Glibc.close(fd)
      // Remove our socket file, unless someone has replaced it since.
      if let unixPath, let identity, fileIdentity(unixPath) == identity { unlink(unixPath) }
    }
    do throws(TransportError) {
      gate = try IOGate(release: release)
    } catch {
      release()
      throw error
    }
    logger.debug("listening", metadata: ["address": "\(boundAddress)"])
  }

  deinit {
    gate.close()
  }

  /// Waits for the next connection. Returns nil once `close()` has been called.
  /// - Throws: `io` if accepting fails for a reason other than a client giving up early.
  public func accept() throws(TransportError) -> SocketTransport? {
    do throws(TransportError) {
      return try gate.withAccess { () throws(TransportError) -> SocketTransport in
        while true {
          _ = try gate.wait(for: fd, events: Int16(POLLIN))
          var storage = sockaddr_storage()
          var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
          let client = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
              accept4(fd, $0, &length, Int32(SOCK_CLOEXEC.rawValue))
            }
          }
          if client < 0 {
            switch errno {
            case EAGAIN, EWOULDBLOCK, EINTR, ECONNABORTED, EPROTO: continue
            case let code: throw .io(operation: "accept", errno: code)
            }
          }
          return try makeTransport(client: client, storage: storage, length: length)
        }
      }
    } catch .closed {
      return nil
    }
  }

  /// Stops listening; wakes a blocked `accept()`. Idempotent.
  public func close() {
    gate.close()
  }

  private func makeTransport(client: Int32, storage: sockaddr_storage, length: socklen_t)
    throws(TransportError) -> SocketTransport
  {
    var peerAddress = boundAddress
    if case .tcp = boundAddress {
      setOption(client, Int32(IPPROTO_TCP), TCP_NODELAY, 1)
      var storage = storage
      let peer = withUnsafeBytes(of: &storage) {
        SocketAddress(family: 0, type: 0, proto: 0, bytes: Array($0.prefix(Int(length))))
      }
      if let (host, port) = peer.hostAndPort { peerAddress = .tcp(host: host, port: port) }
    }
    var limit: Int?
    switch boundAddress {
    case .seqpacket(_, let sduLimit):
      limit = sduLimit
    case .l2cap:
      limit = sendMTU(client)
      var storage = storage
      let peer = withUnsafeBytes(of: &storage) { $0.load(as: sockaddr_l2.self) }
      peerAddress = .l2cap(
        address: formatBluetoothAddress(peer.l2_bdaddr), psm: UInt16(littleEndian: peer.l2_psm),
        addressType: peer.l2_bdaddr_type == UInt8(BDADDR_LE_PUBLIC) ? .public : .random)
    default:
      break
    }
    do throws(TransportError) {
      let transport = try SocketTransport(
        address: peerAddress, readFD: client, writeFD: client,
        isPacket: socketType == Int32(SOCK_SEQPACKET.rawValue), sendSDULimit: limit)
      logger.debug("accepted", metadata: ["peer": "\(peerAddress)"])
      return transport
    } catch {
      _ = Glibc.close(client)
      throw error
    }
  }
}

/// Device and inode of a file, to recognise our own socket file later.
private func fileIdentity(_ path: String) -> [UInt64]? {
  var info = stat()
  guard lstat(path, &info) == 0 else { return nil }
  return [UInt64(info.st_dev), UInt64(info.st_ino)]
}

/// Removes a Unix socket file left behind by a server that has gone; refuses if a server is
/// still listening there.
private func removeStaleSocket(
  at path: String, address socketAddress: SocketAddress, for address: TransportAddress
) throws(TransportError) {
  var info = stat()
  guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFSOCK else { return }
  guard case .success(let probe) = makeSocket(family: AF_UNIX, type: socketAddress.type, proto: 0)
  else { return }
  defer { _ = Glibc.close(probe) }
  switch connect(probe, to: socketAddress, timeoutMilliseconds: 1000) {
  case .failed(ECONNREFUSED):
    logger.debug("removing stale socket", metadata: ["path": "\(path)"])
    unlink(path)
  case .connected, .failed(EAGAIN):
    throw .listenFailed(
      address: address.description, reason: "another server is already listening there")
  case .failed, .timedOut:
    return
  }
}
