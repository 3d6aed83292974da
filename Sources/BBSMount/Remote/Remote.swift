// Remote: the mount's 9P requests that walk, open, create, remove and rename.
//
// Nothing here knows FUSE. Every operation takes a session from a ``SessionProvider`` (the
// pool's primary session in the mount), sends its requests through NinePClient's callback API
// and completes on the session's reader thread with a `Result`; the caller (BBSFileSystem, a
// handle, the Board's sender) turns that into a FUSE reply. NinePClient's `Session.walkOpen` is
// the one walk-open-clunk-on-failure sequence: room feeds, listings, the post channel and
// ``RemoteFile`` reopening after a reconnect all use it. ``RemoteFile`` is a server file open on
// a fid, reopened on the new session after the link comes back.

import Foundation
import NinePClient
import NinePProtocol

/// Hands over a live session, waiting for the link when it is down.
typealias SessionProvider =
  @Sendable (
    @escaping @Sendable (Result<Session, NinePError>) -> Void
  ) -> Void

extension Result where Failure == NinePError {
  /// 0 on success, else the error's errno: what a FUSE reply wants.
  var errnoValue: Int32 {
    switch self {
    case .success: 0
    case .failure(let error): error.errno
    }
  }
}

/// The mount's walks, opens, creates, removes and renames, each on a session from `sessions`.
final class Remote: Sendable {
  let sessions: SessionProvider
  /// Which file versions the page cache holds (``RemoteFileHandle`` opens keep them when current).
  let pageCache = PageCacheLedger()
  /// Small files read whole, for opens while the link is stalled or down.
  let seenFiles = SeenFiles()

  init(sessions: @escaping SessionProvider) {
    self.sessions = sessions
  }

  /// Runs `body` on a live session, or completes with the reason there is none.
  private func onSession<T: Sendable>(
    _ completion: @escaping @Sendable (Result<T, NinePError>) -> Void,
    _ body: @escaping @Sendable (Session) -> Void
  ) {
    sessions { placed in
      switch placed {
      case .failure(let error): completion(.failure(error))
      case .success(let session): body(session)
      }
    }
  }

  /// The directory entry of `path` by a walk and Tstat (for an unlistable parent). The walk's
  /// verdict on directory-ness is kept: device stats lack DMDIR.
  func stat(_ path: [String], _ completion: @escaping @Sendable (Result<Stat, NinePError>) -> Void)
  {
    onSession(completion) { session in
      session.walk(path) { walked in
        switch walked {
        case .failure(let error):
          completion(.failure(error))
        case .success(let result):
          session.stat(result.fid) { stat in
            session.clunk(result.fid)
            completion(
              stat.map {
                var stat = $0; stat.qid.type = result.qid.type; return stat
              })
          }
        }
      }
    }
  }

  /// Changes the entry of `path` (fields of ``Stat/unchanged`` stay): truncate, chmod, rename.
  func wstat(
    _ path: [String], _ change: Stat,
    _ completion: @escaping @Sendable (Result<Void, NinePError>) -> Void
  ) {
    onSession(completion) { session in
      session.withWalk(
        path, { fid, done in session.wstat(fid, change, completion: done) },
        completion: completion)
    }
  }

  /// Renames `directory/name` to `directory/newName` (9P renames only within a directory).
  func rename(
    in directory: [String], _ name: String, to newName: String,
    _ completion: @escaping @Sendable (Result<Void, NinePError>) -> Void
  ) {
    var change = Stat.unchanged
    change.name = newName
    wstat(directory + [name], change, completion)
  }

  /// Removes `path` (Tremove forgets the fid, whatever the answer).
  func remove(
    _ path: [String], _ completion: @escaping @Sendable (Result<Void, NinePError>) -> Void
  ) {
    onSession(completion) { session in
      session.walk(path) { walked in
        switch walked {
        case .failure(let error): completion(.failure(error))
        case .success(let result): session.remove(result.fid, completion: completion)
        }
      }
    }
  }

