import Foundation
import Logging
import Synchronization

/// `chat/unread`: how many lines each room received since it was last read to its end through
/// this mount. Kept on disk with the rooms' history (`history=on`), so a remount starts with
/// the counts the last mount left.
final class UnreadLedger: Sendable {
  /// A place in a room's transcript: the feed (alive for the mount) and a byte offset.
  struct Place: Sendable, Equatable {
    let feed: ObjectIdentifier
    let offset: UInt64

    /// Whether this place is beyond `other` (a place in another feed, or none, is behind).
    func isPast(_ other: Place?) -> Bool {
      other.map { $0.feed != feed || $0.offset < offset } ?? true
    }
  }

  private struct State {
    var counts: [String: Int] = [:]
    /// Where each room was last read to its end. A room's new lines reach its transcript (and
    /// so its readers) before they are counted: lines ending there or before were seen.
    var readTo: [String: Place] = [:]
    var writeScheduled = false
  }

  private let state: Mutex<State>
  private let path: String?
  private let logger: Logger
  private static let writer = DispatchQueue(label: "mount9bbs.unread")
  /// Rooms kept; a hostile server's thousands of rooms cannot grow it without bound.
  static let maximumRooms = 4096
  /// How long a change waits before the counts are written (changes meanwhile share a write).
  static let writeDelay: Duration = .milliseconds(200)

  /// - Parameter directory: where the counts are kept between mounts; nil: not kept.
  init(directory: String?, logger: Logger) {
    path = directory.map { $0 + "/unread.counts" }
    self.logger = logger
    if let directory {
      try? FileManager.default.createDirectory(
        atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700]
      )
    }
    state = Mutex(State(counts: path.map(Self.kept(at:)) ?? [:]))
  }

  /// The counts a previous mount wrote at `path` (none if there is no readable file).
  private static func kept(at path: String) -> [String: Int] {
    guard let data = FileManager.default.contents(atPath: path) else { return [:] }
    var counts: [String: Int] = [:]
    // JSON: a room name is any text a server sends, newlines included, and must not become
    // a second record (another room's count) when read back.
    if let kept = try? JSONDecoder().decode([String: Int].self, from: data) {
      for (room, count) in kept.prefix(maximumRooms) where count >= 0 { counts[room] = count }
      return counts
    }
    // The first format, `ROOM COUNT` lines.
    for line in String(decoding: data, as: UTF8.self).split(separator: "\n") {
      guard let space = line.lastIndex(of: " "), let count = Int(line[line.index(after: space)...]),
        count >= 0
      else { continue }
      counts[String(line[..<space])] = count
    }
    return counts
  }

  /// Counts `lines` new lines of `room`, unless they end at `end` or before it in the place
  /// a reader has already read the room to (see ``read(_:through:)``).
  func add(_ lines: Int, to room: String, endingAt end: Place? = nil) {
    let changed = state.withLock { state in
      guard state.counts[room] != nil || state.counts.count < Self.maximumRooms else {
        return false
      }
      if let end, !end.isPast(state.readTo[room]) { return false }
      state.counts[room, default: 0] += lines
      return true
    }
    if changed { scheduleWrite() }
  }

  /// `room` was read to its end (at `place`, when known: lines counted later that end there
  /// or before it are not unread).
  func read(_ room: String, through place: Place? = nil) {
    let changed = state.withLock { state in
      if let place, place.isPast(state.readTo[room]),
        state.readTo[room] != nil || state.readTo.count < Self.maximumRooms
      {
        state.readTo[room] = place
      }
      guard let count = state.counts[room], count != 0 else { return false }
      state.counts[room] = 0
      return true
    }
    if changed { scheduleWrite() }
  }

  /// `room` is gone from the board: its count goes too.
  func forget(_ room: String) {
    let changed = state.withLock { state in
      state.readTo[room] = nil
      return state.counts.removeValue(forKey: room) != nil
    }
    if changed { scheduleWrite() }
  }

  func count(_ room: String) -> Int { state.withLock { $0.counts[room] ?? 0 } }

  var all: [String: Int] { state.withLock { $0.counts } }

  /// The file's text: one `ROOM COUNT` line per room of `rooms` and per room with a count,
  /// sorted by name.
  func render(rooms: Set<String>) -> [UInt8] {
    let counts = all
    let names = rooms.union(counts.filter { $0.value > 0 }.keys).sorted()
    return Array(
      names.map { "\(EventLog.roomField($0)) \(counts[$0] ?? 0)\n" }
        .joined().utf8)
  }

  private func scheduleWrite() {
    guard path != nil else { return }
    let schedule = state.withLock { state in
      defer { state.writeScheduled = true }
      return !state.writeScheduled
    }
    guard schedule else { return }
    Self.writer.asyncAfter(deadline: .now() + Self.writeDelay.timeInterval) { [self] in
      state.withLock { $0.writeScheduled = false }
      write()
    }
  }

  /// Writes the counts now (unmount).
  func flush() {
    Self.writer.sync { write() }
  }

  private func write() {
    guard let path else { return }
    do {
      let encoder = JSONEncoder()
      encoder.outputFormatting = .sortedKeys
      try encoder.encode(all).write(to: URL(fileURLWithPath: path), options: .atomic)
    } catch {
      logger.warning("unread counts: cannot write \(path): \(error)")
    }
  }
}
