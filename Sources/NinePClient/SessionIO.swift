// A session's two threads, as libmux (plan9port src/libmux/io.c) runs a sending and a
// receiving proc so that an RPC never blocks except on a rendezvous.
//
// - The writer sleeps on the session's condition until a request is queued, a reply frees a
//   tag or a wire slot, or a deadline, park grace or parking turn comes; then it expires what
//   is overdue, rotates parked reads and writes whatever the tag table lets go.
// - The reader receives and decodes frames, hands each reply to the tag table and runs the
//   actions: the completions run here.

import Foundation
import Logging
import NinePProtocol
import NinePTransport

#if canImport(Glibc)
  import Glibc
#endif

extension Session {
  func startThreads() {
    let writer = Thread { [self] in writerLoop() }
    writer.name = "9p-writer"
    writer.start()
    let reader = Thread { [self] in readerLoop() }
    reader.name = "9p-reader"
    reader.start()
  }

  // MARK: - Writing

  /// A dispatched message ready to go: its encoding, or for a Twrite its header and the data
  /// where it lies (the transport gathers the two, so the data is not copied into a frame).
  struct Outgoing {
    var header: [UInt8]
    var payload: ArraySlice<UInt8> = []
    var count: Int { header.count + payload.count }
  }

  private func writerLoop() {
    condition.lock()
    while state.table.closedReason == nil {
      if state.flushOwed {
        // A send that could not wait left bytes in the transport: this thread may wait.
        state.flushOwed = false
        condition.unlock()
        do {
          try transport.flushPending()
        } catch {
          close(reason: "send failed: \(error)")
          return
        }
        condition.lock()
        continue
      }
      let now = ContinuousClock.now
      let expired = state.table.expire(now: now)
      if !expired.isEmpty {
        condition.unlock()
        run(expired)
        condition.lock()
        continue
      }
      if state.table.rotateParkedRead(now: now) {
        logger.debug("a parked read gives up its slot to a waiting one")
      }
      if let dispatch = state.table.dispatchNext(now: now) {
        let frame = frameLocked(dispatch)
        condition.unlock()
        guard transmit(frame, dispatch, mayWait: true) else { return }
        condition.lock()
        continue
      }
      let wake = state.table.nextWake(now: now)
      state.writerWakesAt = wake
      defer { state.writerWakesAt = nil }
      if let wake {
        let seconds = now.duration(to: wake).timeInterval
        _ = condition.wait(until: Date(timeIntervalSinceNow: max(seconds, 0.0005)))
      } else {
        condition.wait()
      }
    }
    condition.unlock()
  }

  /// Encodes a request the tag table let go and counts it. Called with the lock held; the
  /// caller sends the frame (after unlocking) with ``transmit(_:_:)``.
  func frameLocked(_ dispatch: TagTable<Callbacks>.Dispatch) -> Outgoing {
    let frame: Outgoing
    if case .twrite(let fid, let offset, let data) = dispatch.message, !data.isEmpty {
      frame = Outgoing(
        header: Message.twriteHeader(
          tag: dispatch.tag, fid: fid, offset: offset, count: data.count),
        payload: data)
    } else {
      frame = Outgoing(header: dispatch.message.encoded(tag: dispatch.tag))
    }
    state.statistics.messagesSent += 1
    state.statistics.bytesSent += UInt64(frame.count)
    return frame
  }

  /// Writes a dispatched frame; a failed write closes the session. Returns whether it went (or
  /// is owed to the writer's flush).
  ///
  /// Only the writer thread passes `mayWait`. Any other caller (a FUSE thread, a completion on
  /// the reader thread) never waits for the socket: what it does not take now stays queued in
  /// the transport, and the writer thread is told to flush it.
  func transmit(_ frame: Outgoing, _ dispatch: TagTable<Callbacks>.Dispatch, mayWait: Bool)
    -> Bool
  {
    logger.trace("→ \(dispatch.message) tag=\(dispatch.tag)")
    do {
      let left = try transport.sendWithoutWaiting(header: frame.header, payload: frame.payload)
      if left {
        if mayWait {
          try transport.flushPending()
        } else {
          condition.lock()
          state.flushOwed = true
          condition.signal()
          condition.unlock()
        }
      }
      return true
    } catch {
      close(reason: "send failed: \(error)")
      return false
    }
  }

  // MARK: - Reading

  private func readerLoop() {
    let limit = Int(configuration.requestedMsize)
    let rule = SpliceRule(
      isExpecting: { [unowned self] in
        condition.lock()
        defer { condition.unlock() }
        return state.table.splicesOnWire > 0
      },
      accepts: { [unowned self] tag in
        condition.lock()
        defer { condition.unlock() }
        return state.table.acceptsSplice(tag: tag)
      })
    while true {
      let received: ReceivedMessage
      do {
        guard let message = try transport.receive(limit: limit, splicing: rule) else {
          close(reason: "the server closed the connection")
          return
        }
        received = message
      } catch {
        close(reason: closedReason ?? "receive failed: \(error)")
        return
      }
      let tag: Tag
      let message: Message
      var spliced: SplicedBytes?
      let frameSize: Int
      switch received {
      case .frame(let frame):
        do {
          (tag, message) = try Message.decode(frame, limits: DecodeLimits(maxFrameSize: limit))
          frameSize = frame.count
        } catch {
          logger.error("bad frame from \(transport.address): \(error); resetting the session")
          close(reason: "bad frame from the server: \(error)")
          return
        }
      case .splicedRead(let header, let data):
        // The transport checked the header (an Rread whose count matches its size).
        tag = Tag(header[5]) | Tag(header[6]) << 8
        message = .rread(data: [])
        spliced = data
        frameSize = header.count + data.count
      }
      let actions = takeReply(tag: tag, message: message, frameSize: frameSize, spliced: spliced)
      run(actions)
      if actions.contains(where: { $0.isViolation }) { return }
    }
  }

  /// Counts a reply and hands it to the tag table; returns the actions to run. `spliced`
  /// holds the data of an Rread that came in a pipe (`message` then has none).
  private func takeReply(
    tag: Tag, message: Message, frameSize: Int, spliced: SplicedBytes?
  ) -> [Action] {
    logger.trace("← \(message) tag=\(tag)\(spliced.map { " spliced=\($0.count)" } ?? "")")
    let now = ContinuousClock.now
    condition.lock()
    state.statistics.messagesReceived += 1
    state.statistics.bytesReceived += UInt64(frameSize)
    state.lastReceived = now
    let firstOversize = frameSize > Int(msize) && !state.loggedOversize
    if firstOversize { state.loggedOversize = true }
    let actions = state.table.receive(tag: tag, message: message, spliced: spliced, now: now)
    // A freed tag or wire slot matters only to queued requests; deadlines only move later, so
    // an idle writer sleeps on (a wake per reply costs two context switches on a bulk read).
    if state.table.queuedCount > 0 { condition.signal() }
    condition.unlock()
    // Logged once the lock is let go: the log handler writes.
    if firstOversize {
      logger.notice(
        "server sent a \(frameSize)-byte reply above msize \(msize); accepted (old devices do)")
    }
    return actions
  }
}
