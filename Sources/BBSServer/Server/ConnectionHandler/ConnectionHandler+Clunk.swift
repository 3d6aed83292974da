import Glibc
import NinePProtocol

// Tclunk and Tremove: a fid let go, with its parked reads and its descriptor.
extension ConnectionHandler {
  func handleClunk(fid: Fid, state: inout State, before: inout [[UInt8]]) -> Message {
    state.auth.remove(fid)
    answerParked(onFid: fid, state: &state, before: &before)
    if let entry = state.fids.removeValue(forKey: fid) {
      if let fd = entry.fd { Glibc.close(fd) }
      dropIfUnwritten(entry)
    }
    return .rclunk
  }

  func handleRemove(fid: Fid, state: inout State, before: inout [[UInt8]])
    throws(NinePFailure) -> Message
  {
    guard let entry = state.fids[fid] else { throw NinePFailure("unknown fid") }
    do {
      try namespace.remove(entry.node)
    } catch {
      // A device keeps the fid after a failed remove; remove(5) says it is clunked.
      if !device { clunk(fid, state: &state, before: &before) }
      throw error
    }
    clunk(fid, state: &state, before: &before)
    return .rremove
  }

  private func clunk(_ fid: Fid, state: inout State, before: inout [[UInt8]]) {
    answerParked(onFid: fid, state: &state, before: &before)
    if let entry = state.fids.removeValue(forKey: fid) {
      if let fd = entry.fd { Glibc.close(fd) }
      dropIfUnwritten(entry)
    }
  }
}
