import Glibc
import NinePProtocol

// Topen and Tcreate: a fid made ready for I/O.
extension ConnectionHandler {
  func handleOpen(fid: Fid, mode: OpenMode, state: inout State) throws(NinePFailure) -> Message {
    guard var entry = state.fids[fid] else { throw NinePFailure("unknown fid") }
    guard entry.openMode == nil else { throw NinePFailure("fid already open") }
    if case .files(let path) = entry.node, let files = namespace.files {
      if !(try files.info(path)).isDirectory {
        try checkOpenFiles(state)
        entry.fd = try files.open(path, mode: mode)
      } else if mode.allowsWriting {
        throw NinePFailure(errno: EISDIR, operation: "open")
      }
    }
    entry.openMode = mode
    state.fids[fid] = entry
    return .ropen(qid: namespace.walkQid(entry.node), iounit: gen1 ? 0 : iounit(state))
  }

  func handleCreate(
    fid: Fid, name: String, perm: FileMode, mode: OpenMode, state: inout State
  ) throws(NinePFailure) -> Message {
    guard var entry = state.fids[fid] else { throw NinePFailure("unknown fid") }
    guard entry.openMode == nil else { throw NinePFailure("fid already open") }
    if case .files = entry.node, !perm.isDirectory { try checkOpenFiles(state) }
    // A new board message, or a new board room at the root, is a post.
    switch (entry.node, poster(entry.user)) {
    case (.boardRoom, let poster?), (.root, let poster?):
      try limiter.spend(poster, posts: 1, bytes: 0)
    default: break
    }
    let created = try namespace.create(
      in: entry.node, name: name, perm: perm, mode: mode, user: entry.user)
    entry.node = created.node
    entry.fd = created.fd
    if case .boardMessage = created.node { entry.createdMessage = true }
    entry.openMode = mode
    state.fids[fid] = entry
    logger.debug("session \(id): created \(LogText.escaped(created.node.path))")
    return .rcreate(qid: namespace.walkQid(created.node), iounit: device ? 0 : iounit(state))
  }

  /// Refuses to open one more file of the files area when the session holds
  /// ``BBSServerConfiguration/maxOpenFilesPerSession`` already: each holds a descriptor, and
  /// a client opening thousands would take the server's last one (accept(2) then fails).
  private func checkOpenFiles(_ state: State) throws(NinePFailure) {
    let open = state.fids.values.lazy.filter { $0.fd != nil }.count
    guard open < configuration.maxOpenFilesPerSession else {
      logger.notice(
        "session \(id): \(open) files open, the most a session may hold; refusing another")
      throw NinePFailure("resource temporarily unavailable")
    }
  }

  private func iounit(_ state: State) -> UInt32 {
    UInt32(clamping: max(0, state.msize - 24))
  }
}
