import Crypto
import Foundation

#if canImport(Glibc)
  import Glibc
#endif

/// Key files where users keep them: `$XDG_CONFIG_HOME/mount9bbs/identity` (else
/// `~/.config/mount9bbs/identity`), mode 0600, in OpenSSH's format, with `identity.pub` beside
/// it; or any OpenSSH Ed25519 / ECDSA P-256 private key (`~/.ssh/id_ed25519`), or a PEM
/// P-256 key.
public enum KeyFile {
  /// The directory of mount9bbs's own keys.
  public static func directory(environment: [String: String] = ProcessInfo.processInfo.environment)
    -> String
  {
    if let config = environment["XDG_CONFIG_HOME"], config.hasPrefix("/") {
      return config + "/mount9bbs"
    }
    let home = environment["HOME"] ?? NSHomeDirectory()
    return home + "/.config/mount9bbs"
  }

  /// The key `keygen` writes and a mount uses when no `identity=` is given.
  public static func defaultPath(
    environment: [String: String] = ProcessInfo.processInfo.environment
  ) -> String {
    directory(environment: environment) + "/identity"
  }

  /// Reads a private key, refusing a file that group or others may read, or that belongs to
  /// someone else, as ssh does.
  public static func load(_ path: String) throws(IdentityError) -> PrivateKey {
    let descriptor = open(path, O_RDONLY | O_CLOEXEC)
    guard descriptor >= 0 else {
      throw .unreadable(path: path, reason: String(cString: strerror(errno)))
    }
    defer { close(descriptor) }
    var info = stat()
    guard fstat(descriptor, &info) == 0 else {
      throw .unreadable(path: path, reason: String(cString: strerror(errno)))
    }
    guard info.st_mode & S_IFMT == S_IFREG else {
      throw .unreadable(path: path, reason: "not a regular file")
    }
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
      let count = read(descriptor, &buffer, buffer.count)
      if count < 0 && errno == EINTR { continue }
      guard count >= 0 else {
        throw .unreadable(path: path, reason: String(cString: strerror(errno)))
      }
      if count == 0 { break }
      bytes += buffer[..<count]
      guard bytes.count <= 64 * 1024 else { throw .notAKey(path: path) }
    }
    let text = String(decoding: bytes, as: UTF8.self)
    if isPublicKey(text) { throw .publicKeyGiven(path: path) }
    guard info.st_uid == getuid() || info.st_uid == 0 else { throw .notOwned(path: path) }
    let permissions = UInt32(info.st_mode) & 0o777
    guard permissions & 0o077 == 0 else {
      throw .permissionsTooOpen(path: path, mode: permissions)
    }
    return try parse(text, path: path)
  }

  /// Whether the text is an OpenSSH public key line (`ssh-ed25519 AAAA… comment`).
  private static func isPublicKey(_ text: String) -> Bool {
    let first = text.split(separator: " ", maxSplits: 1).first.map(String.init) ?? ""
    return first.hasPrefix("ssh-") || first.hasPrefix("ecdsa-")
  }

  /// The key in `text`, a key file's contents read as ``load(_:)`` reads a file (without its
  /// ownership and permission checks: the caller has them); `origin` names it in errors.
  public static func key(fromText text: String, origin: String) throws(IdentityError)
    -> PrivateKey
  {
    try parse(text, path: origin)
  }

  /// Reads a key file's text.
  static func parse(_ text: String, path: String) throws(IdentityError) -> PrivateKey {
    if text.contains(OpenSSHKey.begin) {
      return try OpenSSHKey.decode(text, origin: path).key
    }
    if text.contains("-----BEGIN EC PRIVATE KEY-----")
      || text.contains("-----BEGIN PRIVATE KEY-----")
    {
      guard let pem = try? P256.Signing.PrivateKey(pemRepresentation: text),
        let key = PrivateKey(.p256, secret: Array(pem.rawRepresentation), origin: path)
      else { throw .notAKey(path: path) }
      return key
    }
    if text.contains("ENCRYPTED PRIVATE KEY") || text.contains("Proc-Type: 4,ENCRYPTED") {
      throw .encrypted(path: path)
    }
    throw .notAKey(path: path)
  }

  /// A board's key at `path` (9bbsd's, like an ssh host key): read if the file exists, else
  /// a new Ed25519 key written there (mode 0600); `created` says which.
  public static func boardKey(at path: String) throws(IdentityError) -> (
    key: PrivateKey, created: Bool
  ) {
    if FileManager.default.fileExists(atPath: path) {
      let key = try load(path)
      guard key.algorithm == .ed25519 else {
        throw .boardKeyNotEd25519(path: path, algorithm: key.algorithm)
      }
      return (key, false)
    }
    let key = PrivateKey.generate(.ed25519)
    try write(key, to: path, comment: "9bbsd board key", replace: false)
    return (try load(path), true)
  }

  /// Writes `key` to `path` (mode 0600, its directory 0700 if new) and its public half to
  /// `path.pub`. An existing key is replaced only with `replace`.
  public static func write(_ key: PrivateKey, to path: String, comment: String, replace: Bool)
    throws(IdentityError)
  {
    try makePrivateDirectory(containing: path)
    let flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (replace ? O_TRUNC : O_EXCL)
    let descriptor = open(path, flags, 0o600)
    guard descriptor >= 0 else {
      if errno == EEXIST { throw .exists(path: path) }
      throw .writeFailed(path: path, reason: String(cString: strerror(errno)))
    }
    // A replaced file keeps its old mode: make sure it is ours alone.
    guard fchmod(descriptor, 0o600) == 0 else {
      close(descriptor)
      throw .writeFailed(path: path, reason: String(cString: strerror(errno)))
    }
    try writeAll(Array(OpenSSHKey.encode(key, comment: comment).utf8), to: descriptor, path: path)
    let publicPath = path + ".pub"
    let publicDescriptor = open(
      publicPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o644)
    guard publicDescriptor >= 0 else {
      throw .writeFailed(path: publicPath, reason: String(cString: strerror(errno)))
    }
    try writeAll(
      Array((key.sshPublicKeyLine(comment: comment) + "\n").utf8), to: publicDescriptor,
      path: publicPath)
  }

  /// Writes everything and closes the descriptor.
  private static func writeAll(_ bytes: [UInt8], to descriptor: Int32, path: String)
    throws(IdentityError)
  {
    defer { close(descriptor) }
    var offset = 0
    while offset < bytes.count {
      let count = bytes[offset...].withUnsafeBytes {
        Glibc.write(descriptor, $0.baseAddress, $0.count)
      }
      if count < 0 && errno == EINTR { continue }
      guard count > 0 else {
        throw .writeFailed(path: path, reason: String(cString: strerror(errno)))
      }
      offset += count
    }
    guard fsync(descriptor) == 0 else {
      throw .writeFailed(path: path, reason: String(cString: strerror(errno)))
    }
  }
}

/// Makes the directory `path` goes in (mode 0700 where it is made), for a key or pin file.
func makePrivateDirectory(containing path: String) throws(IdentityError) {
  let directory = (path as NSString).deletingLastPathComponent
  guard !directory.isEmpty else { return }
  do {
    try FileManager.default.createDirectory(
      atPath: directory, withIntermediateDirectories: true,
      attributes: [.posixPermissions: 0o700])
  } catch {
    throw .writeFailed(path: directory, reason: "\(error)")
  }
}
