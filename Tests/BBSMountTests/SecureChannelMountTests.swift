import BBSDiscovery
import BBSIdentity
import Foundation
import NinePTransport
import TestSupport
import XCTest

/// The secure channel through real `mount9bbs` and `9bbsd` processes (issue 35): a member logs
/// in to `9bbsd --auth required` with default options over it, a tap on the path sees none of
/// the chat, and each side refuses the other's plain connection when told to.
final class SecureChannelMountTests: XCTestCase {
  private var directory = ""
  private var mountpoint: String { directory + "/mnt" }

  override func setUpWithError() throws {
    directory = try makeMountDirectory("mount9bbs-secure")
  }

  /// A user with a `mount9bbs keygen` key.
  private func member() throws -> [String: String] {
    let home = directory + "/member"
    try FileManager.default.createDirectory(
      atPath: home + "/state", withIntermediateDirectories: true)
    let environment = ["XDG_CONFIG_HOME": home + "/config", "XDG_STATE_HOME": home + "/state"]
    let made = try runBuilt("mount9bbs", ["keygen"], environment: environment)
    XCTAssertEqual(made.status, 0, made.output)
    return environment
  }

  /// A proxy on a free TCP port in front of `server`, recording what it forwards.
  private func tap(_ server: ServerProcess) throws -> FaultProxy {
    let proxy = try FaultProxy(
      listen: .tcp(host: "127.0.0.1", port: UInt16(try ServerProcess.freePort())),
      server: try TransportAddress(parsing: server.address))
    addTeardownBlock { proxy.stop() }
    return proxy
  }

  /// Posts `text` through the mount with the shell's `echo`, and waits until the room shows it.
  private func post(_ text: String) throws {
    let result = try shell("echo '\(text)' > '\(mountpoint)/chat/post'", timeout: 10)
    XCTAssertEqual(result.status, 0, result.output)
    let shown = try shell(
      "timeout 5 tail -n 20 '\(mountpoint)/chat/lobby' | grep -c '\(text)' || true", timeout: 10)
    XCTAssertTrue(shown.output.hasPrefix("1"), "the post is not in the room: \(shown.output)")
  }

  func testAMemberLogsInWithDefaultOptionsAndATapSeesNoChat() throws {
    let board = try startServerProcess(extra: ["--auth", "required"])
    let proxy = try tap(board)
    let environment = try member()
    let mount = try MountProcess(
      address: proxy.listenAddress.description, mountpoint: mountpoint, environment: environment)
    defer { mount.stop() }
    let canary = "tap-canary-\(UInt32.random(in: 0...UInt32.max))"
    try post(canary)
    XCTAssertTrue(board.log.contains("secure channel up"), board.log)
    XCTAssertTrue(board.log.contains("authenticated "), board.log)
    let seen = String(decoding: proxy.forwardedBytes, as: UTF8.self)
    XCTAssertFalse(seen.contains(canary), "the tap read the post")
    XCTAssertFalse(seen.contains("chat"), "the tap read a file name")
  }

  /// The control for the tap: on a board without the channel, the same tap reads the post, and
  /// the mount (secure=auto) goes on plain.
  func testOnABoardWithoutTheChannelTheMountGoesPlainAndTheTapReadsIt() throws {
    let board = try startServerProcess(extra: ["--secure", "off"])
    let proxy = try tap(board)
    let mount = try MountProcess(
      address: proxy.listenAddress.description, mountpoint: mountpoint, options: ["uname=guest"])
    defer { mount.stop() }
    let canary = "tap-canary-\(UInt32.random(in: 0...UInt32.max))"
    try post(canary)
    XCTAssertFalse(board.log.contains("secure channel up"), board.log)
    XCTAssertTrue(String(decoding: proxy.forwardedBytes, as: UTF8.self).contains(canary))
  }

  /// One foreground mount attempt that must fail: what it printed.
  private func refusal(_ address: String, options: [String]) throws -> String {
    let result = try runBuilt(
      "mount9bbs", ["-f", "-o", options.joined(separator: ","), address, mountpoint])
    XCTAssertNotEqual(result.status, 0, result.output)
    XCTAssertFalse(isMounted(mountpoint))
    return result.output
  }

  func testSecureRequiredRefusesABoardThatDoesNotOfferIt() throws {
    let board = try startServerProcess(extra: ["--secure", "off"])
    let said = try refusal(board.address, options: ["secure=required"])
    XCTAssertTrue(said.contains("does not offer the secure channel"), said)
    XCTAssertTrue(said.contains("secure=required"), said)
  }

