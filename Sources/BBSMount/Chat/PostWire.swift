import Foundation
import NinePClient
import NinePProtocol
import Synchronization

/// How a ``PostChannel``'s posts go on the wire: one Twrite each on the `post` fid of their
/// chat directory, opened once on the session the provider gives and kept while that session
/// lives; a fid the server forgot (EBADF) is opened again once.
final class PostWire: Sendable {
  private let sessions: SessionProvider
  /// With an outbox the writer is answered anyway: a Twrite then waits for the server's word
  /// (a frozen server's late Rwrite means delivered) until the keepalive declares the link
  /// dead, instead of timing out.
  private let waitsForLateAnswers: Bool
  /// The `post` fids of the current session, by chat directory.
  private let fids = Mutex<[ObjectIdentifier: [[String]: Fid]]>([:])

  init(sessions: @escaping SessionProvider, waitsForLateAnswers: Bool) {
    self.sessions = sessions
    self.waitsForLateAnswers = waitsForLateAnswers
  }

  /// Posts one payload on the primary session's `post` fid.
  func post(
    _ payload: [UInt8], directory: [String], retried: Bool = false,
    _ completion: @escaping @Sendable (Result<Void, NinePError>) -> Void
  ) {
    sessions { [self] placed in
      let session: Session
      switch placed {
      case .failure(let error): return completion(.failure(error))
      case .success(let placed): session = placed
      }
      withFid(session, directory) { [self] opened in
        switch opened {
        case .failure(let error):
          completion(.failure(error))
        case .success(let fid):
          let chunk = Array(payload.prefix(session.maxWriteCount))
          let options = RequestOptions(timeout: waitsForLateAnswers ? .some(nil) : .none)
          session.send(.twrite(fid: fid, offset: 0, data: chunk[...]), options: options) {
            [self] written in
            switch written {
            case .success(.rwrite):
              completion(.success(()))
            case .success(let other):
              completion(.failure(.protocolViolation("Twrite answered with \(other.type)")))
            case .failure(let error) where error.isLinkFailure:
              completion(.failure(error))
            case .failure(.server(let ename, let code)) where retried || code != EBADF:
              completion(.failure(.server(ename: ename, errno: code)))
            case .failure(let error):
              // A stale fid (the server forgot it): open a new one once.
              forget(session, directory)
              if retried { return completion(.failure(error)) }
              post(payload, directory: directory, retried: true, completion)
            }
          }
        }
      }
    }
  }

  private func forget(_ session: Session, _ directory: [String]) {
    fids.withLock { _ = $0[ObjectIdentifier(session)]?.removeValue(forKey: directory) }
  }

  private func withFid(
    _ session: Session, _ directory: [String],
    _ completion: @escaping @Sendable (Result<Fid, NinePError>) -> Void
  ) {
    let key = ObjectIdentifier(session)
    // Fids of sessions that are gone are gone with them.
    let live = session.closedReason == nil
    if live, let fid = fids.withLock({ $0[key]?[directory] }) {
      return completion(.success(fid))
    }
    session.walkOpen(directory + ["post"], mode: .write) { [self] opened in
      switch opened {
      case .failure(let error):
        completion(.failure(error))
      case .success(let post):
        fids.withLock { fids in
          // Keep only the current session's fids.
          fids = fids.filter { $0.key == key }
          fids[key, default: [:]][directory] = post.fid
        }
        completion(.success(post.fid))
      }
    }
  }
}
