import Foundation
import Logging
import NinePClient
import NinePProtocol
import Synchronization

/// Directory listings by path, kept for a short time and fetched once for many callers.
///
/// Lookups are answered from the parent's listing rather than a walk and Tstat: the listing is
/// where 9BBS servers tell the truth about what is a file (walk and Tstat call `/chat/lobby` a
/// directory), and one listing answers every lookup of an `ls -l`.
///
/// On a slow link every request is a round trip, so a listing costs as few as it can:
/// - directories stay open: listing one again re-reads its fid from offset 0 (one request)
///   instead of walking, opening and clunking (``keptDirectories`` of them, least recently
///   used out, reopened after ``keptLifetime`` so one removed and made again by someone else
///   is seen);
/// - a first reply that is clearly short is taken as the whole listing at once (see
///   ``Session/readDirectory(_:early:completion:)``), while the confirming read finishes in
///   the background; a lookup that misses waits for that confirmation.
///
/// A listing ends, whatever the server does: one that fails is tried again only on a kept fid
/// (the server may have forgotten it), once, on a freshly opened one; it is bounded in reads,
/// bytes and time (``DirectoryLimits``); names no local file system can hold are left out.
final class ListingCache: Sendable {
  typealias Callback = @Sendable (Result<Listing, NinePError>) -> Void

  /// A directory's entries, and when the server was asked for them: the mount's own changes
  /// that landed after that are newer than these entries (see ``LocalChange``).
  struct Listing: Sendable {
    var stats: [Stat] { entries.stats }
    var requested: ContinuousClock.Instant
    fileprivate var entries: Entries

    init(stats: [Stat], requested: ContinuousClock.Instant) {
      self.init(Entries(stats), requested: requested)
    }

    fileprivate init(_ entries: Entries, requested: ContinuousClock.Instant) {
      self.entries = entries
      self.requested = requested
    }

    /// The entry named `name`, found without a scan (a lookup in a directory of thousands).
    func stat(named name: String) -> Stat? { entries.stat(named: name) }
  }

  private struct Entry {
    var entries: Entries
    var fetched: ContinuousClock.Instant
    var requested: ContinuousClock.Instant
    /// False while only the first, short reply is in and its confirming read is out.
    var complete: Bool

    init(
      stats: [Stat], fetched: ContinuousClock.Instant, requested: ContinuousClock.Instant,
      complete: Bool
    ) {
      entries = Entries(stats)
      self.fetched = fetched
      self.requested = requested
      self.complete = complete
    }

    var listing: Listing { Listing(entries, requested: requested) }
  }

  private struct Waiter {
    let needsComplete: Bool
    /// A listing asked for before this does not answer it (the caller wants the directory
    /// as it is at its call: see `asOfNow`); nil: any listing on its way does.
    let notBefore: ContinuousClock.Instant?
    let callback: Callback

    /// Whether a listing asked for at `requested` answers this waiter.
    func accepts(listingRequestedAt requested: ContinuousClock.Instant) -> Bool {
      notBefore.map { requested >= $0 } ?? true
    }
  }

  private struct OpenDirectory {
    let session: Session
    let fid: Fid
    let opened: ContinuousClock.Instant
    var used: ContinuousClock.Instant
  }

  private struct State {
    var entries: [[String]: Entry] = [:]
    var fetching: [[String]: [Waiter]] = [:]
    /// When each listing in `fetching` was asked for.
    var requested: [[String]: ContinuousClock.Instant] = [:]
    /// Listings on their way that were invalidated meanwhile (see ``invalidate(_:)``).
    var invalidated: [[String]: ContinuousClock.Instant] = [:]
    var open: [[String]: OpenDirectory] = [:]
  }

  private let state = Mutex(State())
  private let sessions: SessionProvider
  private let linkIsUp: @Sendable () -> Bool
  private let logger: Logger
  let limits: DirectoryLimits
  let lifetime: Duration
  /// Directory fids kept open for listing again (a board has 32 fids in all).
  let keptDirectories: Int
  static let keptLifetime: Duration = .seconds(60)

  init(
    lifetime: Duration, keptDirectories: Int = 16, sessions: @escaping SessionProvider,
    linkIsUp: @escaping @Sendable () -> Bool = { true },
    limits: DirectoryLimits = DirectoryLimits(),
    logger: Logger = Logger(label: "mount9bbs.listing")
  ) {
    self.lifetime = lifetime
    self.limits = limits
    self.logger = logger
    self.keptDirectories = keptDirectories
    self.sessions = sessions
    self.linkIsUp = linkIsUp
  }

