import BBSDiscovery
import BBSIdentity
import Logging
import NinePClient
import NinePTransport
import SecureChannel
import TerminalText

/// Sets up the secure channel (docs/authentication.md §6) on each connection a mount dials to a
/// TCP board, before anything is signed: asks for it, checks the key the board proves in the
/// handshake against the pins, and hands the sessions the channel. A board that does not offer
/// it is used plain, unless `secure=required`.
struct ChannelOpener: Sendable {
  let mode: ParsedOptions.SecureMode
  let pins: BoardPins
  /// The addresses the user named for the board (see ``BoardAnswerer``).
  let board: [String]
  /// Addresses whose board a LAN scan saw advertising the channel (mDNS TXT `secure=`, in the
  /// discovery cache): a plain answer there is refused, as for `secure=required`.
  let advertised: Set<String>
  let logger: Logger

  init(
    mode: ParsedOptions.SecureMode, pins: BoardPins, board: [String],
    cache: DiscoveryCache = DiscoveryCache(), logger: Logger
  ) {
    self.mode = mode
    self.pins = pins
    self.board = board
    advertised = Set(
      cache.boards().filter(\.advertisesSecureChannel).flatMap { $0.dialCandidates }.map(
        \.description))
    self.logger = logger
  }

  func open(_ transport: any MessageTransport, within timeout: Duration) throws(NinePError)
    -> any MessageTransport
  {
    let address = transport.address.description
    switch transport.address {
    case .tcp: break
    case .unix: return transport
    default:
      guard mode == .required else { return transport }
      transport.close()
      throw .authentication(
        .boardRefused(
          "secure=required, but the secure channel runs over TCP only and \(address) is not TCP (Bluetooth boards are plain: docs/authentication.md)"
        ))
    }
    let offer: SecureChannel.Offer
    do {
      offer = try SecureChannel.ask(over: transport, timeout: timeout) {
        payload, signedHash throws(SecureChannelError) in
        try check(payload, signedHash, at: address)
      }
    } catch {
      transport.close()
      switch error {
      case .boardRefused(let why): throw .authentication(.boardRefused(why))
      case .peerLeft:
        throw .transport(
          .secureChannel(
            reason:
              "\(address) hung up when asked for it; a 9P server that hangs up on a version it does not know needs -o secure=off"
          ))
      default: throw .transport(.secureChannel(reason: "\(error) (with \(address))"))
      }
    }
    switch offer {
    case .secure(let channel):
      logger.info(
        "secure channel to \(address) (\(NoiseHandshake.protocolName)), board key \(channel.security?.boardKey.flatMap(BoardKey.init(publicKey:))?.fingerprint ?? "none")"
      )
      return channel
    case .plain(let serverSaid):
      let said = TerminalText.escaped(serverSaid)
      guard let refusal = plainRefusal(at: address, serverSaid: serverSaid) else {
        logger.info(
          "\(address) does not offer the secure channel (it answered '\(said)'): plain 9P")
        return transport
      }
      transport.close()
      throw .authentication(.boardRefused(refusal))
    }
  }

  /// The board key the handshake's payload proves, once checked against the pins; throws to
  /// refuse the board before the client's last handshake message.
  private func check(_ payload: [UInt8], _ signedHash: [UInt8], at address: String)
    throws(SecureChannelError) -> [UInt8]?
  {
    let boardKey: BoardKey?
    do {
      boardKey = try ChannelProof.verify(payload, handshakeHash: signedHash)
    } catch {
      throw .boardRefused(
        "the board at \(address) did not prove its key in the secure channel's handshake (\(error)); refusing it"
      )
    }
    do {
      _ = try pins.check(boardKey, at: address, sameBoard: board)
    } catch {
      throw .boardRefused("\(error)")
    }
    return boardKey?.publicKey
  }

  /// Why a board that answered plain (`serverSaid`) is refused, or nil to go on plain: its pin
  /// says it used the channel, a scan saw it advertise the channel, or secure=required.
  private func plainRefusal(at address: String, serverSaid: String) -> String? {
    if let stripped = pins.strippedChannel(at: address, serverSaid: serverSaid) {
      return "\(stripped)"
    }
    let said = TerminalText.escaped(serverSaid)
    if advertised.contains(address) {
      return
        "the board at \(address) advertises the secure channel (mDNS TXT secure=, in \(DiscoveryCache.defaultPath)), but answered without it ('\(said)'): something on the way may be stripping it. Refusing"
    }
    guard mode == .required else { return nil }
    return
      "the board at \(address) does not offer the secure channel (it answered '\(said)'), and secure=required; a relay may be stripping it"
  }
}
