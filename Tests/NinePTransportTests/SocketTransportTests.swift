import Foundation
import Glibc
import NinePTransport
import XCTest

final class SocketTransportTests: XCTestCase {
  private var directory = ""

  override func setUpWithError() throws {
    directory = try makeSocketDirectory()
  }

  override func tearDownWithError() throws {
    try? FileManager.default.removeItem(atPath: directory)
  }

  private var allListenAddresses: [TransportAddress] {
    [
      .tcp(host: "127.0.0.1", port: 0),
      .unix(path: directory + "/u"),
      .seqpacket(path: directory + "/s", sduLimit: 32),
    ]
  }

  // MARK: Round trips

  func testRoundTripsOnEveryListenerKind() throws {
    for address in allListenAddresses {
      let (listener, client, server) = try connectedPair(address)
      defer {
        client.close()
        server.close()
        listener.close()
      }
      let messages = (0..<40).map { patternMessage(tag: UInt16($0), length: ($0 * 37) % 700) }
      let echo = Background {
        var count = 0
        while let message = try server.receive(limit: 8192) {
          try server.send(message)
          count += 1
        }
        return count
      }
      for message in messages {
        try client.send(message)
        XCTAssertEqual(try client.receive(limit: 8192), message, "\(address)")
      }
      // Pipelined: all out while they come back. (Not all out first: on seqpacket the echo
      // fills the client's receive queue, stops, and both sides wait for room forever.)
      let back = Background { () throws -> [[UInt8]] in
        try messages.map { _ in try client.receive(limit: 8192) ?? [] }
      }
      for message in messages { try client.send(message) }
      XCTAssertEqual(try back.value(), messages, "\(address)")
      client.close()
      XCTAssertEqual(try echo.value(), messages.count * 2, "\(address)")
    }
  }

