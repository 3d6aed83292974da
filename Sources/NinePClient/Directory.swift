import NinePProtocol

extension Session {
  /// Reads a whole directory from an fid opened for reading.
  ///
  /// Offsets are the cumulative bytes returned, as 9P2000 requires. Listings from 9p4z can be
  /// short or repeat entries (union mounts append theirs only at offset 0), so entries are
  /// de-duplicated by name, first one wins, and reading stops at a 0-byte reply or when the
  /// listing stops making progress.
  ///
  /// - Parameter early: called with the first reply's entries when that reply left at least
  ///   ``Session/directorySlack`` bytes of the count unused: a server that fills its replies
  ///   (as 9P2000 asks) has nothing more, so a caller on a slow link can answer now and let the
  ///   confirming 0-byte read finish in the background. `completion` still gets the whole
  ///   listing.
  public func readDirectory(
    _ fid: Fid, early: (@Sendable ([Stat]) -> Void)? = nil,
    completion: @escaping @Sendable (Result<[Stat], NinePError>) -> Void
  ) {
    readDirectoryChunks(
      fid, offset: 0, entries: [], seen: [], rounds: 0, early: early, completion)
  }

  /// Unused bytes of a directory read's count that make its reply "short": more than any
  /// stat entry a 9BBS server writes (names and owners are short).
  public static let directorySlack = 1024

  private func readDirectoryChunks(
    _ fid: Fid, offset: UInt64, entries: [Stat], seen: Set<String>, rounds: Int,
    early: (@Sendable ([Stat]) -> Void)? = nil,
    _ completion: @escaping @Sendable (Result<[Stat], NinePError>) -> Void
  ) {
    let count = maxReadCount
    read(fid, offset: offset, count: count) { [self] result in
      switch result {
      case .failure(let error):
        completion(entries.isEmpty ? .failure(error) : .success(entries))
      case .success(let data) where data.isEmpty:
        completion(.success(entries))
      case .success(let data):
        let decoded: [Stat]
        do {
          decoded = try Stat.decodeDirectory(data)
        } catch {
          logger.warning("unreadable directory listing: \(error)")
          return completion(
            entries.isEmpty
              ? .failure(.protocolViolation("directory listing is not stat entries: \(error)"))
              : .success(entries))
        }
        var entries = entries
        var seen = seen
        var added = 0
        for entry in decoded where !seen.contains(entry.name) {
          seen.insert(entry.name)
          entries.append(entry)
          added += 1
        }
        // A server that keeps answering the same entries would loop forever.
        if added == 0 || rounds > 100_000 {
          return completion(.success(entries))
        }
        if rounds == 0, let early, Int(count) - data.count >= Self.directorySlack { early(entries) }
        readDirectoryChunks(
          fid, offset: offset + UInt64(data.count), entries: entries, seen: seen,
          rounds: rounds + 1, completion)
      }
    }
  }
}
