import Foundation
import Glibc
import XCTest

@testable import NinePProtocol

final class CodecTests: XCTestCase {
  let qid = Qid(type: .directory, version: 7, path: 0x1234_5678_9ABC)
  var stat: Stat {
    Stat(
      type: 1, dev: 2, qid: qid, mode: FileMode(permissions: 0o755, .directory), atime: 3,
      mtime: 4, length: 5, name: "lobby", uid: "zephyr", gid: "zephyr", muid: "glenda")
  }

  var everyMessage: [Message] {
    [
      .tversion(msize: 8192, version: "9P2000"),
      .rversion(msize: 4096, version: "9P2000"),
      .tauth(afid: 3, uname: "glenda", aname: ""),
      .rauth(aqid: Qid(type: .auth, path: 3)),
      .tattach(fid: 0, afid: NineP.noFid, uname: "glenda", aname: "/srv/bbs"),
      .rattach(qid: qid),
      .rerror(ename: "file not found"),
      .tflush(oldtag: 9),
      .rflush,
      .twalk(fid: 0, newfid: 1, names: ["chat", "lobby"]),
      .twalk(fid: 0, newfid: 1, names: []),
      .rwalk(qids: [qid, Qid(path: 9)]),
      .topen(fid: 1, mode: .read),
      .topen(fid: 1, mode: OpenMode.write.truncating),
      .ropen(qid: qid, iounit: 8168),
      .tcreate(fid: 1, name: "1738005432123", perm: FileMode(permissions: 0o644), mode: .write),
      .rcreate(qid: Qid(path: 2_838_644_539), iounit: 0),
      .tread(fid: 1, offset: 1 << 40, count: 8181),
      .rread(data: ArraySlice("[00:00:01] alice: hi\n".utf8)),
      .rread(data: []),
      .twrite(fid: 1, offset: 0, data: ArraySlice("lobby:hello".utf8)),
      .rwrite(count: 11),
      .tclunk(fid: 1),
      .rclunk,
      .tremove(fid: 1),
      .rremove,
      .tstat(fid: 1),
      .rstat(stat: stat),
      .twstat(fid: 1, stat: .unchanged),
      .rwstat,
    ]
  }

  func testEveryMessageRoundTrips() throws {
    var seen = Set<MessageType>()
    for (index, message) in everyMessage.enumerated() {
      let tag = Tag(index)
      let frame = message.encoded(tag: tag)
      XCTAssertEqual(Int(frame[0]) | Int(frame[1]) << 8, frame.count)
      let decoded = try Message.decode(frame, limits: .unbounded)
      XCTAssertEqual(decoded.tag, tag)
      XCTAssertEqual(decoded.message, message)
      seen.insert(message.type)
    }
    XCTAssertEqual(seen.count, MessageType.allCases.count - 1, "every type but Terror")
  }

  func testKnownWireBytes() throws {
    // Tversion NOTAG msize 8192 "9P2000", as in every 9P trace.
    let frame = Message.tversion(msize: 8192, version: "9P2000").encoded(tag: NineP.noTag)
    XCTAssertEqual(
      frame,
      [19, 0, 0, 0, 100, 0xFF, 0xFF, 0x00, 0x20, 0, 0, 6, 0] + Array("9P2000".utf8))
  }

  func testRejectsShortFrames() {
    for size in 0..<7 {
      XCTAssertThrowsError(try Message.decode(Array(repeating: 0, count: size), limits: .unbounded))
      { error in
        XCTAssertEqual(error as? ProtocolError, .frameTooShort(size: size))
      }
    }
  }

