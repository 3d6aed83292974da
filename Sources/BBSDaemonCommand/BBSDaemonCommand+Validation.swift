import ArgumentParser
import BBSIdentity
import BBSServer
import Logging

// The checks of 9bbsd's options that ArgumentParser cannot make itself.
extension BBSDaemonCommand {
  func validate() throws {
    guard BBSProfile(rawValue: profile) != nil else {
      throw ValidationError("--profile must be 'default', 'device' or 'gen1'")
    }
    guard Logger.Level(rawValue: logLevel) != nil else {
      throw ValidationError(
        "--log-level must be one of trace, debug, info, notice, warning, error, critical")
    }
    guard sdu >= 8 else { throw ValidationError("--sdu must be at least 8") }
    guard processingDelay >= 0 else { throw ValidationError("--processing-delay must be ≥ 0") }
    if let maxConnections, maxConnections < 1 {
      throw ValidationError("--max-connections must be at least 1")
    }
    if let connectionCap, connectionCap < 1 {
      throw ValidationError("--connection-cap must be at least 1")
    }
    if maxConnections != nil && connectionCap != nil {
      throw ValidationError("--max-connections and --connection-cap exclude each other")
    }
    guard maxConnectionsPerNetwork >= 0 else {
      throw ValidationError("--max-connections-per-network must be ≥ 0")
    }
    guard memberReserve >= 0 else { throw ValidationError("--member-reserve must be ≥ 0") }
    if let cap = connectionCap, memberReserve >= cap, auth == "optional" {
      throw ValidationError("--member-reserve must be less than --connection-cap")
    }
    for (name, value) in [
      ("--handshake-timeout", handshakeTimeout), ("--idle-timeout", idleTimeout),
      ("--stall-timeout", stallTimeout),
    ] where !(value > 0 && value <= 1e6) {
      throw ValidationError("\(name) must be more than 0 seconds")
    }
    guard maxBoardMessage >= 1 else { throw ValidationError("--max-board-message must be ≥ 1") }
    guard maxOpenFiles >= 1 else { throw ValidationError("--max-open-files must be ≥ 1") }
    for (name, value) in [
      ("--post-burst", postBurst), ("--posts-per-minute", postsPerMinute),
      ("--byte-burst", byteBurst), ("--bytes-per-second", bytesPerSecond),
      ("--guest-budget", guestBudget),
    ] where value < 0 {
      throw ValidationError("\(name) must be ≥ 0")
    }
    if sysop.contains("none") && sysop.count > 1 {
      throw ValidationError("--sysop none names no sysop; it goes alone")
    }
    if files == nil && filesRw { throw ValidationError("--files-rw needs --files DIR") }
    guard AuthPolicy(rawValue: auth) != nil else {
      throw ValidationError("--auth must be 'off', 'optional' or 'required'")
    }
    guard ChallengeResponse.Form(rawValue: authSign) != nil else {
      throw ValidationError("--auth-sign must be 'bound' or 'raw'")
    }
    if authSign == "raw", let boardKey, boardKey != "none" {
      throw ValidationError("--auth-sign raw imitates a deployed board, which has no board key")
    }
    if let secure, SecurePolicy(rawValue: secure) == nil {
      throw ValidationError("--secure must be 'offered', 'required' or 'off'")
    }
    for entry in nickname {
      let parts = entry.split(separator: "=", maxSplits: 1)
      guard parts.count == 2, !parts[1].isEmpty else {
        throw ValidationError("--nickname needs IDENTITY=NAME, not '\(entry)'")
      }
    }
    if let advertise, advertise.isEmpty || advertise.utf8.count > 63 {
      throw ValidationError("--advertise needs a name of 1 to 63 bytes")
    }
  }
}
