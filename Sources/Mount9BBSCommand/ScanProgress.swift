import Dispatch
import Foundation
import Synchronization

#if canImport(Glibc)
  import Glibc
#endif

/// A ticking "N s left" line on stderr while scanning, when stderr is a terminal.
final class ScanProgress: Sendable {
  private let seconds: Double
  private let timer = Mutex<(any DispatchSourceTimer)?>(nil)
  private struct Line {
    var started = Date()
    var visible = false
    var count = 0
  }

  private let line = Mutex(Line())

  init(seconds: Double) {
    self.seconds = seconds
  }

  var found: Int {
    get { line.withLock { $0.count } }
    set { line.withLock { $0.count = newValue } }
  }

  func start() {
    guard isatty(2) != 0 else { return }
    line.withLock { $0.started = Date() }
    timer.withLock { timer in
      let ticking = DispatchSource.makeTimerSource(
        queue: DispatchQueue(label: "mount9bbs.progress"))
      ticking.schedule(deadline: .now() + 1, repeating: 1)
      ticking.setEventHandler { [weak self] in self?.tick() }
      ticking.resume()
      timer = ticking
    }
  }

  private func tick() {
    line.withLock { line in
      let left = max(0, Int((seconds - Date().timeIntervalSince(line.started)).rounded()))
      Console.errorRaw("\r\u{1B}[K  scanning… \(left) s left, \(line.count) found")
      line.visible = true
    }
  }

  /// Clears the ticking line before a result is written.
  func clear() {
    line.withLock { line in
      if line.visible { Console.errorRaw("\r\u{1B}[K") }
      line.visible = false
    }
  }

  func stop() {
    timer.withLock {
      $0?.cancel()
      $0 = nil
    }
    clear()
  }
}
