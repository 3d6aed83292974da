import BBSIdentity
import Foundation
import Logging
import NinePClient

extension ParsedOptions {
  /// The key to prove, by `auth=` and `identity=`: `identity=`'s, else the default key file
  /// (`mount9bbs keygen`) if there is one. Nil attaches without authentication (auth=off, or
  /// auth=auto with no key). `board` are the addresses the user named for the board, most
  /// preferred first: a board key pinned at one of them is no relay at another.
  func authentication(board: [String], logger: Logger) throws(MountError) -> Authentication? {
    guard auth != .off else { return nil }
    let defaultKey = KeyFile.defaultPath()
    let source =
      identity ?? (FileManager.default.fileExists(atPath: defaultKey) ? .file(defaultKey) : nil)
    guard let source else {
      guard auth == .required else { return nil }
      throw .refused(
        "auth=required needs a key: make one with `mount9bbs keygen` (it goes to \(defaultKey)), "
          + "or use yours with -o identity=~/.ssh/id_ed25519 or -o identity=agent")
    }
    let signer: any Signer
    do {
      if let unlockedKey {
        signer = try KeyFile.key(fromText: unlockedKey.text, origin: unlockedKey.origin)
      } else {
        signer = try source.load()
      }
    } catch {
      throw .refused("\(error)")
    }
    if authSign == .raw {
      logger.warning(
        "auth-sign=raw: the key signs the board's raw 32-byte challenge, which names neither this board nor this login; a board you mount could use the signature to log in as you elsewhere. Use it only for a deployed board that needs it"
      )
    }
    return Authentication(
      identity: signer.identity.hex, policy: auth == .required ? .required : .auto,
      respond: BoardAnswerer(
        signer: signer, form: authSign, pins: BoardPins(path: BoardPins.defaultPath()),
        board: board, logger: logger
      ).answer)
  }
}

/// Answers a board's challenge for a mount: refuses anything but a 32-byte challenge (with or
/// without a board key) before signing, refuses a board whose key does not match its pin,
/// signs (docs/authentication.md), and pins a new board key once the board has proved it.
struct BoardAnswerer: Sendable {
  let signer: any Signer
  let form: ChallengeResponse.Form
  let pins: BoardPins
  let board: [String]
  let logger: Logger

  func answer(_ offered: Authentication.Challenge) throws -> Authentication.Answer {
    let address = offered.address.description
    var challenge: ChallengeResponse.Challenge
    let status: BoardPins.Status
    do {
      challenge = try ChallengeResponse.Challenge(parsing: offered.bytes)
      status = try pins.check(challenge.boardKey, at: address, sameBoard: board)
    } catch {
      throw AuthenticationError.boardRefused("\(error)")
    }
    // On the secure channel the signature covers the channel, and the board must name the key
    // it proved there.
    if let channel = offered.channel {
      challenge.channelBinding = channel.binding
      guard challenge.boardKey?.publicKey == channel.boardKey else {
        throw AuthenticationError.boardRefused(
          "the board at \(address) proved one key in the secure channel and named another in its challenge; refusing it"
        )
      }
    }
    let bound = challenge
    let channel = offered.channel != nil
    let response = try ChallengeResponse.respond(to: bound, with: signer, form: form)
    guard let boardKey = challenge.boardKey else {
      return Authentication.Answer(response: response)
    }
    return Authentication.Answer(response: response) { [pins, logger] proof in
      do {
        try ChallengeResponse.verifyBoardProof(
          proof, boardKey: boardKey, nonce: bound.nonce, response: response)
      } catch {
        throw AuthenticationError.boardRefused(
          "the board at \(address) presented the key \(boardKey.fingerprint) but did not prove it (\(error)); refusing it"
        )
      }
      guard status == .new else { return }
      // Sessions of a pool pin at once: one writes the line, and says so. The board proved
      // its key, so a pin file that cannot be written is warned about, as ssh does.
      do {
        guard try pins.pin(boardKey, at: address, secure: channel) else { return }
        logger.notice(
          "new board key for \(address): \(boardKey.fingerprint), pinned in \(pins.path)")
      } catch {
        logger.warning(
          "new board key for \(address): \(boardKey.fingerprint), not pinned: \(error)")
      }
    }
  }
}

// MARK: - Keys with a passphrase

extension ParsedOptions {
  /// The options with the key unlocked, when the key to use is a file protected by a
  /// passphrase: asked for on the terminal here, before the daemon detaches from it.
  func unlockingKey() throws(MountError) -> ParsedOptions {
    guard auth != .off, unlockedKey == nil else { return self }
    let defaultKey = KeyFile.defaultPath()
    let path: String
    switch identity {
    case .file(let given)?: path = given
    case .agent?: return self
    case nil:
      guard FileManager.default.fileExists(atPath: defaultKey) else { return self }
      path = defaultKey
    }
    do {
      _ = try KeyFile.load(path)
      return self
    } catch .encrypted {
      var unlocked = self
      unlocked.unlockedKey = UnlockedKey(text: try PassphrasePrompt.unlock(path), origin: path)
      return unlocked
    } catch {
      // The daemon reports it, as for any key it cannot use.
      return self
    }
  }
}
