import Glibc
import NinePProtocol
import NinePTransport

// Tread: of an afid (the Tauth challenge), of a chat room (see +ParkedReads), of a regular
// file of the files area (sent from the file itself, see ``fileRegion(fid:offset:count:state:)``)
// or of anything else the namespace serves.
extension ConnectionHandler {
  func handleRead(
    fid: Fid, offset: UInt64, count: UInt32, tag: Tag, state: inout State,
    before: inout [[UInt8]]
  ) throws(NinePFailure) -> Message? {
    if state.auth.isAuthFid(fid) {
      return .rread(
        data: try state.auth.read(
          afid: fid, offset: offset, count: Int(count), lifetime: configuration.challengeLifetime)[
            ...])
    }
    guard let entry = state.fids[fid] else { throw NinePFailure("unknown fid") }
    guard let mode = entry.openMode else { throw NinePFailure("fid not open") }
    guard mode.allowsReading else { throw NinePFailure("fid not open for reading") }
    let limit = readLimit(count, state)
    if case .chatRoom(let room) = entry.node {
      if gen1 { return try readGen1Chat(room: room, count: limit) }
      return try readChat(
        room: room, fid: fid, tag: tag, count: limit, user: entry.user, state: &state,
        before: &before)
    }
    if entry.fd == nil, namespace.isDirectory(entry.node) {
      if offset == 0 || entry.listing == nil {
        state.fids[fid]?.listing = try namespace.directoryEntries(entry.node, user: entry.user)
      }
      let listing = state.fids[fid]?.listing ?? []
      return .rread(data: Namespace.directoryRead(listing, offset: offset, count: limit)[...])
    }
    return .rread(
      data: try namespace.read(
        entry.node, offset: offset, count: limit, user: entry.user, fd: entry.fd)[...])
  }

  /// How many bytes a Tread asking for `count` gets at most: what one Rread can carry.
  func readLimit(_ count: UInt32, _ state: State) -> Int {
    // Gen-1 clamps to its 8192-byte TX buffer, not to the msize (docs/board-facts.md §7.2).
    let buffer = gen1 ? configuration.maxMessageSize : state.msize
    return min(Int(count), max(0, buffer - NineP.readOverhead))
  }

  /// A Tread of an open regular file of the file area, as the region of the file its Rread
  /// carries (on a descriptor of its own, which the sender closes); nil for every other read,
  /// and for a read `handle` must refuse, so the usual path answers it.
  func fileRegion(fid: Fid, offset: UInt64, count: UInt32, state: State) -> FileRegion? {
    guard let entry = state.fids[fid], case .files = entry.node, let fd = entry.fd,
      entry.openMode?.allowsReading == true
    else { return nil }
    var info = stat()
    guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
    let limit = readLimit(count, state)
    let size = UInt64(max(0, info.st_size))
    let available = offset < size ? Int(clamping: size - offset) : 0
    let own = dup(fd)
    guard own >= 0 else { return nil }
    return FileRegion(
      descriptor: own, offset: Int64(clamping: offset), count: min(limit, available))
  }

  /// A Gen-1 chat read: never parks (a caught-up or empty room answers 0 bytes at once) and
  /// always uses, and registers, the board-wide last writer's cursor.
  private func readGen1Chat(room: String, count: Int) throws(NinePFailure) -> Message {
    do {
      return .rread(
        data: try namespace.board.chat.read(
          room: room, user: BoardUser(namespace.authenticatedUser), count: count)[...])
    } catch {
      throw NinePFailure(error, operation: "read")
    }
  }
}
