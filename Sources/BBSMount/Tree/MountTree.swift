// MountTree: what the mounted tree holds, as far as the kernel can see.
//
// Threads. BBSFileSystem's operations (libfuse worker threads) ask ``MountTree`` for nodes;
// ``InodeTable`` numbers them by path, ``ListingCache`` answers from the parent's listing
// (fetched once for many callers; its completions run on the session's reader thread) and
// ``Remote`` walks when a parent cannot be listed. ``NodeKind`` says by path what a node is
// (room, post, users, file, directory), ``NodeAttributes`` what the kernel is told about it.
// ``HandleTable`` keeps the open handles (``OpenHandle``: one type per kind of open file). All
// of these lock internally and never call out under their locks.

import Foundation
import FuseKit
import Logging
import NinePClient
import NinePProtocol
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// The nodes of the mount: looked up in listings, numbered by path, described to the kernel.
final class MountTree: Sendable {
  let inodes: InodeTable
  let listings: ListingCache
  let attributes: NodeAttributes
  private let remote: Remote
  private let logger: Logger
  /// A server room named like a mount-local chat file was seen (it is logged once).
  private let shadowReported = Atomic<Bool>(false)

  init(
    inodes: InodeTable, listings: ListingCache, attributes: NodeAttributes, remote: Remote,
    logger: Logger
  ) {
    self.inodes = inodes
    self.listings = listings
    self.attributes = attributes
    self.remote = remote
    self.logger = logger
  }

  /// Records what a listing or a walk said of `path`.
  @discardableResult
  func record(
    _ path: [String], _ stat: Stat, asOf asked: ContinuousClock.Instant
  ) -> InodeTable.Node {
    inodes.record(
      path: path, kind: attributes.kind(of: path, stat: stat), stat: stat, asOf: asked)
  }

  /// How long a lookup of a chat node the mount already knows (the chat directory, a room)
  /// waits for the server before what the mount knows answers: `echo > chat/post` to a frozen
  /// server must not wait for its listing (the listing goes on and updates the cache).
  static let chatPatience: Duration = .milliseconds(500)

  /// Looks `name` up in `directory`'s listing. A name not in a listing still being confirmed
  /// waits for the whole one before it is not found; with the link down a node seen before is
  /// the answer; an unlistable parent is walked instead.
  func lookup(
    _ directory: [String], _ name: String,
    _ completion: @escaping @Sendable (Result<InodeTable.Node, NinePError>) -> Void
  ) {
    let path = directory + [name]
    if RoomLogs.lookup(path, in: self, completion) { return }
    let classifier = attributes.classifier
    switch classifier.kind(of: path) {
    case .outbox, .post, .awareness:
      // Known by its path: mount-local, or the post file of every chat directory (whose
      // writes the outbox keeps when the server does not answer).
      let kind = classifier.kind(of: path) ?? .post
      return completion(.success(inodes.record(path: path, kind: kind, stat: nil)))
    case .room where classifier.isChatDirectory(directory):
      break
    default:
      if !classifier.isChatDirectory(path) { return lookupListed(path, completion) }
    }
    let answer = FirstAnswer(completion)
    DispatchQueue.global().asyncAfter(deadline: .now() + Self.chatPatience.timeInterval) {
      [self] in
      // The node as the mount knows it, or as the last listing of its directory showed it;
      // a name the mount never saw waits for the server.
      if let known = inodes.inode(for: path), let node = inodes.node(known) {
        answer(.success(node))
      } else if let listing = listings.lastSeen(directory),
        let stat = listing.stat(named: name)
      {
        answer(.success(record(path, stat, asOf: listing.requested)))
      }
    }
    lookupListed(path) { answer($0) }
  }

  private func lookupListed(
    _ path: [String],
    _ completion: @escaping @Sendable (Result<InodeTable.Node, NinePError>) -> Void
  ) {
    let directory = Array(path.dropLast())
    guard let name = path.last else { return completion(.failure(.notFound(path: "/"))) }
    listings.listing(directory) { [self] listed in
      if case .success(let listing) = listed, listing.stat(named: name) == nil,
        !listings.isComplete(directory)
      {
        return listings.listing(directory, complete: true) { [self] whole in
          answer(path, whole, completion)
        }
      }
      answer(path, listed, completion)
    }
  }

