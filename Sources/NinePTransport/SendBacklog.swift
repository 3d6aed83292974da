import DequeModule

/// What non-waiting sends could not write at once: whole messages in the order they were sent,
/// the first possibly part-written, and whether a thread is writing them now.
///
/// A pure value; ``SocketTransport`` keeps one under a lock and does the I/O (see
/// SocketTransport+NonWaiting.swift). Only the thread that set ``isWriting`` takes bytes from
/// the front; any thread may append behind.
struct SendBacklog {
  /// One message still to write.
  struct Entry {
    /// Stream bytes (a header, then its payload) or, on packet transports, SDUs. Empty pieces
    /// are dropped as they are written.
    var pieces: Deque<ArraySlice<UInt8>>
    /// True when each piece is one packet that goes whole in one call.
    let isPacket: Bool

    /// A stream message: `header` then `payload`.
    init(header: ArraySlice<UInt8>, payload: ArraySlice<UInt8>) {
      pieces = Deque([header, payload].filter { !$0.isEmpty })
      isPacket = false
    }

    /// A packet message, one SDU per piece.
    init(packets: [ArraySlice<UInt8>]) {
      pieces = Deque(packets)
      isPacket = true
    }

    var byteCount: Int { pieces.reduce(0) { $0 + $1.count } }
    var isDone: Bool { pieces.isEmpty }

    /// Drops `count` written bytes from the front (on packet transports: the first packet,
    /// which a send moves whole or not at all).
    mutating func consume(_ count: Int) {
      if isPacket {
        if !pieces.isEmpty { pieces.removeFirst() }
        return
      }
      var left = count
      while left > 0, var first = pieces.first {
        let taken = min(left, first.count)
        first = first.dropFirst(taken)
        left -= taken
        if first.isEmpty { pieces.removeFirst() } else { pieces[0] = first }
      }
    }
  }

  private(set) var entries: Deque<Entry> = []
  /// Whether a thread is writing the entries now (it alone takes from the front).
  var isWriting = false
  /// The error that ended writing: every later send throws it.
  var failure: TransportError?

  var isEmpty: Bool { entries.isEmpty }
  var byteCount: Int { entries.reduce(0) { $0 + $1.byteCount } }

  /// Queues a message behind everything already waiting.
  mutating func append(_ entry: Entry) {
    guard !entry.isDone else { return }
    entries.append(entry)
  }

  /// Puts back the unwritten rest of a message that was being written when others queued
  /// behind it: it goes first, as it started first.
  mutating func putBackFirst(_ entry: Entry) {
    guard !entry.isDone else { return }
    entries.prepend(entry)
  }

  /// The message to write next.
  var first: Entry? { entries.first }

  /// Records that `count` bytes (or one packet) of the first message were written.
  mutating func consumeFirst(_ count: Int) {
    guard !entries.isEmpty else { return }
    entries[0].consume(count)
    if entries[0].isDone { entries.removeFirst() }
  }
}
