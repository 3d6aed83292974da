import NinePProtocol
import Synchronization

/// How much of one directory a listing reads before it stops: a server that never ends a
/// directory must not hold the listing, and every `ls` waiting for it, for ever.
public struct DirectoryLimits: Sendable, Equatable {
  /// Treads that brought entries.
  public var rounds: Int
  /// Bytes of listing in all.
  public var bytes: Int
  /// Entries kept in all.
  public var entries: Int
  /// Time from the first Tread; checked between reads.
  public var duration: Duration

  public init(
    rounds: Int = 4096, bytes: Int = 16 << 20, entries: Int = 65536,
    duration: Duration = .seconds(120)
  ) {
    self.rounds = rounds
    self.bytes = bytes
    self.entries = entries
    self.duration = duration
  }
}

extension Session {
  /// Reads a whole directory from an fid opened for reading.
  ///
  /// Offsets are the cumulative bytes returned, as 9P2000 requires. Listings from 9p4z can be
  /// short or repeat entries (union mounts append theirs only at offset 0), so entries are
  /// de-duplicated by name, first one wins, and reading stops at a 0-byte reply or when the
  /// listing stops making progress. An entry that cannot be decoded (a name that is not
  /// UTF-8, a bad size field) is left out and logged. A directory that goes past `limits` is
  /// cut there, with a warning: the listing is what was read so far.
  ///
  /// - Parameter early: called with the first reply's entries when that reply left at least
  ///   ``Session/directorySlack`` bytes of the count unused: a server that fills its replies
  ///   (as 9P2000 asks) has nothing more, so a caller on a slow link can answer now and let the
  ///   confirming 0-byte read finish in the background. `completion` still gets the whole
  ///   listing.
  public func readDirectory(
    _ fid: Fid, limits: DirectoryLimits = DirectoryLimits(),
    early: (@Sendable ([Stat]) -> Void)? = nil,
    completion: @escaping @Sendable (Result<[Stat], NinePError>) -> Void
  ) {
    readDirectoryChunks(
      fid, offset: 0, listing: DirectoryListing(limits: limits), early: early, completion)
  }

  /// Unused bytes of a directory read's count that make its reply "short": more than any
  /// stat entry a 9BBS server writes (names and owners are short).
  public static let directorySlack = 1024

  private func readDirectoryChunks(
    _ fid: Fid, offset: UInt64, listing: DirectoryListing,
    early: (@Sendable ([Stat]) -> Void)? = nil,
    _ completion: @escaping @Sendable (Result<[Stat], NinePError>) -> Void
  ) {
    let count = maxReadCount
    read(fid, offset: offset, count: count) { [self] result in
      switch result {
      case .failure(let error):
        completion(listing.entries.isEmpty ? .failure(error) : .success(listing.entries))
      case .success(let data) where data.isEmpty:
        completion(.success(listing.entries))
      case .success(let data):
        let (decoded, problems) = Stat.decodeDirectoryEntries(Array(data))
        if let problem = problems.first {
          logger.warning(
            "directory listing: \(problems.count) unreadable entr\(problems.count == 1 ? "y" : "ies") left out (\(problem))"
          )
          if decoded.isEmpty && listing.entries.isEmpty {
            // Not stat entries at all (some servers list directories as text).
            return completion(
              .failure(.protocolViolation("directory listing is not stat entries: \(problem)")))
          }
        }
        let added = listing.add(decoded, bytes: data.count)
        // A server that keeps answering the same entries would loop forever.
        if added == 0 { return completion(.success(listing.entries)) }
        if let exceeded = listing.exceededLimit {
          logger.warning(
            "directory listing cut at \(listing.entries.count) entries after \(listing.rounds) reads (\(listing.bytes) bytes): \(exceeded); the server did not end it"
          )
          return completion(.success(listing.entries))
        }
        if listing.rounds == 1, let early, Int(count) - data.count >= Self.directorySlack {
          early(listing.entries)
        }
        readDirectoryChunks(
          fid, offset: offset + UInt64(data.count), listing: listing, completion)
      }
    }
  }
}

/// A directory listing being read, one Tread at a time. A class so each reply appends in
/// place: copying the entries every round made a long listing quadratic. One Tread is out at
/// a time, so the lock is never contended; it makes the sharing between completions checked.
private final class DirectoryListing: Sendable {
  let limits: DirectoryLimits
  private let started = ContinuousClock.now
  private let state = Mutex(State())

  private struct State {
    var entries: [Stat] = []
    var seen: Set<String> = []
    var bytes = 0
    var rounds = 0
  }

  init(limits: DirectoryLimits) { self.limits = limits }

  var entries: [Stat] { state.withLock { $0.entries } }
  var bytes: Int { state.withLock { $0.bytes } }
  var rounds: Int { state.withLock { $0.rounds } }

  /// Adds the new names of one reply; returns how many were new.
  func add(_ decoded: [Stat], bytes count: Int) -> Int {
    state.withLock { state in
      state.rounds += 1
      state.bytes += count
      var added = 0
      for entry in decoded
      where state.entries.count < limits.entries && state.seen.insert(entry.name).inserted {
        state.entries.append(entry)
        added += 1
      }
      return added
    }
  }

  /// Which limit the listing has reached, if any.
  var exceededLimit: String? {
    let (rounds, bytes, count) = state.withLock { ($0.rounds, $0.bytes, $0.entries.count) }
    if rounds >= limits.rounds { return "\(limits.rounds) reads" }
    if bytes >= limits.bytes { return "\(limits.bytes) bytes" }
    if count >= limits.entries { return "\(limits.entries) entries" }
    if started.duration(to: .now) > limits.duration { return "longer than \(limits.duration)" }
    return nil
  }
}