  private func answer(
    _ path: [String], _ listed: Result<ListingCache.Listing, NinePError>,
    _ completion: @escaping @Sendable (Result<InodeTable.Node, NinePError>) -> Void
  ) {
    guard let name = path.last else { return completion(.failure(.notFound(path: "/"))) }
    switch listed {
    case .success(let listing):
      guard let stat = listing.stat(named: name) else {
        if let kind = mountLocalKind(path) {
          return completion(.success(inodes.record(path: path, kind: kind, stat: nil)))
        }
        return completion(.failure(.notFound(path: "/" + path.joined(separator: "/"))))
      }
      completion(.success(record(path, stat, asOf: listing.requested)))
    case .failure(let error) where error.isLinkFailure:
      // Link down: a node the mount has seen before is still the best answer.
      if let known = inodes.inode(for: path), let node = inodes.node(known) {
        completion(.success(node))
      } else if let kind = mountLocalKind(path) {
        completion(.success(inodes.record(path: path, kind: kind, stat: nil)))
      } else if attributes.classifier.kind(of: path) == .post {
        // `echo > chat/post` before the mount ever listed chat/: a post file is known by
        // its path, and the outbox keeps what is written to it until the link is back.
        completion(.success(inodes.record(path: path, kind: .post, stat: nil)))
      } else {
        completion(.failure(error))
      }
    case .failure(let error):
      // An unreadable parent (or a server whose listings are not stat entries): walk.
      logger.debug(
        "listing of /\(path.dropLast().joined(separator: "/")) failed (\(error)); walking")
      let asked = ContinuousClock.now
      remote.stat(path) { [self] result in
        completion(result.map { record(path, $0, asOf: asked) })
      }
    }
  }

  /// Fresh attributes for a node, from its parent's listing (or a walk for the root's kids
  /// of an unlistable parent).
  func refresh(
    _ node: InodeTable.Node,
    _ completion: @escaping @Sendable (Result<InodeTable.Node, NinePError>) -> Void
  ) {
    let parent = Array(node.path.dropLast())
    guard let name = node.path.last else { return completion(.success(node)) }
    listings.listing(parent) { [self] listed in
      switch listed {
      case .success(let listing):
        guard let stat = listing.stat(named: name) else {
          return completion(.failure(.notFound(path: "/" + node.path.joined(separator: "/"))))
        }
        completion(
          .success(
            inodes.record(
              path: node.path, kind: node.kind, stat: stat, asOf: listing.requested)))
      case .failure:
        let asked = ContinuousClock.now
        remote.stat(node.path) { [self] result in
          completion(
            result.map {
              inodes.record(path: node.path, kind: node.kind, stat: $0, asOf: asked)
            })
        }
      }
    }
  }

  /// Fresh attributes for a node the mount just changed (setattr): a walk and Tstat of it
  /// alone, its entry then updated in its parent's kept listing, so a `touch` in a directory
  /// of N entries reads none of them. A chat room or board message is what its parent's
  /// listing says (their Tstat does not tell the truth): that is fetched again.
  func restat(
    _ node: InodeTable.Node,
    _ completion: @escaping @Sendable (Result<InodeTable.Node, NinePError>) -> Void
  ) {
    let parent = Array(node.path.dropLast())
    let classifier = attributes.classifier
    guard let name = node.path.last, node.kind == .file || node.kind == .directory,
      !classifier.isChatDirectory(parent), !classifier.isBoardRoom(parent)
    else {
      listings.invalidate(parent)
      return refresh(node, completion)
    }
    let asked = ContinuousClock.now
    remote.stat(node.path) { [self] result in
      switch result {
      case .success(var stat):
        stat.name = name
        listings.apply(.added(stat), to: parent)
      case .failure:
        listings.invalidate(parent)
      }
      completion(
        result.map { inodes.record(path: node.path, kind: node.kind, stat: $0, asOf: asked) })
    }
  }

