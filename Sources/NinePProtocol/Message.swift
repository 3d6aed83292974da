/// The 9P2000 message type byte.
public enum MessageType: UInt8, Sendable, CaseIterable, CustomStringConvertible {
  case tversion = 100, rversion, tauth, rauth, tattach, rattach
  case terror, rerror, tflush, rflush, twalk, rwalk, topen, ropen
  case tcreate, rcreate, tread, rread, twrite, rwrite, tclunk, rclunk
  case tremove, rremove, tstat, rstat, twstat, rwstat

  /// True for requests (T-messages), false for replies.
  public var isRequest: Bool { rawValue % 2 == 0 }

  public var description: String {
    let names = [
      "Tversion", "Rversion", "Tauth", "Rauth", "Tattach", "Rattach", "Terror", "Rerror",
      "Tflush", "Rflush", "Twalk", "Rwalk", "Topen", "Ropen", "Tcreate", "Rcreate", "Tread",
      "Rread", "Twrite", "Rwrite", "Tclunk", "Rclunk", "Tremove", "Rremove", "Tstat", "Rstat",
      "Twstat", "Rwstat",
    ]
    return names[Int(rawValue) - 100]
  }
}

/// A 9P2000 tag. `NOTAG` is used only by Tversion.
public typealias Tag = UInt16
/// A 9P2000 fid. `NOFID` means "no fid" (Tattach without authentication).
public typealias Fid = UInt32

public enum NineP {
  public static let noTag: Tag = 0xFFFF
  public static let noFid: Fid = 0xFFFF_FFFF
  public static let version = "9P2000"
  /// Header bytes of every message: `size[4] type[1] tag[2]`.
  public static let headerSize = 7
  /// Bytes of an Rread or Twrite that are not data (`size type tag count` and Twrite's
  /// `fid offset`): a Tread may ask for at most msize - 11, a Twrite carry at most msize - 23.
  public static let readOverhead = 11
  public static let writeOverhead = 23
  /// Most names (or qids) one walk may carry.
  public static let maxWalkElements = 16
  /// The msize a client asks for and a server grants on a multiplexing link: a megabyte of
  /// data (the most one FUSE read or write carries) plus the 24-byte I/O header, so each
  /// request of the kernel is one Tread or Twrite.
  public static let defaultMessageSize = (1 << 20) + 24
}

/// One 9P2000 message, T or R, without its tag.
public enum Message: Hashable, Sendable {
  case tversion(msize: UInt32, version: String)
  case rversion(msize: UInt32, version: String)
  case tauth(afid: Fid, uname: String, aname: String)
  case rauth(aqid: Qid)
  case tattach(fid: Fid, afid: Fid, uname: String, aname: String)
  case rattach(qid: Qid)
  case rerror(ename: String)
  case tflush(oldtag: Tag)
  case rflush
  case twalk(fid: Fid, newfid: Fid, names: [String])
  case rwalk(qids: [Qid])
  case topen(fid: Fid, mode: OpenMode)
  case ropen(qid: Qid, iounit: UInt32)
  case tcreate(fid: Fid, name: String, perm: FileMode, mode: OpenMode)
  case rcreate(qid: Qid, iounit: UInt32)
  case tread(fid: Fid, offset: UInt64, count: UInt32)
  /// The data read. Decoded, it is a view into the received frame (no copy), so it can be
  /// handed on as it is; it keeps the frame alive while it lives.
  case rread(data: ArraySlice<UInt8>)
  /// The data to write. Like Rread's, it may be a view (into the caller's buffer, or into the
  /// received frame once decoded), so a large write is never copied just to be framed.
  case twrite(fid: Fid, offset: UInt64, data: ArraySlice<UInt8>)
  case rwrite(count: UInt32)
  case tclunk(fid: Fid)
  case rclunk
  case tremove(fid: Fid)
  case rremove
  case tstat(fid: Fid)
  case rstat(stat: Stat)
  case twstat(fid: Fid, stat: Stat)
  case rwstat

