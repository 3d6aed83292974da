import Foundation
import NinePClient
import NinePProtocol

/// Hands over a live session, waiting for the link when it is down.
typealias SessionProvider =
  @Sendable (
    @escaping @Sendable (Result<Session, NinePError>) -> Void
  ) -> Void

extension NinePError {
  /// The link failed, not the request: the server may well answer later.
  var isLinkFailure: Bool {
    switch self {
    case .sessionClosed, .transport, .timedOut: true
    default: false
    }
  }
}

/// Directory listings by path, kept for a short time and fetched once for many callers.
///
/// Lookups are answered from the parent's listing rather than a walk and Tstat: the listing is
/// where 9BBS servers tell the truth about what is a file (walk and Tstat call `/chat/lobby` a
/// directory), one listing answers every lookup of an `ls -l`, and on a slow link that is
/// three round trips for a whole directory instead of three per file.
final class ListingCache: @unchecked Sendable {
  typealias Callback = @Sendable (Result<[Stat], NinePError>) -> Void

  private let lock = NSLock()
  private var entries: [[String]: (stats: [Stat], fetched: ContinuousClock.Instant)] = [:]
  private var fetching: [[String]: [Callback]] = [:]
  private let sessions: SessionProvider
  private let linkIsUp: @Sendable () -> Bool
  let lifetime: Duration

  init(
    lifetime: Duration, sessions: @escaping SessionProvider,
    linkIsUp: @escaping @Sendable () -> Bool = { true }
  ) {
    self.lifetime = lifetime
    self.sessions = sessions
    self.linkIsUp = linkIsUp
  }

  /// The listing of `path`, from the cache while fresh.
  func listing(_ path: [String], maxAge: Duration? = nil, _ callback: @escaping Callback) {
    lock.lock()
    if let cached = entries[path],
      cached.fetched.duration(to: .now) < (maxAge ?? lifetime) || !linkIsUp()
    {
      // Fresh, or the link is down and what the mount last saw is the best answer there is.
      lock.unlock()
      return callback(.success(cached.stats))
    }
    if fetching[path] != nil {
      fetching[path]?.append(callback)
      lock.unlock()
      return
    }
    fetching[path] = [callback]
    lock.unlock()
    fetch(path)
  }

  /// Forgets a listing (after a create, remove or rename in that directory).
  func invalidate(_ path: [String]) {
    lock.lock()
    entries[path] = nil
    lock.unlock()
  }

  private func fetch(_ path: [String]) {
    sessions { [self] placed in
      switch placed {
      case .failure(let error): finish(path, .failure(error))
      case .success(let session): fetch(path, on: session)
      }
    }
  }

  private func fetch(_ path: [String], on session: Session) {
    session.walk(path) { [self] walked in
      guard case .success(let result) = walked else {
        if case .failure(let error) = walked { finish(path, .failure(error)) }
        return
      }
      session.open(result.fid, mode: .read) { [self] opened in
        if case .failure(let error) = opened {
          session.clunk(result.fid)
          return finish(path, .failure(error))
        }
        session.readDirectory(result.fid) { [self] listed in
          session.clunk(result.fid)
          finish(path, listed.map { stats in stats.filter { Self.isAcceptable($0.name) } })
        }
      }
    }
  }

  /// Names a server must never hand us: they would escape or confuse the tree.
  static func isAcceptable(_ name: String) -> Bool {
    !name.isEmpty && name != "." && name != ".." && !name.contains("/") && !name.contains("\0")
  }

  private func finish(_ path: [String], _ result: Result<[Stat], NinePError>) {
    lock.lock()
    var result = result
    switch result {
    case .success(let stats):
      entries[path] = (stats, .now)
    case .failure(let error) where error.isLinkFailure:
      // While the link is down, what the mount last saw beats an error.
      if let stale = entries[path] { result = .success(stale.stats) }
    case .failure:
      break
    }
    let callbacks = fetching.removeValue(forKey: path) ?? []
    lock.unlock()
    for callback in callbacks { callback(result) }
  }
}
