import Foundation
import Synchronization

/// Chat posts waiting for the link, on disk, in order.
///
/// A post written while the link is down, behind posts already here, unanswered for
/// ``PostChannel/patience``, or lost on the way when the link dies is kept here before
/// `write()` returns, so it survives the daemon: one file per post, 0600 in a 0700
/// directory under `$XDG_STATE_HOME/mount9bbs/outbox/<bbs>/`, written to a temporary name,
/// fsynced, renamed into place and the directory fsynced. The next mount of the same BBS
/// (same address and user name) sends what is left. A post that was on the wire when the
/// link died is sent again: delivery is at least once, never silently dropped (see
/// ``PostChannel`` for when it is exactly once).
public final class Outbox: Sendable {
  struct Entry: Equatable {
    let sequence: UInt64
    /// The chat directory whose `post` file takes it (`["chat"]`, `["srv", "bbs", "chat"]`).
    let chatDirectory: [String]
    /// `room:text`, one Twrite.
    let payload: [UInt8]
    /// When it was written (its file's mtime after a restart).
    let queued: Date
  }

  struct Failure: Error, CustomStringConvertible {
    let description: String
    /// The errno of the failed call (ENOSPC, EACCES…), for the writer whose post it was.
    var code: Int32 = EIO
  }

  let directory: String
  /// The bookkeeping (held around it only: the files are written and fsynced outside).
  private let state: Mutex<State>

  private struct State {
    /// The stored posts, oldest first.
    var entries: [Entry] = []
    var nextSequence: UInt64 = 1
  }

  /// Opens (creating it 0700 if needed) the outbox of one BBS and loads what is left in it.
  init(directory: String) throws(Failure) {
    self.directory = directory
    let manager = FileManager.default
    var entries: [Entry] = []
    do {
      try manager.createDirectory(
        atPath: directory, withIntermediateDirectories: true,
        attributes: [.posixPermissions: 0o700])
      _ = chmod(directory, 0o700)
      // A post planted here would go out under the user's name.
      if let problem = StateDirectory.privacyProblem(of: directory) {
        throw Failure(
          description: "the outbox \(directory) \(problem): refusing to send posts from it "
            + "(remove it, or make it yours alone with chmod 700)")
      }
      for name in try manager.contentsOfDirectory(atPath: directory) {
        if name.hasSuffix(".tmp") {
          // A post whose write never completed was never acknowledged: drop the fragment.
          try? manager.removeItem(atPath: directory + "/" + name)
          continue
        }
        guard name.hasSuffix(".post"), let sequence = UInt64(name.dropLast(5)),
          let data = manager.contents(atPath: directory + "/" + name),
          let newline = data.firstIndex(of: UInt8(ascii: "\n"))
        else { continue }
        let path = String(decoding: data[..<newline], as: UTF8.self)
        let modified =
          (try? manager.attributesOfItem(atPath: directory + "/" + name))?[.modificationDate]
          as? Date
        entries.append(
          Entry(
            sequence: sequence, chatDirectory: path.split(separator: "/").map(String.init),
            payload: Array(data[(newline + 1)...]), queued: modified ?? Date()))
      }
    } catch let failure as Failure {
      throw failure
    } catch {
      throw Failure(description: "cannot use the outbox \(directory): \(error)")
    }
    entries.sort { $0.sequence < $1.sequence }
    state = Mutex(State(entries: entries, nextSequence: (entries.last?.sequence ?? 0) + 1))
  }

  /// The outbox directory for a BBS: `$XDG_STATE_HOME/mount9bbs/outbox/<key>`.
  public static func directory(forKey key: String) -> String {
    StateDirectory.path("outbox", key: key)
  }

  var count: Int {
    state.withLock { $0.entries.count }
  }

  var isEmpty: Bool { count == 0 }

  /// The stored posts, oldest first.
  var all: [Entry] {
    state.withLock { $0.entries }
  }

  /// Stores a post durably, after every post stored before. Returns once it is on disk.
  func append(
    _ payload: [UInt8], chatDirectory: [String], queued: Date = Date()
  ) throws(Failure) -> Entry {
    let sequence = state.withLock { state in
      defer { state.nextSequence += 1 }
      return state.nextSequence
    }
    let entry = Entry(
      sequence: sequence, chatDirectory: chatDirectory, payload: payload, queued: queued)
    try store(entry)
    state.withLock { $0.entries.append(entry) }
    return entry
  }

  /// Forgets a post the server acknowledged.
  func remove(_ entry: Entry) {
    forget(entry)
    unlink(path(of: entry))
  }

  /// Moves a post the server refused (e.g. its room is gone) aside, so it neither blocks the
  /// queue nor vanishes.
  func reject(_ entry: Entry) {
    forget(entry)
    let rejected = directory + "/rejected"
    try? FileManager.default.createDirectory(
      atPath: rejected, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    rename(path(of: entry), rejected + "/" + name(of: entry))
  }

  private func forget(_ entry: Entry) {
    state.withLock { $0.entries.removeAll { $0.sequence == entry.sequence } }
  }

  private func name(of entry: Entry) -> String {
    let digits = String(entry.sequence)
    return String(repeating: "0", count: max(0, 16 - digits.count)) + digits + ".post"
  }

  private func path(of entry: Entry) -> String { directory + "/" + name(of: entry) }

  private func store(_ entry: Entry) throws(Failure) {
    let final = path(of: entry)
    let temporary = final + ".tmp"
    let header = Array(("/" + entry.chatDirectory.joined(separator: "/") + "\n").utf8)
    let bytes = header + entry.payload
    var fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    if fd < 0 && errno == ENOENT {
      // The directory was removed under the mount (a cleaned state directory): make it again.
      try? FileManager.default.createDirectory(
        atPath: directory, withIntermediateDirectories: true,
        attributes: [.posixPermissions: 0o700])
      fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    }
    guard fd >= 0 else { throw failure("create", temporary) }
    var written = 0
    while written < bytes.count {
      let count = bytes[written...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
      if count < 0 && errno == EINTR { continue }
      guard count > 0 else {
        let error = failure("write", temporary)
        close(fd)
        unlink(temporary)
        throw error
      }
      written += count
    }
    guard fsync(fd) == 0 else {
      let error = failure("fsync", temporary)
      close(fd)
      unlink(temporary)
      throw error
    }
    close(fd)
    guard rename(temporary, final) == 0 else { throw failure("rename", final) }
    let directoryFD = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    if directoryFD >= 0 {
      fsync(directoryFD)
      close(directoryFD)
    }
  }

  private func failure(_ operation: String, _ path: String) -> Failure {
    let code = errno
    return Failure(
      description: "outbox \(operation) \(path): \(String(cString: strerror(code)))", code: code)
  }
}
