import Foundation
import Logging

// A full board and a member with no session: when every session is taken and some member
// holds more than one, a newcomer is let in on probation, and at its Tattach the board takes
// back the newest session of the member holding the most, if the newcomer's user holds none
// yet. A client's extra sessions are a luxury (its room feeds share its first session); a
// member locked out of the board is not. An extra session of a member already in is refused
// `board full`, so two members' extra sessions never take each other's places in turn.
//
// Shares first: every attached session counts against a share, a verified identity's or its
// guest network's (``SourceNetwork``: a /24 or a /64), whatever it is doing, a parked chat
// read included. A newcomer takes back the newest session of the share holding the most when
// that share holds at least two more than the newcomer's own, and a member's newcomer takes
// one of the biggest guest network's whatever it holds: a pile of sessions from a few
// networks, parked or idle, cannot keep a member out.
extension BBSServer {
  /// The connection refusal of a full board: nil to admit (on probation, see
  /// ``settleAttach(of:as:)``), or why not. Called with the state locked.
  static func probationOrRefusal(
    _ state: inout RunState, limit: Int, newcomer id: Int, network: String?, membersExist: Bool
  ) -> String? {
    let held = state.connections.count - state.probation.count - state.reclaimed.count
    guard held >= limit else { return nil }
    guard state.probation.count < Self.probationAtOnce,
      someoneHoldsMore(state)
        || shareCouldGive(state, toNetwork: network, membersExist: membersExist)
    else {
      return "all \(limit) sessions in use"
    }
    state.probation.insert(id)
    return nil
  }

  /// Newcomers on probation at once at most.
  static let probationAtOnce = 2
  /// How long a newcomer on probation has to attach.
  static let probationPatience: Duration = .seconds(2)

  /// Whether some user holds more than one session (one could be taken back).
  private static func someoneHoldsMore(_ state: RunState) -> Bool {
    var seen = Set<String>()
    for (id, user) in state.users where !state.reclaimed.contains(id) {
      if !seen.insert(user).inserted { return true }
    }
    return false
  }

  /// Whether some share could give a session to a newcomer from `network`: one holding two
  /// more than that network, or, when members exist, any guest network (the newcomer may be
  /// a member).
  private static func shareCouldGive(
    _ state: RunState, toNetwork network: String?, membersExist: Bool
  ) -> Bool {
    let counts = shareCounts(state, except: nil)
    let mine = network.map { counts["net " + $0] ?? 0 } ?? 0
    return counts.contains { share, count in
      count >= mine + 2 || (membersExist && share.hasPrefix("net ") && count > 0)
    }
  }

  /// Sessions per share (``RunState/shares``), of connections neither on probation nor
  /// being taken back, without `excluded`.
  private static func shareSessions(_ state: RunState, except excluded: Int?) -> [String: [Int]] {
    var sessions: [String: [Int]] = [:]
    for (id, share) in state.shares
    where id != excluded && !state.probation.contains(id) && !state.reclaimed.contains(id) {
      sessions[share, default: []].append(id)
    }
    return sessions
  }

  private static func shareCounts(_ state: RunState, except excluded: Int?) -> [String: Int] {
    shareSessions(state, except: excluded).mapValues(\.count)
  }

  /// The share a session attaching as `user` counts against: `id …` for a member, `net …`
  /// for a guest over the network, nil for a local one.
  func share(of id: Int, user: String, member: Bool, state: RunState) -> String? {
    if member { return "id " + user }
    return state.connections[id]?.host.map { "net " + SourceNetwork.key(of: $0) }
  }

  /// A newcomer admitted on probation is closed if it has not attached in time.
  func watchProbation(of connection: Connection) {
    DispatchQueue.global().asyncAfter(deadline: .now() + Self.probationPatience.timeInterval) {
      [self] in
      let waiting = state.withLock { $0.probation.contains(connection.id) }
      if waiting { connection.close(reason: "board full: no attach while on probation") }
    }
  }

