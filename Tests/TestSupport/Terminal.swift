import Foundation
import Glibc

/// A child process whose standard output and error are a pseudo-terminal, as when a person
/// runs it in a shell: stdio (GNU tail included) writes each line as it is made. The test
/// reads the terminal's other side.
public final class TerminalChild: @unchecked Sendable {
  public let process = Process()
  private let master: Int32
  private let lock = NSLock()
  private var captured = Data()

  public init(_ executable: String, _ arguments: [String]) throws {
    // posix_openpt and friends are not visible from Swift's Glibc: /dev/ptmx and its ioctls
    // (TIOCSPTLCK unlocks the slave, TIOCGPTN names it).
    let master = open("/dev/ptmx", O_RDWR | O_NOCTTY)
    var unlock: CInt = 0
    var number: CUnsignedInt = 0
    guard master >= 0, ioctl(master, 0x4004_5431, &unlock) == 0,
      ioctl(master, 0x8004_5430, &number) == 0
    else {
      throw HarnessError("no pseudo-terminal: \(String(cString: strerror(errno)))")
    }
    let name = "/dev/pts/\(number)"
    let slave = open(name, O_RDWR | O_NOCTTY)
    guard slave >= 0 else {
      close(master)
      throw HarnessError(
        "cannot open \(name): \(String(cString: strerror(errno)))")
    }
    // No echo or newline translation: the test sees exactly what the program wrote.
    var modes = termios()
    tcgetattr(slave, &modes)
    cfmakeraw(&modes)
    tcsetattr(slave, TCSANOW, &modes)
    self.master = master
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    let terminal = FileHandle(fileDescriptor: slave, closeOnDealloc: true)
    process.standardOutput = terminal
    process.standardError = terminal
    process.standardInput = FileHandle.nullDevice
  }

  /// Starts the program and a thread copying what it writes.
  public func start() throws {
    try process.run()
    // Our copy of the slave side goes, so the master reads EIO once the child has exited.
    try? (process.standardOutput as? FileHandle)?.close()
    let master = master
    let reader = Thread { [self] in
      var buffer = [UInt8](repeating: 0, count: 65536)
      while true {
        let count = read(master, &buffer, buffer.count)
        if count < 0 && errno == EINTR { continue }
        guard count > 0 else { return }
        lock.lock()
        captured.append(contentsOf: buffer[..<count])
        lock.unlock()
      }
    }
    reader.start()
  }

  /// Everything it wrote so far.
  public var text: String {
    lock.lock()
    defer { lock.unlock() }
    return String(decoding: captured, as: UTF8.self)
  }

  /// Waits until its output contains `needle`; returns the seconds waited, or nil on timeout.
  public func waitForOutput(_ needle: String, timeout: TimeInterval) -> TimeInterval? {
    let start = Date()
    guard waitUntil(timeout: timeout, interval: 0.002, { text.contains(needle) }) else {
      return nil
    }
    return Date().timeIntervalSince(start)
  }

  public var isRunning: Bool { process.isRunning }
  public var pid: pid_t { process.processIdentifier }

  public func signal(_ signal: Int32) {
    if process.isRunning { kill(process.processIdentifier, signal) }
  }

  /// Waits for exit; false on timeout.
  @discardableResult
  public func wait(timeout: TimeInterval) -> Bool {
    waitUntil(timeout: timeout) { !process.isRunning }
  }

  /// SIGTERM, then SIGKILL.
  public func stop() {
    guard process.isRunning else { return }
    signal(SIGTERM)
    if !wait(timeout: 2) {
      signal(SIGKILL)
      wait(timeout: 5)
    }
  }

  deinit { close(master) }

  /// The process state letter from /proc (R, S, T for stopped, …).
  public var state: Character? {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
      let close = stat.lastIndex(of: ")")
    else { return nil }
    return stat[close...].dropFirst(2).first
  }
}
