import Logging
import Synchronization

/// The board rooms under `/rooms`: RFC-822-style messages created by Tcreate and filled by
/// Twrite (docs/board-facts.md §1.4, §1.6). Thread-safe.
public final class MessageBoard: Sendable {
  private struct Room {
    /// In creation order; changed only through the methods below, so `ids` follows it.
    private(set) var messages: [BoardMessage] = []
    /// The ids of `messages`: a flood's every post asks whether its id is taken.
    private(set) var ids: Set<UInt32> = []
    /// Raw text written so far per message id, to reparse chunked writes (default profile).
    var drafts: [UInt32: [UInt8]] = [:]
    /// Messages created and not written yet, not stored (``BoardLimits/refusesEmptyPosts``).
    var unwritten: Set<UInt32> = []

    init(messages: [BoardMessage] = []) {
      self.messages = messages
      ids = Set(messages.map(\.id))
    }

    /// Where the message `id` is, looked for from the newest (the one being written, mostly).
    func index(of id: UInt32) -> Int? {
      ids.contains(id) ? messages.lastIndex { $0.id == id } : nil
    }

    mutating func append(_ message: BoardMessage) {
      messages.append(message)
      ids.insert(message.id)
    }

    /// Removes and returns the `count` oldest messages.
    mutating func dropOldest(_ count: Int) -> [BoardMessage] {
      let dropped = Array(messages.prefix(count))
      messages.removeFirst(dropped.count)
      for old in dropped { ids.remove(old.id) }
      return dropped
    }

    mutating func remove(id: UInt32) {
      guard let index = index(of: id) else { return }
      messages.remove(at: index)
      ids.remove(id)
    }

    /// Puts `message` in the place of the message with its id.
    mutating func replace(at index: Int, with message: BoardMessage) {
      messages[index] = message
    }
  }
  private struct State {
    var order: [String] = []
    var rooms: [String: Room] = [:]
    var sequence: Int64 = 0
  }
  private let state: Mutex<State>
  private let limits: BoardLimits
  private let clock: any BoardClock
  private let store: any BoardStore
  private let logger: Logger

  /// Loads rooms and messages from the store; if it has no rooms, creates `initialRooms`.
  public init(
    initialRooms: [String], limits: BoardLimits, clock: any BoardClock, store: any BoardStore,
    logger: Logger
  ) throws(BoardError) {
    self.limits = limits
    self.clock = clock
    self.store = store
    self.logger = logger
    var initial = State()
    var names = try store.boardRooms()
    if names.isEmpty {
      for name in initialRooms where !names.contains(name) {
        try store.addBoardRoom(name)
        names.append(name)
      }
    }
    for name in names {
      let messages = try store.boardMessages(room: name)
      initial.order.append(name)
      initial.rooms[name] = Room(messages: messages)
      initial.sequence = max(initial.sequence, messages.map(\.sequence).max() ?? 0)
    }
    state = Mutex(initial)
  }

  /// Room names in creation order.
  public var roomNames: [String] { state.withLock { $0.order } }

  /// Whether a room exists.
  public func hasRoom(_ name: String) -> Bool { state.withLock { $0.rooms[name] != nil } }

  /// Creates a room.
  /// - Throws: ``BoardError/exists``, ``BoardError/noSpace`` when the room table is full,
  ///   ``BoardError/invalidArgument`` for an empty name, `.`, `..`, a `/` or a name too long.
  public func createRoom(_ name: String) throws(BoardError) {
    guard !name.isEmpty, name != ".", name != "..", !name.contains("/"),
      name.utf8.count <= limits.maxRoomName
    else { throw BoardError.invalidArgument }
    try state.withLock { state throws(BoardError) in
      guard state.rooms[name] == nil else { throw BoardError.exists }
      guard state.order.count < limits.maxBoardRooms else { throw BoardError.noSpace }
      state.order.append(name)
      state.rooms[name] = Room()
    }
    try store.addBoardRoom(name)
    logger.info("board: created room \(LogText.escaped(name))")
  }

  /// A room's messages in creation order.
  /// - Throws: ``BoardError/notFound``.
  public func messages(in room: String) throws(BoardError) -> [BoardMessage] {
    try state.withLock { state throws(BoardError) in
      guard let entry = state.rooms[room] else { throw BoardError.notFound }
      return entry.messages
    }
  }

  /// Looks a message up by a walked name: any name with a decimal prefix (`strtoull`) finds
  /// the message whose id is that number.
  public func message(in room: String, named name: String) throws(BoardError) -> BoardMessage {
    guard let number = leadingNumber(name), let id = UInt32(exactly: number) else {
      throw BoardError.notFound
    }
    return try message(in: room, id: id)
  }

