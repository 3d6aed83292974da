import BBSServer
import Foundation
import Logging
import NinePTransport

/// The built-in 9BBS of `--local`: the reference server in-process on a private socket.
struct LocalBBS {
  let server: BBSServer
  let directory: String
  let address: TransportAddress

  static func start(logger: Logger) throws -> LocalBBS {
    var template = Array((NSTemporaryDirectory() + "mount9bbs-local.XXXXXX").utf8CString)
    guard let made = mkdtemp(&template) else {
      throw LocalBBSError("cannot create a private directory: \(String(cString: strerror(errno)))")
    }
    let directory = String(cString: made)
    let socket = directory + "/9bbs.sock"
    let configuration = BBSServerConfiguration(
      listen: ["unix!" + socket], rooms: ["lobby", "tech"],
      boardName: "mount9bbs local BBS",
      motd: "Welcome to the built-in 9BBS of mount9bbs. Post with: echo hi > chat/post")
    var serverLogger = logger
    serverLogger.logLevel = max(logger.logLevel, .warning)
    let server = try BBSServer(configuration: configuration, logger: serverLogger)
    try server.start()
    _ = try? server.board.chat.post(
      room: "lobby",
      text: Array("Welcome! Try: tail -f chat/lobby, then echo hello > chat/post".utf8),
      author: "sysop")
    return LocalBBS(server: server, directory: directory, address: .unix(path: socket))
  }

  func stop() {
    server.stop()
    try? FileManager.default.removeItem(atPath: directory)
  }
}

struct LocalBBSError: Error, CustomStringConvertible {
  let description: String
  init(_ description: String) { self.description = description }
}
