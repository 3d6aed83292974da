/// Why a key could not be read, written or used. Each text says what to do about it.
public enum IdentityError: Error, Equatable, Sendable, CustomStringConvertible {
  case unreadable(path: String, reason: String)
  /// Group or others may read the key file (`mode` is its permission bits).
  case permissionsTooOpen(path: String, mode: UInt32)
  /// The key file belongs to another user.
  case notOwned(path: String)
  /// A public key was given where the private key belongs.
  case publicKeyGiven(path: String)
  /// The file is not a key this program reads.
  case notAKey(path: String)
  case malformed(origin: String, detail: String)
  /// The OpenSSH key is protected by a passphrase.
  case encrypted(path: String)
  /// RSA, DSA, other curves, certificates: a board takes Ed25519 and P-256 only.
  case unsupportedKeyType(origin: String, type: String)
  /// No ssh-agent to talk to, or it stopped answering.
  case agentUnavailable(reason: String)
  /// The agent holds no Ed25519 or P-256 key (matching `match`, when given).
  case agentHasNoKey(match: String?, seen: [String])
  /// The agent would not sign (the key was removed, or a confirmation was refused).
  case agentRefused(key: String)
  case signingFailed(origin: String, reason: String)
  /// `keygen` will not overwrite a key.
  case exists(path: String)
  case writeFailed(path: String, reason: String)
  /// A board's key (9bbsd's --board-key) that is not Ed25519.
  case boardKeyNotEd25519(path: String, algorithm: KeyAlgorithm)

  public var description: String {
    switch self {
    case .unreadable(let path, let reason):
      return "cannot read the key \(path): \(reason)"
    case .permissionsTooOpen(let path, let mode):
      return
        "the key \(path) is readable by others (permissions 0\(String(mode, radix: 8))); "
        + "it must be yours alone: chmod 600 \(path)"
    case .notOwned(let path):
      return "the key \(path) belongs to another user; use a key file you own"
    case .publicKeyGiven(let path):
      return
        "\(path) is a public key; give the private key (the same name without .pub), or use identity=agent"
    case .notAKey(let path):
      return
        "\(path) is not a private key mount9bbs reads (OpenSSH Ed25519 or ECDSA P-256, or PEM P-256)"
    case .malformed(let origin, let detail):
      return "the key \(origin) is damaged: \(detail)"
    case .encrypted(let path):
      return
        "the key \(path) is protected by a passphrase; mount9bbs asks for it when it runs on "
        + "a terminal, or add the key to your ssh-agent (ssh-add \(path)) and mount with "
        + "-o identity=agent"
    case .unsupportedKeyType(let origin, let type):
      return
        "\(origin) is a \(type) key; a board takes Ed25519 or ECDSA P-256 keys only "
        + "(mount9bbs keygen makes one)"
    case .agentUnavailable(let reason):
      return "cannot use ssh-agent: \(reason)"
    case .agentHasNoKey(let match, let seen):
      let which = match.map { "matching '\($0)' " } ?? ""
      let listing = seen.isEmpty ? "it holds no keys" : "it holds \(seen.joined(separator: ", "))"
      return
        "ssh-agent has no Ed25519 or ECDSA P-256 key \(which)(\(listing)); add one with ssh-add"
    case .agentRefused(let key):
      return "ssh-agent refused to sign with \(key) (was it removed, or its confirmation denied?)"
    case .signingFailed(let origin, let reason):
      return "cannot sign with \(origin): \(reason)"
    case .exists(let path):
      return "\(path) already exists; keep it, or pass --force to replace it (its identity is lost)"
    case .writeFailed(let path, let reason):
      return "cannot write \(path): \(reason)"
    case .boardKeyNotEd25519(let path, let algorithm):
      return
        "the board key \(path) is \(algorithm); a board key is Ed25519 (9bbsd makes one where "
        + "the file does not exist yet)"
    }
  }
}
