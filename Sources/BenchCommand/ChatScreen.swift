import Foundation
import Glibc

/// A program on a pseudo-terminal (its standard input and output), everything it draws kept
/// with the time each read of it arrived.
///
/// `@unchecked Sendable`: what the reading thread and the waiters share (`seen`, `arrivals`,
/// `finished`) is touched only under `condition`, which waiters need.
final class ChatScreen: @unchecked Sendable {
  let pid: pid_t
  private let master: Int32
  private let condition = NSCondition()
  private var seen: [UInt8] = []
  /// (when, length of `seen` after that read).
  private var arrivals: [(at: Int64, end: Int)] = []
  private var finished = false

  init(_ path: String, _ arguments: [String], width: Int = 100, height: Int = 30, log: String)
    throws
  {
    let (master, slave) = try OutputFollower.makeOutput(.pty)
    defer { close(slave) }
    var size = winsize(
      ws_row: UInt16(height), ws_col: UInt16(width), ws_xpixel: 0, ws_ypixel: 0)
    _ = ioctl(master, UInt(TIOCSWINSZ), &size)
    do {
      pid = try Supervisor.shared.spawn(path, arguments, log: log, stdout: slave, stdin: slave)
    } catch {
      close(master)
      throw error
    }
    self.master = master
    Thread.detachNewThread { [self] in run() }
  }

  private func run() {
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
      let count = buffer.withUnsafeMutableBytes { read(master, $0.baseAddress, $0.count) }
      if count < 0 && errno == EINTR { continue }
      // EIO: the program and its terminal are gone.
      if count <= 0 { break }
      let now = Clock.now
      condition.lock()
      seen += buffer[0..<count]
      arrivals.append((now, seen.count))
      condition.broadcast()
      condition.unlock()
    }
    condition.lock()
    finished = true
    condition.broadcast()
    condition.unlock()
  }

  /// How many bytes the program has drawn so far.
  var count: Int { condition.withLock { seen.count } }

  /// When `bytes` were first drawn completely at or after `offset`, waiting up to `seconds`.
  func waitFor(_ bytes: [UInt8], after offset: Int, seconds: Double) -> Int64? {
    let deadline = Date(timeIntervalSinceNow: seconds)
    condition.lock()
    defer { condition.unlock() }
    while true {
      if let end = Self.end(of: bytes, in: seen, from: offset) {
        return arrivals.first { $0.end >= end }?.at
      }
      if finished || !condition.wait(until: deadline) { return nil }
    }
  }

  private static func end(of needle: [UInt8], in haystack: [UInt8], from offset: Int) -> Int? {
    guard !needle.isEmpty, haystack.count - offset >= needle.count else { return nil }
    var start = max(0, offset)
    while start + needle.count <= haystack.count {
      if haystack[start] == needle[0]
        && haystack[start..<start + needle.count].elementsEqual(needle)
      {
        return start + needle.count
      }
      start += 1
    }
    return nil
  }

  /// Types `bytes`.
  func send(_ bytes: [UInt8]) {
    _ = bytes.withUnsafeBytes { write(master, $0.baseAddress, $0.count) }
  }

  /// The program's CPU use over `seconds`, percent of one core.
  func idleCPU(seconds: Double) -> Double? {
    func ticks() -> Int? {
      guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let close = text.lastIndex(of: ")")
      else { return nil }
      let fields = text[text.index(after: close)...].split(separator: " ")
      guard fields.count > 12, let user = Int(fields[11]), let system = Int(fields[12]) else {
        return nil
      }
      return user + system
    }
    guard let before = ticks() else { return nil }
    usleep(UInt32(seconds * 1e6))
    guard let after = ticks() else { return nil }
    return Double(after - before) / Double(sysconf(Int32(_SC_CLK_TCK))) / seconds * 100
  }

  /// `/quit`, then a kill if it has not left within 3 s.
  func quit() {
    send(Array("/quit\r".utf8))
    if !Supervisor.shared.reap(pid, seconds: 3) { Supervisor.shared.stop(pid) }
    // The reader ends on EIO once the program is gone; only then is its descriptor closed.
    condition.lock()
    let until = Date(timeIntervalSinceNow: 2)
    while !finished && condition.wait(until: until) {}
    let done = finished
    condition.unlock()
    if done { close(master) }
  }
}
