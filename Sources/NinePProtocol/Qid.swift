/// The kind bits of a ``Qid`` (the high byte of a 9P2000 `qid.type`).
public struct QidType: OptionSet, Hashable, Sendable {
  public let rawValue: UInt8
  public init(rawValue: UInt8) { self.rawValue = rawValue }

  public static let file: QidType = []
  public static let directory = QidType(rawValue: 0x80)
  public static let appendOnly = QidType(rawValue: 0x40)
  public static let exclusive = QidType(rawValue: 0x20)
  public static let mount = QidType(rawValue: 0x10)
  public static let auth = QidType(rawValue: 0x08)
  public static let temporary = QidType(rawValue: 0x04)
}

/// The server's unique identity for a file: type, version and path (13 bytes on the wire).
public struct Qid: Hashable, Sendable, CustomStringConvertible {
  public var type: QidType
  public var version: UInt32
  public var path: UInt64

  public init(type: QidType = .file, version: UInt32 = 0, path: UInt64) {
    self.type = type
    self.version = version
    self.path = path
  }

  /// Wire size of a qid.
  public static let wireSize = 13

  public var isDirectory: Bool { type.contains(.directory) }

  public var description: String {
    "(\(String(path, radix: 16)) \(version) \(isDirectory ? "d" : "f"))"
  }
}

/// The permission and kind bits of a 9P2000 `mode`/`perm` field (`DM*` bits plus Unix permissions).
public struct FileMode: OptionSet, Hashable, Sendable {
  public let rawValue: UInt32
  public init(rawValue: UInt32) { self.rawValue = rawValue }

  public static let directory = FileMode(rawValue: 0x8000_0000)
  public static let appendOnly = FileMode(rawValue: 0x4000_0000)
  public static let exclusive = FileMode(rawValue: 0x2000_0000)
  public static let mount = FileMode(rawValue: 0x1000_0000)
  public static let auth = FileMode(rawValue: 0x0800_0000)
  public static let temporary = FileMode(rawValue: 0x0400_0000)

  /// Creates a mode from Unix permission bits (`0o644`) and optional kind bits.
  public init(permissions: UInt32, _ kind: FileMode = []) {
    self.rawValue = (permissions & 0o777) | kind.rawValue
  }

  /// The low nine Unix permission bits.
  public var permissions: UInt32 { rawValue & 0o777 }
  public var isDirectory: Bool { contains(.directory) }
}

/// The mode byte of Topen and Tcreate.
public struct OpenMode: Hashable, Sendable, CustomStringConvertible {
  public var rawValue: UInt8
  public init(rawValue: UInt8) { self.rawValue = rawValue }

  public static let read = OpenMode(rawValue: 0)
  public static let write = OpenMode(rawValue: 1)
  public static let readWrite = OpenMode(rawValue: 2)
  public static let execute = OpenMode(rawValue: 3)
  /// Truncate on open (`OTRUNC`), or-ed into one of the above.
  public static let truncateFlag: UInt8 = 0x10
  /// Remove on clunk (`ORCLOSE`).
  public static let removeOnCloseFlag: UInt8 = 0x40

  /// The access part (read, write, read-write, execute).
  public var access: UInt8 { rawValue & 3 }
  public var truncates: Bool { rawValue & Self.truncateFlag != 0 }
  public var allowsReading: Bool { access == 0 || access == 2 || access == 3 }
  public var allowsWriting: Bool { access == 1 || access == 2 }

  /// This mode with `OTRUNC` set.
  public var truncating: OpenMode { OpenMode(rawValue: rawValue | Self.truncateFlag) }

  public var description: String {
    let names = ["OREAD", "OWRITE", "ORDWR", "OEXEC"]
    var text = names[Int(access)]
    if truncates { text += "|OTRUNC" }
    if rawValue & Self.removeOnCloseFlag != 0 { text += "|ORCLOSE" }
    return text
  }
}
