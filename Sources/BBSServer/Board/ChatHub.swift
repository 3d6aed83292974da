import DequeModule
import Logging
import Synchronization

/// Identifies a registered chat waiter (see ``ChatHub/addWaiter(room:wake:)``).
public struct ChatWaiterID: Hashable, Sendable {
  let raw: UInt64
}

/// What a chat read that may park produced.
public enum ChatReadOutcome: Sendable, Equatable {
  /// Whole lines, at least one.
  case data([UInt8])
  /// Nothing delivered and not parked: the next line is longer than `count`.
  case empty
  /// The reader is caught up; the waiter fires on the next post to the room.
  case parked(ChatWaiterID)
}

/// The chat rooms of a 9BBS: ring buffers of lines, per-user read cursors, presence and
/// waiters for parked reads (docs/board-facts.md §1.3–§1.5). Thread-safe; wake-ups run on the
/// posting thread after the lock is released.
public final class ChatHub: Sendable {
  private struct Room {
    var messages: Deque<ChatMessage> = []
    var nextID: UInt64 = 1
  }
  private struct User {
    var name: String
    var lastActivity: UInt64
    var cursors: [String: UInt64] = [:]
  }
  private struct Waiter {
    var room: String
    var wake: @Sendable () -> Void
  }
  private struct State {
    var rooms: [String: Room] = [:]
    var userOrder: [String] = []
    var users: [String: User] = [:]
    /// Attached sessions per user key (``arrive(_:)``/``leave(_:)``).
    var sessions: [String: Int] = [:]
    var waiters: [UInt64: Waiter] = [:]
    var nextWaiter: UInt64 = 1
  }

  /// Chat room names in listing order.
  public let roomNames: [String]
  private let limits: BoardLimits
  private let clock: any BoardClock
  private let store: any BoardStore
  private let logger: Logger
  private let state: Mutex<State>
  /// Held for a whole post (store, then show); never taken under `state`.
  // house: its job is the store's write (and its failure's log line) under it.
  private let posting = Mutex(())

  /// Creates the chat, loading each room's recent history from the store.
  public init(
    rooms: [String], limits: BoardLimits, clock: any BoardClock, store: any BoardStore,
    logger: Logger
  ) throws(BoardError) {
    var seen = Set<String>()
    roomNames = rooms.filter { seen.insert($0).inserted }
    self.limits = limits
    self.clock = clock
    self.store = store
    self.logger = logger
    var initial = State()
    for name in roomNames {
      var room = Room()
      let history = try store.chatMessages(room: name, limit: limits.chatRingCapacity)
      room.messages = Deque(history)
      room.nextID = (history.last?.id ?? 0) + 1
      initial.rooms[name] = room
    }
    state = Mutex(initial)
  }

  // MARK: Posting

  /// Posts a `/chat/post` payload from `author` (docs/board-facts.md §1.5).
  ///
  /// A `:` within the first 32 bytes of the first line names the room (`room:text`), else the
  /// room is `lobby`. One post is one line: each line of a payload of several (`\n` or
  /// `\r\n` between them, one at the end ignored) is a post of its own by the same author,
  /// so no line can be made to look like someone else's. Each is cut to the text limit; the
  /// author is cut to the author limit.
  /// - Throws: ``BoardError/notFound`` for an unknown or empty room name,
  ///   ``BoardError/invalidArgument`` for any other control character than tab (a lone `\r`
  ///   would let a terminal overwrite the author) or, with ``BoardLimits/refusesEmptyPosts``,
  ///   a post with no visible text (its blank lines are dropped), ``BoardError/storage(_:)`` when the store
  ///   cannot keep the posts (then none is posted).
  /// Returns the last message posted.
  @discardableResult
  public func post(payload: [UInt8], author: BoardUser) throws(BoardError) -> ChatMessage {
    var room = "lobby"
    var text = payload[...]
    let firstLine = payload.firstIndex(of: 0x0A) ?? payload.endIndex
    if let colon = payload[..<firstLine].prefix(32).firstIndex(of: UInt8(ascii: ":")) {
      room = String(decoding: payload[..<colon], as: UTF8.self)
      text = payload[(colon + 1)...]
    }
    return try post(
      room: room, lines: Self.lines(of: text, refusingControls: limits.refusesControlCharacters),
      author: author)
  }

  /// Posts `text` to `room` from `author` (shown by name), applying the text and author
  /// limits and removing one trailing newline; a text of several lines makes one post each.
  /// - Throws: as ``post(payload:author:)``.
  @discardableResult
  public func post(room: String, text: [UInt8], author: BoardUser) throws(BoardError)
    -> ChatMessage
  {
    try post(
      room: room,
      lines: Self.lines(of: text[...], refusingControls: limits.refusesControlCharacters),
      author: author)
  }

