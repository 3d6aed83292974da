import CBlueZ
import Glibc

// Receiving the data of a large Rread into a pipe with splice(2) instead of into memory.
//
// A megabyte Rread received into memory is copied out of the socket, then copied again into
// the reader's page cache when the mount answers the kernel. Spliced into a pipe, the socket's
// pages are only referenced, and the mount hands the pipe to FUSE (`fuse_reply_data`), which
// copies once: one copy per byte fewer on the busiest path of a large read.
//
// A pipe holds what fits its slots (one page or less each), and a megabyte reply needs a pipe
// of two (root may make one; others are held to `fs.pipe-max-size`, 1 MiB by default, and
// FUSE's own pipe would be refused too). So splicing is used only where a pipe that large can
// be made, and a reply whose pieces overflow even a grown pipe falls back to memory.

/// Bytes of a received message held in a kernel pipe rather than in memory.
///
/// One use only: whoever takes the bytes (``contents()`` or a splice out of ``descriptor``)
/// empties the pipe. The pipe closes when the last reference goes.
public final class SplicedBytes: Sendable {
  /// How many bytes the pipe holds.
  public let count: Int
  /// The pipe's read end, to move the bytes on with splice(2) (FUSE's `fuse_reply_data`).
  public let descriptor: Int32
  let writeEnd: Int32

  /// The largest reply data spliced (larger ones are received into memory), or 0 when
  /// splicing is not available. A pipe twice its size can be made here (checked once): a
  /// megabyte where the system allows pipes of two (root, or a raised `fs.pipe-max-size`),
  /// else half of that.
  public static let largestSpliced: Int = {
    for largest in [1 << 20, 512 << 10] where SplicedBytes(count: largest) != nil {
      return largest
    }
    return 0
  }()

  /// Whether replies are spliced at all.
  public static var isAvailable: Bool { largestSpliced > 0 }

  /// The smallest: below it a copy costs less than the pipe.
  static let smallestSpliced = 64 << 10
  /// Room a pipe has beyond the bytes it is made for: pieces that do not fill their page
  /// (where the sender's segments end) take a slot each.
  static let headroom = 16 * 4096

  /// A new empty pipe for `count` bytes: `pipeSize` bytes of slots, by default `count` and
  /// ``headroom``. Nil when the system allows no pipe so large.
  init?(count: Int, pipeSize: Int? = nil) {
    var ends: [Int32] = [0, 0]
    guard pipe2(&ends, O_CLOEXEC | O_NONBLOCK) == 0 else { return nil }
    descriptor = ends[0]
    writeEnd = ends[1]
    self.count = count
    guard Self.resize(writeEnd, toHold: pipeSize ?? count + Self.headroom) else { return nil }
  }

  deinit {
    _ = Glibc.close(descriptor)
    _ = Glibc.close(writeEnd)
  }

  /// Sets the pipe's size; the kernel rounds it up to a power of two of pages.
  static func resize(_ fd: Int32, toHold bytes: Int) -> Bool {
    fcntl(fd, 1031 /* F_SETPIPE_SZ */, Int32(clamping: bytes)) >= 0
  }

  /// Whether the pipe has no free slot (a splice into it would move nothing).
  var isFull: Bool {
    var entry = pollfd(fd: writeEnd, events: Int16(POLLOUT), revents: 0)
    return poll(&entry, 1, 0) == 0
  }

  /// Reads the bytes out into memory (for a consumer that cannot take a pipe).
  public func contents() -> [UInt8] {
    [UInt8](unsafeUninitializedCapacity: count) { buffer, filled in
      filled = drain(into: UnsafeMutableRawBufferPointer(buffer))
    }
  }

  /// Reads what the pipe holds into `buffer`; returns how many bytes.
  func drain(into buffer: UnsafeMutableRawBufferPointer) -> Int {
    guard let base = buffer.baseAddress else { return 0 }
    var filled = 0
    while filled < buffer.count {
      let n = Glibc.read(descriptor, base + filled, buffer.count - filled)
      if n > 0 {
        filled += n
      } else if n < 0 && errno == EINTR {
        continue
      } else {
        break
      }
    }
    return filled
  }
}

/// Which replies a receiver wants spliced (see ``SplicedBytes``).
public struct SpliceRule: Sendable {
  /// Whether any request on the wire would take its data spliced: only then is a message's
  /// header read on its own first, to decide before its data is read.
  public var isExpecting: @Sendable () -> Bool
  /// Whether the reply with this tag may come spliced.
  public var accepts: @Sendable (UInt16) -> Bool

  public init(
    isExpecting: @escaping @Sendable () -> Bool, accepts: @escaping @Sendable (UInt16) -> Bool
  ) {
    self.isExpecting = isExpecting
    self.accepts = accepts
  }
}

/// A message as received: whole in memory, or an Rread whose data waits in a pipe.
public enum ReceivedMessage: Sendable {
  case frame([UInt8])
  /// An Rread: `header` is its first 11 bytes (size, type, tag, count), `data` the rest.
  case splicedRead(header: [UInt8], data: SplicedBytes)
}

extension MessageTransport {
  /// Receives like ``receive(limit:)``; transports that cannot splice never splice.
  public func receive(limit: Int, splicing rule: SpliceRule) throws(TransportError)
    -> ReceivedMessage?
  {
    try receive(limit: limit).map { .frame($0) }
  }
}

