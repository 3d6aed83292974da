import Foundation
import Glibc

/// A room reader as people run one: `tail -f ROOM` or `cat ROOM` as a child process, its
/// stdout on a pseudo-terminal (what a user's terminal is) or a pipe (`tail -f ROOM | …`).
/// A thread reads the other end and records when each complete line carrying a `#p<token>#`
/// first appears.
///
/// `@unchecked Sendable`: what the reading thread and the waiters share (`arrivals`,
/// `finished`, `stopping`) is touched only under `condition`, which waiters need.
final class OutputFollower: @unchecked Sendable {
  enum Output: String {
    case pty, pipe
  }

  let pid: pid_t
  private let fd: Int32
  private let condition = NSCondition()
  private var arrivals: [String: Int64] = [:]
  private var finished = false
  private var stopping = false

  /// Starts `path arguments` with stdout on a new pty or pipe, stderr to `log`.
  init(_ path: String, _ arguments: [String], output: Output, log: String) throws {
    let (reading, writing) = try Self.makeOutput(output)
    defer { close(writing) }
    do {
      pid = try Supervisor.shared.spawn(path, arguments, log: log, stdout: writing)
    } catch {
      close(reading)
      throw error
    }
    fd = reading
    Thread.detachNewThread { [self] in run() }
  }

