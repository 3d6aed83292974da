// The start of a session, as lib9pclient's fsversion, fsauth and fsattach (plan9port
// src/lib9pclient/fs.c, auth.c): Tversion on the bare transport, then, with the threads
// running, Tauth (when an identity is configured, see ``Authentication``) and Tattach. Nobody
// else sees the session until they are done.

import Foundation
import Logging
import NinePProtocol
import NinePTransport

extension Session {

  /// Negotiates the version, proves the configured identity (Tauth, see ``Authentication``)
  /// and attaches.
  ///
  /// Blocks the calling thread for at most `handshakeTimeout`, else the configuration's
  /// timeout (or 30 s).
  public static func connect(
    transport: any MessageTransport, configuration: SessionConfiguration,
    handshakeTimeout: Duration? = nil, logger: Logger = Logger(label: "mount9bbs.client")
  ) throws(NinePError) -> Session {
    let timeout = handshakeTimeout ?? configuration.requestTimeout ?? .seconds(30)
    let msize = try negotiateVersion(transport, configuration, timeout: timeout, logger: logger)
    var logger = logger
    logger[metadataKey: "server"] = "\(transport.address)"
    let session = Session(
      transport: transport, configuration: configuration, msize: msize, rootFid: 0,
      logger: logger)
    session.startThreads()
    let afid: Fid
    do {
      afid = try session.authenticate(timeout: timeout)
    } catch {
      session.close(reason: "authentication failed: \(error)")
      throw error
    }
    let identity = afid == NineP.noFid ? nil : configuration.authentication?.identity
    let reply = session.sendAndWait(
      .tattach(
        fid: 0, afid: afid, uname: identity ?? configuration.uname, aname: configuration.aname),
      timeout: timeout)
    switch reply {
    case .success(.rattach(let qid)):
      session.rootQid = qid
      session.authenticatedIdentity = identity
      // The afid has done its work: clunking it frees the server's authentication slot.
      if afid != NineP.noFid {
        session.send(.tclunk(fid: afid)) { [session] _ in session.releaseFid(afid) }
      }
      return session
    case .success(let other):
      session.close(reason: "unexpected attach reply")
      throw .protocolViolation("Tattach answered with \(other.type)")
    case .failure(.server(let ename, _)) where NinePError.meansBoardFull(ename):
      // A board that lets a newcomer in only if its user has no session yet (9bbsd).
      session.close(reason: "attach refused: \(ename)")
      throw .boardFull(serverSaid: ename)
    case .failure(.server(let ename, _)) where AuthenticationError.isAttachError(ename):
      session.close(reason: "attach failed: \(ename)")
      throw .authentication(AuthenticationError(ename: ename))
    case .failure(let error):
      session.close(reason: "attach failed: \(error)")
      throw error
    }
  }

  /// Proves the configured identity (see ``Authentication``) and returns the afid to attach
  /// with: NOFID when nothing is configured, or when the server does not authenticate and
  /// the policy allows that. A failure closes the session, which frees the afid at the server.
  private func authenticate(timeout: Duration) throws(NinePError) -> Fid {
    guard let authentication = configuration.authentication else { return NineP.noFid }
    guard authentication.gate.enter(before: Date(timeIntervalSinceNow: timeout.timeInterval))
    else { throw .authentication(.busy) }
    defer { authentication.gate.leave() }
    let afid = try allocateFid()
    do throws(NinePError) {
      _ = try authenticationStep(
        .tauth(afid: afid, uname: authentication.identity, aname: configuration.aname),
        timeout: timeout)
    } catch .authentication(let error) where error.meansNoAuthentication {
      // The server made no afid. With auth=auto, attach as before; the attach says whether
      // the server wanted authentication after all.
      guard authentication.policy == .auto else { throw .authentication(error) }
      releaseFid(afid)
      return NineP.noFid
    }
    let count = UInt32(min(Int(msize) - NineP.readOverhead, 1024))
    guard
      case .rread(let challenge) = try authenticationStep(
        .tread(fid: afid, offset: 0, count: count), timeout: timeout), !challenge.isEmpty
    else { throw .authentication(.noChallenge) }
    let answer: Authentication.Answer
    do {
      answer = try authentication.respond(
        .init(bytes: Array(challenge), address: transport.address, channel: transport.security))
    } catch let error as AuthenticationError {
      throw .authentication(error)
    } catch {
      throw .authentication(.signing("\(error)"))
    }
    _ = try authenticationStep(
      .twrite(fid: afid, offset: 0, data: answer.response[...]), timeout: timeout)
    if let checkProof = answer.checkProof {
      guard
        case .rread(let proof) = try authenticationStep(
          .tread(fid: afid, offset: 0, count: count), timeout: timeout)
      else { throw .authentication(.boardRefused("the board answered its proof's read oddly")) }
      do {
        try checkProof(Array(proof))
      } catch let error as AuthenticationError {
        throw .authentication(error)
      } catch {
        throw .authentication(.boardRefused("\(error)"))
      }
    }
    return afid
  }

