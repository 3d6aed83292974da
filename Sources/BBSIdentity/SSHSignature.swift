import Crypto
import Foundation

/// OpenSSH's SSHSIG form (PROTOCOL.sshsig), the domain separation of everything a key signs
/// here: the key signs the "signed data" blob
/// `"SSHSIG" ‖ string(namespace) ‖ string("") ‖ string("sha512") ‖ string(SHA-512(message))`,
/// never a message itself.
///
/// The blob cannot be mistaken for an SSH login (a userauth request starts with a
/// length-prefixed session id, not the six bytes "SSHSIG"), and a signature made in one
/// namespace does not verify in another (`git`, `file`, `email`), so a key that signs only
/// this form cannot be made to sign for anything else.
public enum SSHSignature {
  /// The hash named in the blob (OpenSSH's default).
  public static let hashAlgorithm = "sha512"
  static let preamble = Array("SSHSIG".utf8)

  /// The bytes a key signs for `message` in `namespace`.
  public static func signedData(namespace: String, message: [UInt8]) -> [UInt8] {
    var writer = SSHWriter()
    writer.raw(preamble)
    writer.string(namespace)
    writer.string([UInt8]())
    writer.string(hashAlgorithm)
    writer.string(Array(SHA512.hash(data: message)))
    return writer.bytes
  }

  /// A raw signature (64 bytes: Ed25519, or P-256 `r ‖ s`) over ``signedData(namespace:message:)``
  /// as an armored `-----BEGIN SSH SIGNATURE-----` block, the form `ssh-keygen -Y verify`
  /// reads. Nil when the signature is not 64 bytes.
  public static func armored(
    signature: [UInt8], algorithm: KeyAlgorithm, publicKey: [UInt8], namespace: String
  ) -> String? {
    guard signature.count == 64 else { return nil }
    var inner = SSHWriter()
    inner.string(algorithm.sshName)
    switch algorithm {
    case .ed25519:
      inner.string(signature)
    case .p256:
      var numbers = SSHWriter()
      numbers.mpint(Array(signature[..<32]))
      numbers.mpint(Array(signature[32...]))
      inner.string(numbers.bytes)
    }
    var writer = SSHWriter()
    writer.raw(preamble)
    writer.uint32(1)
    writer.string(OpenSSHKey.publicBlob(algorithm, publicKey))
    writer.string(namespace)
    writer.string([UInt8]())
    writer.string(hashAlgorithm)
    writer.string(inner.bytes)
    let base64 = Data(writer.bytes).base64EncodedString()
    var lines = ["-----BEGIN SSH SIGNATURE-----"]
    var rest = Substring(base64)
    while !rest.isEmpty {
      lines.append(String(rest.prefix(70)))
      rest = rest.dropFirst(70)
    }
    lines.append("-----END SSH SIGNATURE-----")
    return lines.joined(separator: "\n") + "\n"
  }
}
