import Dispatch
import NinePTransport

// The watchdog: a timer that closes connections past a timeout and gives memory back.
extension BBSServer {
  /// How often the watchdog looks: a quarter of the shortest timeout, between 50 ms and 1 s.
  private var watchdogInterval: Duration {
    let shortest = min(
      configuration.handshakeTimeout, configuration.idleTimeout, configuration.stallTimeout)
    return min(max(shortest / 4, .milliseconds(50)), .seconds(1))
  }

  /// Starts the timer that closes connections past a timeout and gives memory back after
  /// connections end. Once.
  func startWatchdog() {
    state.withLock { state in
      guard state.watchdog == nil, !state.stopped else { return }
      let timer = DispatchSource.makeTimerSource(queue: watchdogQueue)
      let interval = watchdogInterval
      timer.schedule(
        deadline: .now() + interval.timeInterval, repeating: interval.timeInterval,
        leeway: .milliseconds(10))
      timer.setEventHandler { [weak self] in self?.watch() }
      timer.resume()
      state.watchdog = timer
    }
  }

  /// One round: closes overdue connections, then trims the heap if connections ended since
  /// the last round (a thread's buffers are freed when its connection ends, and glibc keeps
  /// freed memory unless asked; 2000 connections left 162 MB behind).
  private func watch() {
    let now = ContinuousClock.now
    let connections = state.withLock { Array($0.connections.values) }
    var full = false
    if case .refuse(let limit) = configuration.connectionLimit { full = connections.count >= limit }
    for connection in connections {
      guard let reason = connection.overdue(at: now, boardFull: full) else { continue }
      logger.notice("session \(connection.id): closing: \(reason)")
      connection.close(reason: reason)
    }
    let trim = state.withLock { state -> Bool in
      if state.endedSinceTrim > 0 { state.trimRoundsLeft = 3 }
      state.endedSinceTrim = 0
      guard state.trimRoundsLeft > 0 else { return false }
      state.trimRoundsLeft -= 1
      return true
    }
    if trim { returnFreeMemoryToTheSystem() }
  }

}
