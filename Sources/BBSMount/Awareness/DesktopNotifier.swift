import CSdBus
import Foundation
import Glibc
import Logging
import Synchronization
import TerminalText

/// `-o notify=`: desktop notifications through org.freedesktop.Notifications on the user's
/// session bus.
///
/// Calls go out on one serial queue, so a slow notification service never holds up a room
/// feed. Bursts are coalesced: after ``burstLimit`` notifications within ``burstWindow`` the
/// rest of the window's mentions become one "N more in ROOM…" notification when it ends.
/// Without a session bus (a mount started from a service, over ssh) one line is logged and
/// notifications stay off; nothing else fails.
final class DesktopNotifier: Sendable {
  /// The bus and the burst, taken on `queue` only (so never waited for).
  private struct Delivery {
    var bus: OpaquePointer?
    /// No bus (or it failed): not tried again before this.
    var retryAt: ContinuousClock.Instant?
    /// Said once per outage, in the log.
    var toldUnavailable = false
    var sentInWindow = 0
    var windowStart = ContinuousClock.now
    var held: [(room: String, author: String)] = []
    var flushScheduled = false
  }

  private let logger: Logger
  private let queue = DispatchQueue(label: "mount9bbs.notify")
  // house: taken on `queue` only (and in deinit), so the D-Bus calls under it keep nobody
  // waiting.
  private let delivery = Mutex(Delivery())
  /// Notifications handed to `queue` and not yet done: a stuck notification service must not
  /// let them pile up.
  private let pending = Mutex(0)
  static let maximumPending = 256
  static let retryAfter: Duration = .seconds(30)
  static let burstLimit = 3
  static let burstWindow: Duration = .seconds(1)
  /// The longest body sent: a notification shows a few lines at most.
  static let longestBody = 512

  /// " on BOARD", or nothing without a board name.
  private let onBoard: String

  init(board: String = "", logger: Logger) {
    self.logger = logger
    onBoard = board.isEmpty ? "" : " on " + Self.visible(board)
  }

  deinit {
    delivery.withLock { if let bus = $0.bus { sd_bus_flush_close_unref(bus) } }
  }

  /// Shows a notification for a line of `room` by `author`.
  func notify(room: String, author: String, text: String) {
    let accepted = pending.withLock { count in
      guard count < Self.maximumPending else { return false }
      count += 1
      return true
    }
    guard accepted else { return }
    queue.async { [self] in
      defer { pending.withLock { $0 -= 1 } }
      delivery.withLock { d in
        let now = ContinuousClock.now
        if d.windowStart.duration(to: now) >= Self.burstWindow {
          d.windowStart = now
          d.sentInWindow = 0
        }
        guard d.sentInWindow < Self.burstLimit else {
          d.held.append((room, author))
          if d.held.count > 10_000 { d.held.removeFirst(d.held.count - 10_000) }
          scheduleFlush(&d)
          return
        }
        d.sentInWindow += 1
        send(
          summary: "\(Self.visible(author)) in \(Self.visible(room))\(onBoard)",
          body: Self.visible(text),
          &d)
      }
    }
  }

  /// One notification for the mentions a burst held back.
  private func scheduleFlush(_ d: inout Delivery) {
    guard !d.flushScheduled else { return }
    d.flushScheduled = true
    let wait = Self.burstWindow - d.windowStart.duration(to: .now)
    queue.asyncAfter(deadline: .now() + max(wait, .milliseconds(10)).timeInterval) { [self] in
      delivery.withLock { d in
        d.flushScheduled = false
        guard !d.held.isEmpty else { return }
        let rooms = Array(Set(d.held.map(\.room))).sorted()
        let authors = Array(Set(d.held.map(\.author))).sorted()
        let summary =
          "\(d.held.count) more in \(rooms.prefix(3).map(Self.visible).joined(separator: ", "))\(onBoard)"
        let body = "from " + authors.prefix(5).map(Self.visible).joined(separator: ", ")
        d.held.removeAll()
        d.windowStart = .now
        d.sentInWindow = 1
        send(summary: summary, body: body, &d)
      }
    }
  }

  /// `text` with control characters removed (a notification is plain text), bounded.
  static func visible(_ text: String) -> String {
    var result = ""
    for scalar in text.unicodeScalars {
      if result.utf8.count >= longestBody { return result + "…" }
      // Every control and bidirectional mark a terminal would be protected from.
      if TerminalText.isUnsafe(scalar) {
        result += " "
      } else {
        result.unicodeScalars.append(scalar)
      }
    }
    return result
  }

  /// On `queue`.
  private func send(summary: String, body: String, _ d: inout Delivery) {
    guard let bus = connected(&d) else { return }
    var message: OpaquePointer?
    var rc = sd_bus_message_new_method_call(
      bus, &message, "org.freedesktop.Notifications", "/org/freedesktop/Notifications",
      "org.freedesktop.Notifications", "Notify")
    guard rc >= 0, let message else { return failed(rc, "Notify", &d) }
    defer { sd_bus_message_unref(message) }
    func text(_ string: String) -> Int32 {
      string.withCString { sd_bus_message_append_basic(message, CChar(UInt8(ascii: "s")), $0) }
    }
    var replaces: UInt32 = 0
    var timeout: Int32 = -1
    rc = text("mount9bbs")
    if rc >= 0 {
      rc = sd_bus_message_append_basic(message, CChar(UInt8(ascii: "u")), &replaces)
    }
    if rc >= 0 { rc = text("") }
    if rc >= 0 { rc = text(summary) }
    if rc >= 0 { rc = text(body) }
    if rc >= 0 { rc = sd_bus_message_open_container(message, CChar(UInt8(ascii: "a")), "s") }
    if rc >= 0 { rc = sd_bus_message_close_container(message) }
    if rc >= 0 { rc = sd_bus_message_open_container(message, CChar(UInt8(ascii: "a")), "{sv}") }
    if rc >= 0 { rc = sd_bus_message_close_container(message) }
    if rc >= 0 { rc = sd_bus_message_append_basic(message, CChar(UInt8(ascii: "i")), &timeout) }
    guard rc >= 0 else { return failed(rc, "Notify", &d) }
    // No reply awaited: the feed's thread never waits for the desktop.
    rc = sd_bus_send(bus, message, nil)
    guard rc >= 0 else { return failed(rc, "Notify", &d) }
    _ = sd_bus_flush(bus)
    // Replies (the notification ids) are read and dropped so they do not pile up.
    while sd_bus_process(bus, nil) > 0 {}
    d.toldUnavailable = false
  }

  private func connected(_ d: inout Delivery) -> OpaquePointer? {
    if let bus = d.bus { return bus }
    if let retryAt = d.retryAt, ContinuousClock.now < retryAt { return nil }
    var opened: OpaquePointer?
    let rc = sd_bus_open_user(&opened)
    guard rc >= 0, let opened else {
      unavailable("no session bus (\(String(cString: strerror(-rc))))", &d)
      return nil
    }
    d.bus = opened
    return opened
  }

  private func failed(_ rc: Int32, _ what: String, _ d: inout Delivery) {
    if let bus = d.bus {
      sd_bus_close_unref(bus)
      d.bus = nil
    }
    unavailable("\(what) on the session bus failed (\(String(cString: strerror(-rc))))", &d)
  }

  /// Notifications stop for ``retryAfter``; the first time, the log says so.
  private func unavailable(_ reason: String, _ d: inout Delivery) {
    d.retryAt = .now + Self.retryAfter
    guard !d.toldUnavailable else { return }
    d.toldUnavailable = true
    logger.notice("notify: \(reason); desktop notifications off for now")
  }
}
