import CSdBus
import Foundation
import Glibc
import Logging

/// `-o notify=`: desktop notifications through org.freedesktop.Notifications on the user's
/// session bus.
///
/// Calls go out on one serial queue, so a slow notification service never holds up a room
/// feed. Bursts are coalesced: after ``burstLimit`` notifications within ``burstWindow`` the
/// rest of the window's mentions become one "N more in ROOM…" notification when it ends.
/// Without a session bus (a mount started from a service, over ssh) one line is logged and
/// notifications stay off; nothing else fails.
final class DesktopNotifier: @unchecked Sendable {
  private let logger: Logger
  private let queue = DispatchQueue(label: "mount9bbs.notify")
  /// Touched on `queue` only.
  private var bus: OpaquePointer?
  /// No bus (or it failed): not tried again before this.
  private var retryAt: ContinuousClock.Instant?
  /// Said once per outage, in the log.
  private var toldUnavailable = false
  /// Notifications handed to `queue` and not yet done: a stuck notification service must not
  /// let them pile up.
  private let pending = NSLock()
  private var pendingCount = 0
  static let maximumPending = 256
  static let retryAfter: Duration = .seconds(30)
  private var sentInWindow = 0
  private var windowStart = ContinuousClock.now
  private var held: [(room: String, author: String)] = []
  private var flushScheduled = false
  static let burstLimit = 3
  static let burstWindow: Duration = .seconds(1)
  /// The longest body sent: a notification shows a few lines at most.
  static let longestBody = 512

  init(logger: Logger) {
    self.logger = logger
  }

  deinit {
    if let bus { sd_bus_flush_close_unref(bus) }
  }

  /// Shows a notification for a line of `room` by `author`.
  func notify(room: String, author: String, text: String) {
    let accepted = pending.withLock {
      guard pendingCount < Self.maximumPending else { return false }
      pendingCount += 1
      return true
    }
    guard accepted else { return }
    queue.async { [self] in
      defer { pending.withLock { pendingCount -= 1 } }
      let now = ContinuousClock.now
      if windowStart.duration(to: now) >= Self.burstWindow {
        windowStart = now
        sentInWindow = 0
      }
      guard sentInWindow < Self.burstLimit else {
        held.append((room, author))
        if held.count > 10_000 { held.removeFirst(held.count - 10_000) }
        scheduleFlush()
        return
      }
      sentInWindow += 1
      send(summary: "\(Self.visible(author)) in \(Self.visible(room))", body: Self.visible(text))
    }
  }

  /// One notification for the mentions a burst held back.
  private func scheduleFlush() {
    guard !flushScheduled else { return }
    flushScheduled = true
    let wait = Self.burstWindow - windowStart.duration(to: .now)
    queue.asyncAfter(deadline: .now() + max(wait, .milliseconds(10)).timeInterval) { [self] in
      flushScheduled = false
      guard !held.isEmpty else { return }
      let rooms = Array(Set(held.map(\.room))).sorted()
      let authors = Array(Set(held.map(\.author))).sorted()
      let summary =
        "\(held.count) more in \(rooms.prefix(3).map(Self.visible).joined(separator: ", "))"
      let body = "from " + authors.prefix(5).map(Self.visible).joined(separator: ", ")
      held.removeAll()
      windowStart = .now
      sentInWindow = 1
      send(summary: summary, body: body)
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
  private func send(summary: String, body: String) {
    guard let bus = connected() else { return }
    var message: OpaquePointer?
    var rc = sd_bus_message_new_method_call(
      bus, &message, "org.freedesktop.Notifications", "/org/freedesktop/Notifications",
      "org.freedesktop.Notifications", "Notify")
    guard rc >= 0, let message else { return failed(rc, "Notify") }
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
    guard rc >= 0 else { return failed(rc, "Notify") }
    // No reply awaited: the feed's thread never waits for the desktop.
    rc = sd_bus_send(bus, message, nil)
    guard rc >= 0 else { return failed(rc, "Notify") }
    _ = sd_bus_flush(bus)
    // Replies (the notification ids) are read and dropped so they do not pile up.
    while sd_bus_process(bus, nil) > 0 {}
    toldUnavailable = false
  }

  private func connected() -> OpaquePointer? {
    if let bus { return bus }
    if let retryAt, ContinuousClock.now < retryAt { return nil }
    var opened: OpaquePointer?
    let rc = sd_bus_open_user(&opened)
    guard rc >= 0, let opened else {
      unavailable("no session bus (\(String(cString: strerror(-rc))))")
      return nil
    }
    bus = opened
    return opened
  }

  private func failed(_ rc: Int32, _ what: String) {
    if let bus {
      sd_bus_close_unref(bus)
      self.bus = nil
    }
    unavailable("\(what) on the session bus failed (\(String(cString: strerror(-rc))))")
  }

  /// Notifications stop for ``retryAfter``; the first time, the log says so.
  private func unavailable(_ reason: String) {
    retryAt = .now + Self.retryAfter
    guard !toldUnavailable else { return }
    toldUnavailable = true
    logger.notice("notify: \(reason); desktop notifications off for now")
  }
}
