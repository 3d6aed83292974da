import Foundation
import NinePClient
import NinePProtocol

/// A server file open on a fid. The fid belongs to one session: after a reconnect the file
/// walks its path and opens it again on the new session before its next request.
final class RemoteFile: @unchecked Sendable {
  let path: [String]
  /// The open mode for reopening (never with OTRUNC: that happened the first time).
  let mode: OpenMode
  private let sessions: SessionProvider
  private let lock = NSLock()
  private var session: Session
  private var fid: Fid
  private(set) var iounit: UInt32

  init(
    path: [String], mode: OpenMode, session: Session, fid: Fid, iounit: UInt32,
    sessions: @escaping SessionProvider
  ) {
    self.path = path
    self.mode = OpenMode(rawValue: mode.rawValue & ~OpenMode.truncateFlag)
    self.session = session
    self.fid = fid
    self.iounit = iounit
    self.sessions = sessions
  }

  /// The session and fid as they are now (maybe dead).
  var current: (session: Session, fid: Fid) {
    lock.lock()
    defer { lock.unlock() }
    return (session, fid)
  }

  /// A live session and fid: the current ones, or new ones after a reconnect.
  func live(
    _ completion: @escaping @Sendable (Result<(session: Session, fid: Fid), NinePError>) -> Void
  ) {
    let now = current
    if now.session.closedReason == nil { return completion(.success(now)) }
    sessions { [self] placed in
      switch placed {
      case .failure(let error):
        completion(.failure(error))
      case .success(let session):
        session.walkOpen(path, mode: mode) { [self] opened in
          switch opened {
          case .failure(let error):
            completion(.failure(error))
          case .success(let file):
            lock.lock()
            self.session = session
            fid = file.fid
            iounit = file.opened.iounit
            lock.unlock()
            completion(.success((session, file.fid)))
          }
        }
      }
    }
  }

  /// Reads up to `size` bytes at `offset` on a live fid, in as many Treads as that takes (the
  /// kernel asks for more than one message). A read is idempotent, so one that died with the
  /// link is tried again once on the reconnected session. `box` holds the Tread on the wire,
  /// for ``cancel(_:)``.
  func read(
    size: Int, offset: UInt64, box: HandleBox,
    _ completion: @escaping @Sendable (Result<[UInt8], NinePError>) -> Void
  ) {
    read(size: size, offset: offset, box: box, retried: false, completion)
  }

  private func read(
    size: Int, offset: UInt64, box: HandleBox, retried: Bool,
    _ completion: @escaping @Sendable (Result<[UInt8], NinePError>) -> Void
  ) {
    live { [self] live in
      guard case .success(let (session, fid)) = live else {
        if case .failure(let error) = live { completion(.failure(error)) }
        return
      }
      var count = min(UInt32(clamping: size), session.maxReadCount)
      if iounit > 0 { count = min(count, iounit) }
      readChunks(
        session, fid, offset: offset, wanted: size, chunk: count, into: [], box: box
      ) { [self] result in
        if case .failure(let error) = result, error.isLinkFailure, !retried {
          return read(size: size, offset: offset, box: box, retried: true, completion)
        }
        completion(result)
      }
    }
  }

  /// Reads until `wanted` bytes or a short read.
  private func readChunks(
    _ session: Session, _ fid: Fid, offset: UInt64, wanted: Int, chunk: UInt32,
    into buffer: [UInt8], box: HandleBox,
    _ completion: @escaping @Sendable (Result<[UInt8], NinePError>) -> Void
  ) {
    let count = min(chunk, UInt32(clamping: wanted - buffer.count))
    box.handle = session.read(fid, offset: offset, count: count) { [self] result in
      switch result {
      case .success(let data):
        let total = buffer + data
        if data.count < Int(count) || total.count >= wanted {
          completion(.success(total))
        } else {
          readChunks(
            session, fid, offset: offset + UInt64(data.count), wanted: wanted, chunk: chunk,
            into: total, box: box, completion)
        }
      case .failure(let error):
        completion(buffer.isEmpty ? .failure(error) : .success(buffer))
      }
    }
  }

  /// Cancels the read `box` holds (an interrupt: Tflush).
  func cancel(_ box: HandleBox) {
    if let handle = box.handle { current.session.cancel(handle) }
  }

  /// Writes `data` at `offset`. Writes are not idempotent: one lost with the link fails; the
  /// next one reopens.
  func write(
    _ data: [UInt8], at offset: UInt64,
    _ completion: @escaping @Sendable (Result<Int, NinePError>) -> Void
  ) {
    live { [self] live in
      guard case .success(let (session, fid)) = live else {
        if case .failure(let error) = live { completion(.failure(error)) }
        return
      }
      session.writeAll(fid, offset: offset, data: data, iounit: iounit, completion: completion)
    }
  }

  func close() {
    let now = current
    if now.session.closedReason == nil { now.session.clunk(now.fid) }
  }
}

/// Holds the request handle of the read on the wire, for an interrupt's Tflush.
final class HandleBox: @unchecked Sendable {
  private let lock = NSLock()
  private var value: RequestHandle?
  var handle: RequestHandle? {
    get { lock.withLock { value } }
    set { lock.withLock { value = newValue } }
  }
}
