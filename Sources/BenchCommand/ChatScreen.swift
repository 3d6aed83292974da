import Foundation
import Glibc

/// A program on a pseudo-terminal (its standard input and output), everything it draws kept
/// with the time each read of it arrived (a ``DescriptorFollower`` keeping bytes).
final class ChatScreen: Sendable {
  let pid: pid_t
  /// The keys are typed on a descriptor of the pty master of their own (a dup): the screen's
  /// reader closes the one it reads once the program is gone, and a key typed after that
  /// cannot land on a reused descriptor number.
  private let keyboard: Int32
  private let screen: DescriptorFollower

  init(_ path: String, _ arguments: [String], width: Int = 100, height: Int = 30, log: String)
    throws
  {
    let (master, slave) = try OutputFollower.makeOutput(.pty)
    defer { close(slave) }
    var size = winsize(
      ws_row: UInt16(height), ws_col: UInt16(width), ws_xpixel: 0, ws_ypixel: 0)
    _ = ioctl(master, UInt(TIOCSWINSZ), &size)
    let keyboard = fcntl(master, F_DUPFD_CLOEXEC, 0)
    do {
      guard keyboard >= 0 else {
        throw BenchError("dup pty master: \(String(cString: strerror(errno)))")
      }
      pid = try Supervisor.shared.spawn(path, arguments, log: log, stdout: slave, stdin: slave)
    } catch {
      close(master)
      if keyboard >= 0 { close(keyboard) }
      throw error
    }
    self.keyboard = keyboard
    screen = DescriptorFollower(.descriptor(master), keeping: .bytes)
  }

  /// How many bytes the program has drawn so far.
  var count: Int { screen.look { $0.bytes.count } }

  /// When `bytes` were first drawn completely at or after `offset`, waiting up to `seconds`.
  func waitFor(_ bytes: [UInt8], after offset: Int, seconds: Double) -> Int64? {
    screen.wait(seconds: seconds) { seen in
      Self.end(of: bytes, in: seen.bytes, from: offset).flatMap { end in
        seen.reads.first { $0.end >= end }?.at
      }
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
    _ = bytes.withUnsafeBytes { write(keyboard, $0.baseAddress, $0.count) }
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
    // The screen's reader ends on EIO once the program is gone, and closes its descriptor.
    screen.waitFinished(seconds: 2)
    close(keyboard)
  }
}
