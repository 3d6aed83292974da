import CSdBus
import Foundation
import Logging
import Synchronization

/// Where the mount daemon's messages go.
///
/// Until the mount is ready they go to stderr, which for a detached daemon is the front
/// process's pipe: every failure, libfuse's and fusermount3's own words included, reaches the
/// user's terminal. Once ready, a detached daemon moves stderr (so libfuse's messages follow)
/// to `-o log=FILE`, else to the journal, else to /dev/null with its own lines in syslog.
enum DaemonLog {
  enum Sink: Sendable {
    /// Plain lines on stderr (a terminal, the front process's pipe, or the log file).
    case standardError
    /// stderr is a journal stream: lines carry a `<priority>` prefix.
    case journal
    /// stderr is /dev/null: lines go to syslog(3).
    case syslog
  }

  static let sink = Mutex<Sink>(.standardError)

  static func bootstrap(level: Logger.Level) {
    LoggingSystem.bootstrap { label in
      var handler = DaemonLogHandler(label: label)
      handler.logLevel = level
      return handler
    }
  }

  /// Opens `path` for appending, for `-o log=FILE`.
  static func openLogFile(_ path: String) throws(MountError) -> Int32 {
    let fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
    guard fd >= 0 else {
      throw .refused("cannot open the log file \(path): \(String(cString: strerror(errno)))")
    }
    return fd
  }

  /// Moves stderr away from the front process's pipe: to `logFD` (an open `log=` file), else
  /// the journal, else /dev/null and syslog. Returns a line saying where the log now goes.
  @discardableResult
  static func detach(logFD: Int32?) -> String {
    let target: Int32
    let next: Sink
    let place: String
    if let logFD {
      (target, next, place) = (logFD, .standardError, "the log file")
    } else {
      let journal = sd_journal_stream_fd("mount9bbs", LOG_INFO, 1)
      if journal >= 0 {
        (target, next, place) = (journal, .journal, "the journal")
      } else {
        openlog("mount9bbs", LOG_PID, LOG_DAEMON)
        (target, next, place) = (open("/dev/null", O_WRONLY), .syslog, "syslog")
      }
    }
    if target >= 0 {
      dup2(target, 2)
      if target != 2 { close(target) }
    }
    sink.withLock { $0 = next }
    return place
  }

  /// syslog(3) priority of a level.
  static func priority(_ level: Logger.Level) -> Int32 {
    switch level {
    case .trace, .debug: return LOG_DEBUG
    case .info: return LOG_INFO
    case .notice: return LOG_NOTICE
    case .warning: return LOG_WARNING
    case .error: return LOG_ERR
    case .critical: return LOG_CRIT
    }
  }
}

/// A swift-log handler writing to whatever ``DaemonLog/sink`` says.
struct DaemonLogHandler: LogHandler {
  let label: String
  var logLevel: Logger.Level = .info
  var metadata: Logger.Metadata = [:]

  subscript(metadataKey key: String) -> Logger.Metadata.Value? {
    get { metadata[key] }
    set { metadata[key] = newValue }
  }

  func log(event: LogEvent) {
    var text = "\(event.message)"
    let merged = metadata.merging(event.metadata ?? [:]) { $1 }
    if !merged.isEmpty {
      text +=
        " "
        + merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(
          separator: " ")
    }
    switch DaemonLog.sink.withLock({ $0 }) {
    case .standardError:
      let stamp = Date().formatted(.iso8601)
      Diagnostics.fail("\(stamp) \(event.level) \(label): \(text)")
    case .journal:
      // sd-journal's level prefix: one line, one priority.
      for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
        Diagnostics.fail("<\(DaemonLog.priority(event.level))>\(line)")
      }
    case .syslog:
      text.withCString { message in
        withVaList([message]) { vsyslog(DaemonLog.priority(event.level), "%s", $0) }
      }
    }
  }
}
