import NinePTransport
import XCTest

final class FrameAssemblerTests: XCTestCase {
  private func sampleMessages(count: Int, seed: UInt64) -> [[UInt8]] {
    var generator = SeededGenerator(seed: seed)
    return (0..<count).map { index in
      let length = Int.random(in: 0...600, using: &generator)
      return makeMessage(
        tag: UInt16(index),
        payload: (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }
  }

  private func drain(_ assembler: inout FrameAssembler, into output: inout [[UInt8]]) throws {
    while let message = try assembler.nextMessage(limit: 8192) { output.append(message) }
  }

  func testByteByByte() throws {
    let messages = sampleMessages(count: 20, seed: 1)
    var assembler = FrameAssembler()
    var output: [[UInt8]] = []
    for byte in messages.joined() {
      assembler.append([byte])
      try drain(&assembler, into: &output)
    }
    XCTAssertEqual(output, messages)
    XCTAssertEqual(assembler.bufferedByteCount, 0)
  }

  func testRandomChunks() throws {
    for seed in UInt64(1)...20 {
      let messages = sampleMessages(count: 30, seed: seed)
      let stream = Array(messages.joined())
      var generator = SeededGenerator(seed: seed &* 7919)
      var assembler = FrameAssembler()
      var output: [[UInt8]] = []
      var offset = 0
      while offset < stream.count {
        let length = min(Int.random(in: 1...1500, using: &generator), stream.count - offset)
        assembler.append(stream[offset..<offset + length])
        offset += length
        try drain(&assembler, into: &output)
      }
      XCTAssertEqual(output, messages, "seed \(seed)")
    }
  }

  func testMessagesSpanningSDUs() throws {
    let messages = sampleMessages(count: 25, seed: 99)
    for limit in [1, 7, 23, 64, 245, 4096] {
      var assembler = FrameAssembler()
      var output: [[UInt8]] = []
      for message in messages {
        for sdu in SDUSegmenter.segments(of: message, limit: limit) {
          assembler.append(sdu)
          try drain(&assembler, into: &output)
        }
      }
      XCTAssertEqual(output, messages, "limit \(limit)")
    }
  }

  func testSeveralMessagesInOneAppend() throws {
    let messages = sampleMessages(count: 5, seed: 3)
    var assembler = FrameAssembler()
    assembler.append(Array(messages.joined()))
    var output: [[UInt8]] = []
    try drain(&assembler, into: &output)
    XCTAssertEqual(output, messages)
  }

  func testIncompletePrefixAndBody() throws {
    var assembler = FrameAssembler()
    let message = makeMessage(tag: 1, payload: [1, 2, 3])
    assembler.append(message.prefix(3))
    XCTAssertNil(assembler.pendingMessageSize)
    XCTAssertNil(try assembler.nextMessage(limit: 100))
    assembler.append(message[3..<8])
    XCTAssertEqual(assembler.pendingMessageSize, 10)
    XCTAssertNil(try assembler.nextMessage(limit: 100))
    assembler.append(message[8...])
    XCTAssertEqual(try assembler.nextMessage(limit: 100), message)
  }

  func testLimitIsInclusive() throws {
    var assembler = FrameAssembler()
    let message = makeMessage(tag: 1, payload: [UInt8](repeating: 0, count: 93))
    assembler.append(message)
    XCTAssertEqual(try assembler.nextMessage(limit: 100), message)
  }

  func testFrameTooLargeAsSoonAsPrefixArrives() {
    var assembler = FrameAssembler()
    assembler.append([0xA0, 0x86, 0x01, 0x00])  // 100000
    XCTAssertThrowsError(try assembler.nextMessage(limit: 8192)) { error in
      XCTAssertEqual(error as? TransportError, .frameTooLarge(size: 100_000, limit: 8192))
    }
  }

  func testFrameTooSmall() {
    for size: UInt8 in [0, 4, 6] {
      var assembler = FrameAssembler()
      assembler.append([size, 0, 0, 0, 1, 2, 3])
      XCTAssertThrowsError(try assembler.nextMessage(limit: 8192)) { error in
        XCTAssertEqual(error as? TransportError, .frameTooSmall(size: UInt32(size)))
      }
    }
  }

  // MARK: Receiving the rest straight into the message

  /// A `receive` for `nextMessage(limit:receivingRestWith:)` that hands out `stream` in chunks of
  /// at most `chunk` bytes, never more than it is given room for, then 0 (end of stream).
  private final class ChunkedSource {
    var stream: ArraySlice<UInt8>
    let chunk: Int
    var calls = 0
    init(_ stream: some Collection<UInt8>, chunk: Int) {
      self.stream = Array(stream)[...]
      self.chunk = chunk
    }
    func receive(_ room: UnsafeMutableRawBufferPointer) -> Int {
      calls += 1
      let taken = stream.prefix(min(chunk, room.count))
      room.copyBytes(from: taken)
      stream = stream.dropFirst(taken.count)
      return taken.count
    }
  }

  func testRestIsReceivedIntoTheMessage() throws {
    let message = makeMessage(
      tag: 1, payload: (0..<100_000).map { UInt8(truncatingIfNeeded: $0 * 7) })
    let next = patternMessage(tag: 2, length: 10)
    for (buffered, chunk) in [(4, 1000), (5, 65536), (30_000, 7), (99_000, 100_000)] {
      var assembler = FrameAssembler()
      assembler.append(message.prefix(buffered))
      let source = ChunkedSource(message.dropFirst(buffered) + next, chunk: chunk)
      let received = try assembler.nextMessage(limit: 200_000, receivingRestWith: source.receive)
      XCTAssertEqual(received, message, "buffered \(buffered), chunk \(chunk)")
      XCTAssertEqual(assembler.bufferedByteCount, 0)
      XCTAssertEqual(Array(source.stream), next, "only the message's own bytes are received")
    }
  }

  func testRestReceivingLeavesCompleteAndUnsizedMessagesAlone() throws {
    let first = patternMessage(tag: 1, length: 20)
    let second = patternMessage(tag: 2, length: 30)
    var assembler = FrameAssembler()
    assembler.append(first + second.prefix(3))
    let source = ChunkedSource(second.dropFirst(3), chunk: 100)
    XCTAssertEqual(try assembler.nextMessage(limit: 8192, receivingRestWith: source.receive), first)
    XCTAssertNil(try assembler.nextMessage(limit: 8192, receivingRestWith: source.receive))
    XCTAssertEqual(source.calls, 0, "a complete message or an incomplete prefix receives nothing")
    XCTAssertEqual(assembler.bufferedByteCount, 3)
  }

  func testRestReceivingChecksTheSizeFirst() {
    var assembler = FrameAssembler()
    assembler.append([0xA0, 0x86, 0x01, 0x00])  // 100000
    let source = ChunkedSource([UInt8](repeating: 0, count: 100_000), chunk: 65536)
    XCTAssertThrowsError(try assembler.nextMessage(limit: 8192, receivingRestWith: source.receive))
    {
      XCTAssertEqual($0 as? TransportError, .frameTooLarge(size: 100_000, limit: 8192))
    }
    XCTAssertEqual(source.calls, 0)
  }

  func testRestReceivingEndOfStreamMidMessage() {
    let message = patternMessage(tag: 1, length: 50_000)
    var assembler = FrameAssembler()
    assembler.append(message.prefix(100))
    let source = ChunkedSource(message[100..<20_000], chunk: 4096)
    XCTAssertThrowsError(try assembler.nextMessage(limit: 65536, receivingRestWith: source.receive))
    {
      XCTAssertEqual($0 as? TransportError, .truncatedMessage(bufferedBytes: 20_000))
    }
  }

  func testRestReceivingPassesReceiveErrorsOn() {
    var assembler = FrameAssembler()
    assembler.append(patternMessage(tag: 1, length: 50_000).prefix(10))
    XCTAssertThrowsError(
      try assembler.nextMessage(limit: 65536) { (_) throws(TransportError) in throw .closed }
    ) {
      XCTAssertEqual($0 as? TransportError, .closed)
    }
  }

  /// Bytes written in place (a decrypted record) join the buffer as appended ones do; a fill
  /// that throws appends nothing.
  func testAppendingInPlace() throws {
    let message = patternMessage(tag: 4, length: 3000)
    var assembler = FrameAssembler()
    assembler.append(message.prefix(100))
    try assembler.append(count: message.count - 100) { (buffer) throws(TransportError) in
      message[100...].withUnsafeBytes { buffer.copyMemory(from: $0) }
    }
    XCTAssertThrowsError(
      try assembler.append(count: 50) { (_) throws(TransportError) in throw .closed })
    XCTAssertEqual(try assembler.nextMessage(limit: 65536), message)
    XCTAssertEqual(assembler.bufferedByteCount, 0)
  }

  func testDrain() {
    var assembler = FrameAssembler()
    assembler.append([1, 2, 3])
    XCTAssertEqual(assembler.drain(), [1, 2, 3])
    XCTAssertEqual(assembler.bufferedByteCount, 0)
  }
}

final class SDUSegmenterTests: XCTestCase {
  func testSegmentationProperty() {
    var generator = SeededGenerator(seed: 42)
    for _ in 0..<500 {
      let length = Int.random(in: 7...3000, using: &generator)
      let limit = Int.random(in: 1...600, using: &generator)
      let message = makeMessage(
        tag: 7,
        payload: (0..<(length - 7)).map { _ in UInt8.random(in: 0...255, using: &generator) }
      )
      let segments = SDUSegmenter.segments(of: message, limit: limit)
      XCTAssertTrue(segments.allSatisfy { $0.count <= limit && !$0.isEmpty })
      XCTAssertTrue(segments.dropLast().allSatisfy { $0.count == limit })
      XCTAssertEqual(Array(segments.joined()), message)
      XCTAssertEqual(segments.count, (message.count + limit - 1) / limit)
    }
  }

  func testNoSDUMixesMessages() {
    // Segmenting messages one by one and concatenating the SDU lists: every SDU lies inside
    // exactly one message.
    let messages = (0..<50).map { patternMessage(tag: UInt16($0), length: $0 * 13) }
    var boundaries: Set<Int> = [0]
    var offset = 0
    for message in messages {
      offset += message.count
      boundaries.insert(offset)
    }
    var position = 0
    for message in messages {
      for sdu in SDUSegmenter.segments(of: message, limit: 64) {
        let end = position + sdu.count
        XCTAssertTrue(boundaries.filter { $0 > position && $0 < end }.isEmpty)
        position = end
      }
    }
    XCTAssertEqual(position, offset)
  }

  func testSmallMessageIsOneSDU() {
    let message = makeMessage(tag: 1, payload: [1, 2])
    XCTAssertEqual(SDUSegmenter.segments(of: message, limit: 245).map(Array.init), [message])
    XCTAssertTrue(SDUSegmenter.segments(of: [], limit: 245).isEmpty)
  }
}

/// SplitMix64, so failures are reproducible.
struct SeededGenerator: RandomNumberGenerator {
  var state: UInt64
  init(seed: UInt64) { state = seed }
  mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }
}
