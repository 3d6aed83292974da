import BBSIdentity
import Logging
import NinePProtocol

/// Whether the server authenticates (the 9p4z core's `ninep_auth_config`, facts §6).
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
struct AuthTable {
  private struct Entry {
    var claimed: String
    var challenge: [UInt8]
    var issued: ContinuousClock.Instant
    var challengeRead = false
    var verified: Identity?
  }

  private var entries: [Fid: Entry] = [:]

  /// Authentications that may be in progress at once in one session (a board: 4).
  static let places = 4
  /// Longest identity a board takes (its buffer holds 63 bytes and a NUL).
  static let maxIdentity = 63

  var count: Int { entries.count }

  func isAuthFid(_ fid: Fid) -> Bool { entries[fid] != nil }

  mutating func removeAll() { entries.removeAll() }

  mutating func remove(_ afid: Fid) { entries[afid] = nil }

  /// Tauth: a fresh challenge for `claimed`. The caller has checked the identity's length
  /// and that the afid is free.
  mutating func begin(afid: Fid, claimed: String) throws(NinePFailure) -> Qid {
    guard entries.count < Self.places else {
      throw NinePFailure("too many concurrent authentications")
    }
    var generator = SystemRandomNumberGenerator()
    let challenge = (0..<ChallengeResponse.challengeSize).map { _ in
      UInt8.random(in: .min ... .max, using: &generator)
    }
    entries[afid] = Entry(claimed: claimed, challenge: challenge, issued: .now)
    return Qid(type: .auth, version: 0, path: UInt64(afid))
  }

  /// Tread of an afid: the challenge from `offset`, while it is fresh.
  mutating func read(afid: Fid, offset: UInt64, count: Int, lifetime: Duration)
    throws(NinePFailure) -> [UInt8]
  {
    guard var entry = entries[afid] else { throw NinePFailure("unknown fid") }
    guard entry.issued.duration(to: .now) <= lifetime else {
      throw NinePFailure("authentication timeout")
    }
    entry.challengeRead = true
    entries[afid] = entry
    guard offset < UInt64(entry.challenge.count) else { return [] }
    return Array(entry.challenge[Int(offset)...].prefix(count))
  }

  /// Twrite of an afid: checks signature ‖ public key against the challenge and the claimed
  /// identity. Returns the count to report.
  mutating func write(afid: Fid, data: [UInt8], lifetime: Duration, logger: Logger, session: Int)
    throws(NinePFailure) -> Int
  {
    guard var entry = entries[afid] else { throw NinePFailure("unknown fid") }
    guard entry.challengeRead else { throw NinePFailure("must read challenge first") }
    guard entry.issued.duration(to: .now) <= lifetime else {
      throw NinePFailure("authentication timeout")
    }
    guard ChallengeResponse.sizes.contains(data.count) else {
      throw NinePFailure("invalid auth response size")
    }
    do {
      entry.verified = try ChallengeResponse.verify(
        data, challenge: entry.challenge, claimedIdentity: entry.claimed)
    } catch {
      logger.notice("session \(session): authentication of '\(entry.claimed)' refused: \(error)")
      throw NinePFailure("authentication failed")
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
