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
/// waiters for parked reads (facts §1.3–§1.5). Thread-safe; wake-up callbacks run on the
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

  /// Posts a `/chat/post` payload from `author` (facts §1.5).
  ///
  /// A `:` within the first 32 bytes names the room (`room:text`), else the room is `lobby`.
  /// The text is cut to the text limit, then exactly one trailing newline is removed; the
  /// author is cut to the author limit.
  /// - Throws: ``BoardError/notFound`` for an unknown or empty room name.
  @discardableResult
  public func post(payload: [UInt8], author: BoardUser) throws(BoardError) -> ChatMessage {
    var room = "lobby"
    var text = payload[...]
    if let colon = payload.prefix(32).firstIndex(of: UInt8(ascii: ":")) {
      room = String(decoding: payload[..<colon], as: UTF8.self)
      text = payload[(colon + 1)...]
    }
    return try post(room: room, text: Array(text), author: author)
  }

  /// Posts `text` to `room` from `author` (shown by name), applying the text and author
  /// limits and removing one trailing newline.
  @discardableResult
  public func post(room: String, text: [UInt8], author: BoardUser) throws(BoardError)
    -> ChatMessage
  {
    var body = Array(text.prefix(limits.maxChatText))
    if body.last == UInt8(ascii: "\n") { body.removeLast() }
    let name = displayName(author)
    let key = cursorKey(author)
    let stamp = limits.clock == .uptime ? clock.uptimeMillis : clock.wallMillis
    let now = clock.uptimeMillis

    let (message, wakes) = try state.withLock { state throws(BoardError) in
      guard var entry = state.rooms[room] else { throw BoardError.notFound }
      let message = ChatMessage(
        room: room, id: entry.nextID, author: name, text: body, stamp: stamp)
      entry.nextID += 1
      entry.messages.append(message)
      while entry.messages.count > limits.chatRingCapacity { entry.messages.removeFirst() }
      state.rooms[room] = entry
      state.users[key]?.lastActivity = now
      var wakes: [@Sendable () -> Void] = []
      for (id, waiter) in state.waiters where waiter.room == room {
        wakes.append(waiter.wake)
        state.waiters[id] = nil
      }
      return (message, wakes)
    }
    do {
      try store.appendChatMessage(message, keep: limits.chatRingCapacity)
    } catch {
      logger.error("chat: could not store message \(message.id) in \(room): \(error)")
    }
    for wake in wakes { wake() }
    return message
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

  /// The presence list `<name> (idle: <N>s)\n`, whole lines up to `count` bytes.
  public func usersList(count: Int) -> [UInt8] {
    let now = clock.uptimeMillis
    return state.withLock { state in
      var out: [UInt8] = []
      for key in state.userOrder {
        guard let user = state.users[key] else { continue }
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
