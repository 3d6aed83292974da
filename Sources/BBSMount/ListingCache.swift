import Foundation
import NinePClient
import NinePProtocol

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
  private let session: @Sendable () -> Session?
  let lifetime: Duration

  init(lifetime: Duration, session: @escaping @Sendable () -> Session?) {
    self.lifetime = lifetime
    self.session = session
  }

  /// The listing of `path`, from the cache while fresh.
  func listing(_ path: [String], maxAge: Duration? = nil, _ callback: @escaping Callback) {
    lock.lock()
    if let cached = entries[path], cached.fetched.duration(to: .now) < (maxAge ?? lifetime) {
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
    guard let session = session() else {
      return finish(path, .failure(.sessionClosed(reason: "not connected")))
    }
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
    if case .success(let stats) = result { entries[path] = (stats, .now) }
    let callbacks = fetching.removeValue(forKey: path) ?? []
    lock.unlock()
    for callback in callbacks { callback(result) }
  }
}
