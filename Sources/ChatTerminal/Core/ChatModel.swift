import Foundation

/// What the client must do after a key: the model itself does no I/O.
public enum Effect: Sendable, Equatable {
  case post(room: String, text: String)
  /// Open a room and show it (it may not exist: the I/O side says so).
  case join(String)
  /// Read `chat/unread` and the room list, then call ``ChatModel/showRooms(_:unread:)``.
  case listRooms
  /// Read `chat/users`, then call ``ChatModel/showUsers(_:)``.
  case listUsers
  case bell
  case quit
  case redraw
}

/// One joined room.
public struct JoinedRoom: Sendable {
  public let name: String
  public var scrollback = Scrollback()
  /// Lines that arrived while another room was shown.
  public var unread = 0
  /// Of those, the ones that mention you.
  public var mentions = 0
  /// The day (days since 1970, local) of the last line shown, for date lines.
  var lastDay: Int?
  /// Whether its history (what the room file held at open) has been shown.
  public var historyShown = false
  /// Your lines posted here that the board has not echoed yet, oldest first.
  public internal(set) var sending: [String] = []

  init(name: String) { self.name = name }
}

/// The chat client's state: joined rooms, the input line, what the status line says. Pure:
/// lines and file contents come in through its methods, keys go in through ``handle(_:)``,
/// and what to do comes out as ``Effect``s.
public struct ChatModel: Sendable {
  /// Names that are you (your user name, nickname, identity): highlighted, and mentions.
  public var ownNames: [String]
  /// Words the mount counts as mentions besides your names (`-o highlight=`), from the line
  /// `chat/mentions` starts with: lines with them are marked as the mount counts them.
  public var highlightWords: [String] = []
  /// How the board's stamps become local times; nil: shown as the board sent them.
  var stampClock: StampClock?
  // Set by the key handling too (ChatKeys.swift).
  public internal(set) var rooms: [JoinedRoom] = []
  public internal(set) var current = 0
  /// Every room of the mount (its listing).
  public var knownRooms: [String] = []
  /// `chat/unread` counts of rooms not joined.
  public var unreadElsewhere: [String: Int] = [:]
  /// Mentions (from `chat/mentions`) in rooms not joined.
  public var mentionsElsewhere: [String: Int] = [:]
  public var users: [String] = []
  /// Authors seen, newest last (for completion).
  public private(set) var recentAuthors: [String] = []
  /// nil: unknown (a mount without `chat/events`).
  public var link: LinkState?
  /// nil: unknown (a mount without `chat/outbox` or status).
  public var outbox: Int?
  public var editor = LineEditor()
  /// A paste of several lines waiting for its yes or no (see ``handle(_:)``).
  public var pendingPaste: [String]?
  var completer = Completer()
  /// The pane's size, set by the view.
  public var paneWidth = 80
  public var paneHeight = 20
  /// A note for the status line (the mount went away, a post failed).
  public var alert: String?

  public init(ownNames: [String]) { self.ownNames = ownNames.filter { !$0.isEmpty } }

  /// Shows lines at the local time they were said, reading the board's stamps as `kind`.
  public mutating func readStamps(as kind: StampKind) {
    stampClock = StampClock(kind: kind)
  }

  public var currentRoom: JoinedRoom? { rooms.indices.contains(current) ? rooms[current] : nil }

  // MARK: Lines in

  /// Joins `room` (or switches to it if joined); returns its index.
  @discardableResult
  public mutating func join(_ room: String) -> Int {
    if let index = rooms.firstIndex(where: { $0.name == room }) {
      switchTo(index)
      return index
    }
    rooms.append(JoinedRoom(name: room))
    unreadElsewhere[room] = nil
    mentionsElsewhere[room] = nil
    switchTo(rooms.count - 1)
    return rooms.count - 1
  }

  /// Leaves a room that could not be opened (`/join nosuch`), with a note why.
  public mutating func dropRoom(_ room: String, reason: String) {
    guard let index = rooms.firstIndex(where: { $0.name == room }) else { return }
    rooms.remove(at: index)
    current = min(max(0, current >= index ? current - 1 : current), max(0, rooms.count - 1))
    note(reason, style: .error)
  }

