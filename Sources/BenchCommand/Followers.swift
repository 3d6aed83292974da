import Foundation
import Glibc
import Synchronization

/// Reads a descriptor on a thread of its own, as a person's reader does (a room file, a
/// program's terminal or pipe), and keeps what arrives with the time (`Clock.now`) of the read
/// that brought it: complete lines, or every byte and where each read ended. Callers look at
/// what arrived, or wait until it answers their question, always with a deadline.
///
/// The benchmark's readers are this type and small wrappers over it: ``OutputFollower`` (a
/// child's output), ``ChatScreen`` (a terminal's bytes), ``roomReader(_:)`` (sections 4 and
/// 5), ``roomWatcher(_:)`` (the ping bot's answers) and the awareness section's reader of
/// `chat/events`.
///
/// What the reading thread and the waiters share is in `state`; `condition` is only for
/// sleeping: a waiter holds it while it looks at `state` and while it waits, and the reading
/// thread takes it to broadcast after each change, so no change goes unseen.
final class DescriptorFollower: Sendable {
  /// What is read.
  enum Source: Sendable {
    /// An open descriptor, read with read(); the follower closes it when it ends.
    case descriptor(Int32)
    /// A file opened (O_RDONLY) on the reading thread, as opening a room can wait for the
    /// server: read with read() from its start, or `fromItsEnd` with pread() from the size
    /// fstat gives right after the open.
    case file(String, fromItsEnd: Bool)
  }

  /// How the thread waits for input.
  enum Reading: Sendable {
    /// In read(), until the descriptor ends (end of file or an error: a program gone from its
    /// terminal, an unmount); ``stop()`` takes effect after the next read.
    case blocking
    /// In poll(), at most 100 ms before each read, so ``stop()`` ends the thread even if
    /// nothing arrives. A non-blocking descriptor is read after every poll, ready or not.
    case polling
  }

  /// What it keeps of what arrives.
  enum Keeping: Sendable {
    case lines
    case bytes
  }

  /// What has arrived.
  struct Seen: Sendable {
    /// Complete lines, without their newline, each with the time of the read that brought
    /// its newline (`.lines`).
    var lines: [(at: Int64, text: String)] = []
    /// Every byte read (`.bytes`), and where each read ended with its time.
    var bytes: [UInt8] = []
    var reads: [(at: Int64, end: Int)] = []
    /// The descriptor is open (for a `.file`, once the open has returned).
    var opened = false
    /// The thread has ended: nothing more arrives.
    var finished = false
  }

  private struct State {
    var seen = Seen()
    var stopping = false
  }

  private let state = Mutex(State())
  private let condition = NSCondition()

  /// Starts the reading thread. With `endsAfter`, the thread ends after a read that brought
  /// a line for which it holds (`.lines`).
  init(
    _ source: Source, reading: Reading = .blocking, keeping: Keeping = .lines,
    endsAfter last: (@Sendable (String) -> Bool)? = nil
  ) {
    Thread.detachNewThread { [self] in run(source, reading, keeping, last) }
  }

  // MARK: Looking and waiting

  /// What `body` makes of what has arrived so far.
  func look<T: Sendable>(_ body: (Seen) -> T) -> T {
    state.withLock { body($0.seen) }
  }

  /// What `answer` makes of what has arrived, waiting until it is not nil, the thread has
  /// ended, or `deadline` (Clock.now ns) has passed.
  func wait<T: Sendable>(until deadline: Int64, for answer: (Seen) -> T?) -> T? {
    condition.lock()
    defer { condition.unlock() }
    while true {
      // house: `condition`, then `state`; the reading thread never holds `state` while it
      // takes `condition`.
      let (found, finished) = state.withLock { (answer($0.seen), $0.seen.finished) }
      if found != nil || finished { return found }
      let left = deadline - Clock.now
      if left <= 0 { return nil }
      _ = condition.wait(until: Date(timeIntervalSinceNow: Double(left) / 1e9))
    }
  }

  func wait<T: Sendable>(seconds: Double, for answer: (Seen) -> T?) -> T? {
    wait(until: Clock.now + Int64(seconds * 1e9), for: answer)
  }

  /// When line `index` (from 0) of those that arrived at or after `start` and `match`
  /// arrived, waiting until `deadline` for it.
  func line(
    _ index: Int = 0, after start: Int64 = .min, where match: (String) -> Bool,
    until deadline: Int64
  ) -> Int64? {
    wait(until: deadline) { seen in
      var skip = index
      for line in seen.lines where line.at >= start && match(line.text) {
        if skip == 0 { return line.at }
        skip -= 1
      }
      return nil
    }
  }

  /// How many of the lines so far `match`.
  func lineCount(where match: (String) -> Bool) -> Int {
    look { $0.lines.count { match($0.text) } }
  }

