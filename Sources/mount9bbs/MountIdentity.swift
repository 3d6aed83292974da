import BBSIdentity
import Foundation
import NinePClient

extension ParsedOptions {
  /// The key to prove, by `auth=` and `identity=`: `identity=`'s, else the default key file
  /// (`mount9bbs keygen`) if there is one. Nil attaches without authentication (auth=off, or
  /// auth=auto with no key).
  func authentication() throws(MountError) -> Authentication? {
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
    return Authentication(
      identity: signer.identity.hex, policy: auth == .required ? .required : .auto
    ) { challenge in
      try ChallengeResponse.respond(to: challenge, with: signer)
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
