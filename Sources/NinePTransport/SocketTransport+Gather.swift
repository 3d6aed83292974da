import Glibc

/// A transport that can send a message whose data lies apart from its header: a client's
/// Twrite, whose data is a slice of the buffer the kernel handed over, goes out without first
/// being copied behind its header into one frame.
public protocol GatheredSending: MessageTransport {
  /// Sends one message made of `header` (size prefix included, promising `payload.count`
  /// more bytes) followed by `payload`, as `send(_:)` would send the two joined.
  func send(header: [UInt8], payload: ArraySlice<UInt8>) throws(TransportError)
}

extension SocketTransport: GatheredSending {
  /// Sends `header` and `payload` as one message. On a stream socket both go with one
  /// `sendmsg(2)` from where they lie; on packet transports and pipes they are joined and sent
  /// as `send(_:)` does, so SDU segmentation stays in one place.
  public func send(header: [UInt8], payload: ArraySlice<UInt8>) throws(TransportError) {
    guard !isPacket, writeIsSocket else {
      return try send(header + payload)
    }
    try gate.withAccess { () throws(TransportError) in
      try sendLock.withLock { _ throws(TransportError) in
        try writeGathered(header[...], payload)
      }
    }
  }

  /// Writes `header` then `payload` to the stream socket: one sendmsg(2) for both, and plain
  /// sends for whatever a short write leaves.
  private func writeGathered(_ header: ArraySlice<UInt8>, _ payload: ArraySlice<UInt8>)
    throws(TransportError)
  {
    var header = header
    while !header.isEmpty {
      let (count, code) = sendGathered(header, payload, flags: 0)
      if count > 0 {
        let fromHeader = min(count, header.count)
        header = header.dropFirst(fromHeader)
        if header.isEmpty { return try writeStream(payload.dropFirst(count - fromHeader)) }
        continue
      }
      try awaitRoomToSend(after: code)
    }
    try writeStream(payload)
  }
}

extension SocketTransport {
  /// One sendmsg(2) of `head` then `tail` to the stream socket, never waiting; returns the
  /// count and errno as the call left them.
  func sendGathered(_ head: ArraySlice<UInt8>, _ tail: ArraySlice<UInt8>, flags: Int32)
    -> (Int, Int32)
  {
    head.withUnsafeBytes { head in
      tail.withUnsafeBytes { tail in
        withUnsafeTemporaryAllocation(of: iovec.self, capacity: 2) { parts -> (Int, Int32) in
          parts[0] = iovec(
            iov_base: UnsafeMutableRawPointer(mutating: head.baseAddress), iov_len: head.count)
          parts[1] = iovec(
            iov_base: UnsafeMutableRawPointer(mutating: tail.baseAddress), iov_len: tail.count)
          var message = msghdr()
          message.msg_iov = parts.baseAddress
          message.msg_iovlen = tail.isEmpty ? 1 : 2
          let count = sendmsg(writeFD, &message, Int32(MSG_NOSIGNAL | MSG_DONTWAIT) | flags)
          return (count, count < 0 ? errno : 0)
        }
      }
    }
  }
}
