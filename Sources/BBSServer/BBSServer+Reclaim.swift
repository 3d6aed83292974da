import Foundation
import Logging

// A full board and a member with no session: when every session is taken and some member
// holds more than one, a newcomer is let in on probation, and at its Tattach the board takes
// back the newest session of the member holding the most, if the newcomer's user holds none
// yet. A client's extra sessions are a luxury (its room feeds share its first session); a
// member locked out of the board is not. An extra session of a member already in is refused
// `board full`, so two members' extra sessions never take each other's places in turn.
extension BBSServer {
  /// The connection refusal of a full board: nil to admit (on probation, see
  /// ``settleAttach(of:as:)``), or why not. Called with the state locked.
  static func probationOrRefusal(
    _ state: inout RunState, limit: Int, newcomer id: Int
  ) -> String? {
    let held = state.connections.count - state.probation.count - state.reclaimed.count
    guard held >= limit else { return nil }
    guard state.probation.count < Self.probationAtOnce, someoneHoldsMore(state) else {
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

  /// A newcomer admitted on probation is closed if it has not attached in time.
  func watchProbation(of connection: Connection) {
    DispatchQueue.global().asyncAfter(deadline: .now() + Self.probationPatience.timeInterval) {
      [self] in
      let waiting = state.withLock { $0.probation.contains(connection.id) }
      if waiting { connection.close(reason: "board full: no attach while on probation") }
    }
  }

  /// Connection `id` attaches as `user`: nil to go on, or the refusal its Tattach gets. On
  /// probation, its user must hold no session yet, and another user's newest session (of the
  /// user holding the most) is taken back for it.
  func settleAttach(of id: Int, as user: String) -> String? {
    guard case .refuse(let limit) = configuration.connectionLimit else { return nil }
    // Guests (id "") are different people: each guest session counts as a user of its own.
    let user = user.isEmpty ? "\u{0}guest \(id)" : user
    let outcome = state.withLock {
      state -> (refusal: String?, victim: Connection?, why: String) in
      if state.users[id] == nil { state.users[id] = user }
      guard state.probation.contains(id) else { return (nil, nil, "") }
      let others = state.users.filter {
        $0.key != id && !state.probation.contains($0.key) && !state.reclaimed.contains($0.key)
      }
      let refusal = "board full: all \(limit) sessions in use"
      // An extra session of a member already in takes nobody's place.
      guard !others.values.contains(user) else {
        return (refusal, nil, "its user holds a session already")
      }
      var held: [String: [Int]] = [:]
      for (connection, holder) in others { held[holder, default: []].append(connection) }
      // The member holding the most, the one whose newest session is newest of equals.
      guard
        let most = held.filter({ $0.value.count > 1 }).max(by: {
          ($0.value.count, $0.value.max() ?? 0) < ($1.value.count, $1.value.max() ?? 0)
        }), let newest = most.value.max(), let victim = state.connections[newest]
      else { return (refusal, nil, "no user holds more than one session now") }
      state.probation.remove(id)
      state.reclaimed.insert(newest)
      return (nil, victim, "")
    }
    if let victim = outcome.victim {
      logger.notice(
        "9bbsd: board full: taking back session \(victim.id) of a member holding several, for session \(id), whose user had none"
      )
      victim.close(reason: "taken back for a member with no session (board full)")
    } else if let refusal = outcome.refusal {
      logger.info("session \(id): attach refused: \(refusal) (\(outcome.why))")
    }
    return outcome.refusal
  }
}
