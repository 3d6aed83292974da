import Foundation
import Logging
import Synchronization

/// The names that are the user: the ones the mount was given (user name, identity and its
/// short form) and the ones it learned from the board.
///
/// A board may show the user under a name the mount was never told (an identity's nickname,
/// a board's renaming). When a post this mount sent comes back in a room, the author of that
/// line is the user: the name is learned, so lines naming it are mentions and lines by it are
/// neither unread nor mentions. Someone else may say the same text just before the echo: when
/// the text comes back again within ``ambiguityWindow`` under a name that is the user's, the
/// name learned from the first line is given up again. (Before the board's name for the user
/// is known, which of two such authors is the user cannot be told: the first is learned.) A
/// hostile
/// board renaming the user on every echo must not grow the set without bound: at most
/// ``maximumLearned`` learned names are kept, the newest. They are kept with the unread counts
/// (`history=on`), so a remount knows them before the user's first post.
final class OwnNames: Sendable {
  /// A post sent and not yet seen back (or seen back once, from a name not known to be the
  /// user's, and still watched for a second author).
  private struct Expected {
    let room: String
    let text: String
    let sent: ContinuousClock.Instant
    /// The author the text first came back from, with when and whether it was learned then.
    var answer: (author: String, at: ContinuousClock.Instant, learned: Bool)?
  }

  private struct State {
    /// Learned names, oldest first, each lower-cased and not a given one.
    var learned: [String]
    var own: Set<String>
    var matcher: MentionMatcher
    /// Posts sent, oldest first.
    var expected: [Expected] = []
  }

  private let given: [String]
  private let highlights: [String]
  /// Where learned names are kept between mounts (nil: not kept).
  private let path: String?
  private let logger: Logger
  private static let writer = DispatchQueue(label: "mount9bbs.names")
  private let state: Mutex<State>
  /// Learned names kept at most.
  static let maximumLearned = 4
  /// A longer author is not learned (a nickname is short; a hostile board's 64 KiB "name"
  /// would make every open of `chat/mentions` start with it).
  static let longestName = 64
  /// Posts awaited at most (a flood of posts keeps the newest).
  static let maximumExpected = 64
  /// A post not back within this is not awaited any more (the board refused or dropped it).
  static let echoWait: Duration = .seconds(60)
  /// A post's text coming back under one of the user's names within this of coming back
  /// under another name shows that other name was someone else's: it is given up.
  static let ambiguityWindow: Duration = .seconds(10)

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
    var learned: [String] = []
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
    state = Mutex(
      State(
        learned: learned, own: givenLowered.union(learned),
        matcher: MentionMatcher(names: given + learned + highlights)))
  }

  /// Waits for the learned names to be written (unmount).
  func flush() { Self.writer.sync {} }

  /// The names learned so far, oldest first.
  var learnedNames: [String] { state.withLock { $0.learned } }

  /// The names and highlight words a mention names, given ones first.
  var words: [String] {
    let learned = learnedNames
    var seen = Set<String>()
    return (given + learned + highlights).filter { seen.insert($0.lowercased()).inserted }
  }

  /// Whether `author` is the user.
  func isOwn(_ author: String) -> Bool {
    state.withLock { $0.own.contains(author.lowercased()) }
  }

  /// Whether `text` names the user or a highlight word.
  func mentions(_ text: Substring) -> Bool {
    state.withLock { $0.matcher }.matches(text)
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
    state.withLock { state in
      state.expected.append(Expected(room: room, text: text, sent: .now))
      if state.expected.count > Self.maximumExpected {
        state.expected.removeFirst(state.expected.count - Self.maximumExpected)
      }
    }
  }

  /// A line by `author` saying `text` came in `room`: if it is a post this mount sent, the
  /// author is learned as one of the user's names. Returns whether the line is the user's own.
  @discardableResult
  func received(room: String, author: String, text: Substring) -> Bool {
    let name = author.lowercased()
    let (own, changed) = state.withLock { state in
      let changed = Self.match(&state, room: room, name: name, text: text, given: given)
      if changed { state.matcher = MentionMatcher(names: given + state.learned + highlights) }
      return (state.own.contains(name), changed ? state.learned : nil)
    }
    if let changed { write(changed) }
    return own
  }

  /// Matches a line against the posts awaited, learning or giving up a name. Returns whether
  /// the learned names changed.
  private static func match(
    _ state: inout State, room: String, name: String, text: Substring, given: [String]
  ) -> Bool {
    let now = ContinuousClock.now
    state.expected.removeAll { expected in
      if let answer = expected.answer { return answer.at.duration(to: now) > ambiguityWindow }
      return expected.sent.duration(to: now) > echoWait
    }
    let text = trimmed(text)
    guard !name.isEmpty,
      let index = state.expected.firstIndex(where: {
        $0.room == room && $0.text == text && $0.answer?.author != name
      })
    else { return false }
    if let answer = state.expected[index].answer {
      // The text came back again. Under a name that is the user's, this is the echo and the
      // first author someone saying the same words just before it; under another, it is
      // someone saying them after.
      guard state.own.contains(name) else { return false }
      state.expected.remove(at: index)
      guard answer.learned, let learned = state.learned.firstIndex(of: answer.author) else {
        return false
      }
      state.learned.remove(at: learned)
      state.own = Set(given.map { $0.lowercased() } + state.learned)
      return true
    }
    if state.own.contains(name) {
      state.expected.remove(at: index)
      return false
    }
    let learns = name.utf8.count <= longestName
    state.expected[index].answer = (name, now, learns)
    guard learns else { return false }
    state.learned.append(name)
    if state.learned.count > maximumLearned {
      state.learned.removeFirst(state.learned.count - maximumLearned)
    }
    state.own = Set(given.map { $0.lowercased() } + state.learned)
    return true
  }

  private func write(_ names: [String]) {
    guard let path else { return }
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
