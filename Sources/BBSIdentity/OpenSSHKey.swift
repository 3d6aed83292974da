import Foundation

/// OpenSSH's private-key format, openssh-key-v1 (PROTOCOL.key in OpenSSH), for Ed25519 and
/// ECDSA P-256 keys without a passphrase. `mount9bbs keygen` writes it too, so its keys work
/// with `ssh-keygen -y` and `ssh-add` as they are.
enum OpenSSHKey {
  static let begin = "-----BEGIN OPENSSH PRIVATE KEY-----"
  static let end = "-----END OPENSSH PRIVATE KEY-----"
  private static let magic = Array("openssh-key-v1\0".utf8)
  private static let curveName = "nistp256"

  // MARK: Public-key blobs

  /// `string type, string key` (Ed25519) or `string type, string curve, string Q` (P-256).
  static func publicBlob(_ algorithm: KeyAlgorithm, _ publicKey: [UInt8]) -> [UInt8] {
    var writer = SSHWriter()
    writer.string(algorithm.sshName)
    if algorithm == .p256 { writer.string(curveName) }
    writer.string(publicKey)
    return writer.bytes
  }

  /// What a public-key blob holds: the algorithm and key, or the type name of a key a board
  /// cannot use (RSA, other curves, certificates).
  enum Blob: Equatable {
    case usable(KeyAlgorithm, [UInt8])
    case unusable(type: String)
  }

  static func parsePublicBlob(_ blob: [UInt8]) -> Blob? {
    var reader = SSHReader(blob)
    do {
      let type = try reader.text()
      switch type {
      case KeyAlgorithm.ed25519.sshName:
        let key = try reader.string()
        return key.count == 32 ? .usable(.ed25519, key) : nil
      case KeyAlgorithm.p256.sshName:
        guard try reader.text() == curveName else { return nil }
        let key = try reader.string()
        return key.count == 65 && key.first == 0x04 ? .usable(.p256, key) : nil
      default:
        return .unusable(type: type)
      }
    } catch {
      return nil
    }
  }

  // MARK: Private keys

  /// The key file's text: the armoured openssh-key-v1 block.
  static func encode(_ key: PrivateKey, comment: String) -> String {
    var section = SSHWriter()
    let check = UInt32.random(in: .min ... .max)
    section.uint32(check)
    section.uint32(check)
    section.string(key.algorithm.sshName)
    switch key.algorithm {
    case .ed25519:
      section.string(key.publicKey)
      // OpenSSH keeps the 32-byte seed followed by the public key.
      section.string(key.secret + key.publicKey)
    case .p256:
      section.string(curveName)
      section.string(key.publicKey)
      section.mpint(key.secret)
    }
    section.string(comment)
    var pad: UInt8 = 1
    while section.bytes.count % 8 != 0 {
      section.uint8(pad)
      pad += 1
    }
    var writer = SSHWriter()
    writer.raw(magic)
    writer.string("none")
    writer.string("none")
    writer.string([])
    writer.uint32(1)
    writer.string(publicBlob(key.algorithm, key.publicKey))
    writer.string(section.bytes)
    let base64 = Data(writer.bytes).base64EncodedString()
    var lines = [begin]
    var rest = Substring(base64)
    while !rest.isEmpty {
      lines.append(String(rest.prefix(70)))
      rest = rest.dropFirst(70)
    }
    lines.append(end)
    return lines.joined(separator: "\n") + "\n"
  }

  /// Reads an armoured openssh-key-v1 block; `origin` names the file in errors.
  static func decode(_ text: String, origin: String) throws(IdentityError) -> (
    key: PrivateKey, comment: String
  ) {
    guard let start = text.range(of: begin), let stop = text.range(of: end),
      start.upperBound <= stop.lowerBound
    else { throw .malformed(origin: origin, detail: "no OpenSSH private key block") }
    let body = text[start.upperBound..<stop.lowerBound].filter { !$0.isWhitespace }
    guard let data = Data(base64Encoded: String(body)) else {
      throw .malformed(origin: origin, detail: "the key block is not base64")
    }
    do {
      return try decode(Array(data), origin: origin)
    } catch is SSHReader.Truncated {
      throw .malformed(origin: origin, detail: "the key block is cut short")
    } catch let error as IdentityError {
      throw error
    } catch {
      throw .malformed(origin: origin, detail: "\(error)")
    }
  }

  private static func decode(_ bytes: [UInt8], origin: String) throws -> (
    key: PrivateKey, comment: String
  ) {
    var reader = SSHReader(bytes)
    guard try reader.raw(magic.count) == magic else {
      throw IdentityError.malformed(origin: origin, detail: "not an openssh-key-v1 key")
    }
    let cipher = try reader.text()
    _ = try reader.text()  // kdf name
    _ = try reader.string()  // kdf options
    let count = try reader.uint32()
    guard count == 1 else {
      throw IdentityError.malformed(origin: origin, detail: "the file holds \(count) keys, not 1")
    }
    let blob = try reader.string()
    guard cipher == "none" else { throw IdentityError.encrypted(path: origin) }
    if case .unusable(let type)? = parsePublicBlob(blob) {
      throw IdentityError.unsupportedKeyType(origin: origin, type: type)
    }
    var section = SSHReader(try reader.string())
    guard try section.uint32() == section.uint32() else {
      throw IdentityError.malformed(origin: origin, detail: "its check numbers differ")
    }
    let type = try section.text()
    let key: PrivateKey
    switch type {
    case KeyAlgorithm.ed25519.sshName:
      let publicKey = try section.string()
      let secret = try section.string()
      guard secret.count == 64,
        let parsed = PrivateKey(.ed25519, secret: Array(secret.prefix(32)), origin: origin)
      else { throw IdentityError.malformed(origin: origin, detail: "a bad Ed25519 key") }
      guard parsed.publicKey == publicKey else {
        throw IdentityError.malformed(origin: origin, detail: "its public key does not match")
      }
      key = parsed
    case KeyAlgorithm.p256.sshName:
      guard try section.text() == curveName else {
        throw IdentityError.malformed(origin: origin, detail: "an ECDSA key on another curve")
      }
      let publicKey = try section.string()
      guard let scalar = try section.mpint(width: 32),
        let parsed = PrivateKey(.p256, secret: scalar, origin: origin)
      else { throw IdentityError.malformed(origin: origin, detail: "a bad P-256 key") }
      guard parsed.publicKey == publicKey else {
        throw IdentityError.malformed(origin: origin, detail: "its public key does not match")
      }
      key = parsed
    default:
      throw IdentityError.unsupportedKeyType(origin: origin, type: type)
    }
    let comment = try section.text()
    return (key, comment)
  }
}
