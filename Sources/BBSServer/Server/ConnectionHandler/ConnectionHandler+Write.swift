import NinePProtocol

// Twrite: of an afid (the Tauth response), or of a node, spending the poster's allowance for
// chat lines and board messages.
extension ConnectionHandler {
  func handleWrite(fid: Fid, offset: UInt64, data: ArraySlice<UInt8>, state: inout State)
    throws(NinePFailure) -> Message
  {
    if state.auth.isAuthFid(fid) {
      let count = try state.auth.write(
        afid: fid, data: Array(data), form: configuration.authSign,
        boardKey: configuration.boardKey, lifetime: configuration.challengeLifetime,
        logger: logger, session: id)
      return .rwrite(count: UInt32(count))
    }
    guard let entry = state.fids[fid] else { throw NinePFailure("unknown fid") }
    guard let mode = entry.openMode else { throw NinePFailure("fid not open") }
    guard mode.allowsWriting else { throw NinePFailure("fid not open for writing") }
    // Any Twrite, even one that fails, makes its uname the Gen-1 board's user.
    if gen1 { namespace.noteWriter(entry.user.id) }
    switch (entry.node, poster(entry.user)) {
    case (.chatPost, let poster?):
      let lines = data.reduce(0) { $1 == 0x0A ? $0 + 1 : $0 }
      try limiter.spend(poster, posts: max(1, lines), bytes: data.count)
    case (.boardMessage, let poster?):
      try limiter.spend(poster, posts: 0, bytes: data.count)
    default: break
    }
    let count = try namespace.write(
      entry.node, offset: offset, data: data, user: entry.user, fd: entry.fd)
    return .rwrite(count: UInt32(clamping: count))
  }
}
