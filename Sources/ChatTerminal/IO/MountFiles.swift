import Foundation
import Glibc
import Synchronization

/// The mount's chat files, read and written as any program would: one reader thread per open
/// room (a room file blocks at its end, so a thread waits in `read` and costs nothing while
/// the room is quiet), one each for `chat/mentions` and `chat/events`, and a serial queue for
/// posts (a post waits until the server has it; typing never does).
final class MountFiles: Sendable {
  /// The mount's chat directory (`MOUNTPOINT/chat`).
  let chat: String
  private let inbox: Inbox
  private let posts = DispatchQueue(label: "mount9bbs.chat.post")
  /// Rooms with a reader thread, so a room is never read twice.
  private let reading = Mutex<Set<String>>([])

  /// Mount-local files in `chat/` that are not rooms.
  static let notRooms: Set<String> = ["post", "users", "unread", "mentions", "events", "outbox"]

  init(chat: String, inbox: Inbox) {
    self.chat = chat
    self.inbox = inbox
  }

  /// The rooms: the chat directory's files less the mount's own.
  func roomNames() throws(ChatError) -> [String] {
    let names: [String]
    do {
      names = try FileManager.default.contentsOfDirectory(atPath: chat)
    } catch {
      throw .system("cannot list \(chat)", Self.reason(error))
    }
    return names.filter { name in
      guard !Self.notRooms.contains(name) && !name.hasPrefix(".") else { return false }
      var isDirectory: ObjCBool = false
      return FileManager.default.fileExists(atPath: chat + "/" + name, isDirectory: &isDirectory)
        && !isDirectory.boolValue
    }.sorted()
  }

  /// `chat/unread`, nil when the mount has none (no unread counts then).
  func unread() -> [String: Int]? {
    readWhole("unread").map(MountFormats.unread)
  }

  func users() -> [String] { readWhole("users").map(MountFormats.users) ?? [] }

  func outboxCount() -> Int? { readWhole("outbox").map(MountFormats.outboxCount) }

  /// Room list and unread counts, read off the terminal's thread.
  func listRooms() {
    DispatchQueue.global().async { [self] in
      let names = (try? roomNames()) ?? []
      inbox.post(.rooms(names: names, unread: unread() ?? [:]))
    }
  }

  func listUsers() {
    DispatchQueue.global().async { [self] in inbox.post(.users(users())) }
  }

  func refreshOutbox() {
    DispatchQueue.global().async { [self] in
      if let count = outboxCount() { inbox.post(.outbox(count)) }
    }
  }

  /// Starts reading `room`: its history first (what the file holds at open, with the unread
  /// count read just before: reading the room resets it), then each line as it arrives.
  func follow(_ room: String) {
    let fresh = reading.withLock { $0.insert(room).inserted }
    guard fresh else { return }
    let path = chat + "/" + room
    let thread = Thread { [self] in
      let unread = self.unread()?[room]
      // The open waits until the room has caught up with the server (at most 1.5 s), or, in
      // a room with no lines at all, until its next line: lines an open that long brings
      // are live ones, not history.
      let started = Date()
      let fd = open(path, O_RDONLY | O_CLOEXEC)
      let waitedForALine = Date().timeIntervalSince(started) > 2
      guard fd >= 0 else {
        let code = errno
        // `/join nosuch` says which rooms there are, as `mount9bbs chat MNT nosuch` does.
        let rooms = code == ENOENT ? (try? roomNames()) : nil
        let reason =
          rooms.map { "no such room (rooms: \($0.joined(separator: ", ")))" }
          ?? String(cString: strerror(code))
        forget(room)
        inbox.post(.roomFailed(room: room, reason: reason, opened: false))
        return
      }
      defer { close(fd) }
      var info = stat()
      let size = fstat(fd, &info) == 0 ? Int(info.st_size) : 0
      var splitter = LineSplitter()
      var history: [String] = []
      var offset = 0
      var buffer = [UInt8](repeating: 0, count: 65536)
      var historyDone = size == 0 || waitedForALine
      if historyDone { inbox.post(.history(room: room, lines: [], unread: unread)) }
      while true {
        let count = read(fd, &buffer, buffer.count)
        if count < 0 && errno == EINTR { continue }
        guard count > 0 else {
          let reason = count == 0 ? "the room file ended" : String(cString: strerror(errno))
          forget(room)
          inbox.post(.roomFailed(room: room, reason: reason, opened: true))
          return
        }
        offset += count
        let lines = splitter.lines(adding: buffer[..<count])
        if historyDone {
          for line in lines { inbox.post(.line(room: room, line: line)) }
        } else {
          history += lines
          if offset >= size {
            historyDone = true
            inbox.post(.history(room: room, lines: history, unread: unread))
            history = []
          }
        }
      }
    }
    thread.name = "chat room " + room
    thread.start()
  }