  func testABoardThatRequiresTheChannelRefusesAPlainClient() throws {
    let board = try startServerProcess(extra: ["--secure", "required"])
    let said = try refusal(board.address, options: ["secure=off", "timeout=5"])
    XCTAssertTrue(said.contains("this board requires the secure channel"), said)
    // With default options the same board is mounted.
    let mount = try MountProcess(address: board.address, mountpoint: mountpoint)
    mount.stop()
  }

  /// A board that signs its handshake with a key other than the one pinned for its address is
  /// refused before the client signs anything, even as a guest.
  func testAChangedBoardKeyIsRefusedInTheHandshake() throws {
    let environment = try member()
    let listen = "tcp!127.0.0.1!\(try ServerProcess.freePort())"
    var board = try ServerProcess(
      extra: ["--auth", "optional", "--board-key", directory + "/key-a"], listen: listen)
    let mount = try MountProcess(address: listen, mountpoint: mountpoint, environment: environment)
    mount.stop()
    board.stop()
    XCTAssertTrue(waitUntil(timeout: 5) { !isMounted(self.mountpoint) })
    board = try ServerProcess(
      extra: ["--auth", "optional", "--board-key", directory + "/key-b"], listen: listen)
    defer { board.stop() }
    let result = try runBuilt(
      "mount9bbs", ["-f", "-o", "auth=off", listen, mountpoint], environment: environment)
    XCTAssertNotEqual(result.status, 0, result.output)
    XCTAssertTrue(result.output.contains("but the key pinned for it is"), result.output)
    XCTAssertFalse(board.log.contains("Tauth"), board.log)
    // Refused before the client's last handshake message: the board's channel never came up.
    XCTAssertTrue(waitUntil(timeout: 5) { board.log.contains("secure channel refused") }, board.log)
    XCTAssertFalse(board.log.contains("secure channel up"), board.log)
  }

  /// A board pinned over the secure channel that later answers without it (a relay stripping
  /// it, on the same address) is refused before anything is signed.
  func testAPinnedBoardThatNoLongerOffersTheChannelIsRefused() throws {
    let environment = try member()
    let listen = "tcp!127.0.0.1!\(try ServerProcess.freePort())"
    let key = directory + "/board-key"
    var board = try ServerProcess(
      extra: ["--auth", "required", "--board-key", key], listen: listen)
    let mount = try MountProcess(address: listen, mountpoint: mountpoint, environment: environment)
    mount.stop()
    board.stop()
    XCTAssertTrue(waitUntil(timeout: 5) { !isMounted(self.mountpoint) })
    let pins = try String(
      contentsOfFile: BoardPins.defaultPath(environment: environment), encoding: .utf8)
    XCTAssertTrue(pins.hasSuffix(" secure\n"), pins)
    // The same board, key and address, without the channel: it would take a plain signature.
    board = try ServerProcess(
      extra: ["--auth", "required", "--board-key", key, "--secure", "off"], listen: listen)
    defer { board.stop() }
    let result = try runBuilt(
      "mount9bbs", ["-f", listen, mountpoint], environment: environment)
    XCTAssertNotEqual(result.status, 0, result.output)
    XCTAssertTrue(result.output.contains("now answers without it"), result.output)
    XCTAssertFalse(board.log.contains("authenticated"), board.log)
  }

  /// A board a LAN scan saw advertising the channel (TXT `secure=`, in the discovery cache) that
  /// answers without it is refused at first contact, with no pin.
  func testABoardAdvertisingTheChannelThatAnswersWithoutItIsRefused() throws {
    let board = try startServerProcess(extra: ["--secure", "off"])
    guard case .tcp(let host, let port) = try TransportAddress(parsing: board.address) else {
      return XCTFail("not TCP: \(board.address)")
    }
    let cacheHome = directory + "/cache"
    try DiscoveryCache(path: cacheHome + "/mount9bbs/boards.json").record(
      CachedBoard(
        kind: .lan, name: "GRID9", address: host, port: port,
        txt: ["version": "9P2000", "secure": "noise1"]))
    let result = try runBuilt(
      "mount9bbs", ["-f", "-o", "uname=guest", board.address, mountpoint],
      environment: ["XDG_CACHE_HOME": cacheHome])
    XCTAssertNotEqual(result.status, 0, result.output)
    XCTAssertTrue(result.output.contains("advertises the secure channel"), result.output)
    XCTAssertFalse(isMounted(mountpoint))
  }
}
