// BBSIdentity: who you are on a 9BBS board.
//
// A board (9p4z's Tauth, docs/board-facts.md §6) knows a user by a self-certifying identity: the
// hex of the first 20 bytes of SHA-256 over the user's public key. Proving it takes one
// challenge: Tauth(identity) → read a 32-byte challenge from the afid (followed by the board's
// own key, on a board that has one) → write signature[64] ‖ public key (Ed25519: 32 bytes;
// P-256: 65, uncompressed) → [read the board's proof] → Tattach with that afid. The bytes are
// in docs/authentication.md.
//
// Moving parts:
// - `Identity` is the 40-character name and its short form.
// - `Signer` is anything that can sign for a key: `PrivateKey` (Ed25519 or P-256, held in
//   memory, from our key file or an OpenSSH one) or `AgentKey` (a key inside a running
//   ssh-agent, signed through `SSHAgent`).
// - `ChallengeResponse` is the one place that says what is signed (an SSHSIG blob, see
//   `SSHSignature`, over identity, board key and challenge; or, for deployed boards only, the
//   raw challenge), builds the response a client writes, checks one on the server, and makes
//   and checks a board's proof.
// - `BoardKey` is a board's Ed25519 public key and its fingerprint; `BoardPins` is the user's
//   file of board keys pinned per address (as ssh's known_hosts).
// - `KeyFile` reads and writes key files where users keep them, refusing files that others
//   can read, as ssh does; `OpenSSHKey` is the openssh-key-v1 format both use; `KeySource`
//   turns `-o identity=…` into a signer.
// All cryptography is swift-crypto's.

import Crypto
import Foundation

/// A board identity: lowercase hex of SHA-256(public key)[:20], 40 characters.
public struct Identity: Hashable, Sendable, Comparable, CustomStringConvertible {
  /// The 40 hex characters.
  public let hex: String

  /// Bytes of SHA-256 kept.
  public static let byteCount = 20

  /// The identity of a public key as the auth response carries it (32 or 65 bytes).
  public init(publicKey: [UInt8]) {
    let digest = SHA256.hash(data: publicKey)
    hex = digest.prefix(Self.byteCount).map { byte in
      let text = String(byte, radix: 16)
      return byte < 16 ? "0" + text : text
    }.joined()
  }

  /// Parses 40 hex characters (either case); nil for anything else.
  public init?(parsing text: String) {
    let lowered = text.lowercased()
    guard lowered.utf8.count == Self.byteCount * 2,
      lowered.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) })
    else { return nil }
    hex = lowered
  }

  /// The first 8 characters: how a board shows an identity that has no nickname.
  public var short: String { String(hex.prefix(8)) }

  public var description: String { hex }

  public static func < (lhs: Identity, rhs: Identity) -> Bool { lhs.hex < rhs.hex }
}

/// The key types a board accepts.
public enum KeyAlgorithm: String, Sendable, CaseIterable, CustomStringConvertible {
  case ed25519
  case p256

  /// The OpenSSH key type name.
  public var sshName: String {
    switch self {
    case .ed25519: "ssh-ed25519"
    case .p256: "ecdsa-sha2-nistp256"
    }
  }

  /// Bytes of the public key in an auth response.
  public var publicKeySize: Int {
    switch self {
    case .ed25519: 32
    case .p256: 65
    }
  }

  public var description: String {
    switch self {
    case .ed25519: "Ed25519"
    case .p256: "ECDSA P-256"
    }
  }

  /// The algorithm whose auth response has this public-key size.
  init?(publicKeySize: Int) {
    switch publicKeySize {
    case 32: self = .ed25519
    case 65: self = .p256
    default: return nil
    }
  }
}

/// Something that can sign with one Ed25519 or P-256 key.
public protocol Signer: Sendable {
  var algorithm: KeyAlgorithm { get }
  /// The public key as the auth response carries it: 32 bytes (Ed25519) or 65 (P-256,
  /// uncompressed `04 ‖ x ‖ y`).
  var publicKey: [UInt8] { get }
  /// Where the key lives, for messages: a path, or "ssh-agent key 'comment'".
  var origin: String { get }
  /// A 64-byte raw signature over `message`: Ed25519, or ECDSA P-256 over SHA-256(message)
  /// as `r ‖ s`.
  func sign(_ message: [UInt8]) throws(IdentityError) -> [UInt8]
}

extension Signer {
  /// The identity this key proves.
  public var identity: Identity { Identity(publicKey: publicKey) }

  /// The key in OpenSSH's public-key blob form (`string type, …`).
  public var sshPublicKeyBlob: [UInt8] { OpenSSHKey.publicBlob(algorithm, publicKey) }

  /// The key as one line of an OpenSSH `.pub` file.
  public func sshPublicKeyLine(comment: String) -> String {
    let line = "\(algorithm.sshName) \(Data(sshPublicKeyBlob).base64EncodedString())"
    return comment.isEmpty ? line : line + " " + comment
  }
}

/// A private key held in memory: its 32 secret bytes (Ed25519's seed, P-256's scalar).
public struct PrivateKey: Signer {
  public let algorithm: KeyAlgorithm
  let secret: [UInt8]
  public let publicKey: [UInt8]
  public let origin: String

  /// A key from its secret; nil if the bytes are no valid key.
  init?(_ algorithm: KeyAlgorithm, secret: [UInt8], origin: String) {
    switch algorithm {
    case .ed25519:
      guard let key = try? Curve25519.Signing.PrivateKey(rawRepresentation: secret) else {
        return nil
      }
      publicKey = Array(key.publicKey.rawRepresentation)
    case .p256:
      guard let key = try? P256.Signing.PrivateKey(rawRepresentation: secret) else { return nil }
      publicKey = Array(key.publicKey.x963Representation)
    }
    self.algorithm = algorithm
    self.secret = secret
    self.origin = origin
  }

  /// A new random key.
  public static func generate(_ algorithm: KeyAlgorithm) -> PrivateKey {
    let secret: [UInt8] =
      switch algorithm {
      case .ed25519: Array(Curve25519.Signing.PrivateKey().rawRepresentation)
      case .p256: Array(P256.Signing.PrivateKey().rawRepresentation)
      }
    guard let key = PrivateKey(algorithm, secret: secret, origin: "new key") else {
      preconditionFailure("swift-crypto made a key it cannot read back")
    }
    return key
  }

  public func sign(_ message: [UInt8]) throws(IdentityError) -> [UInt8] {
    do {
      switch algorithm {
      case .ed25519:
        let key = try Curve25519.Signing.PrivateKey(rawRepresentation: secret)
        return Array(try key.signature(for: message))
      case .p256:
        let key = try P256.Signing.PrivateKey(rawRepresentation: secret)
        return Array(try key.signature(for: message).rawRepresentation)
      }
    } catch {
      throw .signingFailed(origin: origin, reason: "\(error)")
    }
  }
}
