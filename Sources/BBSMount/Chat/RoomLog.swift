// The rooms' transcripts as files that end: `chat/log/ROOM`.
//
// A room file streams: a read at its end waits for the next line, so `grep`, `wc -l` and
// `less` never finish on it. `chat/log/ROOM` is the same transcript (the room's feed: its
// lines exactly as the room file shows them, the same escaping, `-o rawtext` honoured, the
// history kept between mounts) cut where it stood when the file was opened. An open first
// catches the room up as an open of the room does (bounded by ``RoomFeed/catchUpWait``),
// then fixes the file's extent: reads end there, and that opener's `fstat` says that size,
// so `stat`, `wc -c`, `cp` and `less` agree. Nothing is copied: the handle reads the
// feed's transcript by offset, whose bytes never change.
//
// Why a directory `log` in the chat directory: next to the rooms, found by `ls chat`, one
// name per room as in `chat/`, so `grep alice chat/log/*` searches every room. A 9BBS names
// its chat files `post`, `users` and rooms; a server room named `log` is shadowed by it
// (said once in the log) and still reachable for posts through `chat/post` (`log:text`).

import Foundation
import FuseKit
import Logging
import NinePClient
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// `chat/log/`: where it sits, what it lists and how its names are looked up.
enum RoomLogs {
  /// The directory's name in the chat directory.
  static let directoryName = "log"

  /// The room file whose transcript a log file shows: `chat/log/ROOM` → `chat/ROOM`.
  static func roomPath(of logPath: [String]) -> [String] {
    Array(logPath.dropLast(2)) + logPath.suffix(1)
  }

  /// Answers a lookup of `chat/log` or of a file in it; false for any other path.
  static func lookup(
    _ path: [String], in tree: MountTree,
    _ completion: @escaping @Sendable (Result<InodeTable.Node, NinePError>) -> Void
  ) -> Bool {
    switch tree.attributes.classifier.kind(of: path) {
    case .roomLogs?:
      completion(.success(tree.inodes.record(path: path, kind: .roomLogs, stat: nil)))
      return true
    case .roomLog(let name)?:
      let room = roomPath(of: path)
      // A log file exists for each room the chat directory lists, and only for those.
      tree.lookup(Array(room.dropLast()), name) { found in
        completion(
          found.flatMap { node in
            guard case .room = node.kind else {
              return .failure(.notFound(path: "/" + path.joined(separator: "/")))
            }
            return .success(
              tree.inodes.record(path: path, kind: .roomLog(name: name), stat: nil))
          })
      }
      return true
    default:
      return false
    }
  }

  /// The listing of `chat/log`: one file per room of the chat directory.
  static func entries(
    of node: InodeTable.Node, in tree: MountTree,
    _ completion: @escaping @Sendable (Result<[DirectoryEntry], NinePError>) -> Void
  ) {
    let chat = Array(node.path.dropLast())
    tree.listings.listing(chat, maxAge: .zero) { listed in
      completion(
        listed.map { listing in
          let parent = tree.inodes.inode(for: chat) ?? .root
          var entries = [
            DirectoryEntry(name: ".", inode: node.inode, mode: S_IFDIR),
            DirectoryEntry(name: "..", inode: parent, mode: S_IFDIR),
          ]
          for stat in listing.stats {
            guard case .room = tree.attributes.kind(of: chat + [stat.name], stat: stat) else {
              continue
            }
            let child = tree.inodes.record(
              path: node.path + [stat.name], kind: .roomLog(name: stat.name), stat: nil)
            entries.append(
              DirectoryEntry(name: stat.name, entry: tree.attributes.entry(for: child)))
          }
          return entries
        })
    }
  }

  /// The entry of `chat/log` in the listing of the chat directory `chat`.
  static func entry(in chat: [String], of tree: MountTree) -> DirectoryEntry {
    let node = tree.inodes.record(path: chat + [directoryName], kind: .roomLogs, stat: nil)
    return DirectoryEntry(name: directoryName, entry: tree.attributes.entry(for: node))
  }

  private static let warnedOfShadow = Mutex(false)

  /// Says once that the server has a room named like the log directory, which hides it.
  static func shadowed(_ chat: [String], _ logger: Logger) {
    let warned = warnedOfShadow.withLock { warned in
      defer { warned = true }
      return warned
    }
    guard !warned else { return }
    logger.warning(
      "the board has a room named '\(directoryName)' in /\(chat.joined(separator: "/")): the mount's transcript directory of that name hides it (post to it with '\(directoryName):text' in chat/post)"
    )
  }
}

/// An open `chat/log/ROOM`: the room's transcript from its oldest kept byte to where it
/// stood at open.
final class RoomLogHandle: OpenHandle {
  let feed: RoomFeed
  /// The log file's inode.
  let inode: FuseInode
  /// The thread that opened it: its `fstat` is told this open's size.
  let opener: pid_t
  /// The transcript offsets this open shows.
  let extent: Range<UInt64>
  /// When the last line shown arrived (the file's mtime for this open).
  let modified: Date

  init(feed: RoomFeed, inode: FuseInode, opener: pid_t) {
    self.feed = feed
    self.inode = inode
    self.opener = opener
    extent = feed.extent
    modified = feed.modified
  }

  /// The file's size for this open.
  var size: UInt64 { UInt64(extent.count) }

  /// Opens the log of the room `feed` reads once the room has caught up (bounded).
  static func open(
    _ request: FuseRequest, feed: RoomFeed, inode: FuseInode, info: FuseFileInfo,
    handles: HandleTable
  ) {
    let pending = PendingReply(request)
    guard !pending.isAnswered else { return }
    let opener = request.caller.pid
    feed.catchUpForStat {
      guard let request = pending.take() else { return }
      var info = info
      info.handle = handles.store(RoomLogHandle(feed: feed, inode: inode, opener: opener))
      if !request.replyOpen(info) { handles.remove(info.handle) }
    }
  }

  func read(_ request: FuseRequest, size: Int, offset: UInt64) {
    guard offset < self.size else {
      request.replyData([UInt8]())
      return
    }
    guard
      let data = feed.read(at: extent.lowerBound + offset, count: size, before: extent.upperBound)
    else {
      // The room grew past the transcript's capacity while this open read slowly: what it
      // would read next is gone from memory. An error, not a silent jump.
      request.replyError(EIO)
      return
    }
    request.replyData(data)
  }
}
