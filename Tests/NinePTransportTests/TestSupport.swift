import Foundation
import NinePTransport
import XCTest

/// A 9P-shaped message: size[4] type[1] tag[2] payload.
func makeMessage(type: UInt8 = 100, tag: UInt16, payload: [UInt8]) -> [UInt8] {
  let size = UInt32(7 + payload.count)
  return [
    UInt8(truncatingIfNeeded: size), UInt8(truncatingIfNeeded: size >> 8),
    UInt8(truncatingIfNeeded: size >> 16), UInt8(truncatingIfNeeded: size >> 24), type,
    UInt8(truncatingIfNeeded: tag), UInt8(truncatingIfNeeded: tag >> 8),
  ] + payload
}

/// A message whose payload repeats one byte derived from `tag`, so interleaving shows.
func patternMessage(tag: UInt16, length: Int) -> [UInt8] {
  makeMessage(tag: tag, payload: [UInt8](repeating: UInt8(truncatingIfNeeded: tag), count: length))
}

struct TestTimeout: Error {}

/// Runs a blocking body on its own thread; `wait` bounds how long the test waits for it.
final class Background<Value: Sendable>: @unchecked Sendable {
  private let done = DispatchSemaphore(value: 0)
  private let lock = NSLock()
  private var outcome: Result<Value, any Error>?

  init(_ body: @escaping @Sendable () throws -> Value) {
    let thread = Thread { [self] in
      let result = Result { try body() }
      lock.withLock { outcome = result }
      done.signal()
    }
    thread.start()
  }

  /// True if the body is still running after `seconds` (used to check that a call blocks).
  func isStillRunning(after seconds: Double) -> Bool {
    if done.wait(timeout: .now() + seconds) == .timedOut { return true }
    done.signal()
    return false
  }

  /// The body's result; fails the test and throws if it takes longer than `seconds`.
  func value(within seconds: Double = 10, file: StaticString = #filePath, line: UInt = #line)
    throws -> Value
  {
    guard done.wait(timeout: .now() + seconds) == .success else {
      XCTFail("background work did not finish within \(seconds) s", file: file, line: line)
      throw TestTimeout()
    }
    done.signal()
    guard let outcome = lock.withLock({ outcome }) else { throw TestTimeout() }
    return try outcome.get()
  }
}

/// A listener on `address` and a client/server pair connected through it.
func connectedPair(_ address: TransportAddress) throws -> (
  listener: Listener, client: SocketTransport, server: SocketTransport
) {
  let listener = try Listener(address: address)
  let accepted = Background { try listener.accept() }
  let client = try SocketTransport.connect(to: listener.boundAddress)
  guard let server = try accepted.value() else {
    XCTFail("accept returned nil")
    throw TestTimeout()
  }
  return (listener, client, server)
}

/// A short, unique directory for socket files (sun_path is only 108 bytes).
func makeSocketDirectory() throws -> String {
  let path = "/tmp/ntt-\(UInt32.random(in: 0...UInt32.max))"
  try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
  return path
}
