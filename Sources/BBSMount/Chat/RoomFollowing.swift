// How `tail -f` of a room shows a line the moment it arrives.
//
// GNU tail treats a FUSE file as remote: it never uses inotify and never reads at the end of
// a regular file. Its follow loop `fstat`s each file; an unchanged size and mtime sends it to
// sleep for a second (`-s`) when no file gave input. So a line waits up to a second unless the
// `fstat` itself returns when the room grows. The kernel's getattr carries no file handle for
// fstat, only the calling thread, so the mount recognises the loop by its caller: a thread
// that opened the room, was told its size and has read up to it, asks again. Its getattr is
// held until one of the rooms that thread follows grows (bounded; an interrupt answers it at
// once with the attributes as they are, so Ctrl-C and Ctrl-Z work and `fg` carries on).
//
// Into a pipe or a file tail's output is buffered and flushed only at the end of a pass that
// read nothing, right before it sleeps. So for such a tail every `fstat` is answered at once
// but the one that begins a pass after a pass with no input (tail has flushed the lines it
// read and slept its second): that one is held until a room grows: a line that follows a quiet second reaches
// `tail -f room | while read …` within milliseconds; lines closer together wait for tail's
// sleep, as they always did. On a terminal (line-buffered) every such `fstat` is held.
//
// Only when that is safe: the caller has no regular file open outside this mount (`tail -f
// room /var/log/syslog` must still see the log). Anyone else's getattr (`ls -l`, `stat`, a
// `cat` starting) never waits.

import Dispatch
import Foundation
import FuseKit
import Glibc
import Synchronization

/// The follow-loop waits of room files.
enum RoomFollowing {
  /// The longest a follow-loop `fstat` is held: every FUSE request is answered in bounded time.
  static let longestWait: Duration = .seconds(60)
}

/// What the mount can learn about the process behind a FUSE request, from `/proc`.
struct CallerProcess {
  let pid: pid_t

  /// Whether its standard output is a terminal (a character device other than /dev/null).
  var writesToTerminal: Bool {
    guard pid > 0, let target = Self.link("/proc/\(pid)/fd/1") else { return false }
    // Only device nodes are looked at: a stat of a path on this mount would come back to us.
    guard target.hasPrefix("/dev/") else { return false }
    var info = stat()
    guard stat(target, &info) == 0, info.st_mode & S_IFMT == S_IFCHR else { return false }
    return target != "/dev/null"
  }

  /// Whether every regular file it has open (other than its standard streams) is under
  /// `mountpoint`. False when that cannot be told (no permission, too many descriptors).
  func opensFilesOnlyUnder(_ mountpoint: String) -> Bool {
    guard pid > 0, let directory = opendir("/proc/\(pid)/fd") else { return false }
    defer { closedir(directory) }
    let prefix = mountpoint.hasSuffix("/") ? mountpoint : mountpoint + "/"
    var seen = 0
    while let entry = readdir(directory) {
      let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
        String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
      }
      guard let fd = Int(name), fd > 2 else { continue }
      seen += 1
      if seen > 256 { return false }
      // Pipes, sockets and anonymous inodes read as "pipe:[…]" and the like: not files.
      guard let target = Self.link("/proc/\(pid)/fd/\(fd)"), target.hasPrefix("/"),
        !target.hasPrefix(prefix)
      else { continue }
      // Devices are not files tail polls; a file open only for writing (a log a script's
      // redirection left behind) is not one it follows.
      if ["/dev/", "/proc/", "/sys/"].contains(where: target.hasPrefix) { continue }
      if Self.isWriteOnly(pid: pid, fd: fd) { continue }
      return false
    }
    return true
  }

  /// Whether descriptor `fd` of `pid` was opened O_WRONLY (its fdinfo's octal `flags`).
  private static func isWriteOnly(pid: pid_t, fd: Int) -> Bool {
    guard let info = try? String(contentsOfFile: "/proc/\(pid)/fdinfo/\(fd)", encoding: .utf8),
      let line = info.split(separator: "\n").first(where: { $0.hasPrefix("flags:") }),
      let flags = Int(line.dropFirst("flags:".count).trimmingCharacters(in: .whitespaces), radix: 8)
    else { return false }
    return flags & Int(O_ACCMODE) == Int(O_WRONLY)
  }

  private static func link(_ path: String) -> String? {
    var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
    let count = readlink(path, &buffer, buffer.count - 1)
    guard count > 0 else { return nil }
    return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
  }
}

