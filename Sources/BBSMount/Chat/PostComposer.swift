/// Turns bytes written to a post file into chat posts: one post per line, always as
/// `room:text`, `\r\n` handled, lines longer than the server's limit split at UTF-8 character
/// boundaries (never cut silently), a partial line held until newline or close.
struct PostComposer {
  /// The room posts go to; nil for `/chat/post`, where a line may name its room itself.
  let fixedRoom: String?
  /// The default room for `/chat/post`.
  let defaultRoom: String
  /// Most bytes of text one post may carry (9BBS: 255).
  let textLimit: Int
  private var pending: [UInt8] = []

  init(fixedRoom: String?, defaultRoom: String = "lobby", textLimit: Int = 255) {
    self.fixedRoom = fixedRoom
    self.defaultRoom = defaultRoom
    self.textLimit = max(textLimit, 4)
  }

  /// Bytes waiting for a newline.
  var hasPartialLine: Bool { !pending.isEmpty }

  /// Whether a line that `data` completes (or, `finishing`, the partial line) may name its
  /// room (`room:text`), so the rooms must be known to route it.
  func mayNameRoom(adding data: [UInt8], finishing: Bool) -> Bool {
    guard fixedRoom == nil else { return false }
    var text = pending + data
    if !finishing {
      guard let newline = text.lastIndex(of: UInt8(ascii: "\n")) else { return false }
      text.removeSubrange(newline...)
    }
    return text.split(separator: UInt8(ascii: "\n")).contains {
      $0.prefix(32).contains(UInt8(ascii: ":"))
    }
  }

  /// Adds written bytes; returns the complete lines' posts. `knownRooms` lets `/chat/post` lines
  /// of the form `room:text` target that room.
  mutating func append(_ data: [UInt8], knownRooms: Set<String>) -> [Post] {
    pending.append(contentsOf: data)
    var posts: [Post] = []
    while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
      let line = Array(pending[..<newline])
      pending.removeSubrange(...newline)
      posts += compose(line, knownRooms: knownRooms)
    }
    return posts
  }

  /// The held partial line's posts (at close).
  mutating func finish(knownRooms: Set<String>) -> [Post] {
    defer { pending.removeAll() }
    return compose(pending, knownRooms: knownRooms)
  }

  /// One wire post: `room:text` bytes for a single Twrite.
  struct Post: Equatable {
    var room: String
    var text: [UInt8]
    var payload: [UInt8] { Array(room.utf8) + [UInt8(ascii: ":")] + text }
  }

  private func compose(_ line: [UInt8], knownRooms: Set<String>) -> [Post] {
    var line = line[...]
    while line.last == UInt8(ascii: "\r") { line = line.dropLast() }
    var room = fixedRoom ?? defaultRoom
    if fixedRoom == nil, let colon = line.prefix(32).firstIndex(of: UInt8(ascii: ":")) {
      let named = String(decoding: line[line.startIndex..<colon], as: UTF8.self)
      if knownRooms.contains(named) {
        room = named
        line = line[(colon + 1)...]
        // `offtopic: pizza`, as people write it, posts `pizza`: the space goes with the colon.
        if line.first == UInt8(ascii: " ") { line = line.dropFirst() }
      }
    }
    guard !line.isEmpty else { return [] }
    return Self.split(line, limit: textLimit).map { Post(room: room, text: Array($0)) }
  }

  /// Splits at UTF-8 boundaries into pieces of at most `limit` bytes, preferring to break
  /// after a space when one is in the last quarter of the piece.
  static func split(_ text: ArraySlice<UInt8>, limit: Int) -> [ArraySlice<UInt8>] {
    var pieces: [ArraySlice<UInt8>] = []
    var rest = text
    while rest.count > limit {
      var end = rest.startIndex + limit
      // Never end inside a multi-byte character: back up to a lead or ASCII byte.
      while end > rest.startIndex && (rest[end] & 0xC0) == 0x80 { end -= 1 }
      if let space = rest[(end - limit / 4)..<end].lastIndex(of: UInt8(ascii: " ")) {
        end = space + 1
      }
      if end == rest.startIndex { end = rest.startIndex + limit }
      pieces.append(rest[..<end])
      rest = rest[end...]
    }
    if !rest.isEmpty { pieces.append(rest) }
    return pieces
  }
}