  /// The listing of `path`, from the cache while fresh.
  ///
  /// - Parameter complete: wait for the confirming read when only a short first reply is in
  ///   (a lookup that did not find its name asks this before answering ENOENT).
  /// - Parameter asOfNow: only a listing asked for after this call answers (a `rewinddir`
  ///   sees what was made before it); otherwise one already on its way answers too, saving a
  ///   round trip (an `ls` that joins another's listing of the same directory).
  func listing(
    _ path: [String], maxAge: Duration? = nil, complete: Bool = false, asOfNow: Bool = false,
    _ callback: @escaping Callback
  ) {
    let down = !linkIsUp()
    enum Next { case answer(Listing), wait, fetch }
    let next = state.withLock { s -> Next in
      if let cached = s.entries[path],
        down
          || ((cached.complete || !complete)
            && cached.fetched.duration(to: .now) < (maxAge ?? lifetime))
      {
        // Fresh, or the link is down and what the mount last saw is the best answer there is.
        return .answer(cached.listing)
      }
      let waiter = Waiter(
        needsComplete: complete, notBefore: asOfNow ? .now : nil, callback: callback)
      if s.fetching[path] != nil {
        s.fetching[path]?.append(waiter)
        return .wait
      }
      s.fetching[path] = [waiter]
      s.requested[path] = .now
      return .fetch
    }
    switch next {
    case .answer(let listing): callback(.success(listing))
    case .wait: break
    case .fetch: fetch(path)
    }
  }

  /// The link stalled: whoever waits for a listing the mount has seen gets what it last saw
  /// (`ls` of a frozen board answers after the stall's 2 s, not the keepalive's 30). The
  /// fetch goes on and updates the cache when the board answers.
  func answerWaitersFromWhatWasSeen() {
    let answers = state.withLock { s -> [(Waiter, Listing)] in
      var answers: [(Waiter, Listing)] = []
      for (path, waiting) in s.fetching where !waiting.isEmpty {
        guard let seen = s.entries[path] else { continue }
        answers += waiting.map { ($0, seen.listing) }
        s.fetching[path] = []
      }
      return answers
    }
    for (waiter, listing) in answers { waiter.callback(.success(listing)) }
  }

  /// The last listing of `path` the mount saw, however old (nil if none is kept).
  func lastSeen(_ path: [String]) -> Listing? {
    state.withLock { s in
      s.entries[path]?.listing
    }
  }

  /// Whether the listing of `path` held now is known to be whole.
  func isComplete(_ path: [String]) -> Bool {
    state.withLock { $0.entries[path]?.complete ?? false }
  }

  /// Forgets a listing (after a create, remove or rename in that directory).
  ///
  /// A listing already on its way was asked for before the change: it still answers those
  /// waiting for it, but is not kept (the next caller fetches afresh and sees the change).
  func invalidate(_ path: [String]) {
    state.withLock { s in
      s.entries[path] = nil
      if s.fetching[path] != nil { s.invalidated[path] = .now }
    }
  }

  /// A change the mount made to a directory's entries, and the server confirmed.
  enum Edit {
    /// An entry was made (create, mkdir, mknod), or changed (its fresh entry).
    case added(Stat)
    case removed(String)
    case renamed(from: String, to: String)
  }

  /// Applies the mount's own change to the listing kept for `path`, so the lookups after it
  /// need no fresh listing: a create, remove or rename in a directory of N entries costs no
  /// read of all N. The listing still expires with its age (changes by others show then).
  /// One on its way, or only partly in, cannot take the edit: it is dropped (``invalidate(_:)``).
  func apply(_ edit: Edit, to path: [String]) {
    state.withLock { s in
      // Edited in place (through the dictionary's subscript): a copy would cost the listing.
      guard s.fetching[path] == nil, s.entries[path]?.complete == true,
        s.entries[path]?.entries.apply(edit) == true
      else {
        s.entries[path] = nil
        if s.fetching[path] != nil { s.invalidated[path] = .now }
        return
      }
    }
  }

  /// Puts a fresh entry of one of `path`'s names (an open's Tstat) into the listing kept for
  /// it, if one is kept whole; anything else is left as it is.
  func refresh(_ stat: Stat, in path: [String]) {
    state.withLock { s in
      guard s.fetching[path] == nil, s.entries[path]?.complete == true,
        s.entries[path]?.entries.stat(named: stat.name) != nil
      else { return }
      _ = s.entries[path]?.entries.apply(.added(stat))
    }
  }

