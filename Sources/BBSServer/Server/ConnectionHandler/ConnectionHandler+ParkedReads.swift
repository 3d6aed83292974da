import NinePProtocol

// Chat reads that park until a post arrives, and Tflush, which answers them.
extension ConnectionHandler {
  func handleFlush(oldtag: Tag, state: inout State, before: inout [[UInt8]]) -> Message {
    if let parked = state.parked.removeValue(forKey: oldtag) {
      namespace.board.chat.removeWaiter(parked.waiter)
      before.append(Message.rread(data: []).encoded(tag: oldtag))
    }
    return .rflush
  }

  /// Answers every read parked on `fid` with Rread(0).
  func answerParked(onFid fid: Fid, state: inout State, before: inout [[UInt8]]) {
    for (tag, parked) in state.parked where parked.fid == fid {
      namespace.board.chat.removeWaiter(parked.waiter)
      state.parked[tag] = nil
      before.append(Message.rread(data: []).encoded(tag: tag))
    }
  }

  /// A chat read: the user's unread lines at once; with none, parks (while a parking slot is
  /// free) and returns nil, and ``wake(tag:generation:)`` answers when a post arrives.
  func readChat(
    room: String, fid: Fid, tag: Tag, count: Int, user: BoardUser, state: inout State,
    before: inout [[UInt8]]
  ) throws(NinePFailure) -> Message? {
    // One parked read per fid: a new Tread answers the old one with Rread(0).
    answerParked(onFid: fid, state: &state, before: &before)
    var wake: (@Sendable () -> Void)?
    let generation = state.generation + 1
    if state.parked.count < configuration.parkingSlots {
      wake = makeWake(tag: tag, generation: generation)
    } else {
      logger.warning(
        "session \(id): all \(configuration.parkingSlots) parking slots in use; answering tag \(tag) at once"
      )
    }
    let outcome: ChatReadOutcome
    do {
      outcome = try namespace.board.chat.readOrPark(
        room: room, user: user, count: count, wake: wake)
    } catch {
      throw NinePFailure(error, operation: "read")
    }
    switch outcome {
    case .data(let bytes): return .rread(data: bytes[...])
    case .empty: return .rread(data: [])
    case .parked(let waiter):
      state.generation = generation
      state.parked[tag] = Parked(
        fid: fid, room: room, count: count, user: user, waiter: waiter, generation: generation)
      logger.debug("session \(id): parked read tag \(tag) on \(room)")
      return nil
    }
  }

  private func makeWake(tag: Tag, generation: UInt64) -> @Sendable () -> Void {
    { [weak self] in
      guard let self else { return }
      self.wakeQueue.async { self.wake(tag: tag, generation: generation) }
    }
  }

  /// A post arrived in the room of a parked read: read again and answer, or park again if
  /// another reader with the same name took the lines.
  private func wake(tag: Tag, generation: UInt64) {
    state.withLock { state in
      defer { parkedGauge.store(state.parked.count, ordering: .relaxed) }
      guard !state.closed, let parked = state.parked[tag], parked.generation == generation else {
        return
      }
      state.parked[tag] = nil
      let next = state.generation + 1
      let reply: Message
      do throws(BoardError) {
        let outcome = try namespace.board.chat.readOrPark(
          room: parked.room, user: parked.user, count: parked.count,
          wake: makeWake(tag: tag, generation: next))
        switch outcome {
        case .data(let bytes): reply = .rread(data: bytes[...])
        case .empty: reply = .rread(data: [])
        case .parked(let waiter):
          state.generation = next
          var again = parked
          again.waiter = waiter
          again.generation = next
          state.parked[tag] = again
          return
        }
      } catch {
        reply = .rerror(ename: NinePFailure(error, operation: "read").ename)
      }
      logger.trace("session \(id): -> \(reply) tag \(tag) (woken)")
      // house: sent under the lock, so a Tflush of this tag, which needs the lock, is
      // answered after this Rread (the watchdog reads `parkedGauge`, not the lock).
      send([reply.encoded(tag: tag)])
    }
  }
}
