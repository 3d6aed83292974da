import Foundation
import FuseKit
import Synchronization

/// A new board message being written: kept here and sent whole at close (see
/// ``BoardMessages``).
final class DraftHandle: OpenHandle, Sendable {
  let roomPath: [String]
  let name: String
  private let board: BoardMessages
  private struct Draft {
    var body: [UInt8] = []
    var sent = true
  }

  private let draft = Mutex(Draft())

  init(roomPath: [String], name: String, board: BoardMessages) {
    self.roomPath = roomPath
    self.name = name
    self.board = board
  }

  func write(_ data: [UInt8], at offset: Int) {
    draft.withLock { d in
      if d.body.count < offset { d.body += [UInt8](repeating: 0, count: offset - d.body.count) }
      let end = offset + data.count
      if d.body.count < end { d.body += [UInt8](repeating: 0, count: end - d.body.count) }
      d.body.replaceSubrange(offset..<end, with: data)
      d.sent = false
    }
  }

  /// Cuts or extends (with zeros) the body to `length` bytes (`ftruncate`).
  func truncate(to length: Int) {
    draft.withLock { d in
      guard length != d.body.count else { return }
      if d.body.count > length {
        d.body.removeLast(d.body.count - length)
      } else {
        d.body += [UInt8](repeating: 0, count: length - d.body.count)
      }
      d.sent = false
    }
  }

  /// The body if it still has to go out; marks it sent.
  func takeUnsent() -> [UInt8]? {
    draft.withLock { d -> [UInt8]? in
      if d.sent { return nil }
      d.sent = true
      return d.body
    }
  }

  var size: Int {
    draft.withLock { d in
      return d.body.count
    }
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
