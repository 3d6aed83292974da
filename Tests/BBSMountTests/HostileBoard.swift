import Foundation
import NinePProtocol
import NinePTransport
import TestSupport

/// A board in the test process, on a real TCP socket, that authenticates the way a test tells
/// it to: the afid read gives what `challenge` returns for the identity claimed in Tauth,
/// every afid write is kept (it is what the client signed) and handed to `received`, and the
/// afid read after it gives what `proof` returns. Tattach is refused: a hostile board is here
/// to collect signatures. Everything else is refused too.
final class HostileBoard: @unchecked Sendable {
  typealias Challenge = @Sendable (_ identity: String) -> [UInt8]
  typealias Proof = @Sendable (_ response: [UInt8]) -> [UInt8]

  private let listener: ScriptedListener
  private let challenge: Challenge
  private let received: @Sendable (_ response: [UInt8]) -> Void
  private let proof: Proof
  private let lock = NSLock()
  private var kept: [[UInt8]] = []

  init(
    challenge: @escaping Challenge, received: @escaping @Sendable ([UInt8]) -> Void = { _ in },
    proof: @escaping Proof = { _ in Array(repeating: 0, count: 64) }
  ) throws {
    self.challenge = challenge
    self.received = received
    self.proof = proof
    listener = try ScriptedListener()
    listener.start { [self] in serve($0) }
  }

  /// The dial string for `mount9bbs`.
  var address: String { listener.address }

  /// Every response a client wrote to an afid.
  var responses: [[UInt8]] { lock.withLock { kept } }

  func stop() { listener.stop() }

  /// One connection, one request at a time (the client waits for each step of Tauth anyway).
  private func serve(_ transport: SocketTransport) {
    var claimed: [Fid: String] = [:]
    var answered: [Fid: [UInt8]] = [:]
    while let frame = try? transport.receive(limit: 1 << 20) {
      guard let (tag, message) = try? Message.decode(frame, limits: .unbounded) else { continue }
      let reply: Message
      switch message {
      case .tversion(let size, _):
        reply = .rversion(msize: min(size, 8192), version: "9P2000")
      case .tauth(let afid, let uname, _):
        claimed[afid] = uname
        reply = .rauth(aqid: Qid(type: .auth, path: UInt64(afid)))
      case .tread(let fid, _, _) where claimed[fid] != nil:
        if let response = answered[fid] {
          reply = .rread(data: proof(response)[...])
        } else {
          reply = .rread(data: challenge(claimed[fid] ?? "")[...])
        }
      case .twrite(let fid, _, let data) where claimed[fid] != nil:
        let response = Array(data)
        lock.withLock { kept.append(response) }
        answered[fid] = response
        received(response)
        reply = .rwrite(count: UInt32(data.count))
      case .tclunk:
        reply = .rclunk
      default:
        reply = .rerror(ename: "hostile board: no service")
      }
      try? transport.send(reply.encoded(tag: tag))
    }
  }
}

/// One value handed from one thread to another, waited for with a timeout.
final class Handover<Value: Sendable>: @unchecked Sendable {
  private let condition = NSCondition()
  private var value: Value?

  func put(_ new: Value) {
    condition.lock()
    value = new
    condition.broadcast()
    condition.unlock()
  }

  /// The value, once put; nil if none came within `timeout` seconds.
  func take(timeout: TimeInterval = 10) -> Value? {
    condition.lock()
    defer { condition.unlock() }
    let deadline = Date(timeIntervalSinceNow: timeout)
    while value == nil {
      guard condition.wait(until: deadline) else { return nil }
    }
    return value
  }
}
