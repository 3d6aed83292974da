/// A 9P2000 directory entry (`stat`), as returned by Tstat, directory reads and sent by Twstat.
public struct Stat: Hashable, Sendable {
  public var type: UInt16
  public var dev: UInt32
  public var qid: Qid
  public var mode: FileMode
  public var atime: UInt32
  public var mtime: UInt32
  public var length: UInt64
  public var name: String
  public var uid: String
  public var gid: String
  public var muid: String

  public init(
    type: UInt16 = 0, dev: UInt32 = 0, qid: Qid, mode: FileMode, atime: UInt32 = 0,
    mtime: UInt32 = 0, length: UInt64 = 0, name: String, uid: String = "", gid: String = "",
    muid: String = ""
  ) {
    self.type = type
    self.dev = dev
    self.qid = qid
    self.mode = mode
    self.atime = atime
    self.mtime = mtime
    self.length = length
    self.name = name
    self.uid = uid
    self.gid = gid
    self.muid = muid
  }

  /// A stat whose every field means "don't change" in a Twstat (all ones, empty strings).
  public static var unchanged: Stat {
    Stat(
      type: .max, dev: .max, qid: Qid(type: QidType(rawValue: .max), version: .max, path: .max),
      mode: FileMode(rawValue: .max), atime: .max, mtime: .max, length: .max, name: "")
  }

  /// Byte size of the encoded entry, including its own two-byte size field.
  public var wireSize: Int {
    2 + 2 + 4 + Qid.wireSize + 4 + 4 + 4 + 8 + 2 + name.utf8.count + 2 + uid.utf8.count + 2
      + gid.utf8.count + 2 + muid.utf8.count
  }

  /// The encoded entry, as it appears in a directory read.
  public func encoded() -> [UInt8] {
    var writer = WireWriter(capacity: wireSize)
    writer.write(self)
    return writer.bytes
  }

  /// Decodes the concatenated entries of a directory read.
  ///
  /// Only whole entries are accepted: a truncated or inconsistent entry (or data that is not
  /// stat entries at all, as a buggy union mount can return) throws.
  public static func decodeDirectory(_ bytes: [UInt8]) throws(ProtocolError) -> [Stat] {
    var reader = WireReader(bytes)
    var entries: [Stat] = []
    while reader.remaining > 0 {
      entries.append(try reader.readStat(context: "directory entry"))
    }
    return entries
  }

  /// Decodes a directory read's entries one at a time, keeping the good ones.
  ///
  /// An entry whose contents are bad (a name that is not UTF-8, a size field that disagrees
  /// with its fields) is skipped by its size field and reported in `problems`; a size field
  /// running past the data ends the decoding, since nothing after it can be found.
  public static func decodeDirectoryEntries(
    _ bytes: [UInt8]
  ) -> (entries: [Stat], problems: [ProtocolError]) {
    var entries: [Stat] = []
    var problems: [ProtocolError] = []
    var position = 0
    while position < bytes.count {
      guard bytes.count - position >= 2 else {
        problems.append(.truncated(field: "size", message: "directory entry"))
        break
      }
      let declared = Int(bytes[position]) | Int(bytes[position + 1]) << 8
      let end = position + 2 + declared
      guard end <= bytes.count else {
        problems.append(.truncated(field: "stat body", message: "directory entry"))
        break
      }
      do {
        entries.append(try decode(Array(bytes[position..<end])))
      } catch {
        problems.append(error)
      }
      position = end
    }
    return (entries, problems)
  }

  /// Decodes exactly one entry (as in Rstat's payload after its `n[2]` count).
  public static func decode(_ bytes: [UInt8]) throws(ProtocolError) -> Stat {
    var reader = WireReader(bytes)
    let stat = try reader.readStat(context: "stat")
    try reader.expectEnd(context: "stat")
    return stat
  }
}