  private func forget(_ room: String) {
    _ = reading.withLock { $0.remove(room) }
  }

  /// What `chat/mentions` looks for, from the line it starts with (read once, waiting at most
  /// a second): known before any room opens, so its history is marked as the mount counts.
  func mentionWords() -> [String] {
    let fd = open(chat + "/mentions", O_RDONLY | O_CLOEXEC | O_NONBLOCK)
    guard fd >= 0 else { return [] }
    defer { close(fd) }
    var splitter = LineSplitter()
    var buffer = [UInt8](repeating: 0, count: 4096)
    let deadline = Date().addingTimeInterval(1)
    while Date() < deadline {
      var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
      guard poll(&ready, 1, 100) >= 0 || errno == EINTR else { return [] }
      let count = read(fd, &buffer, buffer.count)
      if count < 0 && (errno == EAGAIN || errno == EINTR) { continue }
      guard count > 0 else { return [] }
      if let line = splitter.lines(adding: buffer[..<count]).first {
        return MountFormats.mentionWords(line[...]) ?? []
      }
    }
    return []
  }

  /// Follows `chat/mentions` and `chat/events` when the mount has them.
  func followAwareness() {
    stream("mentions") { [inbox] line in
      if let mention = MountFormats.mention(line[...]) {
        inbox.post(.mention(room: mention.room))
      } else if let words = MountFormats.mentionWords(line[...]) {
        inbox.post(.mentionWords(words))
      }
    }
    stream("events") { [inbox] line in
      if let event = MountFormats.event(line[...]) { inbox.post(.event(event)) }
    }
  }

  private func stream(_ name: String, _ handle: @escaping @Sendable (String) -> Void) {
    let path = chat + "/" + name
    guard access(path, R_OK) == 0 else { return }
    let thread = Thread {
      let fd = open(path, O_RDONLY | O_CLOEXEC)
      guard fd >= 0 else { return }
      defer { close(fd) }
      var splitter = LineSplitter()
      var buffer = [UInt8](repeating: 0, count: 16384)
      while true {
        let count = read(fd, &buffer, buffer.count)
        if count < 0 && errno == EINTR { continue }
        guard count > 0 else { return }
        for line in splitter.lines(adding: buffer[..<count]) { handle(line) }
      }
    }
    thread.name = "chat " + name
    thread.start()
  }

  /// Posts `text` to `room` as one line written to the room file, in order, off the
  /// terminal's thread.
  func post(_ text: String, to room: String) {
    let path = chat + "/" + room
    posts.async { [inbox] in
      let fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC)
      guard fd >= 0 else {
        inbox.post(.posted(room: room, text: text, error: String(cString: strerror(errno))))
        return
      }
      let bytes = Array((text + "\n").utf8)
      var written = 0
      var failure: String?
      while written < bytes.count {
        let count = bytes[written...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        if count < 0 && errno == EINTR { continue }
        guard count > 0 else {
          failure = String(cString: strerror(errno))
          break
        }
        written += count
      }
      if close(fd) != 0 && failure == nil { failure = String(cString: strerror(errno)) }
      inbox.post(.posted(room: room, text: text, error: failure))
    }
  }

  /// Whether the mount is still there (its chat directory answers).
  func mountAlive() -> String? {
    var info = stat()
    return stat(chat, &info) == 0 ? nil : String(cString: strerror(errno))
  }

  private func readWhole(_ name: String) -> String? {
    guard let data = FileManager.default.contents(atPath: chat + "/" + name) else { return nil }
    return String(decoding: data, as: UTF8.self)
  }

  private static func reason(_ error: any Error) -> String {
    if let posix = (error as NSError).userInfo[NSUnderlyingErrorKey] as? NSError {
      return String(cString: strerror(Int32(posix.code)))
    }
    return error.localizedDescription
  }
}
