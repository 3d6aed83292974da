import NinePProtocol

// Tstat and Twstat.
extension ConnectionHandler {
  func handleStat(fid: Fid, state: State) throws(NinePFailure) -> Message {
    guard let entry = state.fids[fid] else { throw NinePFailure("unknown fid") }
    if case .files(let path) = entry.node { _ = try namespace.files?.info(path) }
    return .rstat(stat: namespace.stat(entry.node, user: entry.user))
  }

  func handleWstat(fid: Fid, stat: Stat, state: inout State) throws(NinePFailure) -> Message {
    guard let entry = state.fids[fid] else { throw NinePFailure("unknown fid") }
    // A board has no Twstat, even for a wstat that changes nothing (docs/board-facts.md §10).
    guard !device else { throw NinePFailure("wstat not supported") }
    state.fids[fid]?.node = try namespace.wstat(entry.node, stat)
    return .rwstat
  }
}
