import NinePProtocol
import NinePTransport

/// The data of an Rread: in memory, or still in a pipe when the transport spliced it there
/// (``SplicedBytes``), to be moved on without a copy through memory.
public enum ReadData: Sendable {
  case memory(ArraySlice<UInt8>)
  case pipe(SplicedBytes)

  /// How many bytes.
  public var count: Int {
    switch self {
    case .memory(let bytes): bytes.count
    case .pipe(let pipe): pipe.count
    }
  }

  /// The bytes in memory (a pipe's are read out, once).
  public func contents() -> ArraySlice<UInt8> {
    switch self {
    case .memory(let bytes): bytes
    case .pipe(let pipe): pipe.contents()[...]
    }
  }
}

extension Session {
  /// The most data one Tread may ask for on this session.
  public var maxReadCount: UInt32 { msize - UInt32(NineP.readOverhead) }
  /// The most data one Twrite may carry on this session.
  public var maxWriteCount: Int { Int(msize) - NineP.writeOverhead }

  /// Reads at most `count` bytes (clamped to what one message can carry). The data is a view
  /// into the reply as received, not a copy.
  ///
  /// `mayPark` marks a stream read that may wait at the server: it never times out and the
  /// device profile lets other requests go once it has parked.
  @discardableResult
  public func read(
    _ fid: Fid, offset: UInt64, count: UInt32, mayPark: Bool = false,
    completion: @escaping @Sendable (Result<ArraySlice<UInt8>, NinePError>) -> Void
  ) -> RequestHandle {
    sendTread(
      fid, offset: offset, count: count, options: RequestOptions(mayPark: mayPark),
      spliceSink: nil, completion: completion)
  }

  /// Reads at most `count` bytes like ``read(_:offset:count:mayPark:completion:)``; a large
  /// reply's data may stay in a pipe (``ReadData/pipe(_:)``) when `splicing` and the transport
  /// can splice.
  @discardableResult
  public func readData(
    _ fid: Fid, offset: UInt64, count: UInt32, splicing: Bool,
    completion: @escaping @Sendable (Result<ReadData, NinePError>) -> Void
  ) -> RequestHandle {
    let sink: (@Sendable (SplicedBytes) -> Void)? =
      splicing ? { @Sendable pipe in completion(.success(.pipe(pipe))) } : nil
    return sendTread(
      fid, offset: offset, count: count, options: RequestOptions(), spliceSink: sink
    ) { completion($0.map { .memory($0) }) }
  }

  /// One Tread of at most what a message carries; its Rread's data, unless it came spliced
  /// (then `spliceSink` has it).
  private func sendTread(
    _ fid: Fid, offset: UInt64, count: UInt32, options: RequestOptions,
    spliceSink: (@Sendable (SplicedBytes) -> Void)?,
    completion: @escaping @Sendable (Result<ArraySlice<UInt8>, NinePError>) -> Void
  ) -> RequestHandle {
    send(
      .tread(fid: fid, offset: offset, count: min(count, maxReadCount)), options: options,
      spliceSink: spliceSink
    ) { result in
      completion(
        result.flatMap {
          guard case .rread(let data) = $0 else {
            return .failure(.protocolViolation("Tread answered with \($0.type)"))
          }
          return .success(data)
        })
    }
  }

  /// Sends one Twrite; `data` must fit one message (``maxWriteCount``).
  public func write(
    _ fid: Fid, offset: UInt64, data: [UInt8],
    completion: @escaping @Sendable (Result<UInt32, NinePError>) -> Void
  ) {
    write(fid, offset: offset, data: data[...], completion: completion)
  }

  /// Sends one Twrite of a slice, which goes out from where it lies (no copy into a frame);
  /// `data` must fit one message (``maxWriteCount``).
  public func write(
    _ fid: Fid, offset: UInt64, data: ArraySlice<UInt8>,
    completion: @escaping @Sendable (Result<UInt32, NinePError>) -> Void
  ) {
    precondition(data.count <= maxWriteCount, "write larger than one message")
    send(.twrite(fid: fid, offset: offset, data: data)) { result in
      completion(
        result.flatMap {
          guard case .rwrite(let count) = $0 else {
            return .failure(.protocolViolation("Twrite answered with \($0.type)"))
          }
          return .success(count)
        })
    }
  }

  /// Writes all of `data` from `offset`, in as many Twrites as the msize (and `iounit`, when
  /// not 0) require, one after the other. Stops at the first error or short write.
  public func writeAll(
    _ fid: Fid, offset: UInt64, data: ArraySlice<UInt8>, iounit: UInt32 = 0,
    completion: @escaping @Sendable (Result<Int, NinePError>) -> Void
  ) {
    var chunk = maxWriteCount
    if iounit > 0 { chunk = min(chunk, Int(iounit)) }
    writeChunks(fid, offset: offset, data: data, chunk: max(chunk, 1), done: 0, completion)
  }

  private func writeChunks(
    _ fid: Fid, offset: UInt64, data: ArraySlice<UInt8>, chunk: Int, done: Int,
    _ completion: @escaping @Sendable (Result<Int, NinePError>) -> Void
  ) {
    if data.isEmpty { return completion(.success(done)) }
    let piece = data.prefix(chunk)
    write(fid, offset: offset, data: piece) { [self] result in
      switch result {
      case .success(let count):
        let written = Int(count)
        if written < piece.count || written == 0 {
          completion(.success(done + written))
        } else {
          writeChunks(
            fid, offset: offset + UInt64(written), data: data.dropFirst(written), chunk: chunk,
            done: done + written, completion)
        }
      case .failure(let error):
        completion(done > 0 ? .success(done) : .failure(error))
      }
    }
  }

  /// Reads from `offset` until a 0-byte Rread (or `limit` bytes): for regular files whose
  /// server-side length cannot be trusted.
  public func readAll(
    _ fid: Fid, from offset: UInt64 = 0, limit: Int = 64 << 20, iounit: UInt32 = 0,
    completion: @escaping @Sendable (Result<[UInt8], NinePError>) -> Void
  ) {
    var count = maxReadCount
    if iounit > 0 { count = min(count, iounit) }
    readChunks(fid, offset: offset, count: count, limit: limit, into: [], completion)
  }

  private func readChunks(
    _ fid: Fid, offset: UInt64, count: UInt32, limit: Int, into buffer: [UInt8],
    _ completion: @escaping @Sendable (Result<[UInt8], NinePError>) -> Void
  ) {
    read(fid, offset: offset, count: count) { [self] result in
      switch result {
      case .success(let data) where data.isEmpty || buffer.count + data.count >= limit:
        completion(.success(Array((buffer + data).prefix(limit))))
      case .success(let data):
        readChunks(
          fid, offset: offset + UInt64(data.count), count: count, limit: limit,
          into: buffer + data, completion)
      case .failure(let error):
        completion(.failure(error))
      }
    }
  }
}
