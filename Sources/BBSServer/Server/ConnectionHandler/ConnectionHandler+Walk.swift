import NinePProtocol

// Twalk.
extension ConnectionHandler {
  func handleWalk(fid: Fid, newfid: Fid, names: [String], state: inout State)
    throws(NinePFailure) -> Message
  {
    guard let source = state.fids[fid] else { throw NinePFailure("unknown fid") }
    guard source.openMode == nil else { throw NinePFailure("cannot walk an open fid") }
    if newfid == fid {
      if device { throw NinePFailure("cannot allocate newfid") }
    } else {
      try checkNewFid(newfid, state)
    }
    guard names.count <= NineP.maxWalkElements else {
      throw NinePFailure("too many name elements")
    }
    var node = source.node
    var qids: [Qid] = []
    for name in names {
      guard let next = namespace.walk(from: node, name: name) else { break }
      node = next
      qids.append(namespace.walkQid(node))
    }
    if qids.count < names.count {
      // Gen-1 has no partial Rwalk.
      if qids.isEmpty || gen1 { throw NinePFailure.notFound }
      return .rwalk(qids: qids)
    }
    state.fids[newfid] = FidState(node: node, user: source.user)
    return .rwalk(qids: qids)
  }
}
