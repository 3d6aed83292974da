// Sends that never wait for the peer, for a client whose reader thread sends too.
//
// A 9P client sends the next request of a chain (a file's next chunk, a room's next read) from
// the completion of the one before, that is on the thread that reads replies. If that thread
// waited for room in the socket while the server, which writes a reply before it reads the next
// request, waited for the client to read, both would stall. So the client sends with
// `sendWithoutWaiting`: what the socket takes now is written; the rest goes into a
// ``SendBacklog`` in order, and a thread that may wait (the session's writer) writes it with
// `flushPending()`.
//
// Ordering: whichever thread finds nobody writing becomes the writer of the backlog (it alone
// takes from the front); any other appends behind and returns. A non-waiting writer that meets a
// full socket hands over: it stops writing and tells its caller that a flush is owed. The
// backlog is bounded by the client's tags: at most one message per request in flight.

import Glibc

extension SocketTransport {
  /// Sends one message without waiting: writes what the connection takes now and keeps the
  /// rest, in order, for ``flushPending()``. Messages sent this way never interleave; do not mix
  /// them with the waiting `send` calls on one transport at the same time.
  /// - Returns: true when bytes are left that only a ``flushPending()`` will write; false when
  ///   the message went out whole or a thread already writing the backlog will take it.
  public func sendWithoutWaiting(header: [UInt8], payload: ArraySlice<UInt8>)
    throws(TransportError) -> Bool
  {
    try gate.withAccess { () throws(TransportError) -> Bool in
      enum Turn {
        case failed(TransportError)
        case queued
        case direct
        case drain
      }
      let turn = backlog.withLock { state -> Turn in
        if let failure = state.failure { return .failed(failure) }
        if state.isWriting {
          state.append(entry(header: header, payload: payload))
          return .queued
        }
        state.isWriting = true
        guard state.isEmpty else {
          state.append(entry(header: header, payload: payload))
          return .drain
        }
        return .direct
      }
      switch turn {
      case .failed(let error): throw error
      case .queued: return false
      case .direct:
        // Nothing ahead: write straight from the caller's buffers (no copy, no queue).
        do throws(TransportError) {
          if let rest = try writeDirectly(header: header, payload: payload) {
            backlog.withLock { $0.putBackFirst(rest) }
          }
        } catch {
          stopWriting(failure: error)
          throw error
        }
      case .drain: break
      }
      return try drainBacklog(waiting: false)
    }
  }

  /// Writes what non-waiting sends left, waiting for room; returns when nothing is left, or at
  /// once when another thread is writing it (that thread finishes or owes a flush in turn).
  public func flushPending() throws(TransportError) {
    try gate.withAccess { () throws(TransportError) in
      let mine = try backlog.withLock { (state) throws(TransportError) -> Bool in
        if let failure = state.failure { throw failure }
        guard !state.isWriting, !state.isEmpty else { return false }
        state.isWriting = true
        return true
      }
      if mine { _ = try drainBacklog(waiting: true) }
    }
  }

  /// Bytes that non-waiting sends left for a flush (for tests and statistics).
  public var pendingByteCount: Int { backlog.withLock { $0.byteCount } }

  // MARK: - Writing (the thread that holds `isWriting`)

  private func entry(header: [UInt8], payload: ArraySlice<UInt8>) -> SendBacklog.Entry {
    guard isPacket else { return SendBacklog.Entry(header: header[...], payload: payload) }
    let message = header + payload
    guard let limit = sendSDULimit else { return SendBacklog.Entry(packets: [message[...]]) }
    return SendBacklog.Entry(packets: SDUSegmenter.segments(of: message, limit: limit))
  }

