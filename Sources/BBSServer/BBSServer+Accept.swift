import Dispatch
import Foundation
import NinePProtocol
import NinePTransport

// Accepting connections: the accept loop of each listener, the caps a newcomer must pass,
// and forgetting a connection when it ends.
extension BBSServer {
  /// Accepts clients of `listener` until it closes or the server stops.
  func acceptLoop(_ listener: Listener) {
    while true {
      // At the limit, leave newcomers in the listen backlog until a client leaves.
      if let slots,
        !slots.waitForRoom(onWait: { [logger, listener] limit in
          logger.info(
            "9bbsd: \(limit) of \(limit) connections in use; not accepting on \(listener.boundAddress) until one ends"
          )
        })
      {
        return
      }
      let transport: SocketTransport?
      do {
        transport = try listener.accept()
      } catch {
        logger.error("9bbsd: accept on \(listener.boundAddress) failed: \(error)")
        if !state.withLock({ $0.running }) { return }
        Thread.sleep(forTimeInterval: 0.05)
        continue
      }
      guard let transport else { return }
      // Another listener may have taken the last slot meanwhile: hold this one unserved.
      if let slots, !slots.acquire() {
        transport.close()
        return
      }
      // A refused client is closed; the loop goes on unless the server is stopping (a
      // refusal once ended the loop, and with it 9bbsd).
      guard let connection = admit(transport, slotted: slots != nil) else {
        if state.withLock({ $0.stopped }) { return }
        continue
      }
      spawn(name: "9bbs.conn") { connection.run() }
    }
  }

  /// Registers a connection, or refuses (closes) it when a cap or a stop says so.
  func admit(_ transport: any MessageTransport, slotted: Bool) -> Connection? {
    var refusal = ""
    var full = false
    var probation = false
    let admitted = state.withLock { state -> Connection? in
      guard !state.stopped else {
        refusal = "the server is stopping"
        return nil
      }
      let id = state.nextID
      if case .refuse(let max) = configuration.connectionLimit {
        let network: String?
        if case .tcp(let host, _) = transport.address {
          network = SourceNetwork.key(of: host)
        } else if case .l2cap(let host, _, _) = transport.address {
          network = SourceNetwork.key(of: host)
        } else {
          network = nil
        }
        if let why = Self.probationOrRefusal(
          &state, limit: max, newcomer: id, network: network,
          membersExist: configuration.auth != .off)
        {
          refusal = why
          full = true
          return nil
        }
        probation = state.probation.contains(id)
      }
      // Per guest network (a /24, a /64): a member's session, once attached, is not counted.
      if let perNetwork = configuration.maxConnectionsPerNetwork,
        case .tcp(let host, _) = transport.address
      {
        let network = SourceNetwork.key(of: host)
        let shares = state.shares
        let held = state.connections.values.lazy.filter {
          shares[$0.id]?.hasPrefix("id ") != true
            && $0.host.map(SourceNetwork.key(of:)) == network
        }.count
        if held >= perNetwork {
          refusal = "\(network) already has \(perNetwork) connections"
          state.probation.remove(id)
          return nil
        }
      }
      state.nextID += 1
      let connection = Connection(id: id, transport: transport, server: self)
      state.connections[id] = connection
      if slotted { state.slotted.insert(id) }
      return connection
    }
    if let admitted, probation {
      logger.info(
        "9bbsd: session \(admitted.id) let in on probation: the board is full, and a member holding several sessions may give one back"
      )
      watchProbation(of: admitted)
    }
    if admitted == nil {
      logRefusal("9bbsd: refusing a connection from \(transport.address): \(refusal)")
      if slotted { slots?.release() }
      if full {
        tellFull(transport, refusal)
      } else {
        transport.close()
      }
    }
    return admitted
  }

  /// The longest a refused newcomer is given to send its Tversion.
  static let fullAnswerPatience: Duration = .seconds(2)
  /// Most refused newcomers answered at once; beyond, they are only closed.
  static let fullAnswersAtOnce = 8

  /// Answers a newcomer the board is too full for: its Tversion gets the Rerror `board full:
  /// WHY`, so its user reads why (a bare close says only that the server hung up), then the
  /// connection closes. Bounded: a flood of newcomers costs a few threads for 2 s at most.
  private func tellFull(_ transport: any MessageTransport, _ why: String) {
    let taken = state.withLock { state -> Bool in
      guard state.fullAnswers < Self.fullAnswersAtOnce else { return false }
      state.fullAnswers += 1
      return true
    }
    guard taken else { return transport.close() }
    // Closing is idempotent (the transport's gate), so the deadline needs no cancelling.
    DispatchQueue.global().asyncAfter(deadline: .now() + Self.fullAnswerPatience.timeInterval) {
      transport.close()
    }
    Thread.detachNewThread { [self] in
      defer {
        transport.close()
        state.withLock { $0.fullAnswers -= 1 }
      }
      guard let frame = try? transport.receive(limit: 8192),
        let (tag, message) = try? Message.decode(frame, limits: .unbounded),
        case .tversion = message
      else { return }
      try? transport.send(Message.rerror(ename: "board full: \(why)").encoded(tag: tag))
    }
  }

  /// Forgets a connection; `fidsLeftOpen` are the fids its client never clunked (gen1).
  func connectionEnded(_ id: Int, fidsLeftOpen: Int) {
    let slotted = state.withLock { state in
      state.connections.removeValue(forKey: id)
      state.fidsLeftOpen += fidsLeftOpen
      state.endedSinceTrim += 1
      state.users[id] = nil
      state.shares[id] = nil
      state.probation.remove(id)
      state.reclaimed.remove(id)
      return state.slotted.remove(id) != nil
    }
    if slotted { slots?.release() }
  }

  /// Logs a refused connection, at most one line a second (a flood of connections must not
  /// become a flood of log lines); the next line counts those not logged.
  private func logRefusal(_ line: String) {
    let now = ContinuousClock.now
    let skipped = state.withLock { state -> Int? in
      if let last = state.lastRefusalLog, last.duration(to: now) < .seconds(1) {
        state.refusalsUnlogged += 1
        return nil
      }
      defer {
        state.refusalsUnlogged = 0
        state.lastRefusalLog = now
      }
      return state.refusalsUnlogged
    }
    guard let skipped else { return }
    logger.warning(
      "\(line)\(skipped > 0 ? " (and \(skipped) more refused in the last second)" : "")")
  }
}
