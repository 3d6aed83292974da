import Foundation

#if canImport(Glibc)
  import Glibc
#endif

/// A client of a running ssh-agent (draft-miller-ssh-agent): lists its keys and has it sign,
/// so the key in the agent can be a board identity without its secret ever leaving the agent.
/// Each request is one short connection to `SSH_AUTH_SOCK`.
public struct SSHAgent: Sendable {
  public let socketPath: String
  /// How long one request may take (an agent may ask the user to confirm a signature).
  public var timeout: Duration = .seconds(30)

  private static let failure: UInt8 = 5
  private static let requestIdentities: UInt8 = 11
  private static let identitiesAnswer: UInt8 = 12
  private static let signRequest: UInt8 = 13
  private static let signResponse: UInt8 = 14

  /// The agent at `socketPath`, else at `SSH_AUTH_SOCK`.
  public init(
    socketPath: String? = nil,
    environment: [String: String] = ProcessInfo.processInfo.environment
  ) throws(IdentityError) {
    guard let path = socketPath ?? environment["SSH_AUTH_SOCK"], !path.isEmpty else {
      throw .agentUnavailable(
        reason: "SSH_AUTH_SOCK is not set (start one with `eval $(ssh-agent)` and `ssh-add`)")
    }
    self.socketPath = path
  }

  /// The agent's keys a board can use, in the agent's order; `others` lists those it cannot
  /// (by type and comment), for messages.
  public func keys() throws(IdentityError) -> (usable: [AgentKey], others: [String]) {
    let reply = try request(Self.requestIdentities, [])
    guard reply.first == Self.identitiesAnswer else {
      throw .agentUnavailable(reason: "it did not list its keys")
    }
    var reader = SSHReader(Array(reply.dropFirst()))
    var usable: [AgentKey] = []
    var others: [String] = []
    do {
      let count = try reader.uint32()
      for _ in 0..<count {
        let blob = try reader.string()
        let comment = try reader.text()
        switch OpenSSHKey.parsePublicBlob(blob) {
        case .usable(let algorithm, let publicKey)?:
          usable.append(
            AgentKey(
              agent: self, blob: blob, algorithm: algorithm, publicKey: publicKey,
              comment: comment))
        case .unusable(let type)?:
          others.append("\(type) '\(comment)'")
        case nil:
          others.append("an unreadable key '\(comment)'")
        }
      }
    } catch {
      throw .agentUnavailable(reason: "it sent a damaged key list")
    }
    return (usable, others)
  }

  /// The first usable key whose comment contains `match` or whose identity starts with it
  /// (any key when `match` is nil).
  public func key(matching match: String?) throws(IdentityError) -> AgentKey {
    let (usable, others) = try keys()
    let chosen = usable.first { key in
      guard let match, !match.isEmpty else { return true }
      return key.comment.contains(match) || key.identity.hex.hasPrefix(match.lowercased())
    }
    guard let chosen else {
      throw .agentHasNoKey(
        match: match, seen: usable.map { "\($0.algorithm) '\($0.comment)'" } + others)
    }
    return chosen
  }

  /// Has the agent sign `data` with the key `blob`; returns the agent's signature blob.
  func sign(blob: [UInt8], data: [UInt8], describing key: String) throws(IdentityError)
    -> [UInt8]
  {
    var payload = SSHWriter()
    payload.string(blob)
    payload.string(data)
    payload.uint32(0)
    let reply = try request(Self.signRequest, payload.bytes)
    guard reply.first == Self.signResponse else {
      if reply.first == Self.failure { throw .agentRefused(key: key) }
      throw .agentUnavailable(
        reason: "it answered a signature request with message \(reply.first ?? 0)")
    }
    var reader = SSHReader(Array(reply.dropFirst()))
    do {
      return try reader.string()
    } catch {
      throw .agentUnavailable(reason: "it sent a damaged signature")
    }
  }

  // MARK: Wire