  /// Forgets `path` and everything under it, closing kept directories there (it was removed
  /// or renamed: a kept fid would list the old directory).
  func forgetSubtree(_ path: [String]) {
    let closing = state.withLock { s -> [OpenDirectory] in
      for key in s.entries.keys where key.starts(with: path) { s.entries[key] = nil }
      var closing: [OpenDirectory] = []
      for (key, kept) in s.open where key.starts(with: path) && s.fetching[key] == nil {
        closing.append(kept)
        s.open[key] = nil
      }
      return closing
    }
    for kept in closing { kept.session.clunk(kept.fid) }
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
    let (reusable, stale) = state.withLock { s -> (Fid?, OpenDirectory?) in
      guard let kept = s.open[path] else { return (nil, nil) }
      if kept.session === session && session.closedReason == nil
        && kept.opened.duration(to: .now) < Self.keptLifetime
      {
        s.open[path]?.used = .now
        return (kept.fid, nil)
      }
      return (nil, s.open.removeValue(forKey: path))
    }
    if let reusable { return list(path, fid: reusable, on: session, kept: true, reused: true) }
    if let stale, stale.session.closedReason == nil { stale.session.clunk(stale.fid) }
    session.walkOpen(path, mode: .read) { [self] opened in
      switch opened {
      case .failure(let error):
        finish(path, .failure(error))
      case .success(let directory):
        let kept = keep(path, fid: directory.fid, on: session)
        list(path, fid: directory.fid, on: session, kept: kept, reused: false)
      }
    }
  }

  /// Keeps a freshly opened directory fid, closing the least recently used one beyond the
  /// limit (never one a listing is reading). False if there is no room: list once, clunk.
  private func keep(_ path: [String], fid: Fid, on session: Session) -> Bool {
    let (kept, evicted) = state.withLock { s -> (Bool, OpenDirectory?) in
      var evicted: OpenDirectory?
      if s.open.count >= keptDirectories {
        let listing = s.fetching
        let idle = s.open.filter { listing[$0.key] == nil }
        if let oldest = idle.min(by: { $0.value.used < $1.value.used }) {
          evicted = s.open.removeValue(forKey: oldest.key)
        }
      }
      let kept = s.open.count < keptDirectories
      if kept {
        s.open[path] = OpenDirectory(session: session, fid: fid, opened: .now, used: .now)
      }
      return (kept, evicted)
    }
    if let evicted, evicted.session.closedReason == nil { evicted.session.clunk(evicted.fid) }
    return kept
  }

  /// Reads the directory open on `fid`. `reused`: the fid was kept from an earlier listing.
  private func list(
    _ path: [String], fid: Fid, on session: Session, kept: Bool, reused: Bool
  ) {
    session.readDirectory(
      fid, limits: limits,
      early: { [self] stats in provisional(path, acceptable(stats, in: path, quietly: true)) }
    ) { [self] listed in
      if case .failure(let error) = listed, !error.isLinkFailure {
        // Never keep a fid that failed. Only one kept from before that the server refused
        // may be stale (it forgot it): open the directory anew, once. A fresh one failing
        // is the answer: trying again would loop for as long as the server refuses. A
        // timeout is never retried: the caller has waited the whole `timeout=` already.
        if kept {
          state.withLock { s in
            if s.open[path]?.fid == fid && s.open[path]?.session === session { s.open[path] = nil }
          }
        }
        session.clunk(fid)
        if reused, case .server = error { return fetch(path, on: session) }
        logger.warning("cannot list /\(path.joined(separator: "/")): \(error)")
        return finish(path, .failure(error))
      }
      if !kept { session.clunk(fid) }
      finish(path, listed.map { acceptable($0, in: path, quietly: false) })
    }
  }

  /// The entries of a listing the tree can show, logging what is left out.
  private func acceptable(_ stats: [Stat], in path: [String], quietly: Bool) -> [Stat] {
    let kept = stats.filter { Self.isAcceptable($0.name) }
    if !quietly && kept.count < stats.count {
      let dropped = stats.filter { !Self.isAcceptable($0.name) }.map(\.name)
      let shown = dropped.prefix(3).map { String(reflecting: String($0.prefix(40))) }
      logger.warning(
        "listing of /\(path.joined(separator: "/")): left out \(dropped.count) entr\(dropped.count == 1 ? "y" : "ies") with a name no file can have (\(shown.joined(separator: ", ")))"
      )
    }
    return kept
  }

