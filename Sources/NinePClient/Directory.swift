import NinePProtocol

extension Session {
  /// Reads a whole directory from an fid opened for reading.
  ///
  /// Offsets are the cumulative bytes returned, as 9P2000 requires. Listings from 9p4z can be
  /// short or repeat entries (union mounts append theirs only at offset 0), so entries are
  /// de-duplicated by name, first one wins, and reading stops at a 0-byte reply or when the
  /// listing stops making progress.
  public func readDirectory(
    _ fid: Fid, completion: @escaping @Sendable (Result<[Stat], NinePError>) -> Void
  ) {
    readDirectoryChunks(fid, offset: 0, entries: [], seen: [], rounds: 0, completion)
  }

  private func readDirectoryChunks(
    _ fid: Fid, offset: UInt64, entries: [Stat], seen: Set<String>, rounds: Int,
    _ completion: @escaping @Sendable (Result<[Stat], NinePError>) -> Void
  ) {
    read(fid, offset: offset, count: maxReadCount) { [self] result in
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
        readDirectoryChunks(
          fid, offset: offset + UInt64(data.count), entries: entries, seen: seen,
          rounds: rounds + 1, completion)
      }
    }
  }
}
