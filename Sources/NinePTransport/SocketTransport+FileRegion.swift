import Glibc

// A server's Rread of a regular file: the header from memory, the data with sendfile(2)
// straight from the page cache (see ``FileRegion``).
extension SocketTransport {
  /// Sends a message whose tail is a file region. On a stream socket the tail goes with
  /// `sendfile(2)` straight from the page cache; on packet transports and pipes it is read into
  /// memory and sent as one message, as `send(_:)` would.
  public func send(header: [UInt8], file: FileRegion) throws(TransportError) {
    guard !isPacket, writeIsSocket else {
      return try send(header + file.contents())
    }
    try gate.withAccess { () throws(TransportError) in
      try sendLock.withLock { _ throws(TransportError) in
        // MSG_MORE holds the header back to share a segment with the data; with no data it
        // would sit corked for up to 200 ms.
        try writeStream(header[...], flags: file.count > 0 ? Int32(MSG_MORE) : 0)
        try writeFile(file)
      }
    }
  }

  /// Sends all of `file` to the (stream socket) write descriptor with sendfile(2); zeros for
  /// any part the file no longer has.
  private func writeFile(_ file: FileRegion) throws(TransportError) {
    try ensureNonBlocking()
    var offset = off_t(file.offset)
    var rest = file.count
    while rest > 0 {
      // sendfile(2) has no MSG_NOSIGNAL: a peer that reset the connection would raise SIGPIPE.
      let (count, code) = withoutSIGPIPE {
        let count = sendfile(writeFD, file.descriptor, &offset, rest)
        return (count, count < 0 ? errno : 0)
      }
      if count > 0 {
        bytesSent.add(count, ordering: .relaxed)
        rest -= count
        continue
      }
      if count == 0 { break }
      if code == EINVAL || code == ENOSYS || code == EOPNOTSUPP {
        // A file sendfile cannot read from: send the rest through memory.
        let tail = FileRegion(descriptor: file.descriptor, offset: Int64(offset), count: rest)
        return try writeStream(tail.contents()[...])
      }
      try awaitRoomToSend(after: code, operation: "send file")
    }
    if rest > 0 { try writeStream([UInt8](repeating: 0, count: rest)[...]) }
  }
}