  public var type: MessageType {
    switch self {
    case .tversion: .tversion
    case .rversion: .rversion
    case .tauth: .tauth
    case .rauth: .rauth
    case .tattach: .tattach
    case .rattach: .rattach
    case .rerror: .rerror
    case .tflush: .tflush
    case .rflush: .rflush
    case .twalk: .twalk
    case .rwalk: .rwalk
    case .topen: .topen
    case .ropen: .ropen
    case .tcreate: .tcreate
    case .rcreate: .rcreate
    case .tread: .tread
    case .rread: .rread
    case .twrite: .twrite
    case .rwrite: .rwrite
    case .tclunk: .tclunk
    case .rclunk: .rclunk
    case .tremove: .tremove
    case .rremove: .rremove
    case .tstat: .tstat
    case .rstat: .rstat
    case .twstat: .twstat
    case .rwstat: .rwstat
    }
  }
}

/// Limits applied while decoding a frame.
public struct DecodeLimits: Sendable {
  /// Largest frame accepted, size prefix included.
  public var maxFrameSize: Int
  public init(maxFrameSize: Int) { self.maxFrameSize = maxFrameSize }
  /// No limit beyond the 32-bit size field: for tests and trusted input only.
  public static let unbounded = DecodeLimits(maxFrameSize: Int(UInt32.max))
}

extension Message {
  /// The first bytes of an Rread frame with `tag` carrying `count` bytes of data: size prefix,
  /// type, tag and count, for a sender that supplies the data itself.
  public static func rreadHeader(tag: Tag, count: Int) -> [UInt8] {
    var writer = WireWriter(capacity: NineP.readOverhead)
    writer.write(UInt32(clamping: NineP.readOverhead + count))
    writer.write(MessageType.rread.rawValue)
    writer.write(tag)
    writer.write(UInt32(clamping: count))
    return writer.bytes
  }

  /// The first bytes of a Twrite frame with `tag` carrying `count` bytes of data: size prefix,
  /// type, tag, fid, offset and count, for a sender that sends the data from where it lies.
  /// Followed by the data, it is byte for byte what `encoded(tag:)` makes of the Twrite.
  public static func twriteHeader(tag: Tag, fid: Fid, offset: UInt64, count: Int) -> [UInt8] {
    var writer = WireWriter(capacity: NineP.writeOverhead)
    writer.write(UInt32(clamping: NineP.writeOverhead + count))
    writer.write(MessageType.twrite.rawValue)
    writer.write(tag)
    writer.write(fid)
    writer.write(offset)
    writer.write(UInt32(clamping: count))
    return writer.bytes
  }
}

extension Message {
  /// Encodes the message with `tag` into one frame, size prefix included.
  public func encoded(tag: Tag) -> [UInt8] {
    var writer = WireWriter(capacity: encodedCapacity)
    writer.write(UInt32(0))
    writer.write(type.rawValue)
    writer.write(tag)
    switch self {
    case .tversion(let msize, let version), .rversion(let msize, let version):
      writer.write(msize)
      writer.write(version)
    case .tauth(let afid, let uname, let aname):
      writer.write(afid)
      writer.write(uname)
      writer.write(aname)
    case .rauth(let qid), .rattach(let qid):
      writer.write(qid)
    case .tattach(let fid, let afid, let uname, let aname):
      writer.write(fid)
      writer.write(afid)
      writer.write(uname)
      writer.write(aname)
    case .rerror(let ename):
      writer.write(ename)
    case .tflush(let oldtag):
      writer.write(oldtag)
    case .rflush, .rclunk, .rremove, .rwstat:
      break
    case .twalk(let fid, let newfid, let names):
      writer.write(fid)
      writer.write(newfid)
      writer.write(UInt16(truncatingIfNeeded: names.count))
      for name in names { writer.write(name) }
    case .rwalk(let qids):
      writer.write(UInt16(truncatingIfNeeded: qids.count))
      for qid in qids { writer.write(qid) }
    case .topen(let fid, let mode):
      writer.write(fid)
      writer.write(mode.rawValue)
    case .ropen(let qid, let iounit), .rcreate(let qid, let iounit):
      writer.write(qid)
      writer.write(iounit)
    case .tcreate(let fid, let name, let perm, let mode):
      writer.write(fid)
      writer.write(name)
      writer.write(perm.rawValue)
      writer.write(mode.rawValue)
    case .tread(let fid, let offset, let count):
      writer.write(fid)
      writer.write(offset)
      writer.write(count)
    case .rread(let data):
      writer.write(UInt32(truncatingIfNeeded: data.count))
      writer.write(contentsOf: data)
    case .twrite(let fid, let offset, let data):
      writer.write(fid)
      writer.write(offset)
      writer.write(UInt32(truncatingIfNeeded: data.count))
      writer.write(contentsOf: data)
    case .rwrite(let count):
      writer.write(count)
    case .tclunk(let fid), .tremove(let fid), .tstat(let fid):
      writer.write(fid)
    case .rstat(let stat):
      writer.write(UInt16(truncatingIfNeeded: stat.wireSize))
      writer.write(stat)
    case .twstat(let fid, let stat):
      writer.write(fid)
      writer.write(UInt16(truncatingIfNeeded: stat.wireSize))
      writer.write(stat)
    }
    writer.patch(UInt32(truncatingIfNeeded: writer.bytes.count), at: 0)
    return writer.bytes
  }