  /// One message by id.
  public func message(in room: String, id: UInt32) throws(BoardError) -> BoardMessage {
    try state.withLock { state throws(BoardError) in
      guard let entry = state.rooms[room], let index = entry.index(of: id) else {
        throw BoardError.notFound
      }
      return entry.messages[index]
    }
  }

  /// Creates an empty message from a Tcreate name `<ms-timestamp>` or `<ms-timestamp>-<x>`;
  /// its id is the lower 32 bits of the timestamp. Without a timestamp, the next free id. In a
  /// room of ``BoardLimits/roomsAreRings`` a full room drops its oldest message for it; with
  /// ``BoardLimits/refusesEmptyPosts`` it is stored only once written (see
  /// ``discardIfUnwritten(in:id:)``).
  /// - Throws: ``BoardError/notFound`` (no room), ``BoardError/noSpace`` (room full),
  ///   ``BoardError/exists`` (id taken).
  public func createMessage(in room: String, name: String, author: String) throws(BoardError)
    -> BoardMessage
  {
    let who = truncateUTF8(author.isEmpty ? "anonymous" : author, maxBytes: limits.maxAuthor)
    let requested = leadingNumber(name).map { UInt32(truncatingIfNeeded: $0) } ?? 0
    let date = limits.clock == .uptime ? clock.uptimeMillis : clock.wallMillis
    var dropped: [BoardMessage] = []
    let message = try state.withLock { state throws(BoardError) -> BoardMessage in
      // Taken out of the table and put back, so changing it does not copy the whole room.
      guard var entry = state.rooms.removeValue(forKey: room) else { throw BoardError.notFound }
      defer { state.rooms[room] = entry }
      var id = requested
      if id == 0 { id = (entry.ids.max() ?? 0) &+ 1 }
      guard !entry.ids.contains(id) else { throw BoardError.exists }
      if entry.messages.count >= limits.messagesPerRoom {
        guard limits.roomsAreRings else { throw BoardError.noSpace }
        let excess = entry.messages.count - limits.messagesPerRoom + 1
        dropped = entry.dropOldest(excess)
        for old in dropped {
          entry.drafts[old.id] = nil
          entry.unwritten.remove(old.id)
        }
      }
      state.sequence += 1
      let message = BoardMessage(
        room: room, id: id, author: who, date: date, signature: who, sequence: state.sequence)
      entry.append(message)
      if limits.refusesEmptyPosts { entry.unwritten.insert(id) }
      return message
    }
    do throws(BoardError) {
      if !limits.refusesEmptyPosts { try store.saveBoardMessage(message) }
      for old in dropped { try store.deleteBoardMessage(room: room, id: old.id) }
    } catch {
      // Not stored, so not created: the client gets the error and nothing is left behind.
      state.withLock { state in
        state.rooms[room]?.remove(id: message.id)
        state.rooms[room]?.unwritten.remove(message.id)
      }
      logger.error(
        "board: could not store message \(message.id) in \(LogText.escaped(room)): \(error)")
      throw error
    }
    if !dropped.isEmpty {
      logger.info(
        "board: \(LogText.escaped(room)) is full (\(limits.messagesPerRoom) messages): dropped its oldest, \(dropped.map { String($0.id) }.joined(separator: ", "))"
      )
    }
    logger.info(
      "board: \(LogText.escaped(who)) created message \(message.id) in \(LogText.escaped(room))")
    return message
  }

  /// Forgets a message created and never written (``BoardLimits/refusesEmptyPosts``): its
  /// creator clunked it empty. Returns whether it was such a message.
  @discardableResult
  public func discardIfUnwritten(in room: String, id: UInt32) -> Bool {
    let discarded = state.withLock { state -> Bool in
      guard state.rooms[room]?.unwritten.remove(id) != nil else { return false }
      state.rooms[room]?.remove(id: id)
      state.rooms[room]?.drafts[id] = nil
      return true
    }
    if discarded {
      logger.info("board: message \(id) in \(LogText.escaped(room)) left empty: not kept")
    }
    return discarded
  }

