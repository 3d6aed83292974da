import Synchronization

/// How much one poster may write: token buckets refilled over time, per poster (a verified
/// identity, else the client's address). TCP clients only: local ones (Unix sockets,
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

  public init(postBurst: Int, postsPerMinute: Int, byteBurst: Int, bytesPerSecond: Int) {
    self.postBurst = postBurst
    self.postsPerMinute = postsPerMinute
    self.byteBurst = byteBurst
    self.bytesPerSecond = bytesPerSecond
  }

  /// The default: a burst of 300 posts and 1 MiB, then 600 posts a minute and 32 KiB a second
  /// (at most about 2.7 GB a day per poster, against 879 MB in 20 s without it).
  public static let standard = PostingLimits(
    postBurst: 300, postsPerMinute: 600, byteBurst: 1 << 20, bytesPerSecond: 32 << 10)

  /// No limit at all.
  public static let unlimited = PostingLimits(
    postBurst: 0, postsPerMinute: 0, byteBurst: 0, bytesPerSecond: 0)
}

/// The buckets of ``PostingLimits``, keyed by poster. Thread-safe.
final class PostingLimiter: Sendable {
  private struct Bucket {
    var posts: Double
    var bytes: Double
    var refilled: ContinuousClock.Instant
  }

  private let limits: PostingLimits
  private let buckets = Mutex([String: Bucket]())
  /// Buckets kept before full ones are forgotten (a full bucket is a fresh poster's).
  private static let pruneAt = 4096

  init(limits: PostingLimits) {
    self.limits = limits
  }

  /// Spends `posts` posts and `bytes` bytes of `poster`'s allowance, or throws without
  /// spending anything.
  func spend(poster: String, posts: Int, bytes: Int) throws(NinePFailure) {
    let postLimited = limits.postsPerMinute > 0
    let byteLimited = limits.bytesPerSecond > 0
    guard postLimited || byteLimited else { return }
    let now = ContinuousClock.now
    let allowed = buckets.withLock { buckets -> Bool in
      if buckets.count >= Self.pruneAt { prune(&buckets, now: now) }
      var bucket =
        buckets[poster]
        ?? Bucket(
          posts: Double(limits.postBurst), bytes: Double(limits.byteBurst), refilled: now)
      refill(&bucket, now: now)
      let postsOK = !postLimited || bucket.posts >= Double(posts)
      // A write larger than the whole burst could never pass: it may take a full bucket.
      let bytesOK =
        !byteLimited || bucket.bytes >= Double(min(bytes, limits.byteBurst))
      guard postsOK, bytesOK else {
        buckets[poster] = bucket
        return false
      }
      if postLimited { bucket.posts -= Double(posts) }
      if byteLimited { bucket.bytes -= Double(min(bytes, limits.byteBurst)) }
      buckets[poster] = bucket
      return true
    }
    guard allowed else { throw NinePFailure("resource temporarily unavailable") }
  }

  private func refill(_ bucket: inout Bucket, now: ContinuousClock.Instant) {
    let elapsed = bucket.refilled.duration(to: now)
    let seconds =
      Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    bucket.posts = min(
      Double(limits.postBurst), bucket.posts + seconds * Double(limits.postsPerMinute) / 60)
    bucket.bytes = min(
      Double(limits.byteBurst), bucket.bytes + seconds * Double(limits.bytesPerSecond))
    bucket.refilled = now
  }

  private func prune(_ buckets: inout [String: Bucket], now: ContinuousClock.Instant) {
    for (key, var bucket) in buckets {
      refill(&bucket, now: now)
      if bucket.posts >= Double(limits.postBurst) && bucket.bytes >= Double(limits.byteBurst) {
        buckets[key] = nil
      }
    }
  }
}