  /// What the room file held when opened: the room's recent history. `unread` (from
  /// `chat/unread`, nil when the mount has none) places the "── new ──" marker.
  public mutating func showHistory(_ room: String, lines: [String], unread: Int?, now: Date) {
    guard let index = rooms.firstIndex(where: { $0.name == room }) else { return }
    let parsed = lines.map { RoomLine(parsing: $0[...]) }
    // Stamps carry no date: count the times they go back (midnight) to date older lines.
    var wraps = 0
    var previous: Int?
    for line in parsed.reversed() {
      if let seconds = line.stampSeconds {
        if let later = previous, seconds > later { wraps += 1 }
        previous = seconds
      }
    }
    var day = Self.dayNumber(now) - wraps
    previous = nil
    // The marker goes before the first unread line (and before its date line, if any). The
    // mount counts only others' lines, so your own lines among them are stepped over.
    var firstUnread: Int?
    if let unread, unread > 0 {
      var left = unread
      firstUnread = 0
      for index in parsed.indices.reversed() where !isOwn(parsed[index].author) {
        left -= 1
        if left == 0 {
          firstUnread = index
          break
        }
      }
    }
    var markerFromEnd: Int?
    var dates: [Date?] = []
    if var clock = stampClock {
      dates = clock.history(parsed.map(\.stampSeconds), at: now)
      stampClock = clock
    }
    for (number, line) in parsed.enumerated() {
      if let seconds = line.stampSeconds {
        if let earlier = previous, seconds < earlier { day += 1 }
        previous = seconds
      }
      if number == firstUnread { markerFromEnd = rooms[index].scrollback.lines.count }
      if number < dates.count, let date = dates[number] {
        var shown = line
        shown.stamp = StampClock.localText(date)
        add(shown, to: index, day: Self.dayNumber(date))
      } else {
        add(line, to: index, day: day)
      }
      if let start = markerFromEnd, number == parsed.count - 1 {
        markerFromEnd = rooms[index].scrollback.lines.count - start
      }
    }
    rooms[index].historyShown = true
    rooms[index].scrollback.markUnread(last: markerFromEnd)
  }

  /// A line that arrived live. Returns true when it mentions you (the view rings the bell).
  @discardableResult
  public mutating func receive(_ room: String, line: String, now: Date) -> Bool {
    guard let index = rooms.firstIndex(where: { $0.name == room }) else { return false }
    var parsed = RoomLine(parsing: line[...])
    let mention = isMention(parsed)
    var said = now
    if var clock = stampClock, let seconds = parsed.stampSeconds {
      said = clock.live(stamp: seconds, at: now)
      stampClock = clock
      parsed.stamp = StampClock.localText(said)
    }
    delivered(parsed, in: index)
    if index != current {
      if rooms[index].unread == 0 { rooms[index].scrollback.markFromHere() }
      rooms[index].unread += 1
      if mention { rooms[index].mentions += 1 }
    }
    add(parsed, to: index, day: Self.dayNumber(said))
    return mention
  }

  // MARK: Your own lines

  /// How a line of yours on its way is stamped (where a time goes).
  static let sendingStamp = "sending…"

  /// `text` is being posted to the current room: shown at once, marked as on its way.
  mutating func sending(_ text: String) {
    guard rooms.indices.contains(current) else { return }
    rooms[current].sending.append(text)
    drawPending(current)
  }

  /// The post of `text` to `room` failed (the failure is noted): it is no longer on its way.
  public mutating func notSent(_ text: String, in room: String) {
    guard let index = rooms.firstIndex(where: { $0.name == room }),
      let position = rooms[index].sending.firstIndex(of: text)
    else { return }
    rooms[index].sending.remove(at: position)
    drawPending(index)
  }

  /// The board echoed `line`: if it is one of yours on its way, it is delivered (a board
  /// cuts a long line, so a cut one counts too).
  private mutating func delivered(_ line: RoomLine, in index: Int) {
    guard isOwn(line.author), !line.text.isEmpty else { return }
    let sending = rooms[index].sending
    guard
      let position = sending.firstIndex(of: line.text)
        ?? sending.firstIndex(where: { $0.hasPrefix(line.text) })
    else { return }
    rooms[index].sending.remove(at: position)
    drawPending(index)
  }

  private mutating func drawPending(_ index: Int) {
    let name = ownNames.first ?? "you"
    rooms[index].scrollback.pending = rooms[index].sending.map { text in
      var line = render(RoomLine(stamp: Self.sendingStamp, author: name, text: text))
      for position in line.spans.indices where line.spans[position].style != .ownName {
        line.spans[position].style = .notice
      }
      return line
    }
  }

  /// A line of `chat/mentions`: counted for a room not joined (a joined room counts its own).
  public mutating func receiveMention(room: String) {
    guard !rooms.contains(where: { $0.name == room }) else { return }
    mentionsElsewhere[room, default: 0] += 1
  }

  /// A note of the client's own in the current room (or the first).
  public mutating func note(_ text: String, style: TextStyle = .notice) {
    guard !rooms.isEmpty else { return }
    append(StyledLine([Span("-- " + DisplayText.safe(text), style)], hangingIndent: 3), to: current)
  }

  public mutating func showRooms(_ names: [String], unread: [String: Int]) {
    knownRooms = names
    for (room, count) in unread where !rooms.contains(where: { $0.name == room }) {
      unreadElsewhere[room] = count
    }
    var parts: [String] = []
    for name in names {
      var part = name
      if let joined = rooms.firstIndex(where: { $0.name == name }) {
        part = "\(joined + 1):" + name
        if rooms[joined].unread > 0 { part += " (\(rooms[joined].unread) unread)" }
      } else if let count = unread[name], count > 0 {
        part += " (\(count) unread)"
      }
      parts.append(part)
    }
    note("rooms: " + (parts.isEmpty ? "none" : parts.joined(separator: ", ")))
  }