  /// Names a server must never hand us: they would escape or confuse the tree.
  static func isAcceptable(_ name: String) -> Bool {
    !name.isEmpty && name != "." && name != ".." && !name.contains("/") && !name.contains("\0")
      && name.utf8.count <= Self.maxNameLength
  }

  /// The longest name (in bytes) Linux file systems allow (NAME_MAX); the kernel refuses
  /// longer ones anyway, and a readdir buffer must hold any one entry.
  static let maxNameLength = 255

  /// The first reply was short: answer those that can take it now.
  private func provisional(_ path: [String], _ stats: [Stat]) {
    let (asked, waiting) = state.withLock { s -> (ContinuousClock.Instant, [Waiter]) in
      let asked = s.requested[path] ?? .now
      if s.invalidated[path] == nil {
        s.entries[path] = Entry(stats: stats, fetched: .now, requested: asked, complete: false)
      }
      let waiting = s.fetching[path] ?? []
      let answered = { (waiter: Waiter) in
        !waiter.needsComplete && waiter.accepts(listingRequestedAt: asked)
      }
      s.fetching[path] = waiting.filter { !answered($0) }
      return (asked, waiting.filter(answered))
    }
    let listing = Listing(stats: stats, requested: asked)
    for waiter in waiting { waiter.callback(.success(listing)) }
  }

  private func finish(_ path: [String], _ listed: Result<[Stat], NinePError>) {
    let (result, waiting, again) = state.withLock {
      s -> (Result<Listing, NinePError>, [Waiter], Bool) in
      let asked = s.requested.removeValue(forKey: path) ?? .now
      let outdated = s.invalidated.removeValue(forKey: path) != nil
      var result = listed.map { Listing(stats: $0, requested: asked) }
      switch listed {
      case .success where outdated:
        s.entries[path] = nil
      case .success(let stats):
        s.entries[path] = Entry(stats: stats, fetched: .now, requested: asked, complete: true)
      case .failure(let error) where error.isLinkFailure:
        // While the link is down, what the mount last saw beats an error.
        if let stale = s.entries[path] {
          result = .success(stale.listing)
        }
      case .failure:
        if s.entries[path]?.complete == false { s.entries[path] = nil }
      }
      let waiting = s.fetching.removeValue(forKey: path) ?? []
      guard case .success = listed else { return (result, waiting, false) }
      // Those who asked for a newer listing than this one get the next.
      let later = waiting.filter { !$0.accepts(listingRequestedAt: asked) }
      if !later.isEmpty {
        s.fetching[path] = later
        s.requested[path] = .now
      }
      return (result, waiting.filter { $0.accepts(listingRequestedAt: asked) }, !later.isEmpty)
    }
    for waiter in waiting { waiter.callback(result) }
    if again { fetch(path) }
  }
}

/// A directory's entries, each found by its name without a scan. The mount's own edits keep
/// the order of the others but not their places (a removed entry's place takes the last).
private struct Entries: Sendable {
  private(set) var stats: [Stat]
  private var positions: [String: Int] = [:]

  init(_ stats: [Stat]) {
    self.stats = stats
    positions.reserveCapacity(stats.count)
    for (index, stat) in stats.enumerated() where positions[stat.name] == nil {
      positions[stat.name] = index
    }
  }

  func stat(named name: String) -> Stat? { positions[name].map { stats[$0] } }

  /// Applies an edit; false if it cannot be (a rename of a name not here).
  mutating func apply(_ edit: ListingCache.Edit) -> Bool {
    switch edit {
    case .added(let stat):
      add(stat)
    case .removed(let name):
      remove(name)
    case .renamed(let old, let new):
      guard var moved = stat(named: old) else { return false }
      remove(old)
      remove(new)
      moved.name = new
      add(moved)
    }
    return true
  }

  private mutating func add(_ stat: Stat) {
    if let index = positions[stat.name] {
      stats[index] = stat
    } else {
      positions[stat.name] = stats.count
      stats.append(stat)
    }
  }

  private mutating func remove(_ name: String) {
    guard let index = positions.removeValue(forKey: name) else { return }
    let last = stats.count - 1
    if index != last {
      stats.swapAt(index, last)
      positions[stats[index].name] = index
    }
    stats.removeLast()
  }
}
