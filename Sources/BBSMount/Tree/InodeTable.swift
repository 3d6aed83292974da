import Foundation
import FuseKit
import NinePProtocol
import Synchronization

/// Inode numbers by path. A device's `qid.path` is not stable (listings and walks disagree),
/// so the mount numbers nodes itself and never reuses a number while mounted.
final class InodeTable: Sendable {
  struct Node {
    var inode: FuseInode
    var path: [String]
    var kind: NodeKind
    /// The server's entry, from a listing or a Tstat; nil for the root and drafts.
    var stat: Stat?
    var fetched: ContinuousClock.Instant
    /// When the server was asked for `stat`: an entry asked for earlier never replaces it.
    var asked: ContinuousClock.Instant = .now
    /// What the mount changed itself and the server's entry may not show yet.
    var local: LocalChange?
    /// Removed (or renamed over) through the mount: it has no path any more, and is known
    /// only to the descriptors still open on it.
    var unlinked = false
    /// A directory's subdirectories (its `st_nlink` is 2 more, as on ext4 and tmpfs), from
    /// its last whole listing and the mount's own mkdir, rmdir and rename since; nil while
    /// the mount has not listed it (shown as 2 links).
    var subdirectories: Int?
  }

  private struct Numbering {
    var byInode: [FuseInode: Node] = [:]
    var byPath: [[String]: FuseInode] = [:]
    var next: FuseInode = FuseInode.root + 1
  }

  private let numbering: Mutex<Numbering>

  init() {
    let root = Node(inode: .root, path: [], kind: .directory, stat: nil, fetched: .now)
    numbering = Mutex(Numbering(byInode: [.root: root], byPath: [[]: .root]))
  }

  func node(_ inode: FuseInode) -> Node? {
    numbering.withLock { n in
      return n.byInode[inode]
    }
  }

  func inode(for path: [String]) -> FuseInode? {
    numbering.withLock { n in
      return n.byPath[path]
    }
  }

  /// Records what is known of `path`, keeping its inode number if it had one of the same
  /// type. A path that turns from a directory into a file or back (a server that lied, or a
  /// name removed and made again as the other type) gets a new number: the kernel marks an
  /// inode whose type changes bad for good, so the old number keeps its old type (the kernel
  /// may still ask for it) and lookups hand out the new one.
  ///
  /// - Parameter asked: when the server was asked for `stat`. The mount's own changes
  ///   (``LocalChange``) stay over an entry asked for before they landed.
  @discardableResult
  func record(
    path: [String], kind: NodeKind, stat: Stat?, asOf asked: ContinuousClock.Instant = .now
  ) -> Node {
    numbering.withLock { n in
      let inode: FuseInode
      var local: LocalChange?
      var subdirectories: Int?
      if let known = n.byPath[path],
        (n.byInode[known]?.kind == .directory) == (kind == .directory)
      {
        if var existing = n.byInode[known], existing.stat != nil, stat != nil,
          existing.asked > asked
        {
          // A listing fetched before a fresher Tstat (an open's, or a setattr's) of this node:
          // what the mount has is newer.
          existing.kind = kind
          existing.fetched = .now
          n.byInode[known] = existing
          return existing
        }
        inode = known
        local = n.byInode[known]?.local
        subdirectories = n.byInode[known]?.subdirectories
        if let change = local, change.isSuperseded(byEntryAskedAt: asked) { local = nil }
      } else {
        inode = n.next
        n.next += 1
        n.byPath[path] = inode
      }
      var node = Node(
        inode: inode, path: path, kind: kind, stat: stat, fetched: .now, asked: asked,
        local: local)
      node.subdirectories = subdirectories
      n.byInode[inode] = node
      return node
    }
  }

  /// Marks a node's attributes stale (after our own write), so the next getattr asks again.
  func invalidate(_ inode: FuseInode) {
    numbering.withLock { n in
      n.byInode[inode]?.fetched = .now - .seconds(3600)
    }
  }

  /// Applies a change the mount made to `inode` itself (see ``LocalChange``), starting from
  /// the server's entry.
  func changeLocally(_ inode: FuseInode, _ body: (inout LocalChange) -> Void) {
    numbering.withLock { n in
      guard let node = n.byInode[inode] else { return }
      var change =
        node.local
        ?? LocalChange(
          size: node.kind == .directory ? nil : node.stat?.length ?? 0,
          modified: node.stat?.mtime ?? LocalChange.now,
          changed: node.stat?.mtime ?? LocalChange.now,
          landed: .now)
      body(&change)
      n.byInode[inode]?.local = change
    }
  }

  /// A whole listing of the directory at `path` asked for at `asked` counted `count`
  /// subdirectories; ignored if the mount changed the directory's entries since.
  func listed(_ path: [String], subdirectories count: Int, asOf asked: ContinuousClock.Instant) {
    numbering.withLock { n in
      guard let inode = n.byPath[path], let node = n.byInode[inode], node.kind == .directory else {
        return
      }
      if let change = node.local, !change.isSuperseded(byEntryAskedAt: asked) { return }
      n.byInode[inode]?.subdirectories = count
    }
  }

  /// The mount made (`delta` 1) or removed (-1) a subdirectory of `inode`.
  func subdirectoriesChanged(_ inode: FuseInode, by delta: Int) {
    numbering.withLock { n in
      guard let count = n.byInode[inode]?.subdirectories else { return }
      n.byInode[inode]?.subdirectories = max(0, count + delta)
    }
  }

  /// `path` was removed through the mount: the name is free for a new node, and the old one
  /// lives on, unlinked, for the descriptors still open on it.
  func unlink(_ path: [String]) {
    numbering.withLock { n in
      guard let inode = n.byPath.removeValue(forKey: path) else { return }
      n.byInode[inode]?.unlinked = true
    }
  }

  /// Moves a node to a new path (rename), keeping its number; a node it replaces is unlinked.
  func move(from old: [String], to new: [String]) {
    numbering.withLock { n in
      guard let inode = n.byPath.removeValue(forKey: old) else { return }
      if let replaced = n.byPath[new], replaced != inode { n.byInode[replaced]?.unlinked = true }
      n.byPath[new] = inode
      n.byInode[inode]?.path = new
      n.byInode[inode]?.stat?.name = new.last ?? ""
      // A directory's children go with it: the kernel moved their dentries, and an open or
      // getattr of one must walk its new path.
      let below = n.byPath.filter { $0.key.count > old.count && $0.key.starts(with: old) }
      for (path, child) in below {
        n.byPath.removeValue(forKey: path)
        let moved = new + path.dropFirst(old.count)
        if let replaced = n.byPath[moved], replaced != child {
          n.byInode[replaced]?.unlinked = true
        }
        n.byPath[moved] = child
        n.byInode[child]?.path = moved
      }
    }
  }

  var count: Int {
    numbering.withLock { n in
      return n.byInode.count
    }
  }
}