  /// The lines of a post's text: split at `\n` (a `\r` before it dropped, one at the end
  /// ignored). With `refusingControls`, other control characters than tab are refused.
  static func lines(of text: ArraySlice<UInt8>, refusingControls: Bool = true) throws(BoardError)
    -> [ArraySlice<UInt8>]
  {
    var body = text
    if body.last == 0x0A {
      body = body.dropLast()
      if body.last == 0x0D { body = body.dropLast() }
    }
    var lines: [ArraySlice<UInt8>] = []
    var start = body.startIndex
    var index = body.startIndex
    while index < body.endIndex {
      let byte = body[index]
      if byte == 0x0A {
        var line = body[start..<index]
        if line.last == 0x0D { line = line.dropLast() }
        lines.append(line)
        start = index + 1
      } else if byte == 0x0D && refusingControls {
        guard index + 1 < body.endIndex, body[index + 1] == 0x0A else {
          throw BoardError.invalidArgument
        }
      } else if refusingControls && ((byte < 0x20 && byte != 0x09) || byte == 0x7F) {
        throw BoardError.invalidArgument
      }
      index += 1
    }
    lines.append(body[start...])
    return lines
  }

  /// Stores the lines first and shows them afterwards, so a line readers saw is a stored
  /// line; posts are serialised by `posting`, so ids stay in order without holding the room
  /// lock (which readers need) during the write.
  private func post(room: String, lines: [ArraySlice<UInt8>], author: BoardUser)
    throws(BoardError) -> ChatMessage
  {
    var lines = lines
    if limits.refusesEmptyPosts {
      // A blank line is a line of noise under the author's name; a post of nothing but
      // blanks is refused.
      lines.removeAll { $0.allSatisfy { $0 == 0x20 || $0 == 0x09 } }
      guard !lines.isEmpty else { throw BoardError.invalidArgument }
    }
    let name = displayName(author)
    let key = cursorKey(author)
    let stamp = limits.clock == .uptime ? clock.uptimeMillis : clock.wallMillis
    let now = clock.uptimeMillis
    let (messages, wakes) = try posting.withLock {
      _ throws(BoardError) -> ([ChatMessage], [@Sendable () -> Void]) in
      // house: `posting`, then `state`; never the other way round.
      let first = try state.withLock { state throws(BoardError) -> UInt64 in
        guard let entry = state.rooms[room] else { throw BoardError.notFound }
        return entry.nextID
      }
      let messages = lines.enumerated().map { offset, line in
        ChatMessage(
          room: room, id: first + UInt64(offset), author: name,
          text: Array(line.prefix(limits.maxChatText)), stamp: stamp)
      }
      do throws(BoardError) {
        try store.appendChatMessages(messages, keep: limits.chatRingCapacity)
      } catch {
        logger.error("chat: could not store \(messages.count) line(s) in \(room): \(error)")
        throw error
      }
      // house: `posting`, then `state`, as above.
      let wakes = state.withLock { state -> [@Sendable () -> Void] in
        guard var entry = state.rooms[room] else { return [] }
        entry.nextID = first + UInt64(messages.count)
        entry.messages.append(contentsOf: messages)
        while entry.messages.count > limits.chatRingCapacity { entry.messages.removeFirst() }
        state.rooms[room] = entry
        state.users[key]?.lastActivity = now
        var wakes: [@Sendable () -> Void] = []
        for (id, waiter) in state.waiters where waiter.room == room {
          wakes.append(waiter.wake)
          state.waiters[id] = nil
        }
        return wakes
      }
      return (messages, wakes)
    }
    for wake in wakes { wake() }
    // `lines` is never empty: a text without a newline is one line.
    return messages[messages.count - 1]
  }

  // MARK: Reading

  /// Reads new lines of `room` for `user`: whole lines, oldest first, at most `count` bytes,
  /// moving the user's cursor (kept by ``BoardUser/id``) past the lines delivered. A user's
  /// first read returns the backlog and registers the user in `/chat/users` (by name).
  /// - Throws: ``BoardError/notFound`` for an unknown room, ``BoardError/outOfMemory`` when the
  ///   user table is full.
  public func read(room: String, user: BoardUser, count: Int) throws(BoardError) -> [UInt8] {
    switch try readOrPark(room: room, user: user, count: count, wake: nil) {
    case .data(let bytes): return bytes
    case .empty, .parked: return []
    }
  }

  /// Like ``read(room:user:count:)``, but when the user is caught up and `wake` is given, it
  /// registers `wake` as a waiter in the same critical section (so no post can slip in
  /// between) and returns ``ChatReadOutcome/parked(_:)``.
  public func readOrPark(
    room: String, user: BoardUser, count: Int, wake: (@Sendable () -> Void)?
  ) throws(BoardError) -> ChatReadOutcome {
    let name = cursorKey(user)
    let shown = displayName(user)
    let now = clock.uptimeMillis
    return try state.withLock { state throws(BoardError) -> ChatReadOutcome in
      guard let entry = state.rooms[room] else { throw BoardError.notFound }
      if state.users[name] == nil {
        if let max = limits.maxChatUsers, state.userOrder.count >= max {
          throw BoardError.outOfMemory
        }
        state.userOrder.append(name)
        state.users[name] = User(name: shown, lastActivity: now)
      }
      state.users[name]?.lastActivity = now
      let cursor = state.users[name]?.cursors[room] ?? 0
      var out: [UInt8] = []
      var last = cursor
      var pending = false
      for message in entry.messages where message.id > cursor {
        let line = renderLine(message)
        if out.count + line.count > count {
          pending = true
          break
        }
        out += line
        last = message.id
      }
      if !out.isEmpty {
        state.users[name]?.cursors[room] = last
        return .data(out)
      }
      if pending { return .empty }
      guard let wake else { return .empty }
      let id = state.nextWaiter
      state.nextWaiter += 1
      state.waiters[id] = Waiter(room: room, wake: wake)
      return .parked(ChatWaiterID(raw: id))
    }
  }