  /// One request of the Tauth exchange; an Rerror is an ``AuthenticationError``.
  private func authenticationStep(_ request: Message, timeout: Duration) throws(NinePError)
    -> Message
  {
    switch sendAndWait(request, timeout: timeout) {
    case .success(let reply): return reply
    case .failure(.server(let ename, _)): throw .authentication(AuthenticationError(ename: ename))
    case .failure(let error): throw error
    }
  }

  private static func negotiateVersion(
    _ transport: any MessageTransport, _ configuration: SessionConfiguration,
    timeout: Duration, logger: Logger
  ) throws(NinePError) -> UInt32 {
    let request = Message.tversion(msize: configuration.requestedMsize, version: NineP.version)
    let watchdog = Watchdog(after: timeout) { transport.close() }
    defer { watchdog.cancel() }
    let frame: [UInt8]
    do {
      try transport.send(request.encoded(tag: NineP.noTag))
      guard let received = try transport.receive(limit: Int(configuration.requestedMsize)) else {
        throw NinePError.sessionClosed(reason: "the server closed the connection during Tversion")
      }
      frame = received
    } catch let error as TransportError {
      if watchdog.fired { throw .timedOut }
      if let notNineP = notNinePDiagnosis(error) { throw .protocolViolation(notNineP) }
      throw .transport(error)
    } catch let error as NinePError {
      throw error
    } catch {
      throw .sessionClosed(reason: "\(error)")
    }
    let reply: Message
    do {
      // Gen-1 devices answer NOTAG whatever we sent; HEAD echoes. Both are fine here.
      reply = try Message.decode(frame, limits: .unbounded).message
    } catch {
      throw .protocolViolation("bad Rversion: \(error)")
    }
    switch reply {
    case .rversion(let msize, let version):
      // We ask for 9P2000 itself: a server answers that, or an earlier version we do not
      // speak, or `unknown` (intro(5)). `9P2000.u`, `.L` or `9P2000` with bytes after it is
      // another dialect, or not 9P at all.
      guard version == NineP.version else {
        throw .versionNotSupported(serverSaid: version)
      }
      guard msize >= 64 else {
        throw .protocolViolation("server offered msize \(msize), too small for 9P")
      }
      if msize > configuration.requestedMsize {
        logger.notice(
          "server answered msize \(msize) above the \(configuration.requestedMsize) asked; using ours"
        )
      }
      return min(msize, configuration.requestedMsize)
    case .rerror(let ename):
      if NinePError.meansBoardFull(ename) { throw .boardFull(serverSaid: ename) }
      throw .versionNotSupported(serverSaid: ename)
    default:
      throw .protocolViolation("Tversion answered with \(reply.type)")
    }
  }

  /// What to say when the answer to Tversion cannot even be framed: an Rversion is a few
  /// dozen bytes, so a size prefix beyond msize (or below the minimum) means the peer speaks
  /// something else (an HTTP or SSH server answers in text), not that msize is too small.
  static func notNinePDiagnosis(_ error: TransportError) -> String? {
    let size: UInt32
    switch error {
    case .frameTooLarge(let announced, _), .frameTooSmall(let announced): size = announced
    default: return nil
    }
    // The 4 bytes the peer sent first, read back from the little-endian size.
    let prefix = (0..<4).map { UInt8(truncatingIfNeeded: size >> (8 * $0)) }
    let printable = prefix.allSatisfy { (0x20..<0x7f).contains($0) }
    let shown =
      printable
      ? "\"\(String(decoding: prefix, as: UTF8.self))…\""
      : prefix.map { String(format: "%02x", $0) }.joined(separator: " ")
    return "not a 9P server: its answer to Tversion starts with \(shown)"
  }

}
