import BBSServer
import Dispatch
import Glibc
import Logging
import NinePTransport

// Setting up the process: malloc, signals, descriptors, logging.
extension BBSDaemonCommand {
  /// Tunes malloc for a thread per connection, unblocks the signals 9bbsd handles, ignores
  /// SIGPIPE and raises the descriptor limit.
  func prepareProcess() {
    keepLargeBuffersOnTheHeap()
    // A thread per connection: without one arena, memory of ended connections stays in their
    // threads' arenas (measured in MemoryTuning.swift).
    limitMallocArenas(to: 1)
    // Threads inherit the signal mask; start from an empty one so SIGINT/SIGTERM arrive.
    var empty = sigset_t()
    sigemptyset(&empty)
    pthread_sigmask(SIG_SETMASK, &empty, nil)
    // A client that vanishes mid-reply is a failed send (EPIPE) and a logged disconnect,
    // never the end of the server: every send also says MSG_NOSIGNAL or blocks SIGPIPE.
    signal(SIGPIPE, SIG_IGN)
    raiseDescriptorLimit()
  }

  /// Raises the soft limit on open descriptors to the hard one (systemd gives services 1024
  /// soft, 524288 hard): 256 connections holding files of /files would run out of 1024.
  private func raiseDescriptorLimit() {
    var limit = rlimit()
    guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < limit.rlim_max
    else { return }
    limit.rlim_cur = limit.rlim_max
    _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
  }

  /// Logs to standard error at --log-level; returns 9bbsd's logger.
  func bootstrapLogging() -> Logger {
    let level = Logger.Level(rawValue: logLevel) ?? .info
    LoggingSystem.bootstrap { label in
      var handler = StreamLogHandler.standardError(label: label)
      handler.logLevel = level
      return handler
    }
    return Logger(label: "9bbsd")
  }

  /// Stops `server` on SIGINT or SIGTERM; the sources returned must live as long as 9bbsd.
  func stopOnSignals(_ server: BBSServer, logger: Logger) -> [any DispatchSourceSignal] {
    let signals = DispatchQueue(label: "9bbsd.signals")
    var sources: [any DispatchSourceSignal] = []
    for number in [SIGINT, SIGTERM] {
      signal(number, SIG_IGN)
      let source = DispatchSource.makeSignalSource(signal: number, queue: signals)
      source.setEventHandler {
        logger.notice("9bbsd: signal \(number), shutting down")
        server.stop()
      }
      source.resume()
      sources.append(source)
    }
    return sources
  }
}