  /// Makes the directory `directory/name`.
  func makeDirectory(
    in directory: [String], name: String, permissions: UInt32,
    _ completion: @escaping @Sendable (Result<Stat, NinePError>) -> Void
  ) {
    let perm = FileMode(permissions: permissions & 0o777, .directory)
    onSession(completion) { session in
      session.walkCreate(directory, name: name, perm: perm, mode: .read) { created in
        if case .success(let made) = created { session.clunk(made.fid) }
        completion(created.map { Self.madeNow(qid: $0.opened.qid, mode: perm, name: name) })
      }
    }
  }

  /// Creates the file `directory/name` and keeps it open with `mode`.
  func create(
    in directory: [String], name: String, permissions: UInt32, mode: OpenMode,
    _ completion: @escaping @Sendable (Result<(file: RemoteFile, stat: Stat), NinePError>) -> Void
  ) {
    let perm = FileMode(permissions: permissions & 0o777)
    onSession(completion) { [self] session in
      session.walkCreate(directory, name: name, perm: perm, mode: mode) { [self] created in
        completion(
          created.map { made in
            let file = RemoteFile(
              path: directory + [name], mode: mode, session: session, fid: made.fid,
              iounit: made.opened.iounit,
              appendOnly: made.opened.qid.type.contains(.appendOnly), sessions: sessions)
            return (file, Self.madeNow(qid: made.opened.qid, mode: perm, name: name))
          })
      }
    }
  }

  /// The entry of a file or directory just made: Rcreate tells only its qid, so it is empty
  /// and dated now (the server's own time takes over with the next listing).
  private static func madeNow(qid: Qid, mode: FileMode, name: String) -> Stat {
    let now = UInt32(clamping: Int(Date().timeIntervalSince1970))
    return Stat(qid: qid, mode: mode, atime: now, mtime: now, name: name)
  }

  /// Opens `path` with `mode` on a fid of its own.
  func open(
    _ path: [String], mode: OpenMode,
    _ completion: @escaping @Sendable (Result<RemoteFile, NinePError>) -> Void
  ) {
    onSession(completion) { [self] session in
      session.walkOpen(path, mode: mode) { [self] opened in
        completion(
          opened.map {
            RemoteFile(
              path: path, mode: mode, session: session, fid: $0.fid, iounit: $0.opened.iounit,
              appendOnly: $0.opened.qid.type.contains(.appendOnly), sessions: sessions)
          })
      }
    }
  }

  /// Reads `path` once, with one Tread at offset 0 (a file that ignores the offset, like
  /// `/chat/users`, would never end otherwise).
  func readOnce(
    _ path: [String], _ completion: @escaping @Sendable (Result<[UInt8], NinePError>) -> Void
  ) {
    onSession(completion) { session in
      session.walkOpen(path, mode: .read) { opened in
        switch opened {
        case .failure(let error):
          completion(.failure(error))
        case .success(let file):
          session.read(file.fid, offset: 0, count: session.maxReadCount) { result in
            session.clunk(file.fid)
            completion(result.map { Array($0) })
          }
        }
      }
    }
  }

  /// Creates `directory/name` and writes `body` in one Twrite (cut to what one message holds),
  /// as a board takes a message. Completes with the bytes sent.
  func createWritingOnce(
    in directory: [String], name: String, body: [UInt8],
    _ completion: @escaping @Sendable (Result<Int, NinePError>) -> Void
  ) {
    onSession(completion) { session in
      session.walkCreate(
        directory, name: name, perm: FileMode(permissions: 0o644), mode: .write
      ) { created in
        switch created {
        case .failure(let error):
          completion(.failure(error))
        case .success(let file):
          let data = Array(body.prefix(session.maxWriteCount))
          session.write(file.fid, offset: 0, data: data) { written in
            session.clunk(file.fid)
            completion(written.map { _ in data.count })
          }
        }
      }
    }
  }
}
