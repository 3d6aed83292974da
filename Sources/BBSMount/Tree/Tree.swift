// Tree: what the mounted tree holds, as far as the kernel can see.
//
// Threads. BBSFileSystem's operations (libfuse worker threads) ask ``Tree`` for nodes;
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

#if canImport(Glibc)
  import Glibc
#endif

/// The nodes of the mount: looked up in listings, numbered by path, described to the kernel.
final class Tree: Sendable {
  let inodes: InodeTable
  let listings: ListingCache
  let attributes: NodeAttributes
  private let remote: Remote
  private let logger: Logger

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

  /// Looks `name` up in `directory`'s listing. A name not in a listing still being confirmed
  /// waits for the whole one before it is not found; with the link down a node seen before is
  /// the answer; an unlistable parent is walked instead.
  func lookup(
    _ directory: [String], _ name: String,
    _ completion: @escaping @Sendable (Result<InodeTable.Node, NinePError>) -> Void
  ) {
    let path = directory + [name]
    listings.listing(directory) { [self] listed in
      if case .success(let listing) = listed, !listing.stats.contains(where: { $0.name == name }),
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
      guard let stat = listing.stats.first(where: { $0.name == name }) else {
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
        guard let stat = listing.stats.first(where: { $0.name == name }) else {
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

  /// A fresh listing of `node` as directory entries, `.` and `..` first (as a local file
  /// system lists them; readdirplus links neither).
  func entries(
    of node: InodeTable.Node,
    _ completion: @escaping @Sendable (Result<[DirectoryEntry], NinePError>) -> Void
  ) {
    listings.listing(node.path, maxAge: .zero) { [self] listed in
      completion(
        listed.map { listing in
          let parent = inodes.inode(for: Array(node.path.dropLast())) ?? .root
          var entries = [
            DirectoryEntry(name: ".", inode: node.inode, mode: S_IFDIR),
            DirectoryEntry(name: "..", inode: parent, mode: S_IFDIR),
          ]
          for stat in listing.stats {
            let child = record(node.path + [stat.name], stat, asOf: listing.requested)
            entries.append(DirectoryEntry(name: stat.name, entry: attributes.entry(for: child)))
          }
          for name in mountLocalNames(in: node.path)
          where !listing.stats.contains(where: { $0.name == name }) {
            let path = node.path + [name]
            guard let kind = mountLocalKind(path) else { continue }
            let child = inodes.record(path: path, kind: kind, stat: nil)
            entries.append(DirectoryEntry(name: name, entry: attributes.entry(for: child)))
          }
          return entries
        })
    }
  }

  /// The rooms of a chat directory: its listing less `post` and `users`.
  func knownRooms(_ chatDirectory: [String], _ body: @escaping @Sendable (Set<String>) -> Void) {
    listings.listing(chatDirectory) { listed in
      let names = (try? listed.get())?.stats.map(\.name) ?? []
      body(Set(names).subtracting(["post", "users"]).subtracting(AwarenessFile.allNames))
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
}