  /// The rendered line `[HH:MM:SS] <from>: <text>\n` for a message.
  public func renderLine(_ message: ChatMessage) -> [UInt8] {
    let seconds: UInt64
    switch limits.clock {
    case .uptime: seconds = message.stamp / 1000
    case .wallClock: seconds = (message.stamp / 1000) % 86_400
    }
    let stamp = "[\(pad2(seconds / 3600)):\(pad2(seconds / 60 % 60)):\(pad2(seconds % 60))] "
    return Array(stamp.utf8) + Array("\(message.author): ".utf8) + message.text + [0x0A]
  }

  // MARK: Presence

  /// A session of `user` attached. Where the list shows who is present
  /// (``BoardLimits/listsConnectedUsers``), the user is listed from now until their last
  /// session ends, idle since now.
  public func arrive(_ user: BoardUser) {
    guard limits.listsConnectedUsers else { return }
    let key = cursorKey(user)
    let shown = displayName(user)
    let now = clock.uptimeMillis
    state.withLock { state in
      state.sessions[key, default: 0] += 1
      if state.users[key] == nil {
        state.userOrder.append(key)
        state.users[key] = User(name: shown, lastActivity: now)
      }
      state.users[key]?.lastActivity = now
    }
  }

  /// A session that ``arrive(_:)`` counted for `user` ended (disconnect, a new Tversion).
  public func leave(_ user: BoardUser) {
    guard limits.listsConnectedUsers else { return }
    let key = cursorKey(user)
    state.withLock { state in
      let left = (state.sessions[key] ?? 1) - 1
      state.sessions[key] = left > 0 ? left : nil
    }
  }

  /// The presence list `<name> (idle: <N>s)\n`, whole lines up to `count` bytes: users
  /// present now (``BoardLimits/listsConnectedUsers``), or every user who read a room.
  public func usersList(count: Int) -> [UInt8] {
    let now = clock.uptimeMillis
    let present = limits.listsConnectedUsers
    return state.withLock { state in
      var out: [UInt8] = []
      for key in state.userOrder {
        guard let user = state.users[key] else { continue }
        if present && state.sessions[key] == nil { continue }
        let idle = (now >= user.lastActivity ? now - user.lastActivity : 0) / 1000
        let line = Array("\(user.name) (idle: \(idle)s)\n".utf8)
        if out.count + line.count > count { break }
        out += line
      }
      return out
    }
  }

  /// What a user's line shows: their name (`guest` for none), cut to the author limit.
  private func displayName(_ user: BoardUser) -> String {
    truncateUTF8(user.name.isEmpty ? "guest" : user.name, maxBytes: limits.maxAuthor)
  }

  /// What a user's cursors and presence are kept under: their id (`guest` for none), cut to
  /// the 63 bytes a board keeps of an identity.
  private func cursorKey(_ user: BoardUser) -> String {
    truncateUTF8(user.id.isEmpty ? "guest" : user.id, maxBytes: 63)
  }

  // MARK: Waiters

  /// Registers `wake` to run once, on the next post to `room`.
  /// - Throws: ``BoardError/notFound`` for an unknown room.
  public func addWaiter(room: String, wake: @escaping @Sendable () -> Void) throws(BoardError)
    -> ChatWaiterID
  {
    try state.withLock { state throws(BoardError) in
      guard state.rooms[room] != nil else { throw BoardError.notFound }
      let id = state.nextWaiter
      state.nextWaiter += 1
      state.waiters[id] = Waiter(room: room, wake: wake)
      return ChatWaiterID(raw: id)
    }
  }

  /// Unregisters a waiter. Returns `false` if it already fired or never existed.
  @discardableResult
  public func removeWaiter(_ id: ChatWaiterID) -> Bool {
    state.withLock { $0.waiters.removeValue(forKey: id.raw) != nil }
  }

  /// Waiters currently registered (for tests and status).
  public var waiterCount: Int { state.withLock { $0.waiters.count } }
}

private func pad2(_ value: UInt64) -> String {
  value < 10 ? "0\(value)" : "\(value)"
}

/// Cuts `string` to at most `maxBytes` UTF-8 bytes without splitting a character.
func truncateUTF8(_ string: String, maxBytes: Int) -> String {
  if string.utf8.count <= maxBytes { return string }
  var result = ""
  var used = 0
  for character in string {
    let size = character.utf8.count
    if used + size > maxBytes { break }
    result.append(character)
    used += size
  }
  return result
}
