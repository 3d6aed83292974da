import Dispatch
import Foundation
import NinePProtocol

/// What Topen or Tcreate returned.
public struct OpenResult: Sendable {
  public var qid: Qid
  /// The largest read or write the server promises to do in one message; 0 means "use msize".
  public var iounit: UInt32
}

extension Session {
  /// Opens an unopened fid.
  public func open(
    _ fid: Fid, mode: OpenMode,
    completion: @escaping @Sendable (Result<OpenResult, NinePError>) -> Void
  ) {
    send(.topen(fid: fid, mode: mode)) { result in
      completion(
        result.flatMap {
          guard case .ropen(let qid, let iounit) = $0 else {
            return .failure(.protocolViolation("Topen answered with \($0.type)"))
          }
          return .success(OpenResult(qid: qid, iounit: iounit))
        })
    }
  }

  /// Creates `name` in the directory `fid` refers to; the fid then refers to the new file,
  /// open with `mode`.
  public func create(
    _ fid: Fid, name: String, perm: FileMode, mode: OpenMode,
    completion: @escaping @Sendable (Result<OpenResult, NinePError>) -> Void
  ) {
    send(.tcreate(fid: fid, name: name, perm: perm, mode: mode)) { result in
      completion(
        result.flatMap {
          guard case .rcreate(let qid, let iounit) = $0 else {
            return .failure(.protocolViolation("Tcreate answered with \($0.type)"))
          }
          return .success(OpenResult(qid: qid, iounit: iounit))
        })
    }
  }

  /// Forgets a fid at the server. The fid is released locally whatever the answer.
  public func clunk(
    _ fid: Fid, completion: @escaping @Sendable (Result<Void, NinePError>) -> Void = { _ in }
  ) {
    send(.tclunk(fid: fid)) { [self] result in
      releaseFid(fid)
      completion(result.map { _ in () })
    }
  }

  /// Clunks every fid the server still holds for this session, the attach fid last, waiting at
  /// most `timeout` in all, then closes the session. A board that does not clunk on disconnect
  /// (Gen-1 keeps each fid's node in its small heap) would otherwise keep them for ever.
  /// Reads parked here are withdrawn first (``stopParking(reason:)``), so the lines they hold
  /// reach their owners, which read on elsewhere.
  public func retire(within timeout: Duration, reason: String) {
    let deadline = ContinuousClock.now + timeout
    stopParking(reason: reason)
    // Requests on the wire first: a walk still out creates its fid when it is answered.
    let settled = ContinuousClock.now + timeout / 2
    while ContinuousClock.now < settled {
      let now = statistics
      if now.requestsInFlight == 0 && now.requestsQueued == 0 { break }
      Thread.sleep(forTimeInterval: 0.002)
    }
    // Rounds, since an answer to something still out can open one more fid.
    for _ in 0..<3 {
      let fids = openFids.filter { $0 != rootFid }
      guard !fids.isEmpty, ContinuousClock.now < deadline else { break }
      let group = DispatchGroup()
      for fid in fids {
        group.enter()
        clunk(fid) { _ in group.leave() }
      }
      _ = group.wait(timeout: .now() + ContinuousClock.now.duration(to: deadline).timeInterval)
    }
    if ContinuousClock.now < deadline {
      let root = DispatchGroup()
      root.enter()
      send(.tclunk(fid: rootFid)) { _ in root.leave() }
      _ = root.wait(timeout: .now() + ContinuousClock.now.duration(to: deadline).timeInterval)
    }
    close(reason: reason)
  }

  /// Removes the file `fid` refers to. A failed Tremove leaves the fid alive on 9p4z, so it is
  /// clunked then; either way the fid is gone afterwards.
  public func remove(
    _ fid: Fid, completion: @escaping @Sendable (Result<Void, NinePError>) -> Void
  ) {
    send(.tremove(fid: fid)) { [self] result in
      switch result {
      case .success(.rremove):
        releaseFid(fid)
        completion(.success(()))
      case .success(let other):
        clunk(fid)
        completion(.failure(.protocolViolation("Tremove answered with \(other.type)")))
      case .failure(let error):
        clunk(fid)
        completion(.failure(error))
      }
    }
  }

  /// Reads a file's directory entry.
  public func stat(_ fid: Fid, completion: @escaping @Sendable (Result<Stat, NinePError>) -> Void) {
    send(.tstat(fid: fid)) { result in
      completion(
        result.flatMap {
          guard case .rstat(let stat) = $0 else {
            return .failure(.protocolViolation("Tstat answered with \($0.type)"))
          }
          return .success(stat)
        })
    }
  }

  /// Changes a file's directory entry (fields of ``Stat/unchanged`` stay as they are).
  public func wstat(
    _ fid: Fid, _ stat: Stat, completion: @escaping @Sendable (Result<Void, NinePError>) -> Void
  ) {
    send(.twstat(fid: fid, stat: stat)) { result in completion(result.map { _ in () }) }
  }
}
