import CFuse3
import Foundation
import Glibc
import Logging
import Synchronization

/// Sends libfuse's own messages (mount errors, option errors) to swift-log instead of stderr.
enum LibfuseLog {
  static let logger = Logger(label: "mount9bbs.fuse.libfuse")
  private static let installed = Mutex(false)
  static let partial = Mutex("")

  static func install() {
    let first = installed.withLock { i -> Bool in
      defer { i = true }
      return !i
    }
    if first { fuse_set_log_func(libfuseLog) }
  }
}

private func libfuseLog(
  _ level: fuse_log_level, _ format: UnsafePointer<CChar>?, _ args: CVaListPointer?
) {
  guard let format, let args else { return }
  var buffer = [CChar](repeating: 0, count: 1024)
  _ = vsnprintf(&buffer, buffer.count, format, args)
  let bytes = buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
  // libfuse writes some messages in pieces: log whole lines.
  let lines = LibfuseLog.partial.withLock { partial -> [String] in
    partial += String(decoding: bytes, as: UTF8.self)
    var lines = partial.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    partial = lines.removeLast()
    return lines
  }
  for message in lines where !message.isEmpty {
    switch level {
    case FUSE_LOG_EMERG, FUSE_LOG_ALERT, FUSE_LOG_CRIT, FUSE_LOG_ERR:
      LibfuseLog.logger.error("\(message)")
    case FUSE_LOG_WARNING, FUSE_LOG_NOTICE:
      LibfuseLog.logger.warning("\(message)")
    case FUSE_LOG_INFO:
      LibfuseLog.logger.info("\(message)")
    default:
      LibfuseLog.logger.debug("\(message)")
    }
  }
}
