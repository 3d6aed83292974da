import BBSMount
import Foundation
import Logging
import NinePTransport

/// The daemon's control socket: `mount9bbs status` connects, sends `status`, reads one JSON
/// document, and the connection closes. A Unix socket (0600) next to the pid record, so only
/// the mount's owner (and root) can ask.
final class ControlSocket: Sendable {
  let path: String
  private let listener: Listener
  private let report: @Sendable () -> StatusReport
  private let logger: Logger

  init(path: String, logger: Logger, report: @escaping @Sendable () -> StatusReport) throws {
    self.path = path
    self.report = report
    self.logger = logger
    try? FileManager.default.createDirectory(
      atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true,
      attributes: [.posixPermissions: 0o700])
    unlink(path)
    listener = try Listener(address: .unix(path: path))
    chmod(path, 0o600)
    Thread.detachNewThread { [self] in serve() }
  }

  func close() {
    listener.close()
    unlink(path)
  }

  private func serve() {
    while let connection = try? listener.accept() {
      Thread.detachNewThread { [self] in answer(connection) }
    }
  }

  private func answer(_ connection: SocketTransport) {
    defer { connection.close() }
    guard let request = try? connection.receiveRaw(maxBytes: 256) else { return }
    let command = String(decoding: request, as: UTF8.self).trimmingCharacters(
      in: .whitespacesAndNewlines)
    guard command == "status" else {
      try? connection.sendRaw(Array("error: unknown command \(command)\n".utf8))
      return
    }
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
    encoder.dateEncodingStrategy = .iso8601
    guard let data = try? encoder.encode(report()) else { return }
    try? connection.sendRaw(Array(data) + [UInt8(ascii: "\n")])
  }

  /// Asks the daemon of `mountpoint` for its status document.
  static func request(_ path: String, timeout: TimeInterval = 5) throws -> Data {
    let connection = try SocketTransport.connect(to: .unix(path: path))
    defer { connection.close() }
    try connection.sendRaw(Array("status\n".utf8))
    var reply: [UInt8] = []
    let deadline = Date(timeIntervalSinceNow: timeout)
    while Date() < deadline, let chunk = try connection.receiveRaw(maxBytes: 65536) {
      reply += chunk
    }
    return Data(reply)
  }
}
