import Glibc

// Small typed helpers over the POSIX socket calls used by dial() and Listener.

/// A socket address copied out of C storage, with its family and socket parameters.
struct SocketAddress {
  var family: Int32
  var type: Int32
  var proto: Int32
  var bytes: [UInt8]

  func withSockaddr<Result>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> Result) -> Result {
    bytes.withUnsafeBytes { raw in
      // The bytes were copied from a sockaddr; the buffer is never empty.
      guard let base = raw.baseAddress else { fatalError("empty socket address") }
      return body(base.assumingMemoryBound(to: sockaddr.self), socklen_t(raw.count))
    }
  }

  /// The numeric host and port of an AF_INET/AF_INET6 address.
  var hostAndPort: (host: String, port: UInt16)? {
    var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
    var service = [CChar](repeating: 0, count: Int(NI_MAXSERV))
    let status = withSockaddr { address, length in
      getnameinfo(
        address, length, &host, socklen_t(host.count), &service, socklen_t(service.count),
        NI_NUMERICHOST | NI_NUMERICSERV)
    }
    guard status == 0 else { return nil }
    let hostText = String(
      decoding: host.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    let serviceText = String(
      decoding: service.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    guard let port = UInt16(serviceText) else { return nil }
    return (hostText, port)
  }

  /// A Unix-domain address for `path` (already checked to fit in `sun_path`).
  static func unix(path: String, type: Int32) -> SocketAddress {
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    let pathBytes = Array(path.utf8.prefix(TransportAddress.maxUnixPathBytes))
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
      raw.copyBytes(from: pathBytes)
    }
    let length = MemoryLayout<sockaddr_un>.offset(of: \.sun_path).map { $0 + pathBytes.count + 1 }
    let bytes = withUnsafeBytes(of: &address) { Array($0.prefix(length ?? $0.count)) }
    return SocketAddress(family: AF_UNIX, type: type, proto: 0, bytes: bytes)
  }

  /// Resolves `host` and `port` with getaddrinfo (IPv4 and IPv6, in the resolver's order).
  static func resolve(host: String, port: UInt16, passive: Bool) throws(TransportError)
    -> [SocketAddress]
  {
    var hints = addrinfo()
    hints.ai_family = AF_UNSPEC
    hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
    hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0)
    var list: UnsafeMutablePointer<addrinfo>?
    let status = getaddrinfo(host, String(port), &hints, &list)
    guard status == 0 else {
      let reason: String
      switch status {
      case EAI_NONAME, -5 /* EAI_NODATA, GNU-only */: reason = "unknown host"
      case EAI_SYSTEM: reason = errnoText(errno)
      default: reason = String(cString: gai_strerror(status))
      }
      throw .resolveFailed(host: host, reason: reason)
    }
    defer { freeaddrinfo(list) }
    var addresses: [SocketAddress] = []
    var cursor = list
    while let entry = cursor?.pointee {
      if let address = entry.ai_addr, entry.ai_addrlen > 0 {
        let bytes = Array(UnsafeRawBufferPointer(start: address, count: Int(entry.ai_addrlen)))
        addresses.append(
          SocketAddress(
            family: entry.ai_family, type: entry.ai_socktype, proto: entry.ai_protocol,
            bytes: bytes))
      }
      cursor = entry.ai_next
    }
    if addresses.isEmpty { throw .resolveFailed(host: host, reason: "no addresses found") }
    return addresses
  }
}

/// Creates a close-on-exec socket; returns the descriptor or the errno.
func makeSocket(family: Int32, type: Int32, proto: Int32) -> Result<Int32, Errno32> {
  let fd = socket(family, type | Int32(SOCK_CLOEXEC.rawValue), proto)
  return fd >= 0 ? .success(fd) : .failure(Errno32(errno))
}

/// An errno value usable as a `Result` failure.
struct Errno32: Error {
  var code: Int32
  init(_ code: Int32) { self.code = code }
}

/// The outcome of `connect(_:to:timeoutMilliseconds:)`.
enum ConnectOutcome {
  case connected
  case failed(Int32)
  case timedOut
}

/// Connects `fd` with a bounded wait: non-blocking connect, poll for writability, read
/// SO_ERROR, then back to blocking mode.
func connect(_ fd: Int32, to address: SocketAddress, timeoutMilliseconds: Int32) -> ConnectOutcome {
  let flags = fcntl(fd, F_GETFL)
  guard flags >= 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 else { return .failed(errno) }
  let status = address.withSockaddr { Glibc.connect(fd, $0, $1) }
  if status != 0 {
    let code = errno
    guard code == EINPROGRESS || code == EINTR else { return .failed(code) }
    var entry = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
    var ready: Int32
    repeat { ready = poll(&entry, 1, timeoutMilliseconds) } while ready < 0 && errno == EINTR
    if ready < 0 { return .failed(errno) }
    if ready == 0 { return .timedOut }
    var error: Int32 = 0
    var length = socklen_t(MemoryLayout<Int32>.size)
    guard getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 else { return .failed(errno) }
    if error != 0 { return .failed(error) }
  }
  guard fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0 else { return .failed(errno) }
  return .connected
}

/// Sets an integer socket option, returning the errno on failure.
@discardableResult
func setOption(_ fd: Int32, _ level: Int32, _ name: Int32, _ value: Int32) -> Int32? {
  var value = value
  let status = setsockopt(fd, level, name, &value, socklen_t(MemoryLayout<Int32>.size))
  return status == 0 ? nil : errno
}

/// Whether `fd` is a socket, and if so its type (SOCK_STREAM, SOCK_SEQPACKET, …).
func socketType(of fd: Int32) -> Int32? {
  var type: Int32 = 0
  var length = socklen_t(MemoryLayout<Int32>.size)
  return getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) == 0 ? type : nil
}

/// Milliseconds for poll(), rounding up and clamping to Int32.
func pollMilliseconds(_ duration: Duration) -> Int32 {
  let (seconds, attoseconds) = duration.components
  if seconds < 0 { return 0 }
  let millis = seconds.multipliedReportingOverflow(by: 1000)
  if millis.overflow { return Int32.max }
  let total = millis.partialValue + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
  return Int32(clamping: total)
}
