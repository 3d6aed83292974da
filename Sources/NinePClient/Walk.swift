import NinePProtocol

/// Where a walk ended: a new fid (unopened) and the qid of the last element.
public struct WalkResult: Sendable {
  public var fid: Fid
  public var qid: Qid
}

extension Session {
  /// Splits a slash path into walk names, dropping empty elements and `.`.
  public static func components(_ path: String) -> [String] {
    path.split(separator: "/", omittingEmptySubsequences: true).map(String.init).filter {
      $0 != "."
    }
  }

  /// Walks from the attach fid to `path` into a new fid.
  ///
  /// Always starts at the attach fid (9p4z frees nodes shared by clones), never reuses the
  /// source fid as newfid (devices reject it), and splits long paths into walks of 16 names,
  /// clunking the intermediate fids. A partial Rwalk means the path does not exist.
  public func walk(
    _ path: [String], completion: @escaping @Sendable (Result<WalkResult, NinePError>) -> Void
  ) {
    walk(from: rootFid, qid: rootQid, remaining: path[...], walked: [], completion: completion)
  }

  private func walk(
    from fid: Fid, qid: Qid, remaining: ArraySlice<String>, walked: [String],
    completion: @escaping @Sendable (Result<WalkResult, NinePError>) -> Void
  ) {
    let newfid: Fid
    do {
      newfid = try allocateFid()
    } catch {
      if fid != rootFid { clunk(fid) { _ in } }
      return completion(.failure(error))
    }
    let names = Array(remaining.prefix(NineP.maxWalkElements))
    let rest = remaining.dropFirst(names.count)
    send(.twalk(fid: fid, newfid: newfid, names: names)) { [self] result in
      // The intermediate fid of a long walk is no longer needed either way.
      if fid != rootFid { clunk(fid) { _ in } }
      let path = "/" + (walked + names).joined(separator: "/")
      switch result {
      case .success(.rwalk(let qids)) where qids.count == names.count:
        let last = qids.last ?? qid
        if rest.isEmpty {
          completion(.success(WalkResult(fid: newfid, qid: last)))
        } else {
          walk(
            from: newfid, qid: last, remaining: rest, walked: walked + names, completion: completion
          )
        }
      case .success(.rwalk(let qids)):
        releaseFid(newfid)
        let failed = walked + names.prefix(qids.count + 1)
        completion(.failure(.notFound(path: "/" + failed.joined(separator: "/"))))
      case .success(let other):
        releaseFid(newfid)
        completion(.failure(.protocolViolation("Twalk answered with \(other.type)")))
      case .failure(.server(_, let code)) where code == ENOENT:
        releaseFid(newfid)
        completion(.failure(.notFound(path: path)))
      case .failure(let error):
        releaseFid(newfid)
        completion(.failure(error))
      }
    }
  }
}

#if canImport(Glibc)
  import Glibc
#endif
