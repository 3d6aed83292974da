// Board: new messages in a board room (`/rooms/<room>/`), sent whole at close.
//
// A board corrupts a message written in several Twrites, so ``DraftHandle`` keeps what a
// writer puts into a new file in memory (libfuse worker threads write into it) and
// ``BoardMessages`` sends it at the first flush or at release: Tcreate of a millisecond
// timestamp name and one Twrite, through ``Remote``. The reply arrives on the session's
// reader thread; `sent` then lets the file system forget the room's listing and the
// kernel's entry for the draft's name (the board names the message itself).

import Foundation
import Logging
import NinePClient

/// Sends board messages: Tcreate `<ms-timestamp>` in the room, then the whole body in one
/// Twrite (the device re-parses the whole body on every write).
final class BoardMessages: Sendable {
  private let remote: Remote
  private let logger: Logger
  private let sent: @Sendable (_ roomPath: [String], _ draftName: String) -> Void

  /// - Parameter sent: called after each attempt to send a draft (the room's listing and the
  ///   draft's name are stale either way).
  init(
    remote: Remote, logger: Logger,
    sent: @escaping @Sendable (_ roomPath: [String], _ draftName: String) -> Void
  ) {
    self.remote = remote
    self.logger = logger
    self.sent = sent
  }

  /// Sends the draft's body unless it went out already; completes with 0 or the errno.
  func send(_ draft: DraftHandle, _ completion: @escaping @Sendable (Int32) -> Void) {
    guard let body = draft.takeUnsent() else { return completion(0) }
    let name = String(UInt64(Date().timeIntervalSince1970 * 1000))
    remote.createWritingOnce(in: draft.roomPath, name: name, body: body) { [self] result in
      switch result {
      case .success(let count):
        if count < body.count {
          logger.warning(
            "message of \(body.count) bytes cut to \(count): one Twrite is all a board takes")
        }
      case .failure(let error):
        logger.error(
          "posting a message to /\(draft.roomPath.joined(separator: "/")) failed: \(error)")
      }
      sent(draft.roomPath, draft.name)
      completion(result.map { _ in () }.errnoValue)
    }
  }
}
