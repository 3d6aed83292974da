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
      offer = try SecureChannel.ask(over: transport, timeout: timeout)
    } catch .peerLeft {
      transport.close()
      throw .transport(
        .secureChannel(
          reason:
            "\(address) hung up when asked for it; a 9P server that hangs up on a version it does not know needs -o secure=off"
        ))
    } catch {
      transport.close()
      throw .transport(.secureChannel(reason: "\(error) (with \(address))"))
    }
    switch offer {
    case .plain(let said):
      if let stripped = pins.strippedChannel(at: address, serverSaid: said) {
        transport.close()
        throw .authentication(.boardRefused("\(stripped)"))
      }
      if advertised.contains(address) {
        transport.close()
        throw .authentication(
          .boardRefused(
            "the board at \(address) advertises the secure channel (mDNS TXT secure=, in \(DiscoveryCache.defaultPath)), but answered without it ('\(said)'): something on the way may be stripping it. Refusing"
          ))
      }
      guard mode == .required else {
        logger.info(
          "\(address) does not offer the secure channel (it answered '\(TerminalText.escaped(said))'): plain 9P"
        )
        return transport
      }
      transport.close()
      throw .authentication(
        .boardRefused(
          "the board at \(address) does not offer the secure channel (it answered '\(TerminalText.escaped(said))'), and secure=required; a relay may be stripping it"
        ))
    case .secure(let channel, let payload, let signedHash):
      do {
        let boardKey = try ChannelProof.verify(payload, handshakeHash: signedHash)
        _ = try pins.check(boardKey, at: address, sameBoard: board)
        logger.info(
          "secure channel to \(address) (\(NoiseHandshake.protocolName)), board key \(boardKey?.fingerprint ?? "none")"
        )
      } catch let rejection as ChallengeResponse.Rejection {
        channel.close()
        throw .authentication(
          .boardRefused(
            "the board at \(address) did not prove its key in the secure channel's handshake (\(rejection)); refusing it"
          ))
      } catch {
        channel.close()
        throw .authentication(.boardRefused("\(error)"))
      }
      return channel
    }
  }
}
