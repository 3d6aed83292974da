import Synchronization

/// How much one poster may write: token buckets refilled over time, per poster (a verified
/// identity, else the guest's network: its /24, or /64 for IPv6, see ``SourceNetwork``), and
/// one more bucket that all guests share (``guestNetworks`` networks' worth), so a guest flood
/// from many networks cannot take the board from members, who are never charged to it. TCP
/// clients only: local ones (Unix sockets,
/// seqpacket, standard input) are not limited. Chat posts and board-message creations spend posts;
/// chat text and board-message writes spend bytes. A poster over either is refused with
/// `resource temporarily unavailable` (EAGAIN) until the bucket refills.
public struct PostingLimits: Sendable, Equatable {
  /// Posts (chat lines, new board messages) a poster may make at once.
  public var postBurst: Int
  /// Posts per minute the allowance refills; 0 means posts are not limited.
  public var postsPerMinute: Int
  /// Bytes (chat text, board-message writes) a poster may write at once.
  public var byteBurst: Int
  /// Bytes per second the allowance refills; 0 means bytes are not limited.
  public var bytesPerSecond: Int
  /// All guests together may post and write this many guest networks' allowances (bursts and
  /// refills alike); 0 means guests share no budget beyond their networks'.
  public var guestNetworks: Int

  public init(
    postBurst: Int, postsPerMinute: Int, byteBurst: Int, bytesPerSecond: Int,
    guestNetworks: Int = PostingLimits.defaultGuestNetworks
  ) {
    self.postBurst = postBurst
    self.postsPerMinute = postsPerMinute
    self.byteBurst = byteBurst
    self.bytesPerSecond = bytesPerSecond
    self.guestNetworks = guestNetworks
  }

  /// The default guest budget: 4 networks' allowances (4 MiB at once, then 128 KiB/s and
  /// 2400 posts a minute), whatever number of networks the guests come from.
  public static let defaultGuestNetworks = 4

  /// The default: a burst of 300 posts and 1 MiB, then 600 posts a minute and 32 KiB a second
  /// (at most about 2.7 GB a day per poster, against 879 MB in 20 s without it).
  public static let standard = PostingLimits(
    postBurst: 300, postsPerMinute: 600, byteBurst: 1 << 20, bytesPerSecond: 32 << 10)

  /// No limit at all.
  public static let unlimited = PostingLimits(
    postBurst: 0, postsPerMinute: 0, byteBurst: 0, bytesPerSecond: 0)
}

/// Who spends a post: a member (a verified identity) or a guest (keyed by its network).
enum Poster: Hashable, Sendable {
  case member(String)
  case guest(network: String)

  var key: String {
    switch self {
    case .member(let identity): return "id " + identity
    case .guest(let network): return "net " + network
    }
  }
}

/// The buckets of ``PostingLimits``, keyed by poster, and the guests' shared one. Thread-safe.
final class PostingLimiter: Sendable {
  private struct Bucket {
    var posts: Double
    var bytes: Double
    var refilled: ContinuousClock.Instant
    /// Its size in posters' allowances: 1, or the guests' budget's `guestNetworks`.
    var scale: Double
  }

  /// The key of the bucket all guests share (no poster's key starts with a NUL).
  private static let guestsKey = "\u{0}guests"

  private let limits: PostingLimits
  private let buckets = Mutex([String: Bucket]())
  /// Buckets kept before full ones are forgotten (a full bucket is a fresh poster's).
  private static let pruneAt = 4096

  init(limits: PostingLimits) {
    self.limits = limits
  }

  /// Spends `posts` posts and `bytes` bytes of `poster`'s allowance, and for a guest of the
  /// guests' budget too, or throws without spending anything.
  func spend(_ poster: Poster, posts: Int, bytes: Int) throws(NinePFailure) {
    let postLimited = limits.postsPerMinute > 0
    let byteLimited = limits.bytesPerSecond > 0
    guard postLimited || byteLimited else { return }
    var keys = [(poster.key, 1.0)]
    if case .guest = poster, limits.guestNetworks > 0 {
      keys.append((Self.guestsKey, Double(limits.guestNetworks)))
    }
    // A write larger than the whole burst could never pass: it may take a full bucket.
    let cost = (posts: Double(posts), bytes: Double(min(bytes, limits.byteBurst)))
    let now = ContinuousClock.now
    let allowed = buckets.withLock { buckets -> Bool in
      if buckets.count >= Self.pruneAt { prune(&buckets, now: now) }
      var charged: [(String, Bucket)] = []
      for (key, scale) in keys {
        var bucket =
          buckets[key]
          ?? Bucket(
            posts: Double(limits.postBurst) * scale, bytes: Double(limits.byteBurst) * scale,
            refilled: now, scale: scale)
        refill(&bucket, now: now)
        buckets[key] = bucket
        guard (!postLimited || bucket.posts >= cost.posts),
          !byteLimited || bucket.bytes >= cost.bytes
        else { return false }
        if postLimited { bucket.posts -= cost.posts }
        if byteLimited { bucket.bytes -= cost.bytes }
        charged.append((key, bucket))
      }
      for (key, bucket) in charged { buckets[key] = bucket }
      return true
    }
    guard allowed else { throw NinePFailure("resource temporarily unavailable") }
  }

  private func refill(_ bucket: inout Bucket, now: ContinuousClock.Instant) {
    let elapsed = bucket.refilled.duration(to: now)
    let seconds =
      Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    bucket.posts = min(
      Double(limits.postBurst) * bucket.scale,
      bucket.posts + seconds * Double(limits.postsPerMinute) * bucket.scale / 60)
    bucket.bytes = min(
      Double(limits.byteBurst) * bucket.scale,
      bucket.bytes + seconds * Double(limits.bytesPerSecond) * bucket.scale)
    bucket.refilled = now
  }

  private func prune(_ buckets: inout [String: Bucket], now: ContinuousClock.Instant) {
    for (key, var bucket) in buckets {
      refill(&bucket, now: now)
      if bucket.posts >= Double(limits.postBurst) * bucket.scale
        && bucket.bytes >= Double(limits.byteBurst) * bucket.scale
      {
        buckets[key] = nil
      }
    }
  }
}
