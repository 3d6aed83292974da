import Crypto
import Foundation

/// A board's own public key (Ed25519), the key a board proves itself with after a client
/// authenticates (see ``ChallengeResponse``), as an ssh host key proves a server.
public struct BoardKey: Hashable, Sendable, CustomStringConvertible {
  /// The 32-byte Ed25519 public key.
  public let publicKey: [UInt8]

  /// Bytes of the key on the wire.
  public static let size = 32

  /// A key from its 32 bytes; nil when they are no Ed25519 key.
  public init?(publicKey: [UInt8]) {
    guard publicKey.count == Self.size,
      (try? Curve25519.Signing.PublicKey(rawRepresentation: publicKey)) != nil
    else { return nil }
    self.publicKey = publicKey
  }

  /// The public half of a board's private key; nil unless it is an Ed25519 key.
  public init?(of key: PrivateKey) {
    guard key.algorithm == .ed25519 else { return nil }
    self.init(publicKey: key.publicKey)
  }

  /// The key as OpenSSH's public-key blob (`string "ssh-ed25519", string key`).
  public var sshBlob: [UInt8] { OpenSSHKey.publicBlob(.ed25519, publicKey) }

  /// `SHA256:` and the unpadded base64 of SHA-256 over ``sshBlob``: what `ssh-keygen -l`
  /// prints for the key.
  public var fingerprint: String {
    let digest = Data(SHA256.hash(data: sshBlob)).base64EncodedString()
    return "SHA256:" + digest.replacingOccurrences(of: "=", with: "")
  }

  /// `ssh-ed25519 AAAA…`, the form the pin file keeps.
  public var sshText: String { "ssh-ed25519 " + Data(sshBlob).base64EncodedString() }

  /// Reads ``sshText``; nil for anything else.
  public init?(sshText text: some StringProtocol) {
    let fields = text.split(separator: " ")
    guard fields.count >= 2, fields[0] == "ssh-ed25519",
      let data = Data(base64Encoded: String(fields[1]))
    else { return nil }
    guard case .usable(.ed25519, let key)? = OpenSSHKey.parsePublicBlob(Array(data)) else {
      return nil
    }
    self.init(publicKey: key)
  }

  public var description: String { fingerprint }
}