  /// True once the descriptor is open, waiting up to `seconds`.
  func waitOpened(seconds: Double) -> Bool {
    wait(seconds: seconds) { $0.opened ? true : nil } ?? false
  }

  /// True once the thread has ended, waiting up to `seconds`.
  @discardableResult
  func waitFinished(seconds: Double) -> Bool {
    wait(seconds: seconds) { $0.finished ? true : nil } ?? false
  }

  /// Asks the thread to end: within 100 ms when `.polling`, after the next read when
  /// `.blocking`.
  func stop() {
    state.withLock { $0.stopping = true }
  }

  // MARK: The reading thread

  private func change(_ body: (inout Seen) -> Void) {
    state.withLock { body(&$0.seen) }
    condition.lock()
    condition.broadcast()
    condition.unlock()
  }

  private func run(
    _ source: Source, _ reading: Reading, _ keeping: Keeping,
    _ last: (@Sendable (String) -> Bool)?
  ) {
    let fd: Int32
    var offset: Int64?
    switch source {
    case .descriptor(let descriptor):
      fd = descriptor
    case .file(let path, let fromItsEnd):
      fd = open(path, O_RDONLY)
      if fd >= 0 && fromItsEnd {
        var info = stat()
        fstat(fd, &info)
        offset = Int64(info.st_size)
      }
    }
    change { $0.opened = fd >= 0 }
    if fd >= 0 {
      read(fd, from: offset, reading, keeping, last)
      close(fd)
    }
    change { $0.finished = true }
  }

  private func read(
    _ fd: Int32, from start: Int64?, _ reading: Reading, _ keeping: Keeping,
    _ last: (@Sendable (String) -> Bool)?
  ) {
    var offset = start
    let blocks = fcntl(fd, F_GETFL) & O_NONBLOCK == 0
    var buffer = [UInt8](repeating: 0, count: 65536)
    var pending: [UInt8] = []
    while !state.withLock({ $0.stopping }) {
      if reading == .polling {
        var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let ready = poll(&entry, 1, 100)
        if ready < 0 && errno != EINTR { break }
        // Nothing to read: a blocking read would wait past a stop().
        if ready <= 0 && blocks { continue }
      }
      let count = buffer.withUnsafeMutableBytes { bytes in
        if let offset { return pread(fd, bytes.baseAddress, bytes.count, off_t(offset)) }
        return Glibc.read(fd, bytes.baseAddress, bytes.count)
      }
      if count < 0 && (errno == EINTR || errno == EAGAIN) { continue }
      // 0 at the end of a file or pipe; EIO on a pty master whose program is gone.
      if count <= 0 { break }
      let now = Clock.now
      offset? += Int64(count)
      switch keeping {
      case .bytes:
        change {
          $0.bytes += buffer[..<count]
          $0.reads.append((now, $0.bytes.count))
        }
      case .lines:
        pending += buffer[..<count]
        guard let end = pending.lastIndex(of: UInt8(ascii: "\n")) else { continue }
        let lines = pending[..<end].split(
          separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false
        )
        .map { (at: now, text: String(decoding: $0, as: UTF8.self)) }
        pending.removeSubrange(...end)
        change { $0.lines += lines }
        if let last, lines.contains(where: { last($0.text) }) { return }
      }
    }
  }
}

/// A room reader as people run one: `tail -f ROOM` or `cat ROOM` as a child process, its
/// stdout on a pseudo-terminal (what a user's terminal is) or a pipe (`tail -f ROOM | …`),
/// followed (polling, so ``stop(seconds:)`` ends the follower even if the child never exits);
/// it records when each complete line carrying a `#p<token>#` first appears.
final class OutputFollower: Sendable {
  enum Output: String {
    case pty, pipe
  }

  let pid: pid_t
  private let output: DescriptorFollower

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
    self.output = DescriptorFollower(.descriptor(reading), reading: .polling)
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

  /// When each `#p<token>#` of `lines` first appeared.
  private static func arrivals(in lines: [(at: Int64, text: String)]) -> [String: Int64] {
    var arrivals: [String: Int64] = [:]
    for line in lines {
      for piece in line.text.split(separator: "#p").dropFirst() {
        guard let end = piece.firstIndex(of: "#") else { continue }
        let token = String(piece[..<end])
        if arrivals[token] == nil { arrivals[token] = line.at }
      }
    }
    return arrivals
  }

  /// When `token` first appeared, if it has.
  func arrival(of token: String) -> Int64? {
    output.look { Self.arrivals(in: $0.lines)[token] }
  }

  /// Waits until `predicate` holds for the arrivals so far, or until `deadline` (monotonic ns).
  @discardableResult
  func wait(until deadline: Int64, for predicate: ([String: Int64]) -> Bool) -> Bool {
    output.wait(until: deadline) { predicate(Self.arrivals(in: $0.lines)) ? true : nil } ?? false
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
    output.stop()
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
