import Synchronization

/// One chat line as stored.
public struct ChatMessage: Sendable, Equatable {
  /// The chat room.
  public var room: String
  /// Increasing per room, starting at 1.
  public var id: UInt64
  /// The poster's name (already cut to the author limit).
  public var author: String
  /// The text, raw bytes (already cut to the text limit).
  public var text: [UInt8]
  /// Milliseconds, uptime or Unix depending on ``ChatClockStyle``.
  public var stamp: UInt64

  /// Creates a chat message.
  public init(room: String, id: UInt64, author: String, text: [UInt8], stamp: UInt64) {
    self.room = room
    self.id = id
    self.author = author
    self.text = text
    self.stamp = stamp
  }
}

/// One board message (`/rooms/<room>/<id>`).
public struct BoardMessage: Sendable, Equatable {
  /// The board room.
  public var room: String
  /// The decimal file name: the lower 32 bits of the requested timestamp.
  public var id: UInt32
  /// The creator's name, or `anonymous`.
  public var author: String
  /// The `Subject:` header of the last write, or empty.
  public var subject: String
  /// The body with the header block stripped.
  public var body: [UInt8]
  /// Milliseconds (Unix, or uptime in the device profile).
  public var date: UInt64
  /// The signature line; the author's name.
  public var signature: String
  /// Creation order within the room (listings use it).
  public var sequence: Int64

  /// Creates a board message.
  public init(
    room: String, id: UInt32, author: String, subject: String = "", body: [UInt8] = [],
    date: UInt64, signature: String, sequence: Int64
  ) {
    self.room = room
    self.id = id
    self.author = author
    self.subject = subject
    self.body = body
    self.date = date
    self.signature = signature
    self.sequence = sequence
  }

  /// The file as read: headers, blank line, body, blank line, signature. See
  /// ``BoardMessageStyle`` for how the headers differ between a device and the default profile.
  public func rendered(_ style: BoardMessageStyle) -> [UInt8] {
    var out = Array("From: \(author)\nTo: \(room)\n".utf8)
    switch style {
    case .device:
      out += Array("Subject: \(subject)\nDate: \(date)\nX-Date-N: \(date)\n\n".utf8)
    case .standard:
      let shown = subject.isEmpty ? impliedSubject(of: body) : subject
      out += Array(
        "Subject: \(shown)\nDate: \(rfc2822Date(millis: date))\nX-Date-N: \(date)\n\n".utf8)
    }
    out += body
    out += Array("\n\n\(signature)\n".utf8)
    return out
  }
}

/// Persistence behind a ``Board``. Implementations must be safe to call from any thread.
///
/// Chat read cursors and presence are never stored (a device keeps them in RAM).
public protocol BoardStore: Sendable {
  /// The newest `limit` chat messages of a room, oldest first.
  func chatMessages(room: String, limit: Int) throws(BoardError) -> [ChatMessage]
  /// Stores chat messages of one room, all or none, and forgets all but the newest `keep` of
  /// the room.
  func appendChatMessages(_ messages: [ChatMessage], keep: Int) throws(BoardError)
  /// Board room names in creation order.
  func boardRooms() throws(BoardError) -> [String]
  /// Adds a board room.
  func addBoardRoom(_ name: String) throws(BoardError)
  /// A board room's messages in creation order.
  func boardMessages(room: String) throws(BoardError) -> [BoardMessage]
  /// Inserts or replaces a board message (keyed by room and id).
  func saveBoardMessage(_ message: BoardMessage) throws(BoardError)
  /// Forgets a board message (a full room's oldest, dropped for a new one); one not stored
  /// is no error.
  func deleteBoardMessage(room: String, id: UInt32) throws(BoardError)
  /// Stored /etc values.
  func etcValues() throws(BoardError) -> [EtcField: String]
  /// Stores one /etc value.
  func setEtcValue(_ value: String, for field: EtcField) throws(BoardError)
  /// Registered BBS users in registration order (the first is the sysop).
  func users() throws(BoardError) -> [String]
  /// Registers a BBS user.
  func addUser(_ name: String) throws(BoardError)
}

/// A ``BoardStore`` that keeps everything in memory and forgets it at exit.
public final class InMemoryBoardStore: BoardStore {
  private struct State {
    var chat: [String: [ChatMessage]] = [:]
    var rooms: [String] = []
    var messages: [String: [BoardMessage]] = [:]
    var etc: [EtcField: String] = [:]
    var users: [String] = []
  }
  private let state = Mutex(State())

  /// Creates an empty store.
  public init() {}

  public func chatMessages(room: String, limit: Int) -> [ChatMessage] {
    state.withLock { Array(($0.chat[room] ?? []).suffix(limit)) }
  }

  public func appendChatMessages(_ messages: [ChatMessage], keep: Int) {
    guard let room = messages.first?.room else { return }
    state.withLock {
      var list = $0.chat[room] ?? []
      list += messages
      if list.count > keep { list.removeFirst(list.count - keep) }
      $0.chat[room] = list
    }
  }

  public func boardRooms() -> [String] { state.withLock { $0.rooms } }

  public func addBoardRoom(_ name: String) {
    state.withLock { if !$0.rooms.contains(name) { $0.rooms.append(name) } }
  }

  public func boardMessages(room: String) -> [BoardMessage] {
    state.withLock { $0.messages[room] ?? [] }
  }

  public func saveBoardMessage(_ message: BoardMessage) {
    // Changed where it lies: a copy taken out and put back would copy the whole room.
    state.withLock { state in
      if let index = state.messages[message.room]?.lastIndex(where: { $0.id == message.id }) {
        state.messages[message.room]?[index] = message
      } else {
        state.messages[message.room, default: []].append(message)
      }
    }
  }

  public func deleteBoardMessage(room: String, id: UInt32) {
    // A full room drops its oldest: found at the front.
    state.withLock { state in
      guard let index = state.messages[room]?.firstIndex(where: { $0.id == id }) else { return }
      state.messages[room]?.remove(at: index)
    }
  }

  public func etcValues() -> [EtcField: String] { state.withLock { $0.etc } }

  public func setEtcValue(_ value: String, for field: EtcField) {
    state.withLock { $0.etc[field] = value }
  }

  public func users() -> [String] { state.withLock { $0.users } }

  public func addUser(_ name: String) {
    state.withLock { if !$0.users.contains(name) { $0.users.append(name) } }
  }
}
