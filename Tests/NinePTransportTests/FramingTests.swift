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
