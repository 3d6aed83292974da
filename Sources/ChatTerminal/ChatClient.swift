import Foundation
import Glibc

/// How `mount9bbs chat` starts.
public struct ChatOptions: Sendable {
  /// The mount point (absolute).
  public var mountpoint: String
  /// The room to open first (default: `lobby`, else the first room).
  public var room: String?
  /// Names that are you: highlighted, and what a mention names.
  public var ownNames: [String]
  /// The link state when starting (from the mount's status), until `chat/events` says more.
  public var link: LinkState?
  /// The outbox when starting, for a mount without `chat/outbox`.
  public var outbox: Int?
  /// False with `NO_COLOR` set: attributes (bold, underline) only.
  public var colors: Bool
  /// Whether the author your first post comes back under is taken as your name too: when
  /// ``ownNames`` may not be what the board shows (an identity's nickname, no status).
  public var learnsName = false
  /// What the board's stamps count, so lines show at the local time they were said; nil:
  /// shown as the board sent them.
  public var stamps: StampKind?

  public init(
    mountpoint: String, room: String?, ownNames: [String], link: LinkState?, outbox: Int?,
    colors: Bool
  ) {
    self.mountpoint = mountpoint
    self.room = room
    self.ownNames = ownNames
    self.link = link
    self.outbox = outbox
    self.colors = colors
  }
}

/// How the chat ended.
public enum ChatOutcome: Sendable, Equatable {
  /// `/quit` or Ctrl-D.
  case quit
  /// The mount went away underneath (unmounted, its daemon killed): the reason.
  case mountGone(String)
  /// The terminal could not be waited on (`poll` failed): the reason.
  case failed(String)
  /// A terminating signal (SIGHUP too when the terminal hung up).
  case signal(Int32)
}

/// The client: checks what it is given, takes the terminal, and hands over to a
/// ``ChatLoop``; the terminal is given back however the loop ends.
public enum ChatClient {
  public static func run(_ options: ChatOptions) throws(ChatError) -> ChatOutcome {
    let inbox = try Inbox()
    let files = MountFiles(chat: options.mountpoint + "/chat", inbox: inbox)
    let rooms = try files.roomNames()
    guard !rooms.isEmpty else { throw .noRooms(files.chat) }
    let first = options.room ?? (rooms.contains("lobby") ? "lobby" : rooms[0])
    guard rooms.contains(first) else { throw .noSuchRoom(first, rooms) }
    guard isatty(STDIN_FILENO) == 1, isatty(STDOUT_FILENO) == 1 else { throw .notATerminal }

    var model = ChatModel(ownNames: options.ownNames)
    if let stamps = options.stamps { model.readStamps(as: stamps) }
    model.knownRooms = rooms
    model.link = options.link
    model.outbox = files.outboxCount() ?? options.outbox
    model.unreadElsewhere = files.unread() ?? [:]
    let outboxFile = files.outboxCount() != nil

    TerminalGuard.saveModes()
    let view = CursesView(colors: options.colors)
    TerminalGuard.install(leave: CursesView.leaveSequence(), wake: inbox.pipe.write)
    defer {
      view.close()
      TerminalGuard.uninstall()
    }
    var loop = ChatLoop(
      model: model, files: files, inbox: inbox, view: view, outboxFile: outboxFile,
      learnsName: options.learnsName)
    return loop.run(opening: first)
  }
}

/// The client's one thread once the terminal is taken: it sleeps in `poll` on the keyboard
/// and the inbox pipe, applies keys and incoming lines to the ``ChatModel``, does the
/// effects, and draws. Reader threads (``MountFiles``) feed the inbox; nothing polls on a
/// timer, so an idle chat uses no CPU.
struct ChatLoop {
  private(set) var model: ChatModel
  let files: MountFiles
  let inbox: Inbox
  let view: CursesView
  /// The mount has `chat/outbox` (read again after each post).
  let outboxFile: Bool
  /// Texts just posted per room: the first line back with that text names you (a board
  /// shows you by nickname or identity, which the mount's status may not know).
  private var echoes: [String: String] = [:]
  private var learnsName: Bool

  init(
    model: ChatModel, files: MountFiles, inbox: Inbox, view: CursesView, outboxFile: Bool,
    learnsName: Bool
  ) {
    self.model = model
    self.files = files
    self.inbox = inbox
    self.view = view
    self.outboxFile = outboxFile
    self.learnsName = learnsName
  }