  /// Connection `id` attaches as `user` (`member`: a verified identity): nil to go on, or the
  /// refusal its Tattach gets. On probation, its user must hold no session yet, and another
  /// share's newest session is taken back for it (see the top of this file), else that of the
  /// user holding the most.
  func settleAttach(of id: Int, as user: String, member: Bool) -> String? {
    guard case .refuse(let limit) = configuration.connectionLimit else { return nil }
    // Guests (id "") are different people: each guest session counts as a user of its own.
    let user = user.isEmpty ? "\u{0}guest \(id)" : user
    let outcome = state.withLock {
      state -> (refusal: String?, victim: Connection?, why: String) in
      let share = share(of: id, user: user, member: member, state: state)
      if state.users[id] == nil,
        let refusal = guestBeyondReserve(
          state, id: id, share: share, member: member, limit: limit)
      {
        return (refusal, nil, "guests hold all sessions but those reserved for members")
      }
      if state.users[id] == nil { state.users[id] = user }
      if state.shares[id] == nil, let share { state.shares[id] = share }
      guard state.probation.contains(id) else { return (nil, nil, "") }
      let others = state.users.filter {
        $0.key != id && !state.probation.contains($0.key) && !state.reclaimed.contains($0.key)
      }
      let refusal = "board full: all \(limit) sessions in use"
      // An extra session of a member already in takes nobody's place.
      guard !others.values.contains(user) else {
        return (refusal, nil, "its user holds a session already")
      }
      let newest: Int?
      if let victim = Self.shareVictim(state, newcomer: id, share: share, member: member) {
        newest = victim
      } else {
        var held: [String: [Int]] = [:]
        for (connection, holder) in others { held[holder, default: []].append(connection) }
        // The member holding the most, the one whose newest session is newest of equals.
        newest =
          held.filter({ $0.value.count > 1 }).max(by: {
            ($0.value.count, $0.value.max() ?? 0) < ($1.value.count, $1.value.max() ?? 0)
          })?.value.max()
      }
      guard let newest, let victim = state.connections[newest] else {
        return (refusal, nil, "no share or user holds more than its due now")
      }
      state.probation.remove(id)
      state.reclaimed.insert(newest)
      return (nil, victim, "")
    }
    if let victim = outcome.victim {
      logger.notice(
        "9bbsd: board full: taking back session \(victim.id), of the share or member holding the most, for session \(id)"
      )
      victim.close(reason: "taken back for a newcomer with a smaller share (board full)")
    } else if let refusal = outcome.refusal {
      logger.info("session \(id): attach refused: \(refusal) (\(outcome.why))")
    }
    return outcome.refusal
  }

  /// The refusal of a guest's Tattach when guests over the network already hold all sessions
  /// of the cap but ``BBSServerConfiguration/sessionsReservedForMembers``, or nil. Only with
  /// `--auth optional` (without authentication nobody is a member; with `required`, nobody a
  /// guest). A guest on probation stays on it: closed if it does not authenticate in time.
  private func guestBeyondReserve(
    _ state: RunState, id: Int, share: String?, member: Bool, limit: Int
  ) -> String? {
    let reserve = min(configuration.sessionsReservedForMembers, limit - 1)
    guard configuration.auth == .optional, !member, reserve > 0,
      share?.hasPrefix("net ") == true
    else { return nil }
    let guests = state.shares.filter {
      $0.key != id && $0.value.hasPrefix("net ") && !state.reclaimed.contains($0.key)
    }.count
    guard guests >= limit - reserve else { return nil }
    return "board full: the last \(reserve) of \(limit) sessions are kept for members"
  }

  /// The session to take back for a newcomer of `share`: the newest of the share holding the
  /// most, if that one holds two more than the newcomer's, or, for a member, is a guest
  /// network's.
  private static func shareVictim(
    _ state: RunState, newcomer id: Int, share: String?, member: Bool
  ) -> Int? {
    let sessions = shareSessions(state, except: id)
    let mine = share.map { sessions[$0]?.count ?? 0 } ?? 0
    let candidates = sessions.filter { key, held in
      key != share && (held.count >= mine + 2 || (member && key.hasPrefix("net ")))
    }
    // Members first: a guest network gives before a member does.
    let pool = member ? candidates.filter { $0.key.hasPrefix("net ") } : [:]
    return (pool.isEmpty ? candidates : pool).values.max(by: {
      ($0.count, $0.max() ?? 0) < ($1.count, $1.max() ?? 0)
    })?.max()
  }
}
