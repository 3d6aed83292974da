import Logging
import Synchronization

/// The files of `/etc` (docs/board-facts.md §1.2, §1.6).
public enum EtcField: String, Sendable, CaseIterable, Hashable {
  case boardname, sysop, motd, location, description, version, registration

  /// Whether the sysop may write the field.
  public var isWritable: Bool { self != .version && self != .registration }

  /// Bytes the field holds (the device's buffer size less the NUL).
  public var capacity: Int {
    switch self {
    case .boardname, .sysop: return 63
    case .motd, .description: return 255
    case .location: return 127
    case .version, .registration: return 0
    }
  }

  /// The value a fresh device reports.
  public var defaultValue: String {
    switch self {
    case .boardname: return "9BBS"
    case .sysop: return "sysop"
    case .motd: return "Welcome to 9BBS - A Plan 9 style BBS for Zephyr"
    case .location: return "Cyberspace"
    case .description: return "A 9P bulletin board system"
    case .version: return "9BBS v0.1.0"
    case .registration: return "enabled"
    }
  }
}

/// A device's `/etc/nets` entries: listed and walkable, never readable (device and gen1
/// profiles only; see `Namespace`).
public let etcNets = ["fsxnet", "aethernet"]

/// The BBS user registry and the `/etc` values. The sysops (a configured list of identities,
/// else the first registered user, as on a device) alone may write `/etc`.
public final class EtcFiles: Sendable {
  private struct State {
    var values: [EtcField: String]
    var users: [String]
  }
  private let state: Mutex<State>
  private let store: any BoardStore
  private let logger: Logger
  /// The configured sysops; empty: the first registered user.
  private let sysops: Set<String>
  /// Without configured sysops: whether the first registered user is the sysop.
  private let firstUserIsSysop: Bool

  /// Loads values and users from the store, falling back to `defaults`, then to the device's
  /// defaults.
  public init(
    defaults: [EtcField: String], sysops: Set<String> = [], firstUserIsSysop: Bool = true,
    store: any BoardStore, logger: Logger
  ) throws(BoardError) {
    self.firstUserIsSysop = firstUserIsSysop
    var values: [EtcField: String] = [:]
    for field in EtcField.allCases where field.isWritable {
      values[field] = truncateUTF8(defaults[field] ?? field.defaultValue, maxBytes: field.capacity)
    }
    for (field, value) in try store.etcValues() where field.isWritable {
      values[field] = value
    }
    state = Mutex(State(values: values, users: try store.users()))
    self.store = store
    self.logger = logger
    self.sysops = sysops
  }

  /// Registers a BBS user (on attach). Without configured sysops the first one becomes the
  /// sysop.
  public func register(user: String) {
    guard !user.isEmpty else { return }
    let added = state.withLock { state -> Bool in
      if state.users.contains(user) { return false }
      state.users.append(user)
      return true
    }
    guard added else { return }
    do {
      try store.addUser(user)
    } catch {
      logger.error("etc: could not store user \(LogText.escaped(user)): \(error)")
    }
    if sysops.isEmpty && isAdmin(user) {
      logger.info("etc: first user '\(LogText.escaped(user))' is the sysop")
    }
  }

  /// Whether `user` (a ``BoardUser/id``) is a sysop.
  public func isAdmin(_ user: String) -> Bool {
    guard sysops.isEmpty else { return sysops.contains(user) }
    return firstUserIsSysop && !user.isEmpty && state.withLock { $0.users.first == user }
  }

  /// The current value of a field, without the trailing newline.
  public func value(_ field: EtcField) -> String {
    state.withLock { state in
      switch field {
      case .version: return field.defaultValue
      case .registration: return state.users.isEmpty ? "enabled" : "disabled"
      default: return state.values[field] ?? field.defaultValue
      }
    }
  }

  /// The file as read: the value plus a newline.
  public func read(_ field: EtcField) -> [UInt8] {
    Array(value(field).utf8) + [0x0A]
  }

  /// Writes a field as the device does: a write at offset 0 replaces the value, a later one
  /// writes into it; the value is capped at the field size and one trailing newline is
  /// removed. Returns the bytes accepted.
  /// - Throws: ``BoardError/notPermitted`` unless `user` is the sysop or for read-only fields.
  public func write(_ field: EtcField, offset: UInt64, data: [UInt8], user: String)
    throws(BoardError) -> Int
  {
    guard isAdmin(user), field.isWritable else { throw BoardError.notPermitted }
    let capacity = field.capacity
    let (accepted, value) = state.withLock { state -> (Int, String) in
      var bytes = offset == 0 ? [] : Array((state.values[field] ?? "").utf8)
      guard offset < UInt64(capacity) else { return (0, String(decoding: bytes, as: UTF8.self)) }
      let start = Int(offset)
      if bytes.count < start { bytes += [UInt8](repeating: 0x20, count: start - bytes.count) }
      let accepted = min(data.count, capacity - start)
      bytes = Array(bytes.prefix(start)) + data.prefix(accepted)
      if bytes.last == UInt8(ascii: "\n") { bytes.removeLast() }
      let value = String(decoding: bytes, as: UTF8.self)
      state.values[field] = value
      return (accepted, value)
    }
    do {
      try store.setEtcValue(value, for: field)
    } catch {
      logger.error("etc: could not store \(field.rawValue): \(error)")
    }
    return accepted
  }
}
