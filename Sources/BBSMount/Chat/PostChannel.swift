import Foundation
import Logging
import NinePClient
import NinePProtocol

/// The mount's one way of posting: a `/chat/post` fid per chat directory, opened once on the
/// primary session, through which posts go one Twrite each, strictly in order.
///
/// One fid for all writers saves a walk and an open per `echo` (two round trips on a radio
/// link), and one post at a time keeps every writer's lines in order. With an ``Outbox``, a
/// post that cannot go now (link down, or lost on the wire) is stored durably and `write()`
/// still succeeds; stored posts go out first, in order, whenever the link is up.
final class PostChannel: @unchecked Sendable {
  typealias Completion = @Sendable (Result<Void, NinePError>) -> Void

  private enum Job {
    case posts([[UInt8]], directory: [String], completion: Completion)
    case drain
  }

  private let lock = NSLock()
  private var fids: [ObjectIdentifier: [[String]: Fid]] = [:]
  private var jobs: [Job] = []
  private var busy = false
  private let sessions: SessionProvider
  private let linkIsUp: @Sendable () -> Bool
  let outbox: Outbox?
  private let logger: Logger

  init(
    sessions: @escaping SessionProvider, outbox: Outbox? = nil,
    linkIsUp: @escaping @Sendable () -> Bool = { true },
    logger: Logger = Logger(label: "mount9bbs.post")
  ) {
    self.sessions = sessions
    self.outbox = outbox
    self.linkIsUp = linkIsUp
    self.logger = logger
  }

  /// Sends posts (each `room:text`) in order; completes when the server has them, or when
  /// they are safe in the outbox.
  func send(_ payloads: [[UInt8]], chatDirectory: [String], completion: @escaping Completion) {
    if payloads.isEmpty { return completion(.success(())) }
    enqueue(.posts(payloads, directory: chatDirectory, completion: completion))
  }

  /// Sends what waits in the outbox (the link came back, or the mount started).
  func drain() {
    guard let outbox, !outbox.isEmpty else { return }
    enqueue(.drain)
  }

  private func enqueue(_ job: Job) {
    lock.lock()
    jobs.append(job)
    let start = !busy
    busy = true
    lock.unlock()
    if start { next() }
  }

  private func next() {
    lock.lock()
    guard !jobs.isEmpty else {
      busy = false
      lock.unlock()
      return
    }
    let job = jobs.removeFirst()
    lock.unlock()
    switch job {
    case .posts(let payloads, let directory, let completion):
      deliver(payloads, directory: directory) { [self] result in
        completion(result)
        next()
      }
    case .drain:
      drainOutbox { [self] in next() }
    }
  }

  // MARK: Sending now, or keeping for later

  private func deliver(
    _ payloads: [[UInt8]], directory: [String], _ completion: @escaping Completion
  ) {
    if let outbox, !outbox.isEmpty || !linkIsUp() {
      // Behind what already waits, or nowhere to send it: keep it.
      return completion(store(payloads, directory: directory, in: outbox))
    }
    if outbox == nil && !linkIsUp() {
      // No outbox (`-o outbox=off`): an offline post fails at once.
      return completion(.failure(.sessionClosed(reason: "the link is down")))
    }
    post(payloads[...], directory: directory) { [self] sent, result in
      switch result {
      case .failure(let error) where error.isLinkFailure:
        guard let outbox else { return completion(.failure(error)) }
        // The link died under us: keep the rest, including the post on the wire (it may have
        // arrived: at least once, never lost).
        logger.notice("link lost while posting; \(payloads.count - sent) post(s) go to the outbox")
        completion(store(Array(payloads[sent...]), directory: directory, in: outbox))
        drain()
      default:
        completion(result)
      }
    }
  }

  private func store(_ payloads: [[UInt8]], directory: [String], in outbox: Outbox) -> Result<
    Void, NinePError
  > {
    do {
      try outbox.append(payloads, chatDirectory: directory)
      return .success(())
    } catch {
      logger.error("\(error)")
      return .failure(.resourceExhausted("outbox space (\(error))"))
    }
  }

  private func drainOutbox(_ done: @escaping @Sendable () -> Void) {
    guard let outbox, let entry = outbox.first, linkIsUp() else { return done() }
    post([entry.payload][...], directory: entry.chatDirectory) { [self] _, result in
      switch result {
      case .success:
        outbox.remove(entry)
        logger.info("sent a post from the outbox (\(outbox.count) left)")
        drainOutbox(done)
      case .failure(let error) where error.isLinkFailure:
        // Down again: the pool's next "up" starts another drain.
        done()
      case .failure(let error):
        logger.error(
          "the server refused a stored post (\(error)); kept in \(outbox.directory)/rejected")
        outbox.reject(entry)
        drainOutbox(done)
      }
    }
  }

  /// Posts one by one; reports how many the server acknowledged before the result.
  private func post(
    _ payloads: ArraySlice<[UInt8]>, directory: [String], sent: Int = 0, retried: Bool = false,
    _ completion: @escaping @Sendable (Int, Result<Void, NinePError>) -> Void
  ) {
    guard let payload = payloads.first else { return completion(sent, .success(())) }
    sessions { [self] placed in
      guard case .success(let session) = placed else {
        if case .failure(let error) = placed { completion(sent, .failure(error)) }
        return
      }
      withFid(session, directory) { [self] opened in
        switch opened {
        case .failure(let error):
          completion(sent, .failure(error))
        case .success(let fid):
          let chunk = Array(payload.prefix(session.maxWriteCount))
          session.write(fid, offset: 0, data: chunk) { [self] written in
            switch written {
            case .success:
              post(payloads.dropFirst(), directory: directory, sent: sent + 1, completion)
            case .failure(let error) where error.isLinkFailure:
              completion(sent, .failure(error))
            case .failure(.server(let ename, let code)) where retried || code != EBADF:
              completion(sent, .failure(.server(ename: ename, errno: code)))
            case .failure(let error):
              // A stale fid (the server forgot it): open a new one once.
              forget(session, directory)
              if retried { return completion(sent, .failure(error)) }
              post(payloads, directory: directory, sent: sent, retried: true, completion)
            }
          }
        }
      }
    }
  }

  private func forget(_ session: Session, _ directory: [String]) {
    lock.lock()
    fids[ObjectIdentifier(session)]?[directory] = nil
    lock.unlock()
  }

  private func withFid(
    _ session: Session, _ directory: [String],
    _ completion: @escaping @Sendable (Result<Fid, NinePError>) -> Void
  ) {
    let key = ObjectIdentifier(session)
    lock.lock()
    // Fids of sessions that are gone are gone with them.
    if session.closedReason == nil, let fid = fids[key]?[directory] {
      lock.unlock()
      return completion(.success(fid))
    }
    lock.unlock()
    session.walkOpen(directory + ["post"], mode: .write) { [self] opened in
      switch opened {
      case .failure(let error):
        completion(.failure(error))
      case .success(let post):
        lock.lock()
        // Keep only the current session's fids.
        fids = fids.filter { $0.key == key }
        fids[key, default: [:]][directory] = post.fid
        lock.unlock()
        completion(.success(post.fid))
      }
    }
  }
}
