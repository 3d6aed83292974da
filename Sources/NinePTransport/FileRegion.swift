import Glibc

/// A range of an open file to send as the tail of a message, after a header held in memory:
/// a server's Rread of a regular file, whose bytes can go from the page cache to the socket
/// with `sendfile(2)` and never pass through the server's memory.
public struct FileRegion: Sendable {
  /// The open file. The caller keeps it open until the send returns.
  public var descriptor: Int32
  /// Where the bytes start in the file.
  public var offset: Int64
  /// How many bytes the message carries: the header has already promised exactly this many.
  public var count: Int

  public init(descriptor: Int32, offset: Int64, count: Int) {
    self.descriptor = descriptor
    self.offset = offset
    self.count = count
  }

  /// Reads the region into memory; bytes the file no longer has (it shrank since the header
  /// was made) are zeros, so the message keeps the length its header promised.
  public func contents() throws(TransportError) -> [UInt8] {
    var bytes = [UInt8](repeating: 0, count: count)
    var failure: TransportError?
    bytes.withUnsafeMutableBytes { raw in
      do throws(TransportError) { try read(into: raw) } catch { failure = error }
    }
    if let failure { throw failure }
    return bytes
  }

  /// Reads the region into `buffer` (`count` bytes of it), as ``contents()`` does, but where
  /// the caller wants them: a secure channel's record, sealed where it lies.
  public func read(into buffer: UnsafeMutableRawBufferPointer) throws(TransportError) {
    precondition(buffer.count >= count, "a region read into a smaller buffer")
    var done = 0
    while done < count {
      let got = pread(
        descriptor, buffer.baseAddress.map { $0 + done }, count - done, off_t(offset) + off_t(done))
      if got > 0 {
        done += got
      } else if got == 0 {
        break
      } else if errno != EINTR {
        throw .io(operation: "read file", errno: errno)
      }
    }
    if done < count {
      UnsafeMutableRawBufferPointer(rebasing: buffer[done..<count]).initializeMemory(
        as: UInt8.self, repeating: 0)
    }
  }
}

/// A transport that can send a message whose tail is a file region.
public protocol FileRegionSending: MessageTransport {
  /// Sends one message made of `header` (size prefix included, promising `file.count` more
  /// bytes) followed by the bytes of `file`. If the file shrinks meanwhile, the missing bytes
  /// are sent as zeros so the stream stays framed.
  func send(header: [UInt8], file: FileRegion) throws(TransportError)
}
