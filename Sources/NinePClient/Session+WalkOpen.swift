// Walking to a path and opening (or creating) there, as one sequence: the fid a walk made is
// clunked when the open fails, and an open the server refuses for now (EAGAIN, a files area at
// its cap of open files) is tried again for about 1.5 s. The mount's room feeds, listings, post
// channel and reopened files all use it.

import Foundation
import NinePProtocol

#if canImport(Glibc)
  import Glibc
#endif

extension NinePError {
  /// The link failed, not the request: the server may well answer later.
  public var isLinkFailure: Bool {
    switch self {
    case .sessionClosed, .transport, .timedOut: true
    default: false
    }
  }
}

/// A fid walked to a path and opened (or created there).
public struct OpenedFid: Sendable {
  public let fid: Fid
  public let opened: OpenResult
}

extension Session {
  /// Walks to `path` and opens the new fid with `mode`. If the open fails the fid is clunked
  /// and the open's error returned; the walk's error is returned as it is.
  public func walkOpen(
    _ path: [String], mode: OpenMode,
    completion: @escaping @Sendable (Result<OpenedFid, NinePError>) -> Void
  ) {
    walk(
      path, keeping: { [self] fid, done in open(fid, mode: mode, completion: done) },
      completion: completion)
  }

  /// Walks to `directory` and creates `name` there, open with `mode`. If the create fails the
  /// fid is clunked and the create's error returned.
  public func walkCreate(
    _ directory: [String], name: String, perm: FileMode, mode: OpenMode,
    completion: @escaping @Sendable (Result<OpenedFid, NinePError>) -> Void
  ) {
    walk(
      directory,
      keeping: { [self] fid, done in
        create(fid, name: name, perm: perm, mode: mode, completion: done)
      }, completion: completion)
  }

  /// Walks to `path` and opens the new fid by `step` (an open or a create), keeping it open
  /// on success; a failed step clunks it.
  private func walk(
    _ path: [String],
    keeping step:
      @escaping @Sendable (
        Fid, @escaping @Sendable (Result<OpenResult, NinePError>) -> Void
      ) -> Void,
    completion: @escaping @Sendable (Result<OpenedFid, NinePError>) -> Void
  ) {
    walk(path) { [self] walked in
      switch walked {
      case .failure(let error):
        completion(.failure(error))
      case .success(let result):
        Self.stepping(result.fid, step, waitingFor: Self.transientWaits[...]) { [self] opened in
          switch opened {
          case .failure(let error):
            clunk(result.fid)
            completion(.failure(error))
          case .success(let info):
            completion(.success(OpenedFid(fid: result.fid, opened: info)))
          }
        }
      }
    }
  }

  /// How long an open the server refused for now waits before each new try (about 1.5 s in
  /// all): a files area at its cap of open files is usually waiting for closes of ours that
  /// are still on their way (the kernel releases a closed file after `close` returns), and
  /// open(2) with EAGAIN is an answer programs do not expect of a file.
  static let transientWaits: [Duration] = [10, 20, 40, 80, 160, 320, 500, 500].map {
    .milliseconds($0)
  }

  /// Runs `step` on `fid`, again after each of `waits` while the server answers "resource
  /// temporarily unavailable" (EAGAIN); the last answer is the result.
  private static func stepping(
    _ fid: Fid,
    _ step:
      @escaping @Sendable (
        Fid, @escaping @Sendable (Result<OpenResult, NinePError>) -> Void
      ) -> Void,
    waitingFor waits: ArraySlice<Duration>,
    completion: @escaping @Sendable (Result<OpenResult, NinePError>) -> Void
  ) {
    step(fid) { result in
      guard case .failure(let error) = result, case .server = error, error.errno == EAGAIN,
        let wait = waits.first
      else { return completion(result) }
      DispatchQueue.global().asyncAfter(deadline: .now() + wait.timeInterval) {
        stepping(fid, step, waitingFor: waits.dropFirst(), completion: completion)
      }
    }
  }

  /// Walks to `path`, lets `body` use the fid and clunks it when `body` is done.
  public func withWalk<T: Sendable>(
    _ path: [String],
    _ body: @escaping @Sendable (Fid, @escaping @Sendable (Result<T, NinePError>) -> Void) -> Void,
    completion: @escaping @Sendable (Result<T, NinePError>) -> Void
  ) {
    walk(path) { [self] walked in
      switch walked {
      case .failure(let error):
        completion(.failure(error))
      case .success(let result):
        body(result.fid) { [self] outcome in
          clunk(result.fid)
          completion(outcome)
        }
      }
    }
  }
}
