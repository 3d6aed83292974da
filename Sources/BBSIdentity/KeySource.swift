import Foundation

/// Where a mount's key comes from: `-o identity=PATH`, `identity=agent` (the agent's first
/// Ed25519 or P-256 key) or `identity=agent:MATCH` (the first whose comment contains MATCH
/// or whose identity starts with it).
public enum KeySource: Sendable, Equatable, CustomStringConvertible {
  case file(String)
  case agent(match: String?)

  /// Parses an `identity=` value; `~/` is the home directory.
  public init(
    parsing text: String, environment: [String: String] = ProcessInfo.processInfo.environment
  ) {
    if text == "agent" {
      self = .agent(match: nil)
    } else if text.hasPrefix("agent:") {
      self = .agent(match: String(text.dropFirst("agent:".count)))
    } else if text.hasPrefix("~/") {
      self = .file((environment["HOME"] ?? NSHomeDirectory()) + text.dropFirst(1))
    } else {
      self = .file(text)
    }
  }

  /// The key, ready to sign (for the agent: found in it, which checks that it is there).
  public func load(environment: [String: String] = ProcessInfo.processInfo.environment)
    throws(IdentityError) -> any Signer
  {
    switch self {
    case .file(let path): return try KeyFile.load(path)
    case .agent(let match): return try SSHAgent(environment: environment).key(matching: match)
    }
  }

  public var description: String {
    switch self {
    case .file(let path): path
    case .agent(nil): "agent"
    case .agent(let match?): "agent:\(match)"
    }
  }
}
