import BBSIdentity
import Logging
import NinePProtocol

/// Whether the server authenticates (the 9p4z core's `ninep_auth_config`, docs/board-facts.md §6).
public enum AuthPolicy: String, Sendable, CaseIterable {
  /// No authentication: Tauth gets `authentication not required` and the attach uname is the
  /// user, unverified, as on a Gen-1 board.
  case off
  /// A verified identity is that user; an attach without one is a guest.
  case optional
  /// No guests: Tattach needs an authenticated afid.
  case required
}

/// One session's authentications in progress: the core's auth pool. Each entry lives from
/// Tauth until its afid is clunked (or the session is reset), so a client that does not clunk
/// its afids runs out of places.
///
/// A board with a key (``BBSServerConfiguration/boardKey``) hands out the challenge followed
/// by its key, and once a response is accepted, the afid's next read is the board's proof
/// (docs/authentication.md).
struct AuthTable {
  private struct Entry {
    var claimed: String
    var challenge: ChallengeResponse.Challenge
    var issued: ContinuousClock.Instant
    var challengeRead = false
    var verified: Identity?
    /// The board's signature over the accepted response (keyed boards).
    var proof: [UInt8]?
  }

  private var entries: [Fid: Entry] = [:]

  /// Authentications that may be in progress at once in one session (a board: 4).
  static let places = 4

  var count: Int { entries.count }

  func isAuthFid(_ fid: Fid) -> Bool { entries[fid] != nil }

  mutating func removeAll() { entries.removeAll() }

  mutating func remove(_ afid: Fid) { entries[afid] = nil }

  /// Tauth: a fresh challenge for `claimed`, naming `boardKey` when the board has one. The
  /// caller has checked the identity's length and that the afid is free.
  /// On the secure channel, `channelBinding` is its binding, which the signature must cover.
  mutating func begin(afid: Fid, claimed: String, boardKey: BoardKey?, channelBinding: [UInt8]?)
    throws(NinePFailure) -> Qid
  {
    guard entries.count < Self.places else {
      throw NinePFailure("too many concurrent authentications")
    }
    var generator = SystemRandomNumberGenerator()
    let nonce = (0..<ChallengeResponse.challengeSize).map { _ in
      UInt8.random(in: .min ... .max, using: &generator)
    }
    entries[afid] = Entry(
      claimed: claimed,
      challenge: ChallengeResponse.Challenge(
        nonce: nonce, boardKey: boardKey, channelBinding: channelBinding),
      issued: .now)
    return Qid(type: .auth, version: 0, path: UInt64(afid))
  }

  /// Tread of an afid: the challenge from `offset`, while it is fresh; once a response was
  /// accepted, the board's proof.
  mutating func read(afid: Fid, offset: UInt64, count: Int, lifetime: Duration)
    throws(NinePFailure) -> [UInt8]
  {
    guard var entry = entries[afid] else { throw NinePFailure("unknown fid") }
    guard entry.issued.duration(to: .now) <= lifetime else {
      throw NinePFailure("authentication timeout")
    }
    entry.challengeRead = true
    entries[afid] = entry
    let content = entry.proof ?? entry.challenge.encoded
    guard offset < UInt64(content.count) else { return [] }
    return Array(content[Int(offset)...].prefix(count))
  }

  /// Twrite of an afid: checks signature ‖ public key against the challenge and the claimed
  /// identity, in the form `form`; a keyed board signs its proof with `boardKey`. Returns the
  /// count to report.
  mutating func write(
    afid: Fid, data: [UInt8], form: ChallengeResponse.Form, boardKey: PrivateKey?,
    lifetime: Duration, logger: Logger, session: Int
  ) throws(NinePFailure) -> Int {
    guard var entry = entries[afid] else { throw NinePFailure("unknown fid") }
    guard entry.challengeRead else { throw NinePFailure("must read challenge first") }
    guard entry.issued.duration(to: .now) <= lifetime else {
      throw NinePFailure("authentication timeout")
    }
    // One response per challenge: a second would get a second proof, or a second try.
    guard entry.verified == nil else { throw NinePFailure("authentication failed") }
    guard ChallengeResponse.sizes.contains(data.count) else {
      throw NinePFailure("invalid auth response size")
    }
    do {
      entry.verified = try ChallengeResponse.verify(
        data, challenge: entry.challenge, claimedIdentity: entry.claimed, form: form)
    } catch {
      logger.notice("session \(session): authentication of '\(entry.claimed)' refused: \(error)")
      throw NinePFailure("authentication failed")
    }
    if let boardKey {
      do {
        entry.proof = try ChallengeResponse.proveBoard(
          nonce: entry.challenge.nonce, response: data, with: boardKey)
      } catch {
        logger.error("session \(session): cannot sign the board's proof: \(error)")
        throw NinePFailure("authentication failed")
      }
    }
    entries[afid] = entry
    logger.info("session \(session): authenticated \(entry.claimed)")
    return data.count
  }

  /// The identity Tattach may use with `afid`: nil when the afid is not an authentication that
  /// finished. Throws when `uname` names someone else.
  func verifiedIdentity(afid: Fid, uname: String) throws(NinePFailure) -> Identity? {
    guard let entry = entries[afid], let verified = entry.verified else { return nil }
    // An empty uname means "use my identity".
    guard uname.isEmpty || uname == entry.claimed else {
      throw NinePFailure("uname does not match authenticated identity")
    }
    return verified
  }
}