  /// A fresh listing of `node` as directory entries, `.` and `..` first (as a local file
  /// system lists them; readdirplus links neither). `asOfNow`: not one already on its way
  /// (see ``ListingCache/listing(_:maxAge:complete:asOfNow:_:)``).
  func entries(
    of node: InodeTable.Node, asOfNow: Bool = false,
    _ completion: @escaping @Sendable (Result<[DirectoryEntry], NinePError>) -> Void
  ) {
    if node.kind == .roomLogs { return RoomLogs.entries(of: node, in: self, completion) }
    let chat = attributes.classifier.isChatDirectory(node.path)
    listings.listing(node.path, maxAge: .zero, asOfNow: asOfNow) { [self] listed in
      completion(
        listed.map { listing in
          let parent = inodes.inode(for: Array(node.path.dropLast())) ?? .root
          var entries = [
            DirectoryEntry(name: ".", inode: node.inode, mode: S_IFDIR),
            DirectoryEntry(name: "..", inode: parent, mode: S_IFDIR),
          ]
          var subdirectories = 0
          for stat in listing.stats {
            if chat && stat.name == RoomLogs.directoryName {
              RoomLogs.shadowed(node.path, logger)
              continue
            }
            if chat && stat.name == "outbox" {
              reportShadowed(node.path + [stat.name])
              continue
            }
            let child = record(node.path + [stat.name], stat, asOf: listing.requested)
            if child.kind == .directory { subdirectories += 1 }
            entries.append(DirectoryEntry(name: stat.name, entry: attributes.entry(for: child)))
          }
          if chat {
            entries.append(RoomLogs.entry(in: node.path, of: self))
            subdirectories += 1
            let outbox = inodes.record(path: node.path + ["outbox"], kind: .outbox, stat: nil)
            entries.append(DirectoryEntry(name: "outbox", entry: attributes.entry(for: outbox)))
          }
          for name in mountLocalNames(in: node.path)
          where listing.stat(named: name) == nil {
            let path = node.path + [name]
            guard let kind = mountLocalKind(path) else { continue }
            let child = inodes.record(path: path, kind: kind, stat: nil)
            entries.append(DirectoryEntry(name: name, entry: attributes.entry(for: child)))
          }
          if listings.isComplete(node.path) {
            inodes.listed(node.path, subdirectories: subdirectories, asOf: listing.requested)
          }
          return entries
        })
    }
  }

  /// Says once that a server room is hidden behind a mount-local file of the same name.
  private func reportShadowed(_ path: [String]) {
    guard !shadowReported.exchange(true, ordering: .relaxed) else { return }
    logger.notice(
      "the server has a room /\(path.joined(separator: "/")); the mount's own file of that name hides it (posts to it still go through chat/post as \(path.last ?? ""):text)"
    )
  }

  /// The rooms of a chat directory: its listing less `post` and `users` (a board room named
  /// like a mount-local file stays a room to post to). Waits at most `patience` for the listing (a frozen server must not hold a post);
  /// then the last listing seen, however old, answers, and without one the error does: a post
  /// is never routed by a listing that failed.
  func knownRooms(
    _ chatDirectory: [String], within patience: Duration,
    _ body: @escaping @Sendable (Result<Set<String>, NinePError>) -> Void
  ) {
    let answer = FirstAnswer(body)
    let lastSeen: @Sendable () -> ListingCache.Listing? = { [listings] in
      listings.lastSeen(chatDirectory)
    }
    listings.listing(chatDirectory) { listed in
      switch listed {
      case .success(let listing): answer(.success(Self.rooms(in: listing)))
      case .failure(let error):
        answer(lastSeen().map { .success(Self.rooms(in: $0)) } ?? .failure(error))
      }
    }
    DispatchQueue.global().asyncAfter(deadline: .now() + patience.timeInterval) {
      answer(
        lastSeen().map { .success(Self.rooms(in: $0)) }
          ?? .failure(.sessionClosed(reason: "the chat rooms could not be listed in time")))
    }
  }

  /// The files the mount itself adds to `directory` (a chat directory's awareness files).
  func mountLocalNames(in directory: [String]) -> [String] {
    attributes.classifier.isChatDirectory(directory) ? AwarenessFile.allCases.map(\.rawValue) : []
  }

  /// What `path` is if the mount itself serves it, else nil.
  func mountLocalKind(_ path: [String]) -> NodeKind? {
    guard let name = path.last, mountLocalNames(in: Array(path.dropLast())).contains(name),
      case .awareness(let file)? = attributes.classifier.kind(of: path)
    else { return nil }
    return .awareness(file)
  }

  private static func rooms(in listing: ListingCache.Listing) -> Set<String> {
    Set(listing.stats.map(\.name)).subtracting(["post", "users"])
  }
}

/// Passes on the first result it is given and drops the rest (a reply racing a deadline).
final class FirstAnswer<Value: Sendable>: Sendable {
  private let body: Mutex<(@Sendable (Value) -> Void)?>

  init(_ body: @escaping @Sendable (Value) -> Void) { self.body = Mutex(body) }

  func callAsFunction(_ value: Value) {
    let taken = body.withLock { body -> (@Sendable (Value) -> Void)? in
      defer { body = nil }
      return body
    }
    taken?(value)
  }
}