  private var encodedCapacity: Int {
    switch self {
    case .rread(let data): return data.count + 32
    case .twrite(_, _, let data): return data.count + 32
    default: return 64
    }
  }

  /// Decodes one whole frame (size prefix included).
  ///
  /// Checks the size prefix against the bytes given and `limits`, every field against the end
  /// of the frame, walk element counts, stat sizes, and that nothing is left over.
  public static func decode(_ frame: [UInt8], limits: DecodeLimits) throws(ProtocolError) -> (
    tag: Tag, message: Message
  ) {
    guard frame.count >= NineP.headerSize else { throw .frameTooShort(size: frame.count) }
    var reader = WireReader(frame)
    let declared = Int(try reader.readUInt32("size"))
    guard declared <= limits.maxFrameSize else {
      throw .frameTooLarge(size: declared, limit: limits.maxFrameSize)
    }
    guard declared == frame.count else {
      throw .sizeMismatch(declared: declared, actual: frame.count)
    }
    let rawType = try reader.readUInt8("type")
    guard let type = MessageType(rawValue: rawType), type != .terror else {
      throw .unknownType(rawType)
    }
    reader.message = type.description
    let tag = try reader.readUInt16("tag")
    let message = try decodeBody(type, &reader)
    try reader.expectEnd(context: type.description)
    return (tag, message)
  }

  private static func decodeBody(_ type: MessageType, _ r: inout WireReader) throws(ProtocolError)
    -> Message
  {
    switch type {
    case .tversion:
      return .tversion(msize: try r.readUInt32("msize"), version: try r.readString("version"))
    case .rversion:
      return .rversion(msize: try r.readUInt32("msize"), version: try r.readString("version"))
    case .tauth:
      return .tauth(
        afid: try r.readUInt32("afid"), uname: try r.readString("uname"),
        aname: try r.readString("aname"))
    case .rauth:
      return .rauth(aqid: try r.readQid("aqid"))
    case .tattach:
      return .tattach(
        fid: try r.readUInt32("fid"), afid: try r.readUInt32("afid"),
        uname: try r.readString("uname"), aname: try r.readString("aname"))
    case .rattach:
      return .rattach(qid: try r.readQid("qid"))
    case .terror:
      throw .unknownType(type.rawValue)
    case .rerror:
      return .rerror(ename: try r.readString("ename", lossy: true))
    case .tflush:
      return .tflush(oldtag: try r.readUInt16("oldtag"))
    case .rflush:
      return .rflush
    case .twalk:
      let fid = try r.readUInt32("fid")
      let newfid = try r.readUInt32("newfid")
      let count = Int(try r.readUInt16("nwname"))
      guard count <= NineP.maxWalkElements else { throw .tooManyWalkElements(count) }
      var names: [String] = []
      names.reserveCapacity(count)
      for _ in 0..<count { names.append(try r.readString("wname")) }
      return .twalk(fid: fid, newfid: newfid, names: names)
    case .rwalk:
      let count = Int(try r.readUInt16("nwqid"))
      guard count <= NineP.maxWalkElements else { throw .tooManyWalkElements(count) }
      var qids: [Qid] = []
      qids.reserveCapacity(count)
      for _ in 0..<count { qids.append(try r.readQid("wqid")) }
      return .rwalk(qids: qids)
    case .topen:
      return .topen(fid: try r.readUInt32("fid"), mode: OpenMode(rawValue: try r.readUInt8("mode")))
    case .ropen:
      return .ropen(qid: try r.readQid("qid"), iounit: try r.readUInt32("iounit"))
    case .tcreate:
      return .tcreate(
        fid: try r.readUInt32("fid"), name: try r.readString("name"),
        perm: FileMode(rawValue: try r.readUInt32("perm")),
        mode: OpenMode(rawValue: try r.readUInt8("mode")))
    case .rcreate:
      return .rcreate(qid: try r.readQid("qid"), iounit: try r.readUInt32("iounit"))
    case .tread:
      return .tread(
        fid: try r.readUInt32("fid"), offset: try r.readUInt64("offset"),
        count: try r.readUInt32("count"))
    case .rread:
      let count = Int(try r.readUInt32("count"))
      return .rread(data: try r.readSlice(count, "data"))
    case .twrite:
      let fid = try r.readUInt32("fid")
      let offset = try r.readUInt64("offset")
      let count = Int(try r.readUInt32("count"))
      return .twrite(fid: fid, offset: offset, data: try r.readSlice(count, "data"))
    case .rwrite:
      return .rwrite(count: try r.readUInt32("count"))
    case .tclunk:
      return .tclunk(fid: try r.readUInt32("fid"))
    case .rclunk:
      return .rclunk
    case .tremove:
      return .tremove(fid: try r.readUInt32("fid"))
    case .rremove:
      return .rremove
    case .tstat:
      return .tstat(fid: try r.readUInt32("fid"))
    case .rstat:
      return .rstat(stat: try readSizedStat(&r, context: "Rstat"))
    case .twstat:
      let fid = try r.readUInt32("fid")
      return .twstat(fid: fid, stat: try readSizedStat(&r, context: "Twstat"))
    case .rwstat:
      return .rwstat
    }
  }

