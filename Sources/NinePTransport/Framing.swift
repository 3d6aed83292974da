// MARK: - FrameAssembler

/// Turns incoming bytes into complete 9P messages by their 4-byte little-endian size prefix
/// (which counts itself). Pure: no I/O.
///
/// Works the same for a byte stream (bytes arrive in arbitrary chunks) and for SDUs (a message
/// may span several SDUs): append whatever arrived, then take messages out until `nil`.
///
/// ```swift
/// var assembler = FrameAssembler()
/// assembler.append(chunk)
/// while let message = try assembler.nextMessage(limit: msize) { handle(message) }
/// ```
public struct FrameAssembler: Sendable {
  /// The smallest valid 9P message: size[4] type[1] tag[2].
  public static let minimumMessageSize = 7

  private var buffer: [UInt8] = []
  private var start = 0

  public init() {}

  /// The number of bytes received but not yet returned as a message.
  public var bufferedByteCount: Int { buffer.count - start }

  /// Appends received bytes.
  public mutating func append<Bytes: Collection<UInt8>>(_ bytes: Bytes) {
    if start > 0, start >= buffer.count / 2 {
      buffer.removeFirst(start)
      start = 0
    }
    buffer.append(contentsOf: bytes)
  }

  /// Appends `count` bytes that `fill` writes where they will lie (a record decrypted into the
  /// buffer, say), instead of copying them in from elsewhere. If `fill` throws, nothing is
  /// appended.
  public mutating func append(
    count: Int, fill: (UnsafeMutableRawBufferPointer) throws(TransportError) -> Void
  ) throws(TransportError) {
    if start > 0, start >= buffer.count / 2 {
      buffer.removeFirst(start)
      start = 0
    }
    let old = buffer.count
    buffer.append(contentsOf: repeatElement(0, count: count))
    var failure: TransportError?
    buffer.withUnsafeMutableBytes { bytes in
      do throws(TransportError) {
        try fill(UnsafeMutableRawBufferPointer(rebasing: bytes[old...]))
      } catch {
        failure = error
      }
    }
    if let failure {
      buffer.removeLast(count)
      throw failure
    }
  }

  /// The size announced by the message at the head of the buffer, once its prefix is complete.
  public var pendingMessageSize: UInt32? {
    guard bufferedByteCount >= 4 else { return nil }
    return UInt32(buffer[start]) | UInt32(buffer[start + 1]) << 8
      | UInt32(buffer[start + 2]) << 16 | UInt32(buffer[start + 3]) << 24
  }

  /// Removes and returns the next complete message, size prefix included, or `nil` if more
  /// bytes are needed.
  ///
  /// - Throws: `frameTooSmall` for a size below 7, `frameTooLarge` for a size above `limit`;
  ///   both are reported as soon as the prefix has arrived. The stream cannot be resynchronised
  ///   after either; the bytes stay buffered and the same error is thrown again.
  public mutating func nextMessage(limit: Int) throws(TransportError) -> [UInt8]? {
    guard let size = pendingMessageSize else { return nil }
    if size < UInt32(Self.minimumMessageSize) { throw .frameTooSmall(size: size) }
    if Int(size) > limit { throw .frameTooLarge(size: size, limit: limit) }
    guard bufferedByteCount >= Int(size) else { return nil }
    let message = Array(buffer[start..<start + Int(size)])
    start += Int(size)
    if start == buffer.count {
      buffer.removeAll(keepingCapacity: true)
      start = 0
    }
    return message
  }

  /// Removes and returns the next message like ``nextMessage(limit:)``, but once its size is
  /// known and it has not all arrived, receives the rest straight into the message's own
  /// storage: the buffered part is moved in once, then `receive` is handed the unfilled
  /// remainder until it is full. So a large message is not copied through the buffer.
  ///
  /// `receive` must write at most the bytes it is given and return how many it wrote (0 at end
  /// of stream). Returns `nil` only while the size prefix is incomplete.
  ///
  /// - Throws: what ``nextMessage(limit:)`` throws; `truncatedMessage` when `receive` reports
  ///   the end of stream mid-message; whatever `receive` throws. After a throw from `receive`,
  ///   the message's bytes are gone and the stream cannot continue.
  public mutating func nextMessage(
    limit: Int,
    receivingRestWith receive: (UnsafeMutableRawBufferPointer) throws(TransportError) -> Int
  ) throws(TransportError) -> [UInt8]? {
    if let message = try nextMessage(limit: limit) { return message }
    guard let size = pendingMessageSize.map({ Int($0) }) else { return nil }
    var failure: TransportError?
    let message = [UInt8](unsafeUninitializedCapacity: size) { storage, filled in
      let head = buffer[start...]
      filled = head.withUnsafeBufferPointer {
        UnsafeMutableBufferPointer(rebasing: storage[..<$0.count]).initialize(fromContentsOf: $0)
      }
      while filled < size {
        do throws(TransportError) {
          let count = try receive(
            UnsafeMutableRawBufferPointer(UnsafeMutableBufferPointer(rebasing: storage[filled...])))
          if count == 0 {
            failure = .truncatedMessage(bufferedBytes: filled)
            return
          }
          filled += min(count, size - filled)
        } catch {
          failure = error
          return
        }
      }
    }
    buffer.removeAll(keepingCapacity: true)
    start = 0
    if let failure { throw failure }
    return message
  }

  /// The first `count` buffered bytes, if that many are buffered.
  func peek(_ count: Int) -> ArraySlice<UInt8>? {
    bufferedByteCount >= count ? buffer[start..<start + count] : nil
  }

  /// Drops the first `count` buffered bytes.
  mutating func skip(_ count: Int) {
    start += min(count, bufferedByteCount)
    if start == buffer.count {
      buffer.removeAll(keepingCapacity: true)
      start = 0
    }
  }

  /// Removes and returns the first `count` buffered bytes.
  mutating func take(_ count: Int) -> [UInt8] {
    let bytes = Array(buffer[start..<start + min(count, bufferedByteCount)])
    skip(bytes.count)
    return bytes
  }

  /// Removes and returns every buffered byte (for raw readers taking over from framed ones).
  public mutating func drain() -> [UInt8] {
    let bytes = Array(buffer[start...])
    buffer.removeAll(keepingCapacity: true)
    start = 0
    return bytes
  }
}

// MARK: - SDUSegmenter

/// Splits one 9P message into SDUs for a packet transport. Pure: no I/O.
///
/// Each message gets its own SDUs, so bytes of two messages never share an SDU (a 9BBS device
/// discards whatever follows the first message in an SDU).
public enum SDUSegmenter {
  /// The SDUs carrying `message`, in order: each at most `limit` bytes, all but the last exactly
  /// `limit` bytes, concatenating to `message`. An empty message gives no SDUs.
  /// - Precondition: `limit > 0`.
  public static func segments(of message: [UInt8], limit: Int) -> [ArraySlice<UInt8>] {
    precondition(limit > 0, "SDU limit must be positive")
    return stride(from: 0, to: message.count, by: limit).map { offset in
      message[offset..<min(offset + limit, message.count)]
    }
  }
}
