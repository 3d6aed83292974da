import Foundation
import Logging
import Synchronization

/// A room's transcript kept on disk between mounts.
///
/// The server keeps a read position per user, so after a remount a room you had read to the
/// end has nothing to send until the next post: without a copy of its own, the mount would show
/// an empty room, `tail -n 20` would print nothing and opening the room would wait for the next
/// message. Each room's lines are appended to a 0600 file in a 0700 directory under
/// `$XDG_STATE_HOME/mount9bbs/history/` (one per BBS and user name), and the next mount starts
/// the room's transcript with its last ``restored`` bytes. The file is cut back to that much
/// whenever it grows past ``compactBeyond``, at load and while mounted, so a flood from a
/// board cannot fill the disk. A directory that is not the user's own, or that others may
/// write, is not used: lines planted there would show as the room's.
public final class RoomHistory: Sendable {
  /// Bytes of history a mount starts a room with.
  static let restored = 256 << 10
  /// The file is cut back to ``restored`` bytes when it grows larger than this.
  static let compactBeyond = 1 << 20

  /// Lines wait this long in memory before they are written, so a slow disk never holds up
  /// the thread that delivers them (a `kill -9` loses at most that much history).
  static let flushDelay: Duration = .milliseconds(50)
  private static let writer = DispatchQueue(label: "mount9bbs.history")

  let path: String
  private let logger: Logger
  private let descriptor: Int32
  /// Lines not written yet.
  private let buffer = Mutex(Buffer())
  /// Held around each write to the file (and a compaction), so writes keep their order; the
  /// file's size.
  // house: its job is the file's writes and compactions under it; the feed's threads only
  // append to `buffer`.
  private let writing = Mutex(0)

  private struct Buffer {
    var pending: [UInt8] = []
    /// A flush is scheduled.
    var scheduled = false
    /// A write failed: nothing more is kept.
    var failed = false
  }

  /// The directory holding the rooms of one BBS and user name:
  /// `$XDG_STATE_HOME/mount9bbs/history/<key>`.
  public static func directory(forKey key: String) -> String {
    StateDirectory.path("history", key: key)
  }

  /// Opens (creating) the history of `room` in `directory`; nil, logged, if that fails.
  init?(directory: String, room: String, logger: Logger) {
    self.logger = logger
    path = directory + "/" + StateDirectory.fileName(room) + ".log"
    do {
      try FileManager.default.createDirectory(
        atPath: directory, withIntermediateDirectories: true,
        attributes: [.posixPermissions: 0o700])
    } catch {
      logger.warning("room history: cannot create \(directory): \(error)")
      return nil
    }
    if let problem = StateDirectory.privacyProblem(of: directory) {
      logger.warning("room history: \(directory) \(problem); not kept (chmod 700 it, or remove it)")
      return nil
    }
    descriptor = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0o600)
    guard descriptor >= 0 else {
      logger.warning(
        "room history: cannot open \(path): \(String(cString: strerror(errno))); not kept")
      return nil
    }
    var info = stat()
    if fstat(descriptor, &info) == 0 { writing.withLock { $0 = Int(info.st_size) } }
  }

  deinit {
    flush()
    close(descriptor)
  }

  /// The last ``restored`` bytes, starting and ending at line boundaries, and when the file
  /// last grew. Compacts the file when it has grown past ``compactBeyond``.
  func load() -> (bytes: [UInt8], modified: Date) {
    guard let data = FileManager.default.contents(atPath: path), !data.isEmpty else {
      return ([], Date())
    }
    let modified =
      ((try? FileManager.default.attributesOfItem(atPath: path))?[.modificationDate] as? Date)
      ?? Date()
    var bytes = [UInt8](data.suffix(Self.restored))
    if bytes.count < data.count, let newline = bytes.firstIndex(of: UInt8(ascii: "\n")) {
      bytes.removeFirst(newline + 1)  // a line cut by the suffix
    }
    // A line the last mount had only part of when it stopped is dropped, here and on disk.
    let partial = bytes.count - ((bytes.lastIndex(of: UInt8(ascii: "\n"))).map { $0 + 1 } ?? 0)
    bytes.removeLast(partial)
    if data.count > Self.compactBeyond {
      let compacted = writing.withLock { size in
        size = bytes.count
        return ftruncate(descriptor, 0) == 0 && write(bytes)
      }
      if !compacted { logger.warning("room history: cannot compact \(path)") }
    } else if partial > 0 {
      writing.withLock { size in
        size = data.count - partial
        _ = ftruncate(descriptor, off_t(size))
      }
    }
    return (bytes, modified)
  }

  /// Appends lines as they arrive: they are written within ``flushDelay``, off the caller's
  /// thread (a failure is logged once; the room goes on).
  func append(_ data: [UInt8]) {
    guard !data.isEmpty else { return }
    let schedule = buffer.withLock { buffer in
      guard !buffer.failed else { return false }
      buffer.pending += data
      defer { buffer.scheduled = true }
      return !buffer.scheduled
    }
    if schedule {
      Self.writer.asyncAfter(deadline: .now() + Self.flushDelay.timeInterval) { [weak self] in
        self?.flush()
      }
    }
  }

  /// Writes what is pending now (the feed stopping, the mount going away).
  func flush() {
    let failure = writing.withLock { size -> String? in
      // house: `writing`, then `buffer`; `buffer` is never held while `writing` is taken.
      let chunk = buffer.withLock { buffer in
        defer {
          buffer.pending = []
          buffer.scheduled = false
        }
        return buffer.pending
      }
      if chunk.isEmpty { return nil }
      guard write(chunk) else { return String(cString: strerror(errno)) }
      size += chunk.count
      return size > Self.compactBeyond ? compact(&size) : nil
    }
    guard let failure else { return }
    buffer.withLock { $0.failed = true }
    logger.warning("room history: writing \(path) failed: \(failure); not kept")
  }

  /// Cuts the file back to its last ``restored`` bytes, from a line's start; the reason if
  /// that failed. Under `writing`.
  private func compact(_ size: inout Int) -> String? {
    var tail = [UInt8](repeating: 0, count: min(size, Self.restored))
    let read = tail.withUnsafeMutableBytes {
      pread(descriptor, $0.baseAddress, $0.count, off_t(size - $0.count))
    }
    guard read == tail.count else { return String(cString: strerror(errno)) }
    if let newline = tail.firstIndex(of: UInt8(ascii: "\n")) { tail.removeFirst(newline + 1) }
    guard ftruncate(descriptor, 0) == 0, write(tail) else {
      return String(cString: strerror(errno))
    }
    size = tail.count
    return nil
  }

  private func write(_ data: [UInt8]) -> Bool {
    var offset = 0
    while offset < data.count {
      let written = data.withUnsafeBytes { buffer -> Int in
        guard let base = buffer.baseAddress else { return -1 }
        return Glibc.write(descriptor, base + offset, data.count - offset)
      }
      if written < 0 && errno == EINTR { continue }
      guard written > 0 else { return false }
      offset += written
    }
    return true
  }
}

