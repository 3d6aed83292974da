import Foundation
import TerminalText

#if canImport(Glibc)
  import Glibc
#endif

/// The board keys a user has seen, per address, as ssh's known_hosts keeps host keys: the
/// first key a board at an address proves is pinned, and from then on that address must prove
/// the same key.
///
/// The file is `$XDG_STATE_HOME/mount9bbs/known_boards` (else
/// `~/.local/state/mount9bbs/known_boards`), one `ADDRESS ssh-ed25519 BASE64` line per pin
/// (the address percent-encoded where it holds blanks or `%`); `#` starts a comment. Deleting
/// an address's line resets its pin.
///
/// The file is read line by line, and fails closed: a line that cannot be read refuses the
/// board at its address (or, when not even its address can be read, every board not pinned
/// elsewhere in the file), naming the line, rather than dropping the pin and accepting any
/// key there. A pin file or directory others may write is refused too.
public struct BoardPins: Sendable {
  /// The pin file.
  public let path: String

  public init(path: String) { self.path = path }

  /// The user's pin file.
  public static func defaultPath(
    environment: [String: String] = ProcessInfo.processInfo.environment
  ) -> String {
    let state =
      environment["XDG_STATE_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil }
      ?? ((environment["HOME"] ?? NSHomeDirectory()) + "/.local/state")
    return state + "/mount9bbs/known_boards"
  }

  /// What a board's key is, measured against the pins.
  public enum Status: Equatable, Sendable {
    /// The address's pinned key.
    case pinned
    /// No pin for the address yet (and the key is pinned nowhere else, or only at `sameBoard`
    /// addresses).
    case new
    /// A board without a key at an address with no pin: nothing to check.
    case keyless
  }

  /// Why a board is refused.
  public enum Refusal: Error, Equatable, Sendable, CustomStringConvertible {
    /// The address's pinned key is not the one presented.
    case changed(address: String, pinned: BoardKey, presented: BoardKey, file: String)
    /// The address has a pinned key and the board presented none.
    case keyVanished(address: String, pinned: BoardKey, file: String)
    /// The key is pinned for other addresses only.
    case pinnedElsewhere(address: String, key: BoardKey, others: [String], file: String)
    /// A line of the file that may hold this address's pin cannot be read.
    case unreadableLine(address: String, line: Int, reason: String, file: String)
    /// The file or its directory may be written by others: a pin there proves nothing.
    case unsafeFile(path: String, reason: String)
    /// The board proved its key over the secure channel before, and now answers without it.
    case channelStripped(address: String, serverSaid: String, file: String)

    public var description: String {
      switch self {
      case .changed(let address, let pinned, let presented, let file):
        "the board at \(address) presents the key \(presented.fingerprint), but the key pinned "
          + "for it is \(pinned.fingerprint) (\(file)): it may be another board posing as it "
          + "or relaying it. Refusing. If that board's key was really replaced, delete the "
          + "line for \(address) from \(file) and mount again"
      case .keyVanished(let address, let pinned, let file):
        "the board at \(address) presents no board key, but it proved the key "
          + "\(pinned.fingerprint) before (\(file)): it may be another board posing as it or "
          + "relaying it. Refusing. If that board really no longer has a key, delete the line "
          + "for \(address) from \(file) and mount again"
      case .pinnedElsewhere(let address, let key, let others, let file):
        "the board at \(address) presents the key \(key.fingerprint), which is pinned for "
          + "\(others.joined(separator: ", ")) (\(file)): something at \(address) may be "
          + "relaying that board to log in as you. Refusing. If \(address) is really another "
          + "address of the same board, add it: echo "
          + "\(TerminalText.shellQuoted(Self.line(address, key))) >> \(TerminalText.shellQuoted(file))"
      case .unreadableLine(let address, let line, let reason, let file):
        "line \(line) of \(file) cannot be read (\(reason)), and it may be the pin for \(address). "
          + "Refusing. Fix or delete that line and mount again"
      case .unsafeFile(let path, let reason):
        "\(path) \(reason), so the board keys pinned in it prove nothing. Refusing. "
          + "Make it yours alone: chmod go-w \(TerminalText.shellQuoted(path))"
      case .channelStripped(let address, let said, let file):
        "the board at \(address) proved its key over the secure channel before (\(file)), and "
          + "now answers without it ('\(TerminalText.escaped(said))'): something on the way may "
          + "be stripping it to take your signature. Refusing. If that board really no longer "
          + "offers the channel, delete the line for \(address) from \(file) and mount again"
      }
    }

    static func line(_ address: String, _ key: BoardKey) -> String {
      BoardPins.line(address: address, key: key)
    }
  }

  /// A line of the file that could not be read: its number (from 1), its address if that
  /// much could be read, and why.
  public struct UnreadableLine: Equatable, Sendable {
    public let number: Int
    public let address: String?
    public let reason: String
  }

  /// The file as read: its pins, in file order, and the lines that could not be read.
  public struct Contents: Sendable {
    public var entries: [(address: String, key: BoardKey)] = []
    public var unreadable: [UnreadableLine] = []
    /// Addresses whose pin says the board proved its key over the secure channel.
    public var secure: Set<String> = []

    /// The first unreadable line that may be the pin of `address`.
    func unreadable(for address: String) -> UnreadableLine? {
      unreadable.first { $0.address == nil || $0.address == address }
    }
  }

  /// The file, line by line. A missing file has no pins. Each line is decoded on its own, so a
  /// bad byte in one line costs that line only; blank lines and `#` comments are skipped.
  public func contents() -> Contents {
    guard let data = FileManager.default.contents(atPath: path) else { return Contents() }
    var contents = Contents()
    for (index, raw) in data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
      .enumerated()
    {
      let bytes = raw.last == UInt8(ascii: "\r") ? raw.dropLast() : raw
      let trimmed = bytes.drop { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }
      guard !trimmed.isEmpty, trimmed.first != UInt8(ascii: "#") else { continue }
      let fields = trimmed.split(separator: UInt8(ascii: " "), maxSplits: 1)
      let address = String(validating: fields[0], as: UTF8.self).flatMap(\.removingPercentEncoding)
      func unreadable(_ reason: String) {
        contents.unreadable.append(
          UnreadableLine(number: index + 1, address: address, reason: reason))
      }
      guard let address else {
        unreadable("its address is not UTF-8 text")
        continue
      }
      guard fields.count == 2, let text = String(validating: fields[1], as: UTF8.self) else {
        unreadable(fields.count == 2 ? "its key is not UTF-8 text" : "it has no key")
        continue
      }
      guard let key = BoardKey(sshText: Substring(text)) else {
        unreadable("its key is not an ssh-ed25519 key")
        continue
      }
      contents.entries.append((address, key))
      if text.split(separator: " ").dropFirst(2).first == Substring(Self.secureMark) {
        contents.secure.insert(address)
      }
    }
    return contents
  }

  /// Every pin in the file: (address, key), in file order (lines that cannot be read left
  /// out: ``contents()`` has them).
  public func entries() -> [(address: String, key: BoardKey)] { contents().entries }

  /// Why the file cannot be trusted, or nil: it, or the directory holding it, is writable by
  /// group or others, or owned by another user (root's excepted).
  public func unsafety() -> Refusal? {
    let directory = (path as NSString).deletingLastPathComponent
    for (file, what) in [(path, "is"), (directory, "is in a directory that is")] {
      var info = stat()
      guard !file.isEmpty, lstat(file, &info) == 0 else { continue }
      let sticky = info.st_mode & S_ISVTX != 0
      if info.st_mode & 0o022 != 0 && !(file == directory && sticky) {
        return .unsafeFile(path: file, reason: "\(what) writable by others")
      }
      if info.st_uid != getuid() && info.st_uid != 0 {
        return .unsafeFile(path: file, reason: "\(what) owned by another user (uid \(info.st_uid))")
      }
    }
    return nil
  }

  /// Checks what the board at `address` presented against the pins. `sameBoard` are other
  /// addresses the user named for this board (one mount's `ADDR1,ADDR2`): a key pinned there
  /// is no relay.
  public func check(_ key: BoardKey?, at address: String, sameBoard: [String] = [])
    throws(Refusal) -> Status
  {
    if let unsafe = unsafety() { throw unsafe }
    let contents = contents()
    let all = contents.entries
    if let pinned = all.first(where: { $0.address == address })?.key {
      guard let key else { throw .keyVanished(address: address, pinned: pinned, file: path) }
      guard key == pinned else {
        throw .changed(address: address, pinned: pinned, presented: key, file: path)
      }
      return .pinned
    }
    if let bad = contents.unreadable(for: address) {
      throw .unreadableLine(address: address, line: bad.number, reason: bad.reason, file: path)
    }
    guard let key else { return .keyless }
    let elsewhere = all.filter { $0.key == key }.map(\.address)
    if !elsewhere.isEmpty && !elsewhere.contains(where: sameBoard.contains) {
      throw .pinnedElsewhere(address: address, key: key, others: elsewhere, file: path)
    }
    return .new
  }

  /// What a scan can say about a board from the pins (nothing it shows is proven: a board
  /// proves its key only when a mount authenticates).
  public enum Trust: Equatable, Sendable, CustomStringConvertible {
    /// An address of the board has a pin (and what it advertises, if anything, matches).
    case pinned(fingerprint: String)
    /// No pin for its addresses.
    case unknown(advertised: String?)
    /// It advertises another key (or none) than the one pinned for its address.
    case changed(pinned: String, advertised: String?)
    /// A new address advertising a key pinned for other addresses.
    case keyElsewhere(fingerprint: String, addresses: [String])
    /// The pin file cannot be trusted for this board: a line that may hold its pin cannot be
    /// read, or others may write the file.
    case unreadable(reason: String)

    /// One word for JSON: pinned, unknown, changed or elsewhere.
    public var word: String {
      switch self {
      case .pinned: "pinned"
      case .unknown: "unknown"
      case .changed: "changed"
      case .keyElsewhere: "elsewhere"
      case .unreadable: "unreadable"
      }
    }

    public var description: String {
      switch self {
      case .pinned(let fingerprint): "pinned (\(fingerprint))"
      case .unknown(let advertised?): "unknown: not mounted yet (advertises \(advertised))"
      case .unknown(nil): "unknown: not mounted yet"
      case .changed(let pinned, let advertised):
        "CHANGED: advertises \(advertised ?? "no board key"), but \(pinned) is pinned; a mount will refuse it"
      case .keyElsewhere(let fingerprint, let addresses):
        "unknown address advertising \(fingerprint), the key pinned for \(addresses.joined(separator: ", ")); a mount will refuse it"
      case .unreadable(let reason): "UNREADABLE: \(reason); a mount will refuse it"
      }
    }
  }

  /// The trust a scan shows for a board reached at `addresses`: `advertised` is the
  /// fingerprint it advertises (mDNS TXT `boardkey`); `advertisesKeys` is false where boards
  /// advertise none (Bluetooth), so only the address counts.
  public func trust(at addresses: [String], advertised: String?, advertisesKeys: Bool) -> Trust {
    if case .unsafeFile(let path, let reason) = unsafety() {
      return .unreadable(reason: "\(path) \(reason)")
    }
    let contents = contents()
    let all = contents.entries
    if let bad = addresses.lazy.compactMap({ contents.unreadable(for: $0) }).first,
      !all.contains(where: { addresses.contains($0.address) })
    {
      return .unreadable(reason: "line \(bad.number) of \(path) cannot be read (\(bad.reason))")
    }
    if let pinned = all.first(where: { addresses.contains($0.address) })?.key {
      guard advertisesKeys, advertised != pinned.fingerprint else {
        return .pinned(fingerprint: pinned.fingerprint)
      }
      return .changed(pinned: pinned.fingerprint, advertised: advertised)
    }
    if let advertised {
      let elsewhere = all.filter { $0.key.fingerprint == advertised }.map(\.address)
      if !elsewhere.isEmpty { return .keyElsewhere(fingerprint: advertised, addresses: elsewhere) }
    }
    return .unknown(advertised: advertised)
  }

  /// Pins `key` for `address` unless the address has a pin already (another session of the
  /// mount may have pinned it first); returns whether it did. The file and its directory are
  /// made private.
  /// With `secure`, the line says the board proved it over the secure channel: a later mount
  /// refuses that address if it answers without the channel.
  @discardableResult
  public func pin(_ key: BoardKey, at address: String, secure: Bool = false) throws(IdentityError)
    -> Bool
  {
    try makePrivateDirectory(containing: path)
    let descriptor = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0o600)
    guard descriptor >= 0 else {
      throw .writeFailed(path: path, reason: String(cString: strerror(errno)))
    }
    defer { close(descriptor) }
    // One writer at a time, so two sessions pinning at once leave one line.
    guard flock(descriptor, LOCK_EX) == 0 else {
      throw .writeFailed(path: path, reason: String(cString: strerror(errno)))
    }
    guard !entries().contains(where: { $0.address == address }) else { return false }
    let line = Self.line(address: address, key: key) + (secure ? " " + Self.secureMark : "")
    let bytes = Array((line + "\n").utf8)
    let written = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
    guard written == bytes.count else {
      throw .writeFailed(path: path, reason: String(cString: strerror(errno)))
    }
    return true
  }

  /// The word after a pin's key that says the board proved it over the secure channel
  /// (older versions, which read two fields, ignore it).
  public static let secureMark = "secure"

  /// Why a board at a pinned address that answers without the secure channel is refused,
  /// or nil: its pin says it proved its key over the channel before.
  public func strippedChannel(at address: String, serverSaid: String) -> Refusal? {
    guard contents().secure.contains(address) else { return nil }
    return .channelStripped(address: address, serverSaid: serverSaid, file: path)
  }

  /// One line of the file.
  public static func line(address: String, key: BoardKey) -> String {
    var allowed = CharacterSet.urlPathAllowed
    allowed.remove(charactersIn: "%")
    allowed.insert(charactersIn: "!")
    let encoded = address.addingPercentEncoding(withAllowedCharacters: allowed) ?? address
    return encoded + " " + key.sshText
  }
}
