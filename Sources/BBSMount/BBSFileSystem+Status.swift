// What `mount9bbs status` asks the daemon over its control socket: a snapshot of the mount as a
// StatusReport (the link, its sessions, the outbox, the room feeds).

import Foundation
import NinePClient

extension BBSFileSystem {
  /// What `status` and `chat/events` say while the link is stalled.
  static let stalledReason = "no answer for \(Int(Pool.stallAfter.timeInterval)) s"

  /// A snapshot of the mount's state.
  public func statusReport(mountpoint: String) -> StatusReport {
    let state = pool.linkState
    var since = pool.linkStateSince
    let linkText: String
    var reason: String?
    switch state {
    case .up where pool.isStalled:
      linkText = "stalled"
      reason = Self.stalledReason
      since = pool.stalledSince
    case .up: linkText = "up"
    case .down(let why):
      linkText = "down"
      reason = why
    case .closed: linkText = "closed"
    }
    let sessions = pool.sessions.enumerated().map { index, session in
      let stats = session.statistics
      return StatusReport.SessionStatus(
        role: index == 0 && session === pool.current ? "primary" : "stream",
        open: session.closedReason == nil, msize: session.msize,
        requestsInFlight: stats.requestsInFlight, requestsQueued: stats.requestsQueued,
        parkedReads: stats.parkedReads, roundTripMilliseconds: stats.roundTrip.timeInterval * 1000,
        messagesIn: stats.messagesReceived, messagesOut: stats.messagesSent,
        bytesIn: stats.bytesReceived, bytesOut: stats.bytesSent,
        authenticated: session.authenticatedIdentity != nil,
        secure: session.transport.security != nil)
    }
    let now = Date()
    let rooms = feeds.status.map {
      StatusReport.Room(
        path: $0.path, readers: $0.readers, watched: $0.watched, lines: $0.lines,
        lastMessageAge: now.timeIntervalSince($0.lastMessage),
        unread: awareness.ledger.count(String($0.path.split(separator: "/").last ?? "")))
    }
    return StatusReport(
      mountpoint: mountpoint, address: pool.addresses.map(\.description).joined(separator: ","),
      profile: pool.configuration.profile.rawValue, uname: pool.configuration.uname,
      identity: pool.configuration.authentication?.identity,
      auth: pool.configuration.authentication?.policy.rawValue, pid: getpid(),
      link: StatusReport.Link(
        state: linkText, since: since, reason: reason,
        reconnects: pool.reconnectCount, transport: pool.address.description,
        transports: pool.addresses.map(\.description), switches: pool.switchCount),
      sessions: sessions, outbox: outboxCount, rooms: rooms)
  }
}