  /// Sends one message and returns the reply's type and payload.
  private func request(_ type: UInt8, _ payload: [UInt8]) throws(IdentityError) -> [UInt8] {
    let socket = try connect()
    defer { close(socket) }
    var frame = SSHWriter()
    frame.uint32(UInt32(payload.count + 1))
    frame.uint8(type)
    frame.raw(payload)
    try send(frame.bytes, on: socket)
    var header = SSHReader(try receive(4, on: socket))
    guard let length = try? header.uint32(), length >= 1, length <= 256 * 1024 else {
      throw .agentUnavailable(reason: "it sent a bad reply length")
    }
    return try receive(Int(length), on: socket)
  }

  private func connect() throws(IdentityError) -> Int32 {
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    let path = Array(socketPath.utf8)
    guard path.count < MemoryLayout.size(ofValue: address.sun_path) else {
      throw .agentUnavailable(reason: "the socket path \(socketPath) is too long")
    }
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
      raw.copyBytes(from: path)
    }
    let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard descriptor >= 0 else {
      throw .agentUnavailable(reason: String(cString: strerror(errno)))
    }
    let seconds = Int(timeout.components.seconds)
    var limit = timeval(tv_sec: seconds, tv_usec: 0)
    setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
    setsockopt(descriptor, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
    let connected = withUnsafePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
      }
    }
    guard connected == 0 else {
      let reason = String(cString: strerror(errno))
      close(descriptor)
      throw .agentUnavailable(reason: "no agent answers at \(socketPath) (\(reason))")
    }
    return descriptor
  }

  private func send(_ bytes: [UInt8], on descriptor: Int32) throws(IdentityError) {
    var offset = 0
    while offset < bytes.count {
      let count = bytes[offset...].withUnsafeBytes {
        Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
      }
      if count < 0 && errno == EINTR { continue }
      guard count > 0 else {
        throw .agentUnavailable(reason: "writing to it failed: \(String(cString: strerror(errno)))")
      }
      offset += count
    }
  }

  private func receive(_ size: Int, on descriptor: Int32) throws(IdentityError) -> [UInt8] {
    var bytes = [UInt8](repeating: 0, count: size)
    var offset = 0
    while offset < size {
      let count = bytes[offset...].withUnsafeMutableBytes {
        recv(descriptor, $0.baseAddress, $0.count, 0)
      }
      if count < 0 && errno == EINTR { continue }
      if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
        throw .agentUnavailable(reason: "it did not answer within \(timeout)")
      }
      guard count > 0 else {
        throw .agentUnavailable(reason: "it closed the connection")
      }
      offset += count
    }
    return bytes
  }
}

/// A key inside an ssh-agent. Signing asks the agent each time.
public struct AgentKey: Signer {
  let agent: SSHAgent
  /// The key's public blob, which names it to the agent.
  let blob: [UInt8]
  public let algorithm: KeyAlgorithm
  public let publicKey: [UInt8]
  /// The agent's comment for the key (usually the file it was added from).
  public let comment: String

  public var origin: String { "ssh-agent key '\(comment)'" }

  public func sign(_ message: [UInt8]) throws(IdentityError) -> [UInt8] {
    let signature = try agent.sign(blob: blob, data: message, describing: origin)
    var reader = SSHReader(signature)
    do {
      let format = try reader.text()
      var inner = SSHReader(try reader.string())
      switch (algorithm, format) {
      case (.ed25519, KeyAlgorithm.ed25519.sshName):
        let raw = inner.rest()
        guard raw.count == 64 else { break }
        return raw
      case (.p256, KeyAlgorithm.p256.sshName):
        // An SSH ECDSA signature is mpint r, mpint s; the board wants r ‖ s, 32 bytes each.
        guard let r = try inner.mpint(width: 32), let s = try inner.mpint(width: 32) else { break }
        return r + s
      default:
        break
      }
      throw IdentityError.signingFailed(
        origin: origin, reason: "the agent sent a \(format) signature")
    } catch let error as IdentityError {
      throw error
    } catch {
      throw .signingFailed(origin: origin, reason: "the agent sent a damaged signature")
    }
  }
}
