import BBSIdentity
import Foundation

/// A key file's contents without their passphrase, held in memory only.
struct UnlockedKey: Sendable {
  let text: String
  /// The key file it came from (for messages).
  let origin: String
}

/// Asks for a key's passphrase on the terminal and has ssh-keygen decrypt a private copy.
///
/// OpenSSH encrypts keys with bcrypt_pbkdf and AES, which no library on our list offers;
/// ssh-keygen does it, on a copy in the user's private runtime directory that is read back
/// and removed at once. The passphrase goes to it through a pipe, never its arguments.
enum PassphrasePrompt {
  static func unlock(_ path: String) throws(MountError) -> String {
    let terminal = isatty(0) != 0 ? open("/dev/tty", O_RDWR | O_CLOEXEC) : -1
    guard terminal >= 0 else {
      throw .refused(
        "the key \(path) is protected by a passphrase and there is no terminal to ask for it on; "
          + "add it to your ssh-agent (ssh-add \(path)) and mount with -o identity=agent")
    }
    defer { close(terminal) }
    let passphrase = ask("Passphrase for \(path): ", on: terminal)
    let directory: String
    do {
      directory = try RuntimeRecord.directory()
    } catch {
      throw .refused("\(error)")
    }
    var template = Array((directory + "/unlock-XXXXXX").utf8CString)
    guard let made = mkdtemp(&template) else {
      throw .refused("cannot make a private directory in \(directory) to unlock the key")
    }
    let scratch = String(cString: made)
    let copy = scratch + "/key"
    defer {
      unlink(copy)
      rmdir(scratch)
    }
    guard let original = FileManager.default.contents(atPath: path),
      FileManager.default.createFile(
        atPath: copy, contents: original, attributes: [.posixPermissions: 0o600])
    else {
      throw .refused("cannot read the key \(path)")
    }
    let (status, said) = try removePassphrase(from: copy, passphrase, keyPath: path)
    guard status == 0,
      let text = try? String(contentsOfFile: copy, encoding: .utf8),
      (try? KeyFile.key(fromText: text, origin: path)) != nil
    else {
      if said.contains("incorrect passphrase") {
        throw .refused("wrong passphrase for the key \(path)")
      }
      let reason = said.split(separator: "\n").last.map(String.init) ?? "ssh-keygen failed"
      throw .refused("cannot unlock the key \(path): \(reason)")
    }
    return text
  }

  /// Has ssh-keygen remove the passphrase of the key at `copy`; its exit status and what it
  /// said. `keyPath` is the original, for messages.
  private static func removePassphrase(
    from copy: String, _ passphrase: String, keyPath path: String
  ) throws(MountError) -> (status: Int32, said: String) {
    // A new session, so ssh-keygen has no terminal and reads the passphrase from the pipe.
    let keygen = Process()
    keygen.executableURL = URL(fileURLWithPath: "/usr/bin/setsid")
    keygen.arguments = ["--wait", "ssh-keygen", "-p", "-q", "-N", "", "-f", copy]
    let input = Pipe()
    let output = Pipe()
    keygen.standardInput = input
    keygen.standardOutput = output
    keygen.standardError = output
    do {
      try keygen.run()
    } catch {
      throw .refused(
        "cannot unlock the key \(path): ssh-keygen did not start (\(error)); install openssh-client, or use -o identity=agent"
      )
    }
    input.fileHandleForWriting.write(Data((passphrase + "\n").utf8))
    try? input.fileHandleForWriting.close()
    let said = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    keygen.waitUntilExit()
    return (keygen.terminationStatus, said)
  }

  /// Reads one line from the terminal with echo off; the terminal is restored even if the
  /// user gives up with Ctrl-C.
  private static func ask(_ prompt: String, on terminal: Int32) -> String {
    var modes = termios()
    let haveModes = tcgetattr(terminal, &modes) == 0
    if haveModes {
      savedModes = modes
      savedTerminal = terminal
      signal(SIGINT, restoreAndExit)
      signal(SIGTERM, restoreAndExit)
      var quiet = modes
      quiet.c_lflag &= ~tcflag_t(ECHO)
      tcsetattr(terminal, TCSAFLUSH, &quiet)
    }
    _ = prompt.utf8CString.withUnsafeBufferPointer { write(terminal, $0.baseAddress, $0.count - 1) }
    var line: [UInt8] = []
    var byte: UInt8 = 0
    while true {
      let count = read(terminal, &byte, 1)
      if count < 0 && errno == EINTR { continue }
      if count <= 0 || byte == UInt8(ascii: "\n") || byte == UInt8(ascii: "\r") { break }
      line.append(byte)
    }
    if haveModes {
      tcsetattr(terminal, TCSAFLUSH, &modes)
      signal(SIGINT, SIG_DFL)
      signal(SIGTERM, SIG_DFL)
      savedTerminal = -1
    }
    _ = write(terminal, "\n", 1)
    return String(decoding: line, as: UTF8.self)
  }
}

/// The terminal's modes before the passphrase prompt, for the signal handler to put back.
// Written by ask() before it installs the handler that reads it, on the one prompting thread.
nonisolated(unsafe) private var savedModes = termios()
// Written with savedModes, and reset to -1 only after the handler is uninstalled.
nonisolated(unsafe) private var savedTerminal: Int32 = -1

private func restoreAndExit(_ signal: Int32) {
  if savedTerminal >= 0 {
    tcsetattr(savedTerminal, TCSAFLUSH, &savedModes)
    _ = write(savedTerminal, "\n", 1)
  }
  _exit(128 + signal)
}

/// Hands an unlocked key to the detached daemon through a pipe it inherits: never a file,
/// an argument or the environment, which other processes could read.
enum UnlockedKeyPipe {
  /// A pipe's read end holding `key` (origin, NUL, text); nil if it cannot be made.
  static func send(_ key: UnlockedKey) -> Int32? {
    var fds: [Int32] = [0, 0]
    guard pipe(&fds) == 0 else { return nil }
    let bytes = Array(key.origin.utf8) + [0] + Array(key.text.utf8)
    // A key file is a few hundred bytes: far below a pipe's 64 KiB, so this never blocks.
    let written = bytes.withUnsafeBytes { write(fds[1], $0.baseAddress, $0.count) }
    close(fds[1])
    guard written == bytes.count else {
      close(fds[0])
      return nil
    }
    return fds[0]
  }

  /// The key in the pipe `descriptor` (closed after reading); nil if it holds none.
  static func receive(from descriptor: Int32) -> UnlockedKey? {
    defer { close(descriptor) }
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while bytes.count < 1 << 20 {
      let count = read(descriptor, &buffer, buffer.count)
      if count < 0 && errno == EINTR { continue }
      guard count > 0 else { break }
      bytes += buffer[..<count]
    }
    guard let split = bytes.firstIndex(of: 0) else { return nil }
    return UnlockedKey(
      text: String(decoding: bytes[(split + 1)...], as: UTF8.self),
      origin: String(decoding: bytes[..<split], as: UTF8.self))
  }
}