  /// A message whose tail is a file region arrives whole on every kind of transport (sendfile
  /// on streams, through memory on packets), large ones too; a region the file no longer has
  /// all of is padded with zeros, so the stream stays framed for the next message.
  func testFileRegionMessagesArriveWholeAndFramed() throws {
    let path = directory + "/region"
    let bytes = (0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 11) }
    try Data(bytes).write(to: URL(fileURLWithPath: path))
    let fd = open(path, O_RDONLY)
    XCTAssertGreaterThanOrEqual(fd, 0)
    defer { close(fd) }
    @Sendable func header(_ count: Int) -> [UInt8] {
      let size = UInt32(11 + count)
      return [
        UInt8(size & 0xFF), UInt8(size >> 8 & 0xFF), UInt8(size >> 16 & 0xFF), UInt8(size >> 24),
        117, 1, 0, UInt8(count & 0xFF), UInt8(count >> 8 & 0xFF), UInt8(count >> 16 & 0xFF),
        UInt8(count >> 24),
      ]
    }
    for address in allListenAddresses {
      let (listener, client, server) = try connectedPair(address)
      defer {
        client.close()
        server.close()
        listener.close()
      }
      let packets = server.isPacket
      // Packet transports carry at most one SDU limit's worth per message here.
      let cases: [(offset: Int, count: Int)] =
        packets
        ? [(5, 10), (3_500_000, 0)]
        : [(0, 2_500_000), (1_234_567, 100_000), (2_999_000, 4_000), (3_500_000, 0)]
      let sender = Background {
        for (offset, count) in cases {
          try server.send(
            header: header(count),
            file: FileRegion(descriptor: fd, offset: Int64(offset), count: count))
        }
        try server.send(patternMessage(tag: 9, length: 20))
      }
      for (offset, count) in cases {
        let message = try XCTUnwrap(try client.receive(limit: 4 << 20), "\(address)")
        XCTAssertEqual(message.count, 11 + count, "\(address)")
        let have = min(count, max(0, bytes.count - offset))
        let start = min(offset, bytes.count)
        XCTAssertEqual(Array(message[11..<11 + have]), Array(bytes[start..<start + have]))
        XCTAssertTrue(message[(11 + have)...].allSatisfy { $0 == 0 }, "padding, \(address)")
      }
      XCTAssertEqual(try client.receive(limit: 8192), patternMessage(tag: 9, length: 20))
      try sender.value()
    }
  }

  func testTCPListenerReportsRealPortAndDialStringWorks() throws {
    let listener = try Listener(address: .tcp(host: "127.0.0.1", port: 0))
    defer { listener.close() }
    guard case .tcp(let host, let port) = listener.boundAddress else {
      return XCTFail("not tcp: \(listener.boundAddress)")
    }
    XCTAssertEqual(host, "127.0.0.1")
    XCTAssertNotEqual(port, 0)
    let accepted = Background { try listener.accept() }
    let client = try dial(TransportAddress(parsing: "127.0.0.1:\(port)"))
    defer { client.close() }
    XCTAssertNil(client.sendSDULimit)
    let server = try accepted.value()
    guard case .tcp(let peerHost, _)? = server?.address else {
      return XCTFail("accepted address \(String(describing: server?.address))")
    }
    XCTAssertEqual(peerHost, "127.0.0.1")
    server?.close()
  }

  func testSeqpacketPeerSeesSDUsWithinLimitAndOneMessageEach() throws {
    let limit = 32
    let (listener, client, server) = try connectedPair(
      .seqpacket(path: directory + "/s", sduLimit: limit))
    defer {
      client.close()
      server.close()
      listener.close()
    }
    XCTAssertEqual(client.sendSDULimit, limit)
    XCTAssertTrue(client.isPacket)
    let messages = [7, 8, 31, 32, 33, 64, 65, 500, 7].enumerated().map {
      patternMessage(tag: UInt16($0.offset), length: $0.element - 7)
    }
    let expected = messages.flatMap { SDUSegmenter.segments(of: $0, limit: limit).map(Array.init) }
    let observed = Background {
      var sdus: [[UInt8]] = []
      while sdus.count < expected.count, let sdu = try server.receiveRaw(maxBytes: 4096) {
        sdus.append(sdu)
      }
      return sdus
    }
    for message in messages { try client.send(message) }
    let sdus = try observed.value()
    XCTAssertTrue(sdus.allSatisfy { $0.count <= limit })
    XCTAssertEqual(sdus, expected)
  }

  func testSeqpacketClientReassemblesServerSDUs() throws {
    let (listener, client, server) = try connectedPair(
      .seqpacket(path: directory + "/s", sduLimit: 245))
    defer {
      client.close()
      server.close()
      listener.close()
    }
    let big = patternMessage(tag: 1, length: 3000)
    let small = patternMessage(tag: 2, length: 3)
    try server.sendRaw(big)  // one SDU larger than any client limit: fine for the client
    for sdu in SDUSegmenter.segments(of: small, limit: 2) { try server.sendRaw(Array(sdu)) }
    try server.sendRaw(small + small)  // two messages in one SDU
    XCTAssertEqual(try client.receive(limit: 8192), big)
    XCTAssertEqual(try client.receive(limit: 8192), small)
    XCTAssertEqual(try client.receive(limit: 8192), small)
    XCTAssertEqual(try client.receive(limit: 8192), small)
    // receiveRaw hands back an SDU larger than maxBytes whole, for the caller to judge.
    try client.sendRaw(patternMessage(tag: 3, length: 300))
    XCTAssertEqual(try server.receiveRaw(maxBytes: 245)?.count, 307)
  }

  func testConcurrentSendersNeverInterleave() throws {
    for address in [
      TransportAddress.tcp(host: "127.0.0.1", port: 0),
      .seqpacket(path: directory + "/c", sduLimit: 48),
    ] {
      let (listener, client, server) = try connectedPair(address)
      defer {
        client.close()
        server.close()
        listener.close()
      }
      let senders = 8
      let perSender = 40
      let receiver = Background { () -> [UInt16: Int] in
        var counts: [UInt16: Int] = [:]
        for _ in 0..<(senders * perSender) {
          guard let message = try server.receive(limit: 1 << 20) else { break }
          let tag = UInt16(message[5]) | UInt16(message[6]) << 8
          XCTAssertTrue(message[7...].allSatisfy { $0 == UInt8(truncatingIfNeeded: tag) })
          counts[tag, default: 0] += 1
        }
        return counts
      }
      let workers = (0..<senders).map { sender in
        Background {
          for index in 0..<perSender {
            try client.send(patternMessage(tag: UInt16(sender), length: 100 + index * 211))
          }
        }
      }
      for worker in workers { try worker.value() }
      let counts = try receiver.value()
      XCTAssertEqual(
        counts, Dictionary(uniqueKeysWithValues: (0..<senders).map { (UInt16($0), perSender) }))
    }
  }

  // MARK: End of stream and bad frames

  func testOrderlyEOFAndTruncatedMessage() throws {
    let (listener, client, server) = try connectedPair(.unix(path: directory + "/e"))
    defer {
      client.close()
      listener.close()
    }
    server.close()
    XCTAssertNil(try client.receive(limit: 8192))

    let (listener2, client2, server2) = try connectedPair(.tcp(host: "127.0.0.1", port: 0))
    defer {
      client2.close()
      listener2.close()
    }
    try server2.sendRaw(Array(patternMessage(tag: 1, length: 20).prefix(10)))
    server2.close()
    XCTAssertThrowsError(try client2.receive(limit: 8192)) { error in
      XCTAssertEqual(error as? TransportError, .truncatedMessage(bufferedBytes: 10))
    }
  }

  func testLargeMessagesAmongSmallOnesOnStreams() throws {
    for address in allListenAddresses where !address.isPacketTransport {
      let (listener, client, server) = try connectedPair(address)
      defer {
        client.close()
        server.close()
        listener.close()
      }
      // Large ones are received straight into their storage, small ones through the buffer;
      // back to back, a read may hold the end of one and the start of the next.
      let lengths = [300_000, 5, 20_000, 16_380, 700, 262_144, 3, 100_000]
      let messages = lengths.enumerated().map { patternMessage(tag: UInt16($0), length: $1) }
      let sender = Background { for message in messages { try server.sendRaw(message) } }
      for message in messages {
        XCTAssertEqual(try client.receive(limit: 400_000), message, "\(address)")
      }
      try sender.value()
      let all = Array(messages.joined())
      let whole = Background { try server.sendRaw(all) }
      for message in messages {
        XCTAssertEqual(try client.receive(limit: 400_000), message, "\(address), one write")
      }
      try whole.value()
    }
  }

  /// A message sent as header plus a payload slice arrives as the joined message would: on
  /// streams in one piece (also when the socket takes it in several writes), on seqpacket
  /// reassembled from the SDUs `send` would make.
  func testGatheredSendMatchesJoinedMessage() throws {
    for address in allListenAddresses {
      let (listener, client, server) = try connectedPair(address)
      defer {
        client.close()
        server.close()
        listener.close()
      }
      let lengths = [0, 1, 16, 300, 70_000] + (address.isPacketTransport ? [] : [4 << 20])
      let messages = lengths.enumerated().map { patternMessage(tag: UInt16($0), length: $1) }
      let received = Background {
        var got: [[UInt8]] = []
        while got.count < messages.count, let message = try server.receive(limit: 8 << 20) {
          got.append(message)
        }
        return got
      }
      for message in messages {
        // The payload is a slice not starting at index 0, as a Twrite chunk of a larger write.
        let buffer = [0xEE, 0xEE] + message
        let headerLength = min(23, message.count)
        if try client.sendWithoutWaiting(
          header: Array(message[..<headerLength]), payload: buffer[(2 + headerLength)...])
        {
          try client.flushPending()
        }
      }
      let got = try received.value()
      XCTAssertEqual(got.count, messages.count, "\(address)")
      for (one, other) in zip(got, messages) { XCTAssertTrue(one == other, "\(address)") }
    }
  }

  func testGatheredSendKeepsSeqpacketSegmentation() throws {
    let limit = 32
    let (listener, client, server) = try connectedPair(
      .seqpacket(path: directory + "/s", sduLimit: limit))
    defer {
      client.close()
      server.close()
      listener.close()
    }
    let message = patternMessage(tag: 5, length: 500)
    let expected = SDUSegmenter.segments(of: message, limit: limit).map(Array.init)
    let observed = Background {
      var sdus: [[UInt8]] = []
      while sdus.count < expected.count, let sdu = try server.receiveRaw(maxBytes: 4096) {
        sdus.append(sdu)
      }
      return sdus
    }
    if try client.sendWithoutWaiting(header: Array(message[..<23]), payload: message[23...]) {
      try client.flushPending()
    }
    XCTAssertEqual(try observed.value(), expected)
  }

  func testTruncatedLargeMessage() throws {
    let (listener, client, server) = try connectedPair(.unix(path: directory + "/l"))
    defer {
      client.close()
      listener.close()
    }
    let sender = Background {
      try server.sendRaw(Array(patternMessage(tag: 1, length: 200_000).prefix(90_000)))
      server.close()
    }
    XCTAssertThrowsError(try client.receive(limit: 400_000)) { error in
      XCTAssertEqual(error as? TransportError, .truncatedMessage(bufferedBytes: 90_000))
    }
    try sender.value()
  }

  func testFrameTooLargeAndTooSmallOnTheWire() throws {
    let (listener, client, server) = try connectedPair(.tcp(host: "127.0.0.1", port: 0))
    defer {
      client.close()
      server.close()
      listener.close()
    }
    try server.sendRaw([0x00, 0x00, 0x01, 0x00])  // 65536
    XCTAssertThrowsError(try client.receive(limit: 8192)) { error in
      XCTAssertEqual(error as? TransportError, .frameTooLarge(size: 65536, limit: 8192))
    }
    let (listener2, client2, server2) = try connectedPair(
      .seqpacket(path: directory + "/t", sduLimit: 245))
    defer {
      client2.close()
      server2.close()
      listener2.close()
    }
    try server2.sendRaw([6, 0, 0, 0, 1, 2])
    XCTAssertThrowsError(try client2.receive(limit: 8192)) { error in
      XCTAssertEqual(error as? TransportError, .frameTooSmall(size: 6))
    }
  }

  // MARK: close() wakes blocked threads

  private func assertCloseWakesReceive(
    _ transport: any MessageTransport, _ label: String, line: UInt = #line
  ) throws {
    let reader = Background { try transport.receive(limit: 8192) }
    XCTAssertTrue(reader.isStillRunning(after: 0.05), "\(label): receive did not block", line: line)
    let start = ContinuousClock.now
    transport.close()
    XCTAssertThrowsError(try reader.value(within: 2, line: line), label, line: line) { error in
      XCTAssertEqual(error as? TransportError, .closed, label, line: line)
    }
    XCTAssertLessThan(ContinuousClock.now - start, .milliseconds(500), label, line: line)
    transport.close()  // idempotent
    XCTAssertThrowsError(try transport.send(makeMessage(tag: 0, payload: [])), line: line)
  }

  func testCloseWakesReceiveOnSockets() throws {
    for address in allListenAddresses {
      let (listener, client, server) = try connectedPair(address)
      defer {
        server.close()
        listener.close()
      }
      try assertCloseWakesReceive(client, "\(address)")
      // The peer sees the descriptor closed.
      XCTAssertNil(try server.receive(limit: 8192), "\(address)")
    }
  }

  func testCloseWakesReceiveOnPipePair() throws {
    var toB: [Int32] = [-1, -1]
    var toA: [Int32] = [-1, -1]
    XCTAssertEqual(pipe(&toB), 0)
    XCTAssertEqual(pipe(&toA), 0)
    let a = try dial(.fd(read: toA[0], write: toB[1]))
    let b = try dial(TransportAddress(parsing: "fd!\(toB[0])!\(toA[1])"))
    defer { b.close() }
    let message = patternMessage(tag: 9, length: 10_000)  // more than PIPE_BUF
    let sender = Background { try a.send(message) }
    XCTAssertEqual(try b.receive(limit: 65536), message)
    try sender.value()
    try b.send(message)
    XCTAssertEqual(try a.receive(limit: 65536), message)
    try assertCloseWakesReceive(a, "pipe pair")
    XCTAssertNil(try b.receive(limit: 8192))
    // Writing to a pipe whose reader is gone gives an error, not SIGPIPE.
    XCTAssertThrowsError(try b.send(message)) { error in
      XCTAssertEqual(error as? TransportError, .io(operation: "send", errno: EPIPE))
    }
  }

  func testCloseWakesReceiveOnSocketpairDescriptor() throws {
    var fds: [Int32] = [-1, -1]
    XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds), 0)
    let a = try dial(TransportAddress(parsing: "fd!\(fds[0])"))
    let b = try dial(.fd(read: fds[1], write: fds[1]))
    defer { b.close() }
    let message = patternMessage(tag: 1, length: 50)
    try a.send(message)
    XCTAssertEqual(try b.receive(limit: 8192), message)
    try assertCloseWakesReceive(a, "socketpair")
    XCTAssertNil(try b.receive(limit: 8192))
  }

  func testCloseWakesBlockedSend() throws {
    var fds: [Int32] = [-1, -1]
    XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds), 0)
    let a = try dial(.fd(read: fds[0], write: fds[0]))
    let b = try dial(.fd(read: fds[1], write: fds[1]))
    defer { b.close() }
    let huge = patternMessage(tag: 1, length: 16 << 20)  // far beyond the socket buffers
    let sender = Background { try a.send(huge) }
    XCTAssertTrue(sender.isStillRunning(after: 0.05), "send did not block")
    a.close()
    XCTAssertThrowsError(try sender.value(within: 2)) { error in
      XCTAssertEqual(error as? TransportError, .closed)
    }
  }

  func testListenerCloseWakesAccept() throws {
    let listener = try Listener(address: .unix(path: directory + "/l"))
    let accepting = Background { try listener.accept() }
    XCTAssertTrue(accepting.isStillRunning(after: 0.05))
    listener.close()
    XCTAssertNil(try accepting.value(within: 2))
    XCTAssertNil(try listener.accept())
    XCTAssertFalse(FileManager.default.fileExists(atPath: directory + "/l"))
  }

  // MARK: Listener set-up

  func testStaleUnixSocketIsReplacedButLiveOneIsNot() throws {
    let path = directory + "/stale"
    // A socket file whose server has gone: bind, listen, close without unlinking.
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
    let bound = withUnsafePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
      }
    }
    XCTAssertEqual(bound, 0)
    XCTAssertEqual(listen(fd, 1), 0)
    Glibc.close(fd)

    let listener = try Listener(address: .unix(path: path))
    defer { listener.close() }
    XCTAssertThrowsError(try Listener(address: .unix(path: path))) { error in
      guard case .listenFailed(_, let reason)? = error as? TransportError else {
        return XCTFail("\(error)")
      }
      XCTAssertTrue(reason.contains("already listening"), reason)
    }
  }

  func testListenerRejectsUnsupportedAddresses() {
    let address = TransportAddress.fd(read: 0, write: 1)
    XCTAssertThrowsError(try Listener(address: address)) { error in
      XCTAssertEqual(
        error as? TransportError, .unsupported(operation: "listen", address: address.description))
    }
  }

  /// `l2cap:PSM` listens; on a kernel without Bluetooth (these machines) it says so in one
  /// line. (scripts/bluetooth-vm runs the real thing against the kernel's Bluetooth stack.)
  func testAnL2CAPListenerSaysWhenTheKernelHasNoBluetooth() throws {
    let probe = socket(AF_BLUETOOTH, Int32(SOCK_SEQPACKET.rawValue), 0)  // BTPROTO_L2CAP
    if probe >= 0 { close(probe) }
    let kernelHasBluetooth = probe >= 0 || errno != EAFNOSUPPORT
    for text in ["l2cap:0x0080", "l2cap:00:00:00:00:00:00:0x0081"] {
      let address = try TransportAddress(parsing: text)
      do {
        let listener = try Listener(address: address)
        XCTAssertTrue(kernelHasBluetooth, "listening on \(text) without Bluetooth")
        listener.close()
      } catch {
        XCTAssertFalse(kernelHasBluetooth, "\(error)")
        guard case .bluetoothUnavailable(let reason) = error else { return XCTFail("\(error)") }
        XCTAssertTrue(reason.contains("no Bluetooth support"), reason)
      }
    }
  }

  // MARK: Dial errors

  func testConnectionRefused() throws {
    let listener = try Listener(address: .tcp(host: "127.0.0.1", port: 0))
    let address = listener.boundAddress
    listener.close()
    XCTAssertThrowsError(try dial(address)) { error in
      XCTAssertEqual(
        error as? TransportError,
        .connectFailed(address: address.description, reason: "Connection refused"))
      XCTAssertTrue("\(error)".contains("Connection refused"))
    }
  }

  func testUnknownHost() {
    XCTAssertThrowsError(try dial(.tcp(host: "no-such-host.invalid", port: 564))) { error in
      guard case .resolveFailed(let host, let reason)? = error as? TransportError else {
        return XCTFail("\(error)")
      }
      XCTAssertEqual(host, "no-such-host.invalid")
      XCTAssertFalse(reason.isEmpty)
    }
  }

  func testMissingUnixPath() {
    for address in [
      TransportAddress.unix(path: directory + "/missing"),
      .seqpacket(path: directory + "/missing", sduLimit: 245),
    ] {
      XCTAssertThrowsError(try dial(address)) { error in
        XCTAssertEqual(
          error as? TransportError,
          .connectFailed(address: address.description, reason: "No such file or directory"))
      }
    }
  }

  func testConnectTimeout() throws {
    // A TCP listener with a full accept queue drops further SYNs, so connect hangs.
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { Glibc.close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        bind(fd, $0, length) == 0 && listen(fd, 0) == 0 && getsockname(fd, $0, &length) == 0
      }
    }
    XCTAssertTrue(bound)
    let target = TransportAddress.tcp(host: "127.0.0.1", port: UInt16(bigEndian: address.sin_port))
    var options = DialOptions()
    options.connectTimeout = .milliseconds(300)
    var fillers: [any MessageTransport] = []
    defer { fillers.forEach { $0.close() } }
    let start = ContinuousClock.now
    for _ in 0..<8 {
      do {
        fillers.append(try dial(target, options: options))
      } catch {
        XCTAssertEqual(error, .timedOut(address: target.description))
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(5))
        return
      }
    }
    XCTFail("no connection attempt timed out")
  }

  func testBadInheritedDescriptor() {
    XCTAssertThrowsError(try dial(.fd(read: 987_654, write: 987_654))) { error in
      XCTAssertEqual(
        error as? TransportError,
        .connectFailed(address: "fd!987654", reason: "Bad file descriptor"))
    }
  }

  func testIPv6RoundTrip() throws {
    let listener: Listener
    do {
      listener = try Listener(address: .tcp(host: "::1", port: 0))
    } catch {
      XCTFail("no IPv6 loopback here: \(error)")
      return
    }
    defer { listener.close() }
    guard case .tcp(_, let port) = listener.boundAddress else { return XCTFail("not tcp") }
    let accepted = Background { try listener.accept() }
    let client = try dial(TransportAddress(parsing: "[::1]:\(port)"))
    defer { client.close() }
    guard let server = try accepted.value() else { return XCTFail("accept returned nil") }
    defer { server.close() }
    let message = patternMessage(tag: 6, length: 60)
    try client.send(message)
    XCTAssertEqual(try server.receive(limit: 8192), message)
  }

  func testL2CAPReportsBluetoothUnavailable() throws {
    let address = try TransportAddress(parsing: "l2cap!C0:FF:EE:00:00:01!0x0080")
    XCTAssertThrowsError(try dial(address)) { error in
      guard case .bluetoothUnavailable(let reason)? = error as? TransportError else {
        return XCTFail("\(error)")
      }
      XCTAssertTrue("\(error)".contains("Bluetooth"), "\(error)")
      XCTAssertFalse(reason.isEmpty)
    }
  }

  /// `l2cap:PSM` names every local adapter: a listener's address, never a board to dial.
  func testDialingAnL2CAPListenAddressSaysToNameTheBoard() throws {
    let address = try TransportAddress(parsing: "l2cap:0x0080")
    XCTAssertThrowsError(try dial(address)) { error in
      guard case .badDialString(_, let reason)? = error as? TransportError else {
        return XCTFail("\(error)")
      }
      XCTAssertTrue(reason.contains("l2cap:BDADDR:PSM"), reason)
    }
  }
}