  /// Rread's data is a view into the frame it came in (no copy): its indices are the frame's.
  func testRreadDataIsAViewIntoTheFrame() throws {
    let payload = (0..<5000).map { UInt8(truncatingIfNeeded: $0) }
    let frame = Message.rread(data: payload[...]).encoded(tag: 9)
    let (tag, message) = try Message.decode(frame, limits: .unbounded)
    XCTAssertEqual(tag, 9)
    guard case .rread(let data) = message else { return XCTFail("not an Rread: \(message)") }
    XCTAssertEqual(data.indices, NineP.readOverhead..<frame.count)
    XCTAssertEqual(Array(data), payload)
    XCTAssertEqual(
      frame.withUnsafeBufferPointer { $0.baseAddress! + NineP.readOverhead },
      data.withUnsafeBufferPointer { $0.baseAddress! }, "the data shares the frame's storage")
  }

  /// Twrite's header, followed by the data, is byte for byte the whole encoding, for any data
  /// slice (a sender gathers the two instead of copying the data into a frame).
  func testTwriteHeaderPlusDataIsTheEncoding() {
    let buffer = (0..<70_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
    for range in [0..<0, 0..<1, 3..<4099, 1000..<70_000] {
      let data = buffer[range]
      let message = Message.twrite(fid: 0xDEAD_BEEF, offset: 1 << 40 | 5, data: data)
      let header = Message.twriteHeader(
        tag: 513, fid: 0xDEAD_BEEF, offset: 1 << 40 | 5, count: data.count)
      XCTAssertEqual(header.count, NineP.writeOverhead)
      XCTAssertEqual(header + data, message.encoded(tag: 513), "\(range)")
    }
  }

  /// Twrite's data is a view into the frame it came in, as Rread's is.
  func testTwriteDataIsAViewIntoTheFrame() throws {
    let payload = (0..<5000).map { UInt8(truncatingIfNeeded: $0) }
    let frame = Message.twrite(fid: 3, offset: 77, data: payload[...]).encoded(tag: 4)
    let (tag, message) = try Message.decode(frame, limits: .unbounded)
    XCTAssertEqual(tag, 4)
    guard case .twrite(3, 77, let data) = message else { return XCTFail("not it: \(message)") }
    XCTAssertEqual(data.indices, NineP.writeOverhead..<frame.count)
    XCTAssertEqual(Array(data), payload)
    XCTAssertEqual(
      frame.withUnsafeBufferPointer { $0.baseAddress! + NineP.writeOverhead },
      data.withUnsafeBufferPointer { $0.baseAddress! }, "the data shares the frame's storage")
  }

  /// A Twrite whose count says more or less than the frame carries is refused, whatever the
  /// count (up to the largest a 32-bit field can claim).
  func testRejectsTwriteCountDisagreeingWithFrame() {
    let frame = Message.twrite(fid: 1, offset: 0, data: ArraySlice(repeating: 9, count: 100))
      .encoded(tag: 1)
    for count: UInt32 in [0, 1, 99, 101, 4096, 0x7FFF_FFFF, .max] {
      var bad = frame
      for index in 0..<4 { bad[19 + index] = UInt8(truncatingIfNeeded: count >> (8 * index)) }
      XCTAssertThrowsError(try Message.decode(bad, limits: .unbounded), "count \(count)") {
        if count < 100 {
          XCTAssertEqual(
            $0 as? ProtocolError, .trailingBytes(count: 100 - Int(count), message: "Twrite"))
        } else {
          XCTAssertEqual($0 as? ProtocolError, .truncated(field: "data", message: "Twrite"))
        }
      }
    }
  }

  func testRejectsFramesOverTheLimit() {
    let frame = Message.rread(data: ArraySlice(repeating: 1, count: 100)).encoded(tag: 1)
    XCTAssertThrowsError(try Message.decode(frame, limits: DecodeLimits(maxFrameSize: 64))) {
      XCTAssertEqual($0 as? ProtocolError, .frameTooLarge(size: frame.count, limit: 64))
    }
  }

  func testRejectsSizeMismatch() {
    var frame = Message.rclunk.encoded(tag: 1)
    frame.append(0)
    XCTAssertThrowsError(try Message.decode(frame, limits: .unbounded)) {
      XCTAssertEqual($0 as? ProtocolError, .sizeMismatch(declared: 7, actual: 8))
    }
  }

  func testRejectsUnknownTypeAndTerror() {
    for type: UInt8 in [0, 99, 106, 128, 255] {
      let frame: [UInt8] = [7, 0, 0, 0, type, 1, 0]
      XCTAssertThrowsError(try Message.decode(frame, limits: .unbounded)) {
        XCTAssertEqual($0 as? ProtocolError, .unknownType(type))
      }
    }
  }

  /// Every proper prefix of every message, with the size prefix fixed up, must fail cleanly.
  func testRejectsEveryTruncation() {
    for message in everyMessage {
      let frame = message.encoded(tag: 1)
      for cut in NineP.headerSize..<frame.count {
        var short = Array(frame[..<cut])
        let size = UInt32(cut)
        for index in 0..<4 { short[index] = UInt8(truncatingIfNeeded: size >> UInt32(index * 8)) }
        XCTAssertThrowsError(
          try Message.decode(short, limits: .unbounded), "\(message) cut at \(cut)")
      }
    }
  }

  func testRejectsTrailingBytes() {
    var frame = Message.tclunk(fid: 1).encoded(tag: 1)
    frame.append(contentsOf: [0, 0])
    frame[0] = UInt8(frame.count)
    XCTAssertThrowsError(try Message.decode(frame, limits: .unbounded)) {
      XCTAssertEqual($0 as? ProtocolError, .trailingBytes(count: 2, message: "Tclunk"))
    }
  }

  func testRejectsMoreThanSixteenWalkNames() {
    let names = (0..<17).map { "n\($0)" }
    let frame = Message.twalk(fid: 0, newfid: 1, names: names).encoded(tag: 1)
    XCTAssertThrowsError(try Message.decode(frame, limits: .unbounded)) {
      XCTAssertEqual($0 as? ProtocolError, .tooManyWalkElements(17))
    }
    let qids = Array(repeating: qid, count: 17)
    XCTAssertThrowsError(
      try Message.decode(Message.rwalk(qids: qids).encoded(tag: 1), limits: .unbounded))
  }

  func testRejectsStringLengthPastFrame() {
    // Rversion whose version string claims 200 bytes.
    var frame = Message.rversion(msize: 8192, version: "9P2000").encoded(tag: 1)
    frame[11] = 200
    XCTAssertThrowsError(try Message.decode(frame, limits: .unbounded)) {
      XCTAssertEqual($0 as? ProtocolError, .truncated(field: "version", message: "Rversion"))
    }
  }

  func testRejectsInvalidUTF8InNamesButKeepsErrorText() throws {
    var frame = Message.twalk(fid: 0, newfid: 1, names: ["ab"]).encoded(tag: 1)
    frame[frame.count - 1] = 0xFF
    XCTAssertThrowsError(try Message.decode(frame, limits: .unbounded))
    var error = Message.rerror(ename: "ab").encoded(tag: 1)
    error[error.count - 1] = 0xFF
    guard case .rerror(let text) = try Message.decode(error, limits: .unbounded).message else {
      return XCTFail("not an Rerror")
    }
    XCTAssertTrue(text.hasPrefix("a"))
  }

  func testRejectsInconsistentStatSizes() {
    // Rstat whose inner stat size is one larger than its fields.
    var frame = Message.rstat(stat: stat).encoded(tag: 1)
    frame[9] &+= 1
    XCTAssertThrowsError(try Message.decode(frame, limits: .unbounded))
    // Rstat whose outer n[2] disagrees with the stat.
    var outer = Message.rstat(stat: stat).encoded(tag: 1)
    outer[7] &+= 1
    XCTAssertThrowsError(try Message.decode(outer, limits: .unbounded)) {
      guard case .statSizeMismatch = $0 as? ProtocolError else {
        return XCTFail("wrong error \($0)")
      }
    }
  }

  func testDirectoryDecoding() throws {
    let entries = [
      stat, Stat(qid: Qid(path: 1), mode: FileMode(permissions: 0o444), name: "users"),
    ]
    let bytes = entries.flatMap { $0.encoded() }
    XCTAssertEqual(try Stat.decodeDirectory(bytes), entries)
    XCTAssertEqual(try Stat.decodeDirectory([]), [])
    // A partial entry is refused, as is plain text from a buggy union mount.
    XCTAssertThrowsError(try Stat.decodeDirectory(Array(bytes.dropLast())))
    XCTAssertThrowsError(try Stat.decodeDirectory(Array("lobby\npost\nusers\n".utf8)))
  }

  func testOpenModeAndFileMode() {
    XCTAssertEqual(OpenMode.write.truncating.rawValue, 0x11)
    XCTAssertTrue(OpenMode.readWrite.allowsReading && OpenMode.readWrite.allowsWriting)
    XCTAssertFalse(OpenMode.write.allowsReading)
    XCTAssertEqual(FileMode(permissions: 0o1755, .directory).rawValue, 0x8000_01ED)
    XCTAssertEqual(OpenMode(rawValue: 0x51).description, "OWRITE|OTRUNC|ORCLOSE")
  }

  /// Bounded random decode: mutated and random frames must throw or decode, never crash, and
  /// whatever decodes must re-encode to a frame that decodes to the same message.
  func testRandomizedDecodeNeverCrashes() {
    var generator = SplitMix64(seed: 0x9B85)
    let seeds = everyMessage.map { $0.encoded(tag: 3) }
    var decoded = 0
    for round in 0..<20_000 {
      var frame = seeds[round % seeds.count]
      let mutations = 1 + Int(generator.next() % 4)
      for _ in 0..<mutations {
        switch generator.next() % 4 {
        case 0 where !frame.isEmpty:
          frame[Int(generator.next() % UInt64(frame.count))] = UInt8(
            truncatingIfNeeded: generator.next())
        case 1: frame.append(UInt8(truncatingIfNeeded: generator.next()))
        case 2 where frame.count > 1: frame.removeLast()
        case 3:
          frame = (0..<Int(generator.next() % 64)).map { _ in
            UInt8(truncatingIfNeeded: generator.next())
          }
        default: break
        }
      }
      if generator.next() % 2 == 0, frame.count >= 4 {
        let size = UInt32(frame.count)
        for index in 0..<4 { frame[index] = UInt8(truncatingIfNeeded: size >> UInt32(index * 8)) }
      }
      if let (tag, message) = try? Message.decode(frame, limits: DecodeLimits(maxFrameSize: 8192)) {
        decoded += 1
        let again = try? Message.decode(message.encoded(tag: tag), limits: .unbounded)
        XCTAssertEqual(again?.message, message)
      }
    }
    XCTAssertGreaterThan(decoded, 100, "the mutations should leave some frames valid")
  }
}

/// Deterministic generator so a failure reproduces.
struct SplitMix64: RandomNumberGenerator {
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

/// The fuzzer's seed corpus (fuzz/corpus/decode) must be valid input, or fuzzing starts from
/// noise.
final class FuzzCorpusTests: XCTestCase {
  func testSeedCorpusDecodes() throws {
    let directory = URL(fileURLWithPath: #filePath)
      .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
      .appendingPathComponent("fuzz/corpus/decode")
    let names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
    XCTAssertGreaterThanOrEqual(names.count, 28)
    for name in names {
      let bytes = Array(try Data(contentsOf: directory.appendingPathComponent(name)))
      if name == "directory" {
        XCTAssertEqual(try Stat.decodeDirectory(bytes).map(\.name), ["lobby", "post", "users"])
      } else {
        let decoded = try Message.decode(bytes, limits: .unbounded)
        XCTAssertEqual(decoded.message.type.description.lowercased(), name)
      }
    }
  }
}