  /// Writes message content. The text is parsed as RFC-822 headers (keeping `Subject`) and the
  /// header block stripped. In the device profile each write is parsed alone; otherwise writes
  /// are assembled by offset and the whole text parsed again. Returns the bytes accepted.
  /// - Throws: ``BoardError/noSpace`` for a write that would make the text larger than
  ///   ``BoardLimits/maxMessageBytes`` (nothing is written), ``BoardError/invalidArgument``
  ///   for one that would leave it empty (``BoardLimits/refusesEmptyPosts``; nothing is
  ///   written), ``BoardError/storage(_:)`` when the store fails (the message keeps its stored
  ///   text).
  public func write(in room: String, id: UInt32, offset: UInt64, data: [UInt8])
    throws(BoardError) -> Int
  {
    let maxSize = limits.maxMessageBytes
    let start = limits.messageWriteReplaces ? 0 : offset
    guard start <= UInt64(maxSize), UInt64(data.count) <= UInt64(maxSize) - start else {
      throw BoardError.noSpace
    }
    var previous: (message: BoardMessage, draft: [UInt8]?, unwritten: Bool)?
    let updated = try state.withLock { state throws(BoardError) -> BoardMessage in
      // Taken out of the table and put back, so changing it does not copy the whole room
      // (nothing in it changes before the last throw below).
      guard var entry = state.rooms.removeValue(forKey: room) else { throw BoardError.notFound }
      defer { state.rooms[room] = entry }
      guard let index = entry.index(of: id) else { throw BoardError.notFound }
      previous = (entry.messages[index], entry.drafts[id], entry.unwritten.contains(id))
      var raw: [UInt8]
      if limits.messageWriteReplaces {
        raw = data
      } else {
        raw = entry.drafts[id] ?? []
        let start = Int(offset)
        if raw.count < start { raw += [UInt8](repeating: 0x20, count: start - raw.count) }
        let end = min(start + data.count, maxSize)
        if raw.count < end { raw += [UInt8](repeating: 0, count: end - raw.count) }
        raw.replaceSubrange(start..<end, with: data.prefix(end - start))
      }
      let (subject, body) = parseRFC822(raw)
      var message = entry.messages[index]
      if let subject { message.subject = subject }
      message.body = body
      if limits.refusesEmptyPosts && Self.isBlank(message) { throw BoardError.invalidArgument }
      if !limits.messageWriteReplaces { entry.drafts[id] = raw }
      entry.replace(at: index, with: message)
      entry.unwritten.remove(id)
      return entry.messages[index]
    }
    do throws(BoardError) {
      try store.saveBoardMessage(updated)
    } catch {
      if let previous {
        state.withLock { state in
          guard let index = state.rooms[room]?.index(of: id) else { return }
          state.rooms[room]?.replace(at: index, with: previous.message)
          state.rooms[room]?.drafts[id] = previous.draft
          if previous.unwritten { state.rooms[room]?.unwritten.insert(id) }
        }
      }
      throw error
    }
    return data.count
  }

  /// Whether a message has nothing to read: no subject and a body of white space at most.
  private static func isBlank(_ message: BoardMessage) -> Bool {
    message.subject.allSatisfy(\.isWhitespace)
      && message.body.allSatisfy { $0 == 0x20 || (0x09...0x0D).contains($0) || $0 == 0 }
  }
}

/// The decimal number a name starts with, as `strtoull` would read it (`nil` if none).
func leadingNumber(_ name: String) -> UInt64? {
  var value: UInt64 = 0
  var digits = 0
  for byte in name.utf8 {
    guard byte >= 0x30, byte <= 0x39 else { break }
    let (times, overflow1) = value.multipliedReportingOverflow(by: 10)
    let (sum, overflow2) = times.addingReportingOverflow(UInt64(byte - 0x30))
    value = (overflow1 || overflow2) ? UInt64.max : sum
    digits += 1
  }
  return digits > 0 ? value : nil
}

/// Splits an RFC-822-style text into its `Subject` (if a header block has one) and body.
///
/// Header lines run until the first empty line; a text whose first line is not a header has
/// no header block.
func parseRFC822(_ raw: [UInt8]) -> (subject: String?, body: [UInt8]) {
  var subject: String?
  var position = 0
  var sawHeader = false
  while position < raw.count {
    let end = raw[position...].firstIndex(of: 0x0A) ?? raw.count
    var line = raw[position..<end]
    if line.last == 0x0D { line = line.dropLast() }
    if line.isEmpty {
      if !sawHeader { return (nil, raw) }
      return (subject, Array(raw[min(end + 1, raw.count)...]))
    }
    guard let colon = line.firstIndex(of: UInt8(ascii: ":")), colon > line.startIndex,
      !line[line.startIndex..<colon].contains(0x20)
    else {
      // Not a header line: no header block at all, or an unterminated one.
      return sawHeader ? (subject, Array(raw[position...])) : (nil, raw)
    }
    sawHeader = true
    let name = String(decoding: line[line.startIndex..<colon], as: UTF8.self)
    if name.lowercased() == "subject" {
      let value = line[(colon + 1)...].drop(while: { $0 == 0x20 || $0 == 0x09 })
      subject = String(decoding: value, as: UTF8.self)
    }
    position = end + 1
  }
  return sawHeader ? (subject, []) : (nil, raw)
}
