import ArgumentParser
import BBSIdentity
import BBSServer
import Foundation
import Logging

// The server's configuration, from the options, and the board key.
extension BBSDaemonCommand {
  /// The configuration the options describe; loads (or makes) the board key when --auth is on.
  func serverConfiguration(logger: Logger) throws -> BBSServerConfiguration {
    let roomList = rooms.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
      .filter { !$0.isEmpty }
    let listenAddresses =
      listen.isEmpty && !stdio ? [BBSServerConfiguration.defaultListen] : listen
    var configuration = BBSServerConfiguration(
      listen: listenAddresses, profile: BBSProfile(rawValue: profile) ?? .standard,
      rooms: roomList, boardName: boardName, motd: motd, filesDirectory: files,
      filesWritable: filesRw, dataDirectory: data, maxMessageSize: maxMsize, sduLimit: sdu,
      processingDelay: .milliseconds(processingDelay),
      connectionLimit: maxConnections.map { .backlog($0) } ?? connectionCap.map { .refuse($0) })
    configuration.auth = AuthPolicy(rawValue: auth) ?? .off
    configuration.authSign = ChallengeResponse.Form(rawValue: authSign) ?? .bound
    configuration.secure =
      secure.flatMap(SecurePolicy.init(rawValue:)) ?? (authSign == "raw" ? .off : .offered)
    if configuration.auth != .off {
      do {
        configuration.boardKey = try loadBoardKey(logger: logger)
      } catch {
        logger.critical("9bbsd: \(error)")
        throw ExitCode.failure
      }
    }
    if sysop == ["none"] {
      configuration.firstUserIsSysop = false
    } else {
      configuration.sysops = Set(sysop.map { $0.lowercased() })
    }
    configuration.maxConnectionsPerNetwork =
      maxConnectionsPerNetwork == 0 ? nil : maxConnectionsPerNetwork
    configuration.sessionsReservedForMembers = memberReserve
    configuration.handshakeTimeout = .seconds(handshakeTimeout)
    configuration.idleTimeout = .seconds(idleTimeout)
    configuration.stallTimeout = .seconds(stallTimeout)
    configuration.maxBoardMessageSize = maxBoardMessage
    configuration.maxOpenFilesPerSession = maxOpenFiles
    configuration.postingLimits = PostingLimits(
      postBurst: postBurst, postsPerMinute: postsPerMinute, byteBurst: byteBurst,
      bytesPerSecond: bytesPerSecond, guestNetworks: guestBudget)
    for entry in nickname {
      let parts = entry.split(separator: "=", maxSplits: 1).map(String.init)
      configuration.nicknames[parts[0].lowercased()] = parts[1]
    }
    return configuration
  }

  /// The board key (see --board-key), its fingerprint logged as sshd logs a host key's.
  private func loadBoardKey(logger: Logger) throws(IdentityError) -> PrivateKey? {
    if boardKey == "none" || authSign == "raw" {
      logger.notice("9bbsd: no board key: clients cannot tell this board from another")
      return nil
    }
    let key: PrivateKey
    if let path = boardKey ?? data.map({ $0 + "/board_key" }) {
      let loaded = try KeyFile.boardKey(at: path)
      key = loaded.key
      if loaded.created { logger.notice("9bbsd: created the board key \(path)") }
    } else {
      key = PrivateKey.generate(.ed25519)
      logger.notice("9bbsd: the board key lives for this run only (no --data or --board-key)")
    }
    if let fingerprint = BoardKey(of: key)?.fingerprint {
      logger.notice("9bbsd: board key \(fingerprint)")
    }
    return key
  }
}