  /// (read end, write end), both close-on-exec; spawn dups the write end onto stdout.
  static func makeOutput(_ output: Output) throws -> (Int32, Int32) {
    switch output {
    case .pipe:
      var ends: [Int32] = [-1, -1]
      guard let pipe2 = PseudoTerminal.pipe2, pipe2(&ends, O_CLOEXEC) == 0 else {
        throw BenchError("pipe2: \(errnoText())")
      }
      return (ends[0], ends[1])
    case .pty:
      guard let openpt = PseudoTerminal.openpt, let grantpt = PseudoTerminal.grantpt,
        let unlockpt = PseudoTerminal.unlockpt, let ptsname = PseudoTerminal.ptsname
      else { throw BenchError("no posix_openpt/grantpt/unlockpt/ptsname_r in the C library") }
      let master = openpt(O_RDWR | O_NOCTTY | O_CLOEXEC)
      guard master >= 0 else { throw BenchError("posix_openpt: \(errnoText())") }
      var name = [CChar](repeating: 0, count: 128)
      guard grantpt(master) == 0, unlockpt(master) == 0,
        ptsname(master, &name, name.count) == 0
      else {
        let text = errnoText()
        close(master)
        throw BenchError("pty set-up: \(text)")
      }
      let path = String(
        decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
      let slave = open(path, O_RDWR | O_NOCTTY | O_CLOEXEC)
      guard slave >= 0 else {
        let text = errnoText()
        close(master)
        throw BenchError("open pty slave: \(text)")
      }
      // Raw mode: no \n → \r\n translation, the bytes arrive as the child wrote them.
      var modes = termios()
      if tcgetattr(slave, &modes) == 0 {
        cfmakeraw(&modes)
        tcsetattr(slave, TCSANOW, &modes)
      }
      return (master, slave)
    }
  }

  private func run() {
    var buffer = [UInt8](repeating: 0, count: 65536)
    var pending: [UInt8] = []
    while true {
      condition.lock()
      let stop = stopping
      condition.unlock()
      if stop { break }
      // poll with a timeout, so stop() ends this thread even if the child never exits.
      var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
      let ready = poll(&entry, 1, 100)
      if ready < 0 && errno != EINTR { break }
      if ready <= 0 { continue }
      let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
      if count < 0 && errno == EINTR { continue }
      // 0 on a pipe, EIO on a pty master: the child and its stdout are gone.
      if count <= 0 { break }
      let now = Clock.now
      pending += buffer[0..<count]
      guard let lastNewline = pending.lastIndex(of: UInt8(ascii: "\n")) else { continue }
      let tokens = Self.tokens(in: pending[...lastNewline])
      pending.removeSubrange(...lastNewline)
      condition.lock()
      for token in tokens where arrivals[token] == nil { arrivals[token] = now }
      condition.broadcast()
      condition.unlock()
    }
    close(fd)
    condition.lock()
    finished = true
    condition.broadcast()
    condition.unlock()
  }

  /// The `#p<token>#` tokens of complete lines.
  private static func tokens(in lines: ArraySlice<UInt8>) -> [String] {
    let text = String(decoding: lines, as: UTF8.self)
    return text.split(separator: "#p").dropFirst().compactMap { piece in
      piece.firstIndex(of: "#").map { String(piece[..<$0]) }
    }
  }

  /// When `token` first appeared, if it has.
  func arrival(of token: String) -> Int64? {
    condition.withLock { arrivals[token] }
  }

  /// Waits until `predicate` holds for the arrivals so far, or until `deadline` (monotonic ns).
  @discardableResult
  func wait(until deadline: Int64, for predicate: ([String: Int64]) -> Bool) -> Bool {
    condition.lock()
    defer { condition.unlock() }
    while !predicate(arrivals) && !finished {
      let left = Double(deadline - Clock.now) / 1e9
      if left <= 0 || !condition.wait(until: Date(timeIntervalSinceNow: left)) { break }
    }
    return predicate(arrivals)
  }

  /// Where the child waits in the kernel: its wchan and system call, from /proc.
  var kernelState: String {
    func read(_ name: String) -> String {
      let text = (try? String(contentsOfFile: "/proc/\(pid)/\(name)", encoding: .utf8)) ?? "?"
      return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }
    let call = read("syscall").split(separator: " ").first.flatMap { Int($0) }
    let name = call.map { Self.syscallNames[$0] ?? "syscall \($0)" } ?? read("syscall")
    return "\(read("wchan")) in \(name)"
  }

  /// True while the child waits where a follower settles: in read() (at the end of the room,
  /// or tail's first read of an empty room) or in tail's sleep between polls — not in exec,
  /// open or stat.
  var isSettled: Bool {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/syscall", encoding: .utf8),
      let call = text.split(separator: " ").first.flatMap({ Int($0) })
    else { return false }
    return Self.settledCalls.contains(call)
  }

  private static let settledCalls: Set<Int> = [0, 17, 35, 230]

  /// The x86_64 numbers of the calls a reader can wait in.
  private static let syscallNames = [
    0: "read", 1: "write", 4: "stat", 5: "fstat", 6: "lstat", 7: "poll", 17: "pread64",
    35: "nanosleep", 230: "clock_nanosleep", 257: "openat", 262: "newfstatat", 332: "statx",
  ]

  /// Kills the child and waits up to `seconds` for it; false if it is still there (a reader
  /// stuck in a FUSE request dies when its mount's daemon does).
  func terminate() { kill(pid, SIGKILL) }

  @discardableResult
  func stop(seconds: Double = 3) -> Bool {
    terminate()
    let gone = Supervisor.shared.reap(pid, seconds: seconds)
    condition.withLock { stopping = true }
    return gone
  }
}

/// The C library's pseudo-terminal calls (and pipe2), which Swift's Glibc module leaves out:
/// they are declared only under _XOPEN_SOURCE / _GNU_SOURCE.
private enum PseudoTerminal {
  static func function<T>(_ name: String, as type: T.Type) -> T? {
    // The program's own handle: libc is already loaded.
    guard let symbol = dlsym(dlopen(nil, RTLD_NOW), name) else { return nil }
    return unsafeBitCast(symbol, to: type)
  }

  static let openpt = function("posix_openpt", as: (@convention(c) (Int32) -> Int32).self)
  static let grantpt = function("grantpt", as: (@convention(c) (Int32) -> Int32).self)
  static let unlockpt = function("unlockpt", as: (@convention(c) (Int32) -> Int32).self)
  static let ptsname = function(
    "ptsname_r", as: (@convention(c) (Int32, UnsafeMutablePointer<CChar>?, Int) -> Int32).self)
  static let pipe2 = function(
    "pipe2", as: (@convention(c) (UnsafeMutablePointer<Int32>?, Int32) -> Int32).self)
}

private func errnoText() -> String { String(cString: strerror(errno)) }