/// Per-user state under `$XDG_STATE_HOME/mount9bbs/` (default `~/.local/state`).
enum StateDirectory {
  /// Why `directory` cannot hold this user's state, or nil: it is not a directory (a link, a
  /// file), another user owns it, or group or others may write it.
  static func privacyProblem(of directory: String) -> String? {
    var info = stat()
    guard lstat(directory, &info) == 0 else { return String(cString: strerror(errno)) }
    if info.st_mode & S_IFMT != S_IFDIR { return "is not a directory" }
    if info.st_uid != getuid() { return "is owned by another user (uid \(info.st_uid))" }
    if info.st_mode & 0o022 != 0 { return "is writable by others" }
    return nil
  }

  /// `…/mount9bbs/KIND/KEY`, with the key made safe as a file name.
  static func path(_ kind: String, key: String) -> String {
    let environment = ProcessInfo.processInfo.environment
    let state =
      environment["XDG_STATE_HOME"].flatMap { $0.isEmpty ? nil : $0 }
      ?? (NSHomeDirectory() + "/.local/state")
    return state + "/mount9bbs/" + kind + "/" + safe(key)
  }

  /// A file name of its own for `text` (a room, as the server names it): ``safe(_:)`` when
  /// that is `text` itself; otherwise, as two names made the same by it ("a b", "a_b") or a
  /// name too long for a file must not share a file or lose it, a prefix of it and a hash of
  /// `text`.
  static func fileName(_ text: String) -> String {
    let safe = safe(text)
    guard safe != text || safe.utf8.count > 200 else { return safe }
    // FNV-1a: the same on every run (Swift's Hasher is seeded per process).
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325
    for byte in text.utf8 {
      hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3
    }
    let hex = String(hash, radix: 16)
    return String(safe.unicodeScalars.prefix(50)) + "~"
      + String(repeating: "0", count: 16 - hex.count) + hex
  }

  /// `text` with everything but letters, digits and `-._@` replaced by `_`.
  static func safe(_ text: String) -> String {
    text.unicodeScalars.map {
      CharacterSet.alphanumerics.contains($0) || "-._@".unicodeScalars.contains($0)
        ? String($0) : "_"
    }.joined()
  }
}