  public mutating func showUsers(_ names: [String]) {
    users = names
    note("users: " + (names.isEmpty ? "nobody" : names.joined(separator: ", ")))
  }

  func isMention(_ line: RoomLine) -> Bool {
    !line.author.isEmpty && !isOwn(line.author)
      && Mentions.mentions(line.text, names: ownNames + highlightWords)
  }

  func isOwn(_ author: String) -> Bool {
    ownNames.contains { $0.caseInsensitiveCompare(author) == .orderedSame }
  }

  private mutating func add(_ line: RoomLine, to index: Int, day: Int) {
    if rooms[index].lastDay != day {
      rooms[index].lastDay = day
      append(StyledLine([Span("── " + Self.dateText(day: day) + " ──", .marker)]), to: index)
    }
    if !line.author.isEmpty {
      recentAuthors.removeAll { $0 == line.author }
      recentAuthors.append(line.author)
      if recentAuthors.count > 200 { recentAuthors.removeFirst() }
    }
    append(render(line), to: index)
  }

  private mutating func append(_ line: StyledLine, to index: Int) {
    rooms[index].scrollback.append(line, width: paneWidth)
  }

  /// A room line as the pane shows it: stamp, author in their colour (yours highlighted),
  /// text; a mention marked `»`; `/me` as `* author text`; control characters visible.
  public func render(_ line: RoomLine) -> StyledLine {
    // A line a board could never send (theirs stop at 255 bytes) from a hostile server is
    // cut, so wrapping it on every redraw stays cheap.
    var line = line
    if line.text.count > Self.longestText {
      let more = line.text.count - Self.longestText
      line.text = String(line.text.prefix(Self.longestText)) + " … [\(more) more characters]"
    }
    guard !line.author.isEmpty else {
      return StyledLine([Span(DisplayText.safe(line.text), .plain)])
    }
    let mention = isMention(line)
    let stamp = DisplayText.safe(line.stamp) + (mention ? " » " : " ")
    let authorStyle: TextStyle =
      isOwn(line.author) ? .ownName : .author(AuthorColors.index(for: line.author))
    let author = DisplayText.safe(line.author)
    let textStyle: TextStyle = mention ? .mention : .plain
    let indent = DisplayText.width(of: stamp)
    if line.isAction {
      return StyledLine(
        [
          Span(stamp, .stamp), Span("* ", textStyle), Span(author, authorStyle),
          Span(" " + DisplayText.safe(String(line.text.dropFirst(4))), textStyle),
        ], hangingIndent: indent)
    }
    return StyledLine(
      [
        Span(stamp, .stamp), Span(author, authorStyle), Span(": ", .plain),
        Span(DisplayText.safe(line.text), textStyle),
      ], hangingIndent: indent)
  }

  /// The most characters of a line the pane shows.
  public static let longestText = 4096

  static func dayNumber(_ date: Date) -> Int {
    let offset = TimeZone.current.secondsFromGMT(for: date)
    return Int(((date.timeIntervalSince1970 + Double(offset)) / 86400).rounded(.down))
  }

  static func dateText(day: Int) -> String {
    let formatter = DateFormatter()
    formatter.locale = Locale(identifier: "en_US_POSIX")
    formatter.timeZone = TimeZone(secondsFromGMT: 0)
    formatter.dateFormat = "EEE d MMM yyyy"
    return formatter.string(from: Date(timeIntervalSince1970: Double(day) * 86400))
  }

  // MARK: Status line

  /// The status line: the room shown, other rooms with unread lines (`@N`: mentions), the
  /// link, the outbox, and how far back the view is scrolled.
  public func statusLine() -> String {
    var parts: [String] = []
    if let room = currentRoom {
      parts.append("[\(current + 1):\(DisplayText.safe(room.name))]")
    }
    var others: [String] = []
    for (index, room) in rooms.enumerated() where index != current && room.unread > 0 {
      var part = "\(index + 1):\(DisplayText.safe(room.name)) \(room.unread)"
      if room.mentions > 0 { part += " @\(room.mentions)" }
      others.append(part)
    }
    let elsewhere = Set(unreadElsewhere.filter { $0.value > 0 }.keys).union(
      mentionsElsewhere.filter { $0.value > 0 }.keys)
    for room in elsewhere.sorted() {
      var part = DisplayText.safe(room)
      if let unread = unreadElsewhere[room], unread > 0 { part += " \(unread)" }
      if let mentions = mentionsElsewhere[room], mentions > 0 { part += " @\(mentions)" }
      others.append(part)
    }
    if !others.isEmpty { parts.append("unread: " + others.joined(separator: ", ")) }
    parts.append("link " + (link?.rawValue ?? "?"))
    if let outbox { parts.append("outbox \(outbox)") }
    if let room = currentRoom, room.scrollback.offset > 0 {
      let below = room.scrollback.newBelow(width: paneWidth)
      parts.append(below > 0 ? "\(below) new below (PgDn)" : "scrolled back (PgDn)")
    }
    if let alert { parts.append(DisplayText.safe(alert)) }
    return " " + parts.joined(separator: " | ")
  }
}
