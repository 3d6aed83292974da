import Foundation
import Logging
import Synchronization

/// The rooms this member reads through the mount, most recent first, and how the board
/// answers caught-up reads; kept between mounts with the rooms' history. What `watch=mine` (a
/// 9BBS board's default) watches.
///
/// A board that answers caught-up reads at once (Gen-1) keeps one read position for everyone,
/// so a mount reading in the background would take lines from its other readers: on such a
/// board nothing is watched.
final class MemberRooms: Sendable {
  private struct Kept: Codable {
    var rooms: [String] = []
    /// The board answers caught-up reads at once (learned from a room read).
    var answersAtOnce = false
  }

  private let kept: Mutex<Kept>
  private let path: String?
  private let logger: Logger
  private static let writer = DispatchQueue(label: "mount9bbs.rooms")
  /// Rooms remembered; a hostile server's thousands of rooms cannot grow the file.
  static let maximumRooms = 64

  /// - Parameter directory: where the rooms are kept between mounts; nil: not kept.
  init(directory: String?, logger: Logger) {
    path = directory.map { $0 + "/rooms.mine" }
    self.logger = logger
    kept = Mutex(path.map(Self.kept(at:)) ?? Kept())
  }

  /// What a previous mount wrote at `path` (nothing if there is no readable file).
  private static func kept(at path: String) -> Kept {
    guard let data = FileManager.default.contents(atPath: path),
      var kept = try? JSONDecoder().decode(Kept.self, from: data)
    else { return Kept() }
    var seen = Set<String>()
    // A room name is one path component; duplicates count once.
    kept.rooms = Array(
      kept.rooms.filter { !$0.isEmpty && !$0.contains("/") && seen.insert($0).inserted }
        .prefix(maximumRooms))
    return kept
  }

  /// The `count` rooms read most recently (none on a board that answers reads at once).
  func recent(_ count: Int) -> [String] {
    kept.withLock { $0.answersAtOnce ? [] : Array($0.rooms.prefix(count)) }
  }

  /// The member read `room`. Returns whether the rooms watched may have changed.
  @discardableResult
  func note(_ room: String) -> Bool {
    guard !room.isEmpty, !room.contains("/") else { return false }
    return change { kept in
      guard kept.rooms.first != room else { return false }
      kept.rooms.removeAll { $0 == room }
      kept.rooms.insert(room, at: 0)
      if kept.rooms.count > Self.maximumRooms {
        kept.rooms.removeLast(kept.rooms.count - Self.maximumRooms)
      }
      return true
    }
  }

  /// A room read showed how the board answers caught-up reads. Returns whether that is news
  /// (the rooms watched may have changed).
  @discardableResult
  func learned(boardParksReads parks: Bool) -> Bool {
    change { kept in
      defer { kept.answersAtOnce = !parks }
      return kept.answersAtOnce == parks
    }
  }

  /// Applies `body` and, if it says it changed something, writes what is kept.
  private func change(_ body: (inout Kept) -> Bool) -> Bool {
    let changed = kept.withLock { kept -> Kept? in body(&kept) ? kept : nil }
    guard let changed else { return false }
    if let path {
      Self.writer.async { [logger] in
        do {
          try JSONEncoder().encode(changed).write(to: URL(fileURLWithPath: path), options: .atomic)
        } catch {
          logger.warning("member's rooms: cannot write \(path): \(error)")
        }
      }
    }
    return true
  }

  /// Waits for the writes under way (unmount).
  func flush() { Self.writer.sync {} }
}
