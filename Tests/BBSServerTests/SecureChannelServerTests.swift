import BBSIdentity
import Foundation
import NinePProtocol
import NinePTransport
import SecureChannel
import XCTest

@testable import BBSServer

/// 9bbsd's side of the secure channel (docs/authentication.md §6): the board proves its key in
/// the handshake, a Tauth signature must name this channel's binding, a plain TCP connection
/// gets no challenge, and `--secure required` takes nothing plain on TCP.
final class SecureChannelServerTests: ServerTestCase {
  private let boardKey = PrivateKey.generate(.ed25519)
  private let alice = PrivateKey.generate(.ed25519)

  private func startServer(_ secure: SecurePolicy = .offered) throws {
    var configuration = BBSServerConfiguration(
      listen: ["tcp!127.0.0.1!0"], profile: .standard, rooms: ["lobby"])
    configuration.auth = .required
    configuration.boardKey = boardKey
    configuration.secure = secure
    try start(try BBSServer(configuration: configuration))
  }

  /// A client on the secure channel (version negotiated inside), and the binding.
  private func secureClient() throws -> (WireClient, ChannelSecurity) {
    let transport = try NinePTransport.dial(TransportAddress(parsing: address))
    var proven: BoardKey?
    guard
      case .secure(let channel) = try SecureChannel.ask(
        over: transport, timeout: .seconds(5),
        accept: { payload, hash in
          proven = try? ChannelProof.verify(payload, handshakeHash: hash)
          return proven?.publicKey
        })
    else { throw TestError.unexpected("no secure channel") }
    XCTAssertEqual(proven, BoardKey(of: boardKey), "the board did not prove its key")
    let client = WireClient(transport: channel)
    clients.append(client)
    guard
      case .rversion = try client.rpc(.tversion(msize: 8192, version: "9P2000"), tag: NineP.noTag)
    else { throw TestError.unexpected("Rversion") }
    return (client, try XCTUnwrap(channel.security))
  }

  /// Tauth on `afid`, the challenge read, and the response made for `binding` written.
  private func answer(_ client: WireClient, afid: Fid, binding: [UInt8]?) throws -> Message {
    let auth = try client.rpc(.tauth(afid: afid, uname: alice.identity.hex, aname: ""))
    guard case .rauth = auth else { throw TestError.unexpected("\(auth)") }
    guard case .rread(let bytes) = try client.rpc(.tread(fid: afid, offset: 0, count: 1024)) else {
      throw TestError.unexpected("no challenge")
    }
    var challenge = try ChallengeResponse.Challenge(parsing: Array(bytes))
    challenge.channelBinding = binding
    let response = try ChallengeResponse.respond(to: challenge, with: alice)
    return try client.rpc(.twrite(fid: afid, offset: 0, data: response[...]))
  }

  func testOnlyASignatureBoundToThisChannelIsAccepted() throws {
    try startServer()
    let (client, channel) = try secureClient()
    XCTAssertEqual(channel.boardKey, BoardKey(of: boardKey)?.publicKey)
    // The plain form, and a signature bound to some other channel (a relay's), are refused.
    XCTAssertEqual(
      try answer(client, afid: 1, binding: nil), .rerror(ename: "authentication failed"))
    let elsewhere = (0..<32).map { _ in UInt8.random(in: 0...255) }
    XCTAssertEqual(
      try answer(client, afid: 2, binding: elsewhere), .rerror(ename: "authentication failed"))
    guard case .rwrite = try answer(client, afid: 3, binding: channel.binding) else {
      return XCTFail("the bound signature was refused")
    }
    let attach = try client.rpc(.tattach(fid: 0, afid: 3, uname: "", aname: ""))
    guard case .rattach = attach else { return XCTFail("\(attach)") }
  }

  func testAPlainTCPConnectionGetsNoChallengeButMayAttachAsAGuest() throws {
    var configuration = BBSServerConfiguration(
      listen: ["tcp!127.0.0.1!0"], profile: .standard, rooms: ["lobby"])
    configuration.auth = .optional
    configuration.boardKey = boardKey
    try start(try BBSServer(configuration: configuration))
    let client = try dial()
    _ = try client.rpc(.tversion(msize: 8192, version: "9P2000"), tag: NineP.noTag)
    XCTAssertEqual(
      try client.rpc(.tauth(afid: 1, uname: alice.identity.hex, aname: "")),
      .rerror(ename: "authentication only over the secure channel"))
    let attach = try client.rpc(.tattach(fid: 0, afid: NineP.noFid, uname: "", aname: ""))
    guard case .rattach = attach else { return XCTFail("\(attach)") }
  }

  func testARequiredChannelRefusesEveryPlainRequestOnTCP() throws {
    try startServer(.required)
    let client = try dial()
    XCTAssertEqual(
      try client.rpc(.tversion(msize: 8192, version: "9P2000"), tag: NineP.noTag),
      .rerror(ename: "this board requires the secure channel"))
    XCTAssertEqual(
      try client.rpc(.tattach(fid: 0, afid: NineP.noFid, uname: "x", aname: "")),
      .rerror(ename: "this board requires the secure channel"))
    // The channel asked for later than first is not set up: the request is refused too.
    XCTAssertEqual(
      try client.rpc(.tversion(msize: 8192, version: SecureChannel.version), tag: NineP.noTag),
      .rerror(ename: "this board requires the secure channel"))
    _ = try secureClient()
  }

  /// A board that does not offer the channel answers the request as 9P2000 says of an unknown
  /// version, and the client goes on plain.
  func testABoardWithoutTheChannelAnswersPlain() throws {
    try startServer(.off)
    let transport = try NinePTransport.dial(TransportAddress(parsing: address))
    defer { transport.close() }
    guard
      case .plain(let said) = try SecureChannel.ask(
        over: transport, timeout: .seconds(5), accept: { _, _ in nil })
    else { return XCTFail("a channel from a board that does not offer it") }
    XCTAssertEqual(said, "9P2000")
  }
}
