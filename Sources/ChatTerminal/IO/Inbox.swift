import Foundation
import Glibc
import Synchronization

/// What the reader threads hand the terminal's thread.
enum Incoming: Sendable {
  /// What a room file held when opened.
  case history(room: String, lines: [String], unread: Int?)
  case line(room: String, line: String)
  /// A room file could not be opened, or ended (only a dying mount ends one).
  case roomFailed(room: String, reason: String, opened: Bool)
  case mention(room: String)
  /// What `chat/mentions` looks for (your names, and `-o highlight=` words).
  case mentionWords([String])
  case event(ChatEvent)
  case posted(room: String, text: String, error: String?)
  case rooms(names: [String], unread: [String: Int])
  case users([String])
  case outbox(Int)
}

/// A queue from reader threads to the one thread that draws, with a pipe to wake its
/// `poll`: the client sleeps in `poll` on the keyboard and this pipe, never polling files.
final class Inbox: Sendable {
  private let items = Mutex<[Incoming]>([])
  /// [read end, write end], both non-blocking.
  let pipe: (read: Int32, write: Int32)

  init() throws(ChatError) {
    var ends: [Int32] = [0, 0]
    guard Glibc.pipe(&ends) == 0 else {
      throw .system("pipe", String(cString: strerror(errno)))
    }
    for end in ends {
      _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
      _ = fcntl(end, F_SETFD, FD_CLOEXEC)
    }
    pipe = (ends[0], ends[1])
  }

  func post(_ item: Incoming) {
    items.withLock { $0.append(item) }
    wake()
  }

  /// Wakes the terminal thread (a full pipe is already a wake-up).
  func wake() {
    var byte: UInt8 = 1
    _ = write(pipe.write, &byte, 1)
  }

  /// Everything queued, oldest first; empties the pipe.
  func take() -> [Incoming] {
    var buffer = [UInt8](repeating: 0, count: 256)
    while read(pipe.read, &buffer, buffer.count) > 0 {}
    return items.withLock { items in
      let taken = items
      items = []
      return taken
    }
  }
}

/// Why the chat client cannot run.
public enum ChatError: Error, CustomStringConvertible {
  case system(String, String)
  case notATerminal
  case noRooms(String)
  case noSuchRoom(String, [String])

  public var description: String {
    switch self {
    case .system(let call, let reason): "\(call): \(reason)"
    case .notATerminal: "the chat needs a terminal (standard input and output are not one)"
    case .noRooms(let path): "\(path) has no chat rooms"
    case .noSuchRoom(let room, let rooms):
      "no room \(room) (rooms: \(rooms.joined(separator: ", ")))"
    }
  }
}
