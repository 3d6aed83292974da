import ArgumentParser
import BBSIdentity
import Foundation

/// `mount9bbs keygen`: makes the key that is your identity on boards that authenticate, or
/// shows the identity of a key you have.
struct KeygenCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "keygen",
    abstract: "Make a key: your identity on boards that authenticate.",
    discussion: """
      Writes an Ed25519 (or, with --type p256, ECDSA P-256) private key in OpenSSH's format, \
      readable by you alone, to $XDG_CONFIG_HOME/mount9bbs/identity (else \
      ~/.config/mount9bbs/identity), its public half beside it (.pub), and prints \
      your identity: 40 hex characters, the first 20 bytes of SHA-256 over the public key. \
      Mounts use that key by default; -o identity=PATH or -o identity=agent picks another.

      --show prints the identity of an existing key instead: the default one, or --file \
      PATH (an OpenSSH Ed25519 or ECDSA P-256 key such as ~/.ssh/id_ed25519), or --file \
      agent (the first such key in your ssh-agent).
      """)

  @Option(help: ArgumentHelp("ed25519 or p256.", valueName: "type"))
  var type = "ed25519"

  @Option(
    name: [.customShort("f"), .customLong("file")],
    help: ArgumentHelp("Where the key is (default: the path above).", valueName: "path"))
  var file: String?

  @Option(name: [.customShort("C"), .customLong("comment")], help: "A comment in the key files.")
  var comment: String?

  @Flag(help: "Replace an existing key (its identity is lost for good).")
  var force = false

  @Flag(help: "Print the identity of an existing key; make none.")
  var show = false

  func validate() throws {
    guard KeyAlgorithm(rawValue: type) != nil else {
      throw ValidationError("--type must be ed25519 or p256")
    }
  }

  func run() throws {
    let source = KeySource(parsing: file ?? KeyFile.defaultPath())
    if show {
      do {
        Console.output("\(try source.load().identity)")
      } catch {
        Diagnostics.fail("mount9bbs: \(error)")
        throw ExitCode(1)
      }
      return
    }
    guard case .file(let path) = source else {
      throw ValidationError("keygen writes a file; to see an agent key's identity use --show")
    }
    let key = PrivateKey.generate(KeyAlgorithm(rawValue: type) ?? .ed25519)
    do {
      try KeyFile.write(key, to: path, comment: comment ?? Self.defaultComment, replace: force)
    } catch {
      Diagnostics.fail("mount9bbs: \(error)")
      throw ExitCode(1)
    }
    Console.output(
      "Wrote an \(key.algorithm) key to \(path) (mode 0600) and its public half to \(path).pub.")
    Console.output("Your identity on boards: \(key.identity)")
  }

  /// `user@host`, as ssh-keygen writes.
  private static var defaultComment: String {
    "\(ParsedOptions.loginName())@\(ProcessInfo.processInfo.hostName)"
  }
}
