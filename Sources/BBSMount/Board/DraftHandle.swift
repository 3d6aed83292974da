import Foundation
import FuseKit

/// A new board message being written: kept here and sent whole at close (see
/// ``BoardMessages``).
final class DraftHandle: OpenHandle, @unchecked Sendable {
  let roomPath: [String]
  let name: String
  private let board: BoardMessages
  private let lock = NSLock()
  private var body: [UInt8] = []
  private var sent = true

  init(roomPath: [String], name: String, board: BoardMessages) {
    self.roomPath = roomPath
    self.name = name
    self.board = board
  }

  func write(_ data: [UInt8], at offset: Int) {
    lock.lock()
    defer { lock.unlock() }
    if body.count < offset { body += [UInt8](repeating: 0, count: offset - body.count) }
    let end = offset + data.count
    if body.count < end { body += [UInt8](repeating: 0, count: end - body.count) }
    body.replaceSubrange(offset..<end, with: data)
    sent = false
  }

  /// Cuts or extends (with zeros) the body to `length` bytes (`ftruncate`).
  func truncate(to length: Int) {
    lock.lock()
    defer { lock.unlock() }
    guard length != body.count else { return }
    if body.count > length {
      body.removeLast(body.count - length)
    } else {
      body += [UInt8](repeating: 0, count: length - body.count)
    }
    sent = false
  }

  /// The body if it still has to go out; marks it sent.
  func takeUnsent() -> [UInt8]? {
    lock.lock()
    defer { lock.unlock() }
    if sent { return nil }
    sent = true
    return body
  }

  var size: Int {
    lock.lock()
    defer { lock.unlock() }
    return body.count
  }

  // MARK: OpenHandle

  func write(_ request: FuseRequest, data: [UInt8], offset: UInt64) {
    write(data, at: Int(clamping: offset))
    request.replyWrite(data.count)
  }

  func flush(_ request: FuseRequest) {
    board.send(self) { code in request.replyError(code) }
  }

  func release() {
    board.send(self) { _ in }
  }
}
