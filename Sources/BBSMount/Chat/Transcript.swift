import Foundation

/// The local copy of a chat room: every line the room feed received, addressed by offset.
///
/// The bytes at offset N never change, so GNU `tail` (which seeks from `st_size` and re-reads
/// at the offset it reached) and `cat` see one consistent file. Old bytes are dropped past
/// `capacity`, keeping offsets: a reader that far behind skips to the oldest byte kept.
struct Transcript {
  private(set) var bytes: [UInt8] = []
  /// Offset of `bytes[0]`.
  private(set) var base: UInt64 = 0
  /// When the last line arrived (the file's mtime).
  private(set) var modified = Date()
  /// Lines received, for status output.
  private(set) var lineCount = 0
  let capacity: Int

  init(capacity: Int = 8 << 20) { self.capacity = capacity }

  /// Total length so far: the file's `st_size`.
  var length: UInt64 { base + UInt64(bytes.count) }

  mutating func append(_ data: [UInt8], at time: Date = Date()) {
    guard !data.isEmpty else { return }
    bytes.append(contentsOf: data)
    lineCount += data.reduce(0) { $0 + ($1 == UInt8(ascii: "\n") ? 1 : 0) }
    modified = time
    if bytes.count > capacity {
      // Drop whole lines from the front, about a quarter of the capacity at a time.
      var cut = bytes.count - capacity * 3 / 4
      while cut < bytes.count && bytes[cut - 1] != UInt8(ascii: "\n") { cut += 1 }
      bytes.removeFirst(cut)
      base += UInt64(cut)
    }
  }

  /// Up to `count` bytes from `offset`; empty at (or past) the end.
  func read(at offset: UInt64, count: Int) -> [UInt8] {
    let start = max(offset, base)
    guard start < length else { return [] }
    let from = Int(start - base)
    return Array(bytes[from..<min(bytes.count, from + count)])
  }

  /// The last `count` lines, for de-duplicating a replayed backlog.
  func lastLines(_ count: Int) -> [ArraySlice<UInt8>] {
    var lines: [ArraySlice<UInt8>] = []
    var end = bytes.endIndex
    var index = bytes.endIndex
    while index > bytes.startIndex && lines.count < count {
      index -= 1
      if bytes[index] == UInt8(ascii: "\n") && index + 1 < end {
        lines.append(bytes[(index + 1)..<end])
        end = index + 1
      }
    }
    if lines.count < count && end > bytes.startIndex { lines.append(bytes[bytes.startIndex..<end]) }
    return lines.reversed()
  }
}
