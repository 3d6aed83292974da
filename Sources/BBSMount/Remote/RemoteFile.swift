import Foundation
import NinePClient
import NinePProtocol
import NinePTransport
import Synchronization

/// A server file open on a fid. The fid belongs to one session: after a reconnect the file
/// walks its path and opens it again on the new session before its next request.
final class RemoteFile: Sendable {
  let path: [String]
  /// The open mode for reopening (never with OTRUNC: that happened the first time).
  let mode: OpenMode
  private let sessions: SessionProvider
  /// Where the file is open now.
  private struct Placement {
    var session: Session
    var fid: Fid
    var iounit: UInt32
  }

  private let placement: Mutex<Placement>
  /// The server file is append-only (QTAPPEND): its Twrites must go in order.
  let appendOnly: Bool

  init(
    path: [String], mode: OpenMode, session: Session, fid: Fid, iounit: UInt32,
    appendOnly: Bool = false, sessions: @escaping SessionProvider
  ) {
    self.appendOnly = appendOnly
    self.path = path
    self.mode = OpenMode(rawValue: mode.rawValue & ~OpenMode.truncateFlag)
    placement = Mutex(Placement(session: session, fid: fid, iounit: iounit))
    self.sessions = sessions
  }

  /// The session and fid as they are now (maybe dead).
  var current: (session: Session, fid: Fid, iounit: UInt32) {
    placement.withLock { ($0.session, $0.fid, $0.iounit) }
  }

  /// A live session and fid: the current ones, or new ones after a reconnect.
  func live(
    _ completion: @escaping @Sendable (Result<(session: Session, fid: Fid), NinePError>) -> Void
  ) {
    let now = current
    if now.session.closedReason == nil { return completion(.success((now.session, now.fid))) }
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
            self.placement.withLock {
              $0 = Placement(session: session, fid: file.fid, iounit: file.opened.iounit)
            }
            completion(.success((session, file.fid)))
          }
        }
      }
    }
  }

  /// Reads up to `size` bytes at `offset` on a live fid, in as many Treads as that takes (the
  /// kernel asks for up to a megabyte), pipelined within the session's window. A read is
  /// idempotent, so one that died with the link is tried again once on the reconnected
  /// session. `group` holds the Treads on the wire, for ``cancel(_:)``. The data comes in
  /// the replies' pieces, in order; a large piece may wait in the pipe it was spliced into
  /// (see NinePTransport's Splice.swift), for the kernel to take without a copy through here.
  func read(
    size: Int, offset: UInt64, group: RequestGroup,
    _ completion: @escaping @Sendable (Result<[ReadData], NinePError>) -> Void
  ) {
    read(size: size, offset: offset, group: group, retried: false, completion)
  }

  private func read(
    size: Int, offset: UInt64, group: RequestGroup, retried: Bool,
    _ completion: @escaping @Sendable (Result<[ReadData], NinePError>) -> Void
  ) {
    live { [self] live in
      guard case .success(let (session, fid)) = live else {
        if case .failure(let error) = live { completion(.failure(error)) }
        return
      }
      session.readPipelined(
        fid, offset: offset, count: size, chunk: chunkLimit(session.maxReadCount),
        splicing: SplicedBytes.isAvailable, group: group
      ) { [self] result in
        if case .failure(let error) = result, error.isLinkFailure, !retried, !group.isCancelled {
          return read(size: size, offset: offset, group: group, retried: true, completion)
        }
        completion(result)
      }
    }
  }

  /// The largest chunk one message may carry: `limit`, or the iounit when smaller.
  private func chunkLimit(_ limit: UInt32) -> UInt32 {
    let iounit = current.iounit
    return iounit > 0 ? min(limit, iounit) : limit
  }

  /// Cancels the reads `group` holds (an interrupt: Tflush).
  func cancel(_ group: RequestGroup) {
    group.cancelAll(on: current.session)
  }

  /// Whether reads of this file may go ahead of the reader (``ReadAhead``): on a multiplexing
  /// server, where they queue behind nothing; a board's channel serves one request at a time.
  var readsAhead: Bool {
    current.session.configuration.profile == .multiplex
  }

  /// How many bytes of writes may be on their way before a `write(2)` waits for the server
  /// (``WriteBehind``): none on a device link (a board takes one request at a time, and a
  /// `close` would wait for megabytes at radio speed) or for an append-only file.
  var writeBehindLimit: Int {
    appendOnly || current.session.configuration.profile == .device ? 0 : 8 << 20
  }

  /// Writes `data` at `offset`, pipelined within the session's window unless the file is
  /// append-only (there the order of the Twrites is the order of the bytes). Writes are not
  /// idempotent: one lost with the link fails; the next one reopens.
  func write(
    _ data: [UInt8], at offset: UInt64,
    _ completion: @escaping @Sendable (Result<Int, NinePError>) -> Void
  ) {
    live { [self] live in
      guard case .success(let (session, fid)) = live else {
        if case .failure(let error) = live { completion(.failure(error)) }
        return
      }
      let chunk = Int(chunkLimit(UInt32(clamping: session.maxWriteCount)))
      if appendOnly {
        session.writeAll(
          fid, offset: offset, data: data[...], iounit: UInt32(chunk), completion: completion)
      } else {
        session.writePipelined(
          fid, offset: offset, data: data[...], chunk: chunk, completion: completion)
      }
    }
  }

  /// The file's entry now (a Tstat of its fid): what an open checks its cached view against.
  func stat(_ completion: @escaping @Sendable (Result<Stat, NinePError>) -> Void) {
    live { placed in
      switch placed {
      case .failure(let error): completion(.failure(error))
      case .success(let (session, fid)): session.stat(fid, completion: completion)
      }
    }
  }

  func close() {
    let now = current
    if now.session.closedReason == nil { now.session.clunk(now.fid) }
  }
}
