import Crypto
import XCTest

@testable import SecureChannel

/// The handshake and transport ciphers against another implementation: the vectors below were
/// made with the Python `noiseprotocol` package (0.3.1, on the `cryptography` library), with
/// fixed keys, so any difference in hashing, key derivation, nonces or the pattern shows.
final class NoiseHandshakeTests: XCTestCase {
  private static func key(_ range: ClosedRange<UInt8>) throws -> Curve25519.KeyAgreement.PrivateKey
  {
    try Curve25519.KeyAgreement.PrivateKey(rawRepresentation: Array(range))
  }

  private static func hex(_ text: String) -> [UInt8] {
    var bytes: [UInt8] = []
    var index = text.startIndex
    while index < text.endIndex {
      let next = text.index(index, offsetBy: 2)
      bytes.append(UInt8(text[index..<next], radix: 16)!)
      index = next
    }
    return bytes
  }

  private let prologue = Array("9P2000.9bbs-noise1".utf8)

  func testHandshakeAndRecordsMatchNoiseprotocol() throws {
    var client = NoiseHandshake(
      role: .initiator, prologue: prologue, staticKey: try Self.key(1...32),
      ephemeralKey: try Self.key(33...64))
    var board = NoiseHandshake(
      role: .responder, prologue: prologue, staticKey: try Self.key(65...96),
      ephemeralKey: try Self.key(97...128))

    let first = try client.writeMessage(payload: [])
    XCTAssertEqual(
      first, Self.hex("5869aff450549732cbaaed5e5df9b30a6da31cb0e5742bad5ad4a1a768f1a67b"))
    _ = try board.readMessage(first)
    let second = try board.writeMessage(payload: Array("board payload".utf8))
    XCTAssertEqual(
      second,
      Self.hex(
        "244fe3b963e899dd295baffce248d3530f3a9a7479ba063002680ebfe7adad49f197d6be61b51372854b4947bb7968e90c719fe79550e48ecf696cc4e7b51e1610e85ae27722024720269cc7c308ad7138be612916b72d86ea4f0a586d2c55fd646cd18130c498ee0f87abdd40"
      ))
    let (payload, _) = try client.readMessage(second)
    XCTAssertEqual(payload, Array("board payload".utf8))
    XCTAssertEqual(client.remoteStaticKey, Array(try Self.key(65...96).publicKey.rawRepresentation))
    let third = try client.writeMessage(payload: Array("client payload".utf8))
    XCTAssertEqual(
      third,
      Self.hex(
        "bb393122a9dd7e3e19dd4433a6c6743ff2454a8d4e165786a5f1235a87aaf27e35602eddcd9fb12c72c98b278b4d9a4cf61c6a99291dbff4e324ee6627b801adfacfee22853fd2c161a8fc40c5fc"
      ))
    XCTAssertEqual(try board.readMessage(third).payload, Array("client payload".utf8))

    let hash = Self.hex("524dbcb65f5636722cf041e4c61788bfb93d9dbb49f8f469ebb3b92020966324")
    XCTAssertEqual(client.handshakeHash, hash)
    XCTAssertEqual(board.handshakeHash, hash)

    var (clientSend, clientReceive) = try client.split()
    var (boardSend, boardReceive) = try board.split()
    let tversion = try clientSend.encrypt(Array("Tversion".utf8))
    XCTAssertEqual(tversion, Self.hex("ddf1628d75fa452d7fbc0ee3f342e9a5113dfb28b358d49e"))
    let tattach = try clientSend.encrypt(Array("Tattach".utf8))
    XCTAssertEqual(tattach, Self.hex("7be36e1898323812c63904176b6831301581b0ae6c9d36"))
    let rversion = try boardSend.encrypt(Array("Rversion".utf8))
    XCTAssertEqual(rversion, Self.hex("5d9457567cc55ec9cb8ca3917b3224435fe5d8c1b60275fb"))
    XCTAssertEqual(try boardReceive.decrypt(tversion[...]), Array("Tversion".utf8))
    XCTAssertEqual(try boardReceive.decrypt(tattach[...]), Array("Tattach".utf8))
    XCTAssertEqual(try clientReceive.decrypt(rversion[...]), Array("Rversion".utf8))
  }

  /// A replayed, reordered or altered record fails, and so does a second message's worth
  /// taken out of turn.
  func testRecordsCannotBeReplayedReorderedOrAltered() throws {
    var (client, board) = try handshake()
    let one = try client.send.encrypt(Array("one".utf8))
    let two = try client.send.encrypt(Array("two".utf8))
    XCTAssertThrowsError(try board.receive.decrypt(two[...])) {
      XCTAssertEqual($0 as? SecureChannelError, .badRecord)
    }
    var altered = one
    altered[0] ^= 1
    XCTAssertThrowsError(try board.receive.decrypt(altered[...]))
    XCTAssertEqual(try board.receive.decrypt(one[...]), Array("one".utf8))
    XCTAssertThrowsError(try board.receive.decrypt(one[...]))
    XCTAssertEqual(try board.receive.decrypt(two[...]), Array("two".utf8))
  }

  /// A different prologue (a handshake that did not follow the same request) fails at the
  /// board's first authenticated message, and a message out of turn is refused.
  func testPrologueMismatchAndTurnsFail() throws {
    var client = NoiseHandshake(
      role: .initiator, prologue: prologue, staticKey: .init())
    var board = NoiseHandshake(role: .responder, prologue: Array("9P2000".utf8), staticKey: .init())
    XCTAssertThrowsError(try client.readMessage([UInt8](repeating: 0, count: 32))) {
      XCTAssertEqual($0 as? SecureChannelError, .outOfOrder)
    }
    _ = try board.readMessage(try client.writeMessage(payload: []))
    XCTAssertThrowsError(try client.readMessage(try board.writeMessage(payload: []))) {
      guard case .badHandshake = $0 as? SecureChannelError else {
        return XCTFail("\($0)")
      }
    }
  }

  private func handshake() throws -> (
    client: (send: NoiseCipherState, receive: NoiseCipherState),
    board: (send: NoiseCipherState, receive: NoiseCipherState)
  ) {
    var client = NoiseHandshake(role: .initiator, prologue: prologue, staticKey: .init())
    var board = NoiseHandshake(role: .responder, prologue: prologue, staticKey: .init())
    _ = try board.readMessage(try client.writeMessage(payload: []))
    _ = try client.readMessage(try board.writeMessage(payload: []))
    _ = try board.readMessage(try client.writeMessage(payload: []))
    return (try client.split(), try board.split())
  }
}