/// Bytes of an Rread before its data: size[4] type[1] tag[2] count[4].
let rreadHeaderSize = 11
/// The Rread type byte.
private let rreadType: UInt8 = 117
private let spliceNonBlock: UInt32 = 2  // SPLICE_F_NONBLOCK

extension SocketTransport {
  /// Whether this transport can splice a reply's data into a pipe: a stream socket, on a
  /// system that allows pipes that large, whose replies have not overflowed a pipe before.
  var canSplice: Bool {
    !isPacket && readIsSocket && SplicedBytes.isAvailable
      && !spliceOverflowed.load(ordering: .relaxed)
  }

  /// Once the assembler holds an Rread's header that `rule` accepts, with at least
  /// ``SplicedBytes/smallestSpliced`` of data to come: moves what was buffered into a pipe,
  /// splices the rest from the socket and returns it. Nil when the head is anything else (the
  /// caller receives it as usual). A reply a pipe cannot hold comes back as a frame.
  func receiveSplicedRead(
    _ assembler: inout FrameAssembler, limit: Int, rule: SpliceRule
  ) throws(TransportError) -> ReceivedMessage? {
    guard let size = assembler.pendingMessageSize.map({ Int($0) }), size <= limit,
      let header = assembler.peek(rreadHeaderSize), header[header.startIndex + 4] == rreadType
    else { return nil }
    let count = size - rreadHeaderSize
    let announced =
      Int(header[header.startIndex + 7]) | Int(header[header.startIndex + 8]) << 8
      | Int(header[header.startIndex + 9]) << 16 | Int(header[header.startIndex + 10]) << 24
    let tag = UInt16(header[header.startIndex + 5]) | UInt16(header[header.startIndex + 6]) << 8
    guard announced == count, count >= SplicedBytes.smallestSpliced,
      count <= SplicedBytes.largestSpliced, rule.accepts(tag)
    else { return nil }
    let testPipeSize = splicePipeSize.load(ordering: .relaxed)
    guard let pipe = SplicedBytes(count: count, pipeSize: testPipeSize > 0 ? testPipeSize : nil)
    else { return nil }
    let headerBytes = Array(header)
    assembler.skip(rreadHeaderSize)
    let buffered = assembler.take(min(count, assembler.bufferedByteCount))
    try ensureNonBlocking()
    try fill(pipe, with: buffered)
    var moved = buffered.count
    var grown = false
    while moved < count {
      let n = splice(readFD, nil, pipe.writeEnd, nil, UInt(count - moved), spliceNonBlock)
      if n > 0 {
        moved += n
        continue
      }
      if n == 0 { throw .truncatedMessage(bufferedBytes: rreadHeaderSize + moved) }
      let code = errno
      if code == EINTR { continue }
      guard code == EAGAIN else { throw .io(operation: "splice", errno: code) }
      if !pipe.isFull {
        _ = try gate.wait(for: readFD, events: Int16(POLLIN))
        continue
      }
      // Small pieces (a real network's segments) filled the pipe's slots before its bytes.
      if !grown, testPipeSize == 0,
        SplicedBytes.resize(pipe.writeEnd, toHold: 4 * (count + SplicedBytes.headroom))
      {
        grown = true
        continue
      }
      // They would again: this link's replies go to memory from now on.
      spliceOverflowed.store(true, ordering: .relaxed)
      logger.debug("a \(count)-byte reply overflowed its pipe; no more splicing on \(address)")
      return .frame(try finishInMemory(header: headerBytes, from: pipe, moved: moved, size: size))
    }
    return .splicedRead(header: headerBytes, data: pipe)
  }

  /// Writes bytes already received into the (empty, large enough) pipe.
  private func fill(_ pipe: SplicedBytes, with bytes: [UInt8]) throws(TransportError) {
    var done = 0
    while done < bytes.count {
      let n = bytes[done...].withUnsafeBytes {
        Glibc.write(pipe.writeEnd, $0.baseAddress, $0.count)
      }
      if n > 0 {
        done += n
      } else if n < 0 && errno == EINTR {
        continue
      } else {
        throw .io(operation: "write to pipe", errno: n < 0 ? errno : EAGAIN)
      }
    }
  }

  /// The message as one frame: its header, what reached the pipe, and the rest from the
  /// socket.
  private func finishInMemory(header: [UInt8], from pipe: SplicedBytes, moved: Int, size: Int)
    throws(TransportError) -> [UInt8]
  {
    var failure: TransportError?
    let message = [UInt8](unsafeUninitializedCapacity: size) { storage, filled in
      let raw = UnsafeMutableRawBufferPointer(storage)
      raw.copyBytes(from: header)
      filled = header.count
      filled += pipe.drain(
        into: UnsafeMutableRawBufferPointer(rebasing: raw[filled..<filled + moved]))
      while filled < size {
        do throws(TransportError) {
          let n = try readOnce(into: UnsafeMutableRawBufferPointer(rebasing: raw[filled...]))
          if n == 0 {
            failure = .truncatedMessage(bufferedBytes: filled)
            return
          }
          filled += n
        } catch {
          failure = error
          return
        }
      }
    }
    if let failure { throw failure }
    return message
  }
}
