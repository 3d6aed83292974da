import BBSIdentity
import BBSMount
import Foundation
import NinePClient

/// The `-o` options, validated.
struct ParsedOptions {
  var uname: String
  var aname = ""
  var msize: UInt32?
  var profile: ServerProfile?
  var sessions: Int?
  var readOnly = false
  var allowOther = false
  var defaultPermissions = false
  var timeout: Duration = .seconds(30)
  var streamGlobs: [String] = []
  var allowNonEmpty = false
  /// Keep posts made while the link is down on disk and send them later.
  var outbox = true
  /// Keep rooms' lines on disk, so a remounted room shows its recent history at once.
  var history = true
  var reconnect = true
  var keepalive: Duration? = .seconds(15)
  /// `identity=PATH|agent[:MATCH]`: the key to authenticate with (else the default key file).
  var identity: KeySource?
  /// `auth=auto|required|off`.
  var auth: AuthMode = .auto
  var passthrough: [String] = []

  /// When to authenticate (see MountIdentity.swift).
  enum AuthMode: String {
    /// With a key (`identity=`, else the default key file if there is one), when the server
    /// authenticates; as a guest otherwise.
    case auto
    /// Always, or fail.
    case required
    /// Never: attach with `uname`.
    case off
  }

  struct Invalid: Error, CustomStringConvertible {
    let description: String
  }

  init(_ lists: [String]) throws(Invalid) {
    uname = Self.loginName()
    for item in lists.flatMap({ $0.split(separator: ",").map(String.init) }) where !item.isEmpty {
      let parts = item.split(separator: "=", maxSplits: 1).map(String.init)
      let key = parts[0]
      let value = parts.count > 1 ? parts[1] : nil
      func required() throws(Invalid) -> String {
        guard let value, !value.isEmpty else {
          throw Invalid(description: "option \(key) needs a value (\(key)=…)")
        }
        return value
      }
      func onOff() throws(Invalid) -> Bool {
        let text = try required()
        guard text == "on" || text == "off" else {
          throw Invalid(description: "option \(key)=\(text): expected on or off")
        }
        return text == "on"
      }
      func number(_ range: ClosedRange<Int>) throws(Invalid) -> Int {
        let text = try required()
        guard let parsed = Int(text), range.contains(parsed) else {
          throw Invalid(
            description:
              "option \(key)=\(text): expected a number from \(range.lowerBound) to \(range.upperBound)"
          )
        }
        return parsed
      }
      switch key {
      case "uname": uname = try required()
      case "aname": aname = value ?? ""
      case "msize": msize = UInt32(try number(256...(16 << 20)))
      case "profile":
        let text = try required()
        guard let chosen = ServerProfile(rawValue: text) else {
          throw Invalid(description: "option profile=\(text): expected device or multiplex")
        }
        profile = chosen
      case "sessions": sessions = try number(1...16)
      case "ro": readOnly = true
      case "rw": readOnly = false
      case "allow_other":
        allowOther = true
        // Other users reach the files: let the kernel check the modes.
        defaultPermissions = true
      case "default_permissions": defaultPermissions = true
      case "timeout": timeout = .seconds(try number(1...86400))
      case "stream": streamGlobs.append(try required())
      case "nonempty": allowNonEmpty = true
      case "outbox": outbox = try onOff()
      case "history": history = try onOff()
      case "reconnect": reconnect = try onOff()
      case "identity": identity = KeySource(parsing: try required())
      case "auth":
        let text = try required()
        guard let mode = AuthMode(rawValue: text) else {
          throw Invalid(description: "option auth=\(text): expected auto, required or off")
        }
        auth = mode
      case "keepalive":
        let seconds = try number(0...3600)
        keepalive = seconds == 0 ? nil : .seconds(seconds)
      default: passthrough.append(item)
      }
    }
  }

  static func loginName() -> String {
    if let entry = getpwuid(getuid()), let name = entry.pointee.pw_name {
      return String(cString: name)
    }
    return ProcessInfo.processInfo.environment["USER"] ?? "guest"
  }
}
