import Foundation
import NinePProtocol

/// A bare TCP socket for hostile-client tests: what `WireClient` cannot do on purpose, such as
/// resetting the connection (SO_LINGER 0) with replies in flight, or sending half a frame.
final class RawSocket {
  let fd: Int32

  /// Connects to `127.0.0.1:port` (blocking, with a 5 s receive timeout), from `source` if
  /// given (another address of 127/8: the server sees another client address).
  init(port: Int, source: String? = nil) throws {
    fd = try Self.connected(port: port, source: source)
    var timeout = timeval(tv_sec: 5, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
  }

  /// A TCP socket connected to `127.0.0.1:port`, bound first to `source` if given.
  static func connected(port: Int, source: String? = nil) throws -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw TestError.unexpected("socket: errno \(errno)") }
    do {
      if let source {
        try call("bind \(source)", fd, host: source, port: 0, bind)
      }
      try call("connect", fd, host: "127.0.0.1", port: port, connect)
    } catch {
      Glibc.close(fd)
      throw error
    }
    return fd
  }

  /// `operation` (bind or connect) of `fd` with the IPv4 address `host:port`.
  private static func call(
    _ what: String, _ fd: Int32, host: String, port: Int,
    _ operation: (Int32, UnsafePointer<sockaddr>, socklen_t) -> Int32
  ) throws {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr(host)
    address.sin_port = UInt16(port).bigEndian
    let result = withUnsafePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        operation(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
      }
    }
    guard result == 0 else { throw TestError.unexpected("\(what): errno \(errno)") }
  }

  /// The port of a `tcp!host!port` dial string.
  static func port(of dial: String) throws -> Int {
    guard let last = dial.split(separator: "!").last, let port = Int(last) else {
      throw TestError.unexpected("no port in \(dial)")
    }
    return port
  }

  func send(_ bytes: [UInt8]) throws {
    var rest = bytes[...]
    while !rest.isEmpty {
      let count = rest.withUnsafeBytes {
        Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
      }
      guard count > 0 else { throw TestError.unexpected("send: errno \(errno)") }
      rest = rest.dropFirst(count)
    }
  }

  func send(_ message: Message, tag: Tag) throws {
    try send(message.encoded(tag: tag))
  }

  /// The next whole reply (blocking, bounded by the receive timeout).
  func receive() throws -> Message {
    let header = try read(4)
    let size = Int(header[0]) | Int(header[1]) << 8 | Int(header[2]) << 16 | Int(header[3]) << 24
    guard size >= 7 else { throw TestError.unexpected("bad size \(size)") }
    let frame = header + (try read(size - 4))
    return try Message.decode(frame, limits: .unbounded).message
  }

  func rpc(_ message: Message, tag: Tag = 1) throws -> Message {
    try send(message, tag: tag)
    return try receive()
  }

  private func read(_ count: Int) throws -> [UInt8] {
    var bytes = [UInt8](repeating: 0, count: count)
    var done = 0
    while done < count {
      let got = bytes.withUnsafeMutableBytes { recv(fd, $0.baseAddress! + done, count - done, 0) }
      if got > 0 {
        done += got
      } else if got == 0 {
        throw TestError.closed
      } else if errno != EINTR {
        throw TestError.timeout
      }
    }
    return bytes
  }

  /// Whether the server has closed the connection (a read sees end of file or a reset)
  /// within `timeout` seconds; data that arrives meanwhile is discarded.
  func waitForClose(timeout: TimeInterval) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    var buffer = [UInt8](repeating: 0, count: 4096)
    while Date() < deadline {
      var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
      let left = max(1, Int32(deadline.timeIntervalSinceNow * 1000))
      guard poll(&poller, 1, left) > 0 else { continue }
      let got = recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT))
      if got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR) { return true }
    }
    return false
  }

  /// Closes with SO_LINGER 0: the kernel sends a TCP reset and drops unsent data.
  func reset() {
    var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
    Glibc.close(fd)
  }

  /// Sends FIN: the server sees end of file but may still send.
  func shutdownWriting() { shutdown(fd, Int32(SHUT_WR)) }

  func close() { Glibc.close(fd) }
}