  /// Shows `room` and runs until the user leaves, a signal comes or the mount goes away.
  mutating func run(opening room: String) -> ChatOutcome {
    model.paneWidth = view.width
    model.paneHeight = view.paneHeight
    model.highlightWords = files.mentionWords().filter { !model.isOwn($0) }
    model.join(room)
    files.follow(room)
    files.followAwareness()
    while true {
      view.draw(model)
      var fds = [
        pollfd(fd: STDIN_FILENO, events: Int16(POLLIN), revents: 0),
        pollfd(fd: inbox.pipe.read, events: Int16(POLLIN), revents: 0),
      ]
      let ready = poll(&fds, 2, -1)
      if ready < 0 && errno != EINTR {
        return .failed("poll: \(String(cString: strerror(errno)))")
      }
      let caught = TerminalGuard.signalCaught
      if caught != 0 { return .signal(caught) }
      if fds[0].revents & Int16(POLLHUP | POLLERR) != 0 { return .signal(SIGHUP) }
      if TerminalGuard.takeResize() { resize() }
      var effects: [Effect] = []
      for input in view.readKeys() {
        switch input {
        case .resize: resize()
        case .key(let key): effects += model.handle(key)
        }
      }
      for item in inbox.take() {
        if let end = receive(item, effects: &effects) { return end }
      }
      if let end = perform(effects) { return end }
    }
  }

  private mutating func resize() {
    view.resize()
    model.paneWidth = view.width
    model.paneHeight = view.paneHeight
  }

  /// Applies what a reader thread sent; the end of the chat if the mount went away.
  private mutating func receive(_ item: Incoming, effects: inout [Effect]) -> ChatOutcome? {
    switch item {
    case .history(let room, let lines, let unread):
      model.showHistory(room, lines: lines, unread: unread, now: Date())
    case .line(let room, let line):
      if learnsName, let text = echoes[room], RoomLine(parsing: line[...]).text == text {
        echoes[room] = nil
        learnsName = false
        let author = RoomLine(parsing: line[...]).author
        if !author.isEmpty && !model.isOwn(author) { model.ownNames.append(author) }
      }
      if model.receive(room, line: line, now: Date()) { effects.append(.bell) }
    case .roomFailed(let room, let reason, let opened):
      if let gone = files.mountAlive() { return .mountGone(gone) }
      if opened {
        model.note("room \(room) stopped: \(reason)", style: .error)
      } else {
        model.dropRoom(room, reason: "cannot open room \(room): \(reason)")
      }
    case .mention(let room):
      if !model.rooms.contains(where: { $0.name == room }) {
        model.receiveMention(room: room)
        effects.append(.bell)
      }
    case .mentionWords(let words):
      model.highlightWords = words.filter { !model.isOwn($0) }
    case .event(let event):
      apply(event)
    case .posted(let room, let text, let error):
      if let error {
        model.notSent(text, in: room)
        if let gone = files.mountAlive() { return .mountGone(gone) }
        model.note("post to \(room) failed: \(error)", style: .error)
      }
      if outboxFile { files.refreshOutbox() }
    case .rooms(let names, let unread): model.showRooms(names, unread: unread)
    case .users(let names): model.showUsers(names)
    case .outbox(let count): model.outbox = count
    }
    return nil
  }

  /// Does what the keys and lines of one wake-up asked for; `.quit` ends the chat.
  private mutating func perform(_ effects: [Effect]) -> ChatOutcome? {
    // One bell per wake-up, however many mentions came in it (a flood rings once).
    var rang = false
    for effect in effects {
      switch effect {
      case .post(let room, let text):
        echoes[room] = text
        files.post(text, to: room)
      case .join(let room):
        model.join(room)
        files.follow(room)
      case .listRooms: files.listRooms()
      case .listUsers: files.listUsers()
      case .bell:
        if !rang { view.bell() }
        rang = true
      case .quit: return .quit
      case .redraw: view.forceRedraw()
      }
    }
    return nil
  }

  private mutating func apply(_ event: ChatEvent) {
    switch event {
    case .link(let state, let reason):
      model.link = state
      model.alert = state == .up ? nil : (reason.isEmpty || reason == "-" ? nil : reason)
    case .message(let room, let author):
      // Events name every line, yours too; unread counts (as chat/unread) only others'.
      if !model.rooms.contains(where: { $0.name == room }) && !model.isOwn(author) {
        model.unreadElsewhere[room, default: 0] += 1
      }
    case .roomAdded(let room):
      if !model.knownRooms.contains(room) { model.knownRooms.append(room) }
    case .roomRemoved(let room):
      model.knownRooms.removeAll { $0 == room }
    case .userArrived(let name):
      if !model.users.contains(name) { model.users.append(name) }
    case .userLeft(let name):
      model.users.removeAll { $0 == name }
    case .post(let outcome, let room, let reason):
      if outcome == "refused" {
        model.note("the board refused your post to \(room): \(reason)", style: .error)
      }
      if outboxFile { files.refreshOutbox() }
    case .mention, .backlogIncomplete, .other:
      break
    }
  }
}