  /// Writes a message while nothing is queued; returns what the connection would not take now.
  private func writeDirectly(header: [UInt8], payload: ArraySlice<UInt8>)
    throws(TransportError) -> SendBacklog.Entry?
  {
    if isPacket {
      var rest = entry(header: header, payload: payload)
      return try writeWithoutWaiting(&rest) ? nil : rest
    }
    var head = header[...]
    var tail = payload
    while !head.isEmpty || !tail.isEmpty {
      guard let count = try writeOnce(head, tail, isPacket: false) else {
        return SendBacklog.Entry(header: head, payload: tail)
      }
      let fromHead = min(count, head.count)
      head = head.dropFirst(fromHead)
      tail = tail.dropFirst(count - fromHead)
    }
    return nil
  }

  /// Writes `entry` until done (true) or the connection has no room (false).
  private func writeWithoutWaiting(_ entry: inout SendBacklog.Entry) throws(TransportError) -> Bool
  {
    while let first = entry.pieces.first {
      let second = entry.isPacket || entry.pieces.count < 2 ? [] : entry.pieces[1]
      guard let count = try writeOnce(first, second, isPacket: entry.isPacket) else {
        return false
      }
      entry.consume(count)
    }
    return true
  }

  /// Writes the backlog from the front until it is empty; the caller holds `isWriting`, which
  /// this gives up on return. Without `waiting`, stops at a full connection and returns true
  /// (a flush is owed).
  private func drainBacklog(waiting: Bool) throws(TransportError) -> Bool {
    do {
      while true {
        let next = backlog.withLock { state -> SendBacklog.Entry? in
          guard let first = state.first else {
            state.isWriting = false
            return nil
          }
          return first
        }
        guard let entry = next, let first = entry.pieces.first else { return false }
        let second = entry.isPacket || entry.pieces.count < 2 ? [] : entry.pieces[1]
        if let count = try writeOnce(first, second, isPacket: entry.isPacket) {
          backlog.withLock { $0.consumeFirst(count) }
          continue
        }
        guard waiting else {
          backlog.withLock { $0.isWriting = false }
          return true
        }
        _ = try gate.wait(for: writeFD, events: Int16(POLLOUT))
      }
    } catch {
      stopWriting(failure: error)
      throw error
    }
  }

  /// Gives up writing after `failure`: it ends the connection's sending for good (a message
  /// may have gone out in part), so every later send throws it.
  private func stopWriting(failure: TransportError) {
    backlog.withLock { state in
      state.failure = state.failure ?? failure
      state.isWriting = false
    }
  }

  /// One write of `first` (then `second`, on a stream) that never waits: the bytes written (a
  /// whole packet on packet transports), or nil when the connection has no room now.
  private func writeOnce(
    _ first: ArraySlice<UInt8>, _ second: ArraySlice<UInt8>, isPacket: Bool
  ) throws(TransportError) -> Int? {
    while true {
      let count: Int
      let code: Int32
      if isPacket {
        count = first.withUnsafeBytes { raw in
          Glibc.send(writeFD, raw.baseAddress, raw.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT))
        }
        code = count < 0 ? errno : 0
        if count >= 0 && count != first.count {
          throw .io(operation: "packet send (short write)", errno: EMSGSIZE)
        }
      } else if writeIsSocket {
        (count, code) = sendGathered(first, second)
      } else {
        // A pipe: POLLOUT promises room for PIPE_BUF bytes, so a write of at most that many
        // does not block.
        guard try gate.wait(for: writeFD, events: Int16(POLLOUT), timeoutMilliseconds: 0) != nil
        else { return nil }
        (count, code) = withoutSIGPIPE {
          first.withUnsafeBytes { raw in
            let count = Glibc.write(writeFD, raw.baseAddress, min(raw.count, Int(PIPE_BUF)))
            return (count, count < 0 ? errno : 0)
          }
        }
      }
      if count > 0 || (count == 0 && first.isEmpty) {
        bytesSent.add(count, ordering: .relaxed)
        return count
      }
      switch code {
      case EAGAIN, EWOULDBLOCK, ENOBUFS, 0: return nil
      case EINTR: continue
      case EMSGSIZE where isPacket:
        throw .sduTooLarge(size: first.count, limit: sendSDULimit ?? first.count - 1)
      default: throw .io(operation: "send", errno: code)
      }
    }
  }
}