  /// Rstat and Twstat wrap the stat in an extra `n[2]` count, which must equal the stat's size.
  private static func readSizedStat(_ r: inout WireReader, context: String) throws(ProtocolError)
    -> Stat
  {
    let outer = Int(try r.readUInt16("nstat"))
    guard outer == r.remaining else {
      throw .statSizeMismatch(declared: outer, actual: r.remaining, context: context)
    }
    return try r.readStat(context: context)
  }
}

extension Message: CustomStringConvertible {
  /// A compact trace line, as plan9port's `fcall` printer would show it.
  public var description: String {
    switch self {
    case .tversion(let msize, let version): return "Tversion msize=\(msize) version=\(version)"
    case .rversion(let msize, let version): return "Rversion msize=\(msize) version=\(version)"
    case .tauth(let afid, let uname, let aname):
      return "Tauth afid=\(afid) uname=\(uname) aname=\(aname)"
    case .rauth(let qid): return "Rauth qid=\(qid)"
    case .tattach(let fid, let afid, let uname, let aname):
      return "Tattach fid=\(fid) afid=\(afid) uname=\(uname) aname=\(aname)"
    case .rattach(let qid): return "Rattach qid=\(qid)"
    case .rerror(let ename): return "Rerror ename=\(ename)"
    case .tflush(let oldtag): return "Tflush oldtag=\(oldtag)"
    case .rflush: return "Rflush"
    case .twalk(let fid, let newfid, let names):
      return "Twalk fid=\(fid) newfid=\(newfid) names=\(names.joined(separator: "/"))"
    case .rwalk(let qids): return "Rwalk nqid=\(qids.count)"
    case .topen(let fid, let mode): return "Topen fid=\(fid) mode=\(mode)"
    case .ropen(let qid, let iounit): return "Ropen qid=\(qid) iounit=\(iounit)"
    case .tcreate(let fid, let name, let perm, let mode):
      return "Tcreate fid=\(fid) name=\(name) perm=\(String(perm.rawValue, radix: 8)) mode=\(mode)"
    case .rcreate(let qid, let iounit): return "Rcreate qid=\(qid) iounit=\(iounit)"
    case .tread(let fid, let offset, let count):
      return "Tread fid=\(fid) offset=\(offset) count=\(count)"
    case .rread(let data): return "Rread count=\(data.count)"
    case .twrite(let fid, let offset, let data):
      return "Twrite fid=\(fid) offset=\(offset) count=\(data.count)"
    case .rwrite(let count): return "Rwrite count=\(count)"
    case .tclunk(let fid): return "Tclunk fid=\(fid)"
    case .rclunk: return "Rclunk"
    case .tremove(let fid): return "Tremove fid=\(fid)"
    case .rremove: return "Rremove"
    case .tstat(let fid): return "Tstat fid=\(fid)"
    case .rstat(let stat): return "Rstat name=\(stat.name) qid=\(stat.qid)"
    case .twstat(let fid, let stat): return "Twstat fid=\(fid) name=\(stat.name)"
    case .rwstat: return "Rwstat"
    }
  }
}
