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
      signer = try source.load()
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
