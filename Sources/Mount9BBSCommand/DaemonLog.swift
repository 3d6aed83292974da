import BBSMount
import CSdBus
import Foundation
import Logging
import Synchronization
import TerminalText

/// Where the mount daemon's messages go.
///
/// Until the mount is ready they go to stderr, which for a detached daemon is the front
/// process's pipe: every failure, libfuse's and fusermount3's own words included, reaches the
/// user's terminal. Once ready, a detached daemon moves stderr (so libfuse's messages follow)
/// to `-o log=FILE`, else to the journal, else to /dev/null with its own lines in syslog, and
/// where there is neither a journal nor a syslog socket, to a file under
/// `$XDG_STATE_HOME/mount9bbs/`, which it names on the terminal when it makes it.
///
/// A log (file, journal, syslog) gets the informational lines too (mounted, unmounted,
/// connected, reconnected, posts sent from the outbox); a terminal gets notices and worse.
enum DaemonLog {
  enum Sink: Sendable {
    /// Plain lines on stderr (a terminal or the front process's pipe).
    case standardError
    /// Plain lines on stderr, which is a log file.
    case logFile
    /// stderr is a journal stream: lines carry a `<priority>` prefix.
    case journal
    /// stderr is /dev/null: lines go to syslog(3).
    case syslog
  }

  /// Where the log goes when there is no journal and no syslog: `…/mount9bbs/mount9bbs.log`.
  static var fallbackLogPath: String {
    let environment = ProcessInfo.processInfo.environment
    let state =
      environment["XDG_STATE_HOME"].flatMap { $0.isEmpty ? nil : $0 }
      ?? (NSHomeDirectory() + "/.local/state")
    return state + "/mount9bbs/mount9bbs.log"
  }

  /// Whether stderr is the journal stream systemd connected (`JOURNAL_STREAM=dev:ino`).
  static var stderrIsTheJournal: Bool {
    guard let stream = ProcessInfo.processInfo.environment["JOURNAL_STREAM"] else { return false }
    let parts = stream.split(separator: ":")
    var info = stat()
    guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]),
      fstat(2, &info) == 0
    else { return false }
    return UInt64(info.st_dev) == device && UInt64(info.st_ino) == inode
  }

  /// Whether a syslog daemon listens (syslog(3) drops lines silently when none does).
  static var hasSyslog: Bool {
    var info = stat()
    return stat("/dev/log", &info) == 0 && (info.st_mode & S_IFMT) == S_IFSOCK
  }

  static let sink = Mutex<Sink>(.standardError)

  static func bootstrap(level: Logger.Level) {
    // Run by systemd (`-f` in a unit), stderr is already the journal: lines get priorities,
    // and informational ones are kept.
    if stderrIsTheJournal { sink.withLock { $0 = .journal } }
    LoggingSystem.bootstrap { label in
      var handler = DaemonLogHandler(label: label)
      handler.logLevel = level
      return handler
    }
  }

  /// Opens `path` for appending, for `-o log=FILE`. In a directory others may write (/tmp), a
  /// link is not followed and a file must be the user's own: another user could have put
  /// either there first to have the mount's log written over a file of the user's, or read.
  static func openLogFile(_ path: String) throws(MountError) -> Int32 {
    let directory = (path as NSString).deletingLastPathComponent
    var parent = stat()
    let shared =
      stat(directory.isEmpty ? "." : directory, &parent) == 0
      && parent.st_mode & (S_ISVTX | 0o022) != 0
    let fd = open(
      path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | (shared ? O_NOFOLLOW : 0), 0o600)
    guard fd >= 0 else {
      let code = errno
      if code == ELOOP && shared {
        throw .refused(
          "the log file \(path) is a symbolic link in a directory others may write: "
            + "not following it (choose a file in a directory of your own)")
      }
      throw .refused("cannot open the log file \(path): \(String(cString: strerror(code)))")
    }
    var file = stat()
    if shared, fstat(fd, &file) == 0, file.st_uid != getuid() || file.st_mode & S_IFMT != S_IFREG {
      close(fd)
      throw .refused(
        "the log file \(path) in a directory others may write is "
          + (file.st_uid != getuid() ? "another user's (uid \(file.st_uid))" : "not a regular file")
          + ": not writing to it (choose a file in a directory of your own)")
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
      (target, next, place) = (logFD, .logFile, "the log file")
    } else {
      let journal = sd_journal_stream_fd("mount9bbs", LOG_INFO, 1)
      if journal >= 0 {
        (target, next, place) = (journal, .journal, "the journal")
      } else if hasSyslog {
        openlog("mount9bbs", LOG_PID, LOG_DAEMON)
        (target, next, place) = (open("/dev/null", O_WRONLY), .syslog, "syslog")
      } else {
        // Nowhere a log would be read: a file of the user's, said once where they see it.
        let path = fallbackLogPath
        try? FileManager.default.createDirectory(
          atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true,
          attributes: [.posixPermissions: 0o700])
        let existed = access(path, F_OK) == 0
        let file = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        if file >= 0 {
          // Said once, when the file is made: a successful mount otherwise prints nothing.
          if !existed {
            Diagnostics.fail("mount9bbs: no journal or syslog here; the log goes to \(path)")
          }
          (target, next, place) = (file, .logFile, path)
        } else {
          Diagnostics.fail(
            "mount9bbs: no journal or syslog here, and \(path) cannot be opened "
              + "(\(String(cString: strerror(errno)))): the log is lost; use -o log=FILE")
          (target, next, place) = (open("/dev/null", O_WRONLY), .standardError, "nowhere")
        }
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
    // One record, one line, whatever a server put in a name or an error string.
    text = TerminalText.oneLine(text)
    let sink = DaemonLog.sink.withLock { $0 }
    // A terminal gets notices and worse; informational lines are for logs (and -d).
    if sink == .standardError && event.level == .info && logLevel > .debug { return }
    switch sink {
    case .standardError, .logFile:
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
