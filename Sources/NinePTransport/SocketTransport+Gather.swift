import Glibc

// A client's Twrite goes out with its data where it lies (a slice of the buffer the kernel
// handed over), not copied behind its header into one frame.
extension SocketTransport {
  /// One sendmsg(2) of `head` then `tail` to the stream socket, never waiting; returns the
  /// count and errno as the call left them.
  func sendGathered(_ head: ArraySlice<UInt8>, _ tail: ArraySlice<UInt8>) -> (Int, Int32) {
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
          let count = sendmsg(writeFD, &message, Int32(MSG_NOSIGNAL | MSG_DONTWAIT))
          return (count, count < 0 ? errno : 0)
        }
      }
    }
  }
}