extension RoomHandle: FollowedRoom {}

/// The caller of a getattr as ``FollowDecision`` asks about it: `/proc` and its follow passes.
struct FollowingCaller: FollowCaller {
  let process: CallerProcess
  let passes: FollowPasses

  var pid: pid_t { process.pid }
  var writesToTerminal: Bool { process.writesToTerminal }
  func opensFilesOnlyUnder(_ mountpoint: String) -> Bool {
    process.opensFilesOnlyUnder(mountpoint)
  }
  func startPass() -> Bool { passes.startPass(of: process.pid) }
}

/// Held follow-loop getattrs, answered at the latest after a wait limit by one shared sweep
/// (a timer each would keep every answered hold alive for the whole wait: 50 tails of a busy
/// room make thousands a minute).
final class HeldFstats: Sendable {
  private struct Holds {
    var nextID: UInt64 = 0
    var wakes: [UInt64: @Sendable () -> Void] = [:]
    /// Deadlines in the order they were armed (every hold waits as long, so they are sorted).
    var deadlines: [(at: ContinuousClock.Instant, id: UInt64)] = []
    var head = 0
    var sweeping = false
  }

  private let holds = Mutex(Holds())

  /// A new hold's id.
  func reserve() -> UInt64 {
    holds.withLock {
      $0.nextID += 1
      return $0.nextID
    }
  }

  /// Calls `wake` after `limit` unless the hold is forgotten first.
  func arm(_ id: UInt64, after limit: Duration, _ wake: @escaping @Sendable () -> Void) {
    let start = holds.withLock { holds -> Bool in
      holds.wakes[id] = wake
      holds.deadlines.append((ContinuousClock.now + limit, id))
      defer { holds.sweeping = true }
      return !holds.sweeping
    }
    if start { scheduleSweep() }
  }

  /// The hold was answered: drop its wake.
  func forget(_ id: UInt64) {
    holds.withLock { _ = $0.wakes.removeValue(forKey: id) }
  }

  /// Holds still waiting (for tests and status).
  var count: Int { holds.withLock { $0.wakes.count } }

  private func scheduleSweep() {
    DispatchQueue.global().asyncAfter(deadline: .now() + 1) { [weak self] in self?.sweep() }
  }

  private func sweep() {
    let now = ContinuousClock.now
    let (due, more) = holds.withLock { holds -> ([@Sendable () -> Void], Bool) in
      var due: [@Sendable () -> Void] = []
      while holds.head < holds.deadlines.count, holds.deadlines[holds.head].at <= now {
        if let wake = holds.wakes.removeValue(forKey: holds.deadlines[holds.head].id) {
          due.append(wake)
        }
        holds.head += 1
      }
      if holds.head > 1024 && holds.head * 2 > holds.deadlines.count {
        holds.deadlines.removeFirst(holds.head)
        holds.head = 0
      }
      // Entries of answered holds go as their deadlines pass; stop once none is left.
      holds.sweeping = holds.head < holds.deadlines.count
      return (due, holds.sweeping)
    }
    for wake in due { wake() }
    if more { scheduleSweep() }
  }
}

/// The feed waiters of one held getattr, cancelled together once it is answered.
final class FollowWaits: Sendable {
  private let state = Mutex<(waits: [(RoomFeed, UInt64)], cancelled: Bool)>(([], false))

  func add(_ feed: RoomFeed, _ id: UInt64) {
    let cancelled = state.withLock { state in
      if !state.cancelled { state.waits.append((feed, id)) }
      return state.cancelled
    }
    if cancelled { feed.cancelWait(id) }
  }

  func cancelAll() {
    let all = state.withLock { state in
      state.cancelled = true
      defer { state.waits.removeAll() }
      return state.waits
    }
    for (feed, id) in all { feed.cancelWait(id) }
  }
}
