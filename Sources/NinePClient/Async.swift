import Foundation
import NinePProtocol
import NinePTransport

// async/await wrappers over the callback core, for the command-line tools and tests. FUSE
// threads use the callback forms directly.

extension Session {
  /// Bridges one callback-style operation to async/await.
  static func awaiting<T: Sendable>(
    _ body: (@escaping @Sendable (Result<T, NinePError>) -> Void) -> Void
  ) async throws(NinePError) -> T {
    let result: Result<T, NinePError> = await withCheckedContinuation { continuation in
      body { continuation.resume(returning: $0) }
    }
    return try result.get()
  }

  /// Dials `address`, negotiates and attaches, off the caller's thread.
  public static func connect(
    to address: TransportAddress, configuration: SessionConfiguration,
    dialOptions: DialOptions = DialOptions()
  ) async throws(NinePError) -> Session {
    try await awaiting { completion in
      Thread.detachNewThread {
        do {
          let transport = try dial(address, options: dialOptions)
          completion(
            .success(try Session.connect(transport: transport, configuration: configuration)))
        } catch let error as NinePError {
          completion(.failure(error))
        } catch let error as TransportError {
          completion(.failure(.transport(error)))
        } catch {
          completion(.failure(.sessionClosed(reason: "\(error)")))
        }
      }
    }
  }

  public func walk(_ path: String) async throws(NinePError) -> WalkResult {
    try await Self.awaiting { walk(Self.components(path), completion: $0) }
  }

  public func open(_ fid: Fid, mode: OpenMode) async throws(NinePError) -> OpenResult {
    try await Self.awaiting { open(fid, mode: mode, completion: $0) }
  }

  public func create(_ fid: Fid, name: String, perm: FileMode, mode: OpenMode)
    async throws(NinePError) -> OpenResult
  {
    try await Self.awaiting { create(fid, name: name, perm: perm, mode: mode, completion: $0) }
  }

  public func read(_ fid: Fid, offset: UInt64, count: UInt32, mayPark: Bool = false)
    async throws(NinePError) -> [UInt8]
  {
    try await Self.awaiting {
      read(fid, offset: offset, count: count, mayPark: mayPark, completion: $0)
    }
  }

  public func write(_ fid: Fid, offset: UInt64, data: [UInt8]) async throws(NinePError) -> UInt32 {
    try await Self.awaiting { write(fid, offset: offset, data: data, completion: $0) }
  }

  public func writeAll(_ fid: Fid, offset: UInt64, data: [UInt8], iounit: UInt32 = 0)
    async throws(NinePError) -> Int
  {
    try await Self.awaiting {
      writeAll(fid, offset: offset, data: data, iounit: iounit, completion: $0)
    }
  }

  public func readAll(_ fid: Fid, iounit: UInt32 = 0) async throws(NinePError) -> [UInt8] {
    try await Self.awaiting { readAll(fid, iounit: iounit, completion: $0) }
  }

  public func clunk(_ fid: Fid) async throws(NinePError) {
    try await Self.awaiting { clunk(fid, completion: $0) }
  }

  public func remove(_ fid: Fid) async throws(NinePError) {
    try await Self.awaiting { remove(fid, completion: $0) }
  }

  public func stat(_ fid: Fid) async throws(NinePError) -> Stat {
    try await Self.awaiting { stat(fid, completion: $0) }
  }

  public func wstat(_ fid: Fid, _ stat: Stat) async throws(NinePError) {
    try await Self.awaiting { wstat(fid, stat, completion: $0) }
  }

  public func readDirectory(_ fid: Fid) async throws(NinePError) -> [Stat] {
    try await Self.awaiting { readDirectory(fid, completion: $0) }
  }

  // MARK: Whole-path conveniences

  /// Runs `body` with a fid walked to `path`, clunking it afterwards whatever happens.
  public func withFid<T: Sendable>(
    _ path: String, _ body: (Fid) async throws(NinePError) -> T
  ) async throws(NinePError) -> T {
    let walked = try await walk(path)
    do {
      let value = try await body(walked.fid)
      try? await clunk(walked.fid)
      return value
    } catch {
      try? await clunk(walked.fid)
      throw error
    }
  }

  public func stat(path: String) async throws(NinePError) -> Stat {
    try await withFid(path) { fid throws(NinePError) in try await stat(fid) }
  }

  /// Reads a whole file (until a 0-byte Rread).
  public func readFile(_ path: String) async throws(NinePError) -> [UInt8] {
    try await withFid(path) { fid throws(NinePError) in
      let opened = try await open(fid, mode: .read)
      return try await readAll(fid, iounit: opened.iounit)
    }
  }

  /// Lists a directory.
  public func listDirectory(_ path: String) async throws(NinePError) -> [Stat] {
    try await withFid(path) { fid throws(NinePError) in
      _ = try await open(fid, mode: .read)
      return try await readDirectory(fid)
    }
  }

  /// Writes `data` to an existing file, truncating it first when asked.
  @discardableResult
  public func writeFile(_ path: String, data: [UInt8], truncate: Bool = false)
    async throws(NinePError) -> Int
  {
    try await withFid(path) { fid throws(NinePError) in
      let opened = try await open(fid, mode: truncate ? OpenMode.write.truncating : .write)
      return try await writeAll(fid, offset: 0, data: data, iounit: opened.iounit)
    }
  }
}
