import Foundation
import NinePProtocol
import XCTest

@testable import BBSServer

/// Twstat and Tremove on the `--files` area (default profile) over TCP, checked against the
/// real files on disk.
final class FilesWstatTests: ServerTestCase {
  /// The directory served under /files.
  private var files = ""

  private func startServer(writable: Bool = true, profile: BBSProfile = .standard) throws {
    directory = try makeTemporaryDirectory("9bbs-wstat")
    files = directory + "/files"
    try FileManager.default.createDirectory(
      atPath: files + "/full", withIntermediateDirectories: true)
    try "0123456789\n".write(toFile: files + "/a.txt", atomically: false, encoding: .utf8)
    try "x\n".write(toFile: files + "/full/x", atomically: false, encoding: .utf8)
    chmod(files + "/a.txt", 0o644)
    let listen =
      profile == .device ? "seqpacket!\(directory)/bbs.sock" : "tcp!127.0.0.1!0"
    let server = try BBSServer(
      configuration: BBSServerConfiguration(
        listen: [listen], profile: profile, filesDirectory: files, filesWritable: writable))
    try start(server)
  }

  /// Walks fid 0 to `path` on `fid`.
  private func walk(_ client: WireClient, _ path: String, fid: Fid) throws {
    let names = path.split(separator: "/").map(String.init)
    guard case .rwalk(let qids) = try client.rpc(.twalk(fid: 0, newfid: fid, names: names)),
      qids.count == names.count
    else { throw TestError.unexpected("walk \(path)") }
  }

  private func onDisk(_ relative: String) throws -> stat {
    var buffer = stat()
    guard stat(files + "/" + relative, &buffer) == 0 else {
      throw TestError.unexpected("stat \(relative): errno \(errno)")
    }
    return buffer
  }

  private func tstat(_ client: WireClient, fid: Fid) throws -> Stat {
    guard case .rstat(let stat) = try client.rpc(.tstat(fid: fid)) else {
      throw TestError.unexpected("Tstat")
    }
    return stat
  }

  func testWstatChangesModeTimesLengthAndNameOfTheRealFile() throws {
    try startServer()
    let client = try connect()
    try walk(client, "files/a.txt", fid: 1)

    var mode = Stat.unchanged
    mode.mode = FileMode(permissions: 0o600)
    XCTAssertEqual(try client.rpc(.twstat(fid: 1, stat: mode)), .rwstat)
    XCTAssertEqual(try onDisk("a.txt").st_mode & 0o7777, 0o600)
    XCTAssertEqual(try tstat(client, fid: 1).mode.permissions, 0o600)

    var times = Stat.unchanged
    times.mtime = 1_577_836_800  // 2020-01-01
    times.atime = 1_600_000_000
    XCTAssertEqual(try client.rpc(.twstat(fid: 1, stat: times)), .rwstat)
    XCTAssertEqual(try onDisk("a.txt").st_mtim.tv_sec, 1_577_836_800)
    XCTAssertEqual(try onDisk("a.txt").st_atim.tv_sec, 1_600_000_000)
    let stat = try tstat(client, fid: 1)
    XCTAssertEqual(stat.mtime, 1_577_836_800)
    XCTAssertEqual(stat.atime, 1_600_000_000)

    // Several fields in one request, rename included; the fid follows the file.
    var several = Stat.unchanged
    several.length = 4
    several.mode = FileMode(permissions: 0o640)
    several.name = "b.txt"
    several.uid = "zephyr"  // the owner it has: no change
    XCTAssertEqual(try client.rpc(.twstat(fid: 1, stat: several)), .rwstat)
    XCTAssertFalse(FileManager.default.fileExists(atPath: files + "/a.txt"))
    XCTAssertEqual(try String(contentsOfFile: files + "/b.txt", encoding: .utf8), "0123")
    XCTAssertEqual(try onDisk("b.txt").st_mode & 0o7777, 0o640)
    XCTAssertEqual(try tstat(client, fid: 1).name, "b.txt")

    // A wstat that changes nothing is a sync: it succeeds.
    XCTAssertEqual(try client.rpc(.twstat(fid: 1, stat: .unchanged)), .rwstat)
  }

  func testWstatRefusesWhatItCannotDoAndChangesNothing() throws {
    try startServer()
    let client = try connect()
    try walk(client, "files/a.txt", fid: 1)
    let before = try onDisk("a.txt")

    var owner = Stat.unchanged
    owner.uid = "bob"
    owner.mode = FileMode(permissions: 0o600)
    XCTAssertEqual(
      try client.rpc(.twstat(fid: 1, stat: owner)), .rerror(ename: "not authorized"))
    var group = Stat.unchanged
    group.gid = "staff"
    XCTAssertEqual(
      try client.rpc(.twstat(fid: 1, stat: group)), .rerror(ename: "not authorized"))
    var directoryBit = Stat.unchanged
    directoryBit.mode = FileMode(permissions: 0o755, .directory)
    XCTAssertEqual(
      try client.rpc(.twstat(fid: 1, stat: directoryBit)), .rerror(ename: "invalid argument"))
    var appendOnly = Stat.unchanged
    appendOnly.mode = FileMode(permissions: 0o644, .appendOnly)
    XCTAssertEqual(
      try client.rpc(.twstat(fid: 1, stat: appendOnly)),
      .rerror(ename: "operation not supported"))
    let after = try onDisk("a.txt")
    XCTAssertEqual(after.st_mode, before.st_mode)
    XCTAssertEqual(after.st_size, before.st_size)

    try walk(client, "files/full", fid: 2)
    var length = Stat.unchanged
    length.length = 10
    XCTAssertEqual(
      try client.rpc(.twstat(fid: 2, stat: length)), .rerror(ename: "invalid argument"))

    // Board files have no metadata to change.
    try walk(client, "etc/motd", fid: 3)
    var motd = Stat.unchanged
    motd.mode = FileMode(permissions: 0o600)
    XCTAssertEqual(
      try client.rpc(.twstat(fid: 3, stat: motd)), .rerror(ename: "wstat not supported"))
    XCTAssertEqual(try client.rpc(.twstat(fid: 3, stat: .unchanged)), .rwstat)
  }

  func testReadOnlyAreaRefusesWstat() throws {
    try startServer(writable: false)
    let client = try connect()
    try walk(client, "files/a.txt", fid: 1)
    var times = Stat.unchanged
    times.mtime = 1_577_836_800
    XCTAssertEqual(
      try client.rpc(.twstat(fid: 1, stat: times)), .rerror(ename: "permission denied"))
    XCTAssertNotEqual(try onDisk("a.txt").st_mtim.tv_sec, 1_577_836_800)
  }

  func testDeviceProfileHasNoWstat() throws {
    try startServer(profile: .device)
    let client = try connect()
    try walk(client, "files/a.txt", fid: 1)
    var mode = Stat.unchanged
    mode.mode = FileMode(permissions: 0o600)
    XCTAssertEqual(
      try client.rpc(.twstat(fid: 1, stat: mode)), .rerror(ename: "wstat not supported"))
    XCTAssertEqual(try onDisk("a.txt").st_mode & 0o7777, 0o644)
  }

  func testRemovingANonEmptyDirectorySaysSo() throws {
    try startServer()
    let client = try connect()
    try walk(client, "files/full", fid: 1)
    XCTAssertEqual(try client.rpc(.tremove(fid: 1)), .rerror(ename: "directory not empty"))
    XCTAssertEqual(ErrorStrings.errno(for: "directory not empty"), ENOTEMPTY)
    XCTAssertTrue(FileManager.default.fileExists(atPath: files + "/full/x"))
  }
}
