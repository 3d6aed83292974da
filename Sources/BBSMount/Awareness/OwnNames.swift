import Foundation
import Logging

/// The names that are the user: the ones the mount was given (user name, identity and its
/// short form) and the ones it learned from the board.
///
/// A board may show the user under a name the mount was never told (an identity's nickname,
/// a board's renaming). When a post this mount sent comes back in a room, the author of that
/// line is the user: the name is learned, so lines naming it are mentions and lines by it are
/// neither unread nor mentions. A hostile board renaming the user on every echo must not grow
/// the set without bound: at most ``maximumLearned`` learned names are kept, the newest. They
/// are kept with the unread counts (`history=on`), so a remount knows them before the user's
/// first post.
final class OwnNames: @unchecked Sendable {
  private let given: [String]
  private let highlights: [String]
  /// Where learned names are kept between mounts (nil: not kept).
  private let path: String?
  private let logger: Logger
  private static let writer = DispatchQueue(label: "mount9bbs.names")
  private let lock = NSLock()
  /// Learned names, oldest first, each lower-cased and not a given one.
  private var learned: [String] = []
  private var own: Set<String>
  private var matcher: MentionMatcher
  /// Posts sent and not yet seen back, oldest first.
  private var expected: [(room: String, text: String, sent: ContinuousClock.Instant)] = []
  /// Learned names kept at most.
  static let maximumLearned = 4
  /// A longer author is not learned (a nickname is short; a hostile board's 64 KiB "name"
  /// would make every open of `chat/mentions` start with it).
  static let longestName = 64
  /// Posts awaited at most (a flood of posts keeps the newest).
  static let maximumExpected = 64
  /// A post not back within this is not awaited any more (the board refused or dropped it).
  static let echoWait: Duration = .seconds(60)

  /// - Parameters:
  ///   - names: the names the mount knows are the user's.
  ///   - highlights: words that make a line a mention without being the user's names.
  ///   - directory: where learned names are kept between mounts (nil: not kept).
  init(
    names: [String], highlights: [String], directory: String? = nil,
    logger: Logger = Logger(label: "mount9bbs.names")
  ) {
    given = names.filter { !$0.isEmpty }
    self.highlights = highlights
    self.logger = logger
    path = directory.map { $0 + "/names.learned" }
    let givenLowered = Set(given.map { $0.lowercased() })
    if let path, let data = FileManager.default.contents(atPath: path),
      let kept = try? JSONDecoder().decode([String].self, from: data)
    {
      // Bounded as when learned: the file is the mount's, but a hostile board wrote the names.
      var seen = givenLowered
      learned = Array(
        kept.map { $0.lowercased() }
          .filter { !$0.isEmpty && $0.utf8.count <= Self.longestName && seen.insert($0).inserted }
          .suffix(Self.maximumLearned))
    }
    own = givenLowered.union(learned)
    matcher = MentionMatcher(names: given + learned + highlights)
  }

  /// Waits for the learned names to be written (unmount).
  func flush() { Self.writer.sync {} }

  /// The names learned so far, oldest first.
  var learnedNames: [String] { lock.withLock { learned } }

  /// The names and highlight words a mention names, given ones first.
  var words: [String] {
    lock.withLock {
      var seen = Set<String>()
      return (given + learned + highlights).filter { seen.insert($0.lowercased()).inserted }
    }
  }

  /// Whether `author` is the user.
  func isOwn(_ author: String) -> Bool {
    lock.withLock { own.contains(author.lowercased()) }
  }

  /// Whether `text` names the user or a highlight word.
  func mentions(_ text: Substring) -> Bool {
    lock.withLock { matcher }.matches(text)
  }

  /// This mount sent `payload` (`room:text`, one line) to the board.
  func sent(_ payload: [UInt8]) {
    guard let colon = payload.firstIndex(of: UInt8(ascii: ":")) else { return }
    let room = String(decoding: payload[..<colon], as: UTF8.self)
    let text = Self.trimmed(String(decoding: payload[(colon + 1)...], as: UTF8.self))
    // A post with a line break or control character comes back changed (split, escaped).
    guard !room.isEmpty, !text.isEmpty,
      !text.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F })
    else { return }
    lock.withLock {
      expected.append((room, text, .now))
      if expected.count > Self.maximumExpected {
        expected.removeFirst(expected.count - Self.maximumExpected)
      }
    }
  }

  /// A line by `author` saying `text` came in `room`: if it is a post this mount sent, the
  /// author is learned as one of the user's names. Returns whether the line is the user's own.
  @discardableResult
  func received(room: String, author: String, text: Substring) -> Bool {
    let name = author.lowercased()
    return lock.withLock {
      let now = ContinuousClock.now
      expected.removeAll { $0.sent.duration(to: now) > Self.echoWait }
      if !expected.isEmpty, !name.isEmpty,
        let index = expected.firstIndex(where: { $0.room == room && $0.text == Self.trimmed(text) })
      {
        expected.remove(at: index)
        if !own.contains(name) && name.utf8.count <= Self.longestName { learnLocked(name) }
      }
      return own.contains(name)
    }
  }

  private func learnLocked(_ name: String) {
    learned.append(name)
    if learned.count > Self.maximumLearned {
      learned.removeFirst(learned.count - Self.maximumLearned)
    }
    let all = given.map { $0.lowercased() } + learned
    own = Set(all)
    matcher = MentionMatcher(names: all + highlights)
    guard let path else { return }
    let names = learned
    Self.writer.async { [logger] in
      do {
        try JSONEncoder().encode(names).write(to: URL(fileURLWithPath: path), options: .atomic)
      } catch {
        logger.warning("learned names: cannot write \(path): \(error)")
      }
    }
  }

  /// `text` without the line end and trailing spaces a board may drop.
  private static func trimmed<S: StringProtocol>(_ text: S) -> String {
    var scalars = Substring(text).unicodeScalars
    while let last = scalars.last, last == "\n" || last == "\r" || last == " " {
      scalars = scalars.dropLast()
    }
    return String(scalars)
  }
}
