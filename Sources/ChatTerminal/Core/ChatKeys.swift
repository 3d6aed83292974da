import Foundation

/// A key as the client handles it (the view turns curses' codes into these).
public enum Key: Sendable, Equatable {
  case character(Character)
  case enter, tab, backspace, delete, left, right, home, end, up, down, pageUp, pageDown
  case wordLeft, wordRight, deleteWord, deleteToStart, deleteToEnd
  /// Ctrl-C: clears the input line.
  case interrupt
  /// Ctrl-D: leaves (on an empty line), else deletes forward.
  case endOfInput
  /// Ctrl-L: redraws.
  case redraw
  /// Alt plus a key (Alt-1…9 switch rooms).
  case alt(Character)
  /// Text the terminal says was pasted (bracketed paste): its tabs are text, never completion,
  /// and more than one line waits for a yes before it is posted.
  case paste(String)
}

/// What a key or an input line does to the model: editing, scrolling, switching rooms, and
/// the commands and posts of Enter.
extension ChatModel {
  public mutating func switchTo(_ index: Int) {
    guard rooms.indices.contains(index) else { return }
    current = index
    rooms[index].unread = 0
    rooms[index].mentions = 0
  }

  /// Handles one key; the returned effects are for the I/O side.
  public mutating func handle(_ key: Key) -> [Effect] {
    if key != .tab { completer.reset() }
    if let lines = pendingPaste { return answerPaste(lines, key) }
    switch key {
    case .paste(let text): return paste(text)
    case .character(let character): editor.insert(String(character))
    case .enter: return submit()
    case .tab:
      let nicknames = users + recentAuthors.reversed()
      if !completer.complete(&editor, nicknames: nicknames, rooms: knownRooms + rooms.map(\.name)) {
        return [.bell]
      }
    case .backspace: editor.deleteBackward()
    case .delete: editor.deleteForward()
    case .left: editor.moveLeft()
    case .right: editor.moveRight()
    case .home: editor.moveToStart()
    case .end: editor.moveToEnd()
    case .up: editor.historyUp()
    case .down: editor.historyDown()
    case .wordLeft: editor.moveWordLeft()
    case .wordRight: editor.moveWordRight()
    case .deleteWord: editor.deleteWordBackward()
    case .deleteToStart: editor.deleteToStart()
    case .deleteToEnd: editor.deleteToEnd()
    case .interrupt: editor.clear()
    case .endOfInput:
      if editor.characters.isEmpty { return [.quit] }
      editor.deleteForward()
    case .redraw: return [.redraw]
    case .pageUp:
      if current < rooms.count {
        rooms[current].scrollback.pageUp(height: paneHeight, width: paneWidth)
      }
    case .pageDown:
      if current < rooms.count { rooms[current].scrollback.pageDown(height: paneHeight) }
    case .alt(let character):
      if let digit = character.wholeNumberValue, digit >= 1, digit <= 9 {
        guard digit <= rooms.count else { return [.bell] }
        switchTo(digit - 1)
      } else if character == "b" {
        editor.moveWordLeft()
      } else if character == "f" {
        editor.moveWordRight()
      }
    }
    return []
  }

  /// Longest paste taken (a bigger one is cut there, with a note).
  static let pasteLimit = 64 * 1024

  /// A paste: one line goes into the input line as it is (tabs included); more wait for a yes
  /// (weechat's `paste_max_lines`), so a paste into the wrong window does not post fifty lines.
  private mutating func paste(_ text: String) -> [Effect] {
    let normalized = text.replacingOccurrences(of: "\r\n", with: "\n")
      .replacingOccurrences(of: "\r", with: "\n")
    var lines = normalized.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    while lines.last?.isEmpty == true { lines.removeLast() }
    guard lines.count > 1 else {
      editor.insert(lines.first ?? "")
      return []
    }
    pendingPaste = lines
    let room = currentRoom.map { " to \($0.name)" } ?? ""
    note(
      "paste of \(lines.count) lines\(room): Enter or y posts them in order, n or Ctrl-C drops them",
      style: .marker)
    return []
  }

  /// The answer to a paste of several lines: yes posts them, in order, each as it is.
  private mutating func answerPaste(_ lines: [String], _ key: Key) -> [Effect] {
    switch key {
    case .enter, .character("y"), .character("Y"):
      pendingPaste = nil
      return lines.filter { !$0.isEmpty }.flatMap { post($0) }
    case .character("n"), .character("N"), .interrupt, .endOfInput:
      pendingPaste = nil
      note("paste of \(lines.count) lines dropped")
      return []
    case .redraw:
      return [.redraw]
    default:
      return [.bell]
    }
  }

  /// Enter: a command, or the line posted exactly as typed to the room shown.
  private mutating func submit() -> [Effect] {
    let line = editor.submit()
    guard !line.isEmpty else { return [] }
    if line.hasPrefix("//") { return post(String(line.dropFirst())) }
    guard line.hasPrefix("/") else { return post(line) }
    let parts = line.split(separator: " ", maxSplits: 1)
    let command = parts[0]
    let argument = parts.count > 1 ? parts[1].trimmingCharacters(in: .whitespaces) : ""
    switch command {
    case "/join", "/j":
      guard !argument.isEmpty else {
        note("usage: /join ROOM", style: .error)
        return []
      }
      let room = argument.hasPrefix("#") ? String(argument.dropFirst()) : argument
      // A room is a file of chat/: a path is not a room name.
      guard !room.contains("/"), room != ".", room != ".." else {
        note("no such room: \(room)", style: .error)
        return []
      }
      return [.join(room)]
    case "/rooms": return [.listRooms]
    case "/users", "/who": return [.listUsers]
    case "/next": switchTo(rooms.isEmpty ? 0 : (current + 1) % rooms.count)
    case "/prev": switchTo(rooms.isEmpty ? 0 : (current + rooms.count - 1) % rooms.count)
    case "/quit", "/exit", "/q": return [.quit]
    case "/help": for text in Self.help { note(text) }
    case "/me":
      // Posted as typed: other readers see `/me waves`, this client shows `* you waves`.
      guard !argument.isEmpty else { return [] }
      return post(line)
    default:
      note(
        "unknown command \(command) (/help lists them; //text posts a line starting with /)",
        style: .error)
    }
    return []
  }

  private mutating func post(_ text: String) -> [Effect] {
    guard let room = currentRoom else { return [] }
    rooms[current].scrollback.scrollToBottom()
    sending(text)
    return [.post(room: room.name, text: text)]
  }

  public static let help = [
    "Enter posts the line as typed; //text posts a line starting with /.",
    "/join ROOM (/j)  open a room      /rooms  rooms and unread counts",
    "/next, /prev, Alt-1…9  switch      /users  who is here",
    "/me TEXT  an action               /quit, Ctrl-D  leave",
    "Tab completes names and rooms; ↑/↓ history; PgUp/PgDn scroll; Ctrl-C clears the line.",
  ]
}
