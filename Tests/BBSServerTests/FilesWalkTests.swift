import Foundation
import Glibc
import NinePProtocol
import XCTest

@testable import BBSServer

/// The `--files` area walked as a hostile client names paths: deeper than the host's
/// PATH_MAX below the root, names longer than NAME_MAX, and symbolic links that try to
/// leave the area.
final class FilesWalkTests: ServerTestCase {
  /// The directory served under /files.
  private var files = ""
  /// A directory next to the area that no walk may reach.
  private var outside = ""

  override func tearDown() {
    // The deep trees are beyond FileManager's reach (PATH_MAX): removed by descriptor.
    if !files.isEmpty { Self.removeTree(named: "files", in: directory) }
    super.tearDown()
  }

  private func startServer() throws {
    directory = try makeTemporaryDirectory("9bbs-walk")
    files = directory + "/files"
    outside = directory + "/outside"
    try FileManager.default.createDirectory(
      atPath: files + "/sub", withIntermediateDirectories: true)
    try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
    try "inside\n".write(toFile: files + "/a.txt", atomically: false, encoding: .utf8)
    try "secret\n".write(toFile: outside + "/secret", atomically: false, encoding: .utf8)
    let server = try BBSServer(
      configuration: BBSServerConfiguration(
        listen: ["tcp!127.0.0.1!0"], filesDirectory: files, filesWritable: true))
    try start(server)
  }

  /// Walks fid 0 to `names` on `fid`, 16 names a message (MAXWELEM); whether all were walked.
  private func walk(_ client: WireClient, _ names: [String], fid: Fid) throws -> Bool {
    var from: Fid = 0
    var rest = names[...]
    repeat {
      let step = Array(rest.prefix(16))
      rest = rest.dropFirst(step.count)
      let reply = try client.rpc(.twalk(fid: from, newfid: fid, names: step))
      guard case .rwalk(let qids) = reply, qids.count == step.count else {
        if from != 0 { _ = try client.rpc(.tclunk(fid: fid)) }
        return false
      }
      from = fid
    } while !rest.isEmpty
    return true
  }

  /// Walks to `names`, opens for reading and reads up to 8 KiB at offset 0.
  private func read(_ client: WireClient, _ names: [String]) throws -> [UInt8]? {
    guard try walk(client, names, fid: 30) else { return nil }
    defer { _ = try? client.rpc(.tclunk(fid: 30)) }
    guard case .ropen = try client.rpc(.topen(fid: 30, mode: .read)) else { return nil }
    guard case .rread(let data) = try client.rpc(.tread(fid: 30, offset: 0, count: 8000)) else {
      return nil
    }
    return Array(data)
  }

  private func text(_ client: WireClient, _ path: String) throws -> String? {
    try read(client, path.split(separator: "/").map(String.init)).map {
      String(decoding: $0, as: UTF8.self)
    }
  }

  /// The names in a directory listing (stat records).
  private func listing(_ client: WireClient, _ names: [String]) throws -> [String] {
    guard let data = try read(client, names) else { throw TestError.unexpected("read dir") }
    let names = try Stat.decodeDirectory(data).map(\.name)
    return names.sorted()
  }

  /// A client builds a tree 22 levels of 200-byte names deep (4,422 bytes below the root,
  /// past PATH_MAX with any prefix) and creates, writes, reads, lists, renames and removes
  /// at the bottom; before the walk by descriptor, every step past PATH_MAX failed (EIO).
  func testPathsLongerThanPathMaxBelowTheRootWork() throws {
    try startServer()
    let client = try connect()
    let levels = (0..<22).map { String(repeating: "d", count: 198) + String(format: "%02d", $0) }
    XCTAssertGreaterThan(files.utf8.count + levels.joined(separator: "/").utf8.count, 4096)
    for depth in 0..<levels.count {
      XCTAssertTrue(try walk(client, ["files"] + levels[..<depth], fid: 20), "walk \(depth)")
      let reply = try client.rpc(
        .tcreate(
          fid: 20, name: levels[depth], perm: FileMode(permissions: 0o755, .directory),
          mode: .read))
      guard case .rcreate = reply else { return XCTFail("mkdir level \(depth): \(reply)") }
      _ = try client.rpc(.tclunk(fid: 20))
    }
    let bottom = ["files"] + levels
    XCTAssertTrue(try walk(client, bottom, fid: 21))
    guard
      case .rcreate = try client.rpc(
        .tcreate(fid: 21, name: "leaf.txt", perm: FileMode(permissions: 0o644), mode: .write))
    else { return XCTFail("create leaf") }
    XCTAssertEqual(
      try client.rpc(.twrite(fid: 21, offset: 0, data: ArraySlice("deep\n".utf8))),
      .rwrite(count: 5))
    _ = try client.rpc(.tclunk(fid: 21))

    XCTAssertEqual(try read(client, bottom + ["leaf.txt"]), Array("deep\n".utf8))
    XCTAssertEqual(try listing(client, bottom), ["leaf.txt"])
    XCTAssertEqual(Self.hostRead(files, levels + ["leaf.txt"]), "deep\n")

    XCTAssertTrue(try walk(client, bottom + ["leaf.txt"], fid: 22))
    guard case .rstat(let stat) = try client.rpc(.tstat(fid: 22)) else {
      return XCTFail("Tstat")
    }
    XCTAssertEqual(stat.length, 5)
    var rename = Stat.unchanged
    rename.name = "moved.txt"
    rename.length = 2
    XCTAssertEqual(try client.rpc(.twstat(fid: 22, stat: rename)), .rwstat)
    _ = try client.rpc(.tclunk(fid: 22))
    XCTAssertEqual(Self.hostRead(files, levels + ["moved.txt"]), "de")
    XCTAssertTrue(try walk(client, bottom + ["moved.txt"], fid: 23))
    XCTAssertEqual(try client.rpc(.tremove(fid: 23)), .rremove)
    XCTAssertNil(Self.hostRead(files, levels + ["moved.txt"]))
    // And the deepest directory itself goes.
    XCTAssertTrue(try walk(client, bottom, fid: 24))
    XCTAssertEqual(try client.rpc(.tremove(fid: 24)), .rremove)
    XCTAssertEqual(try listing(client, Array(bottom.dropLast())), [])
  }

  /// A name longer than NAME_MAX is refused as too long (ENAMETOOLONG in every client),
  /// not "create failed" (EIO).
  func testNameLongerThanNameMaxIsTooLong() throws {
    try startServer()
    let client = try connect()
    XCTAssertTrue(try walk(client, ["files"], fid: 20))
    XCTAssertEqual(
      try client.rpc(
        .tcreate(
          fid: 20, name: String(repeating: "n", count: 256), perm: FileMode(permissions: 0o644),
          mode: .write)),
      .rerror(ename: "file name too long"))
    XCTAssertTrue(try walk(client, ["files", "a.txt"], fid: 21))
    var rename = Stat.unchanged
    rename.name = String(repeating: "m", count: 256)
    XCTAssertEqual(
      try client.rpc(.twstat(fid: 21, stat: rename)), .rerror(ename: "file name too long"))
    XCTAssertEqual(try text(client, "files/a.txt"), "inside\n")
  }

  /// Files and directories are made with the mode the client asked for, whatever 9bbsd's
  /// umask (pjdfstest open/03.t: `open(…, O_CREAT, 0642)` made 0640 under umask 022).
  func testCreatedEntriesHaveTheModeAsked() throws {
    try startServer()
    let saved = umask(0o022)
    defer { umask(saved) }
    let client = try connect()
    for (fid, name, perm) in [
      (Fid(20), "file", FileMode(permissions: 0o642)),
      (Fid(21), "dir", FileMode(permissions: 0o757, .directory)),
    ] {
      XCTAssertTrue(try walk(client, ["files"], fid: fid))
      guard case .rcreate = try client.rpc(.tcreate(fid: fid, name: name, perm: perm, mode: .read))
      else { return XCTFail("create \(name)") }
    }
    var status = stat()
    XCTAssertEqual(lstat(files + "/file", &status), 0)
    XCTAssertEqual(status.st_mode & 0o7777, 0o642)
    XCTAssertEqual(lstat(files + "/dir", &status), 0)
    XCTAssertEqual(status.st_mode & 0o7777, 0o757)
  }

  /// 9P2000 has regular files and directories only: a Tcreate with a 9P2000.u kind (a symbolic
  /// link, a device, a pipe, a socket, setuid) is refused and makes nothing (a DMSYMLINK|0777
  /// create made a world-writable regular file holding the link's target).
  func testCreatesOfOtherKindsAreRefused() throws {
    try startServer()
    let client = try connect()
    let kinds: [(String, UInt32)] = [
      ("link", 0x0200_0000), ("device", 0x0080_0000), ("pipe", 0x0020_0000),
      ("socket", 0x0010_0000), ("setuid", 0x0008_0000),
    ]
    for (index, (name, bit)) in kinds.enumerated() {
      let fid = Fid(40 + index)
      XCTAssertTrue(try walk(client, ["files"], fid: fid))
      let perm = FileMode(rawValue: bit | 0o777)
      XCTAssertEqual(
        try client.rpc(.tcreate(fid: fid, name: name, perm: perm, mode: .write)),
        .rerror(ename: "invalid argument"), name)
      XCTAssertFalse(FileManager.default.fileExists(atPath: files + "/" + name), name)
    }
  }

  /// Links inside the area are followed while their targets stay inside; any that lead out
  /// (`..` above the root, an absolute path elsewhere, a chain of links) are not, and are
  /// not listed; a loop ends in an error, not a hang; removing a link removes the link.
  func testSymbolicLinksNeverLeadOutOfTheArea() throws {
    try startServer()
    let links = [
      ("up", "../outside/secret"),
      ("sub/upup", "../../outside/secret"),
      ("absolute-out", outside + "/secret"),
      ("hop", "sub/upup"),
      ("absolute-in", files + "/a.txt"),
      ("sub/back", "../a.txt"),
      ("sub/around", "../sub/./back"),
      ("root-dir", ".."),
      ("loop", "loop"),
    ]
    for (name, target) in links {
      try FileManager.default.createSymbolicLink(
        atPath: files + "/" + name, withDestinationPath: target)
    }
    let client = try connect()
    for escape in ["up", "sub/upup", "absolute-out", "hop", "root-dir", "loop"] {
      XCTAssertNil(try text(client, "files/" + escape), escape)
    }
    for inside in ["absolute-in", "sub/back", "sub/around"] {
      XCTAssertEqual(try text(client, "files/" + inside), "inside\n", inside)
    }
    XCTAssertEqual(try listing(client, ["files"]), ["a.txt", "absolute-in", "sub"])
    XCTAssertEqual(try listing(client, ["files", "sub"]), ["around", "back"])
    // A wstat through a link changes the file inside; removing the escaping link removes
    // the link only.
    XCTAssertTrue(try walk(client, ["files", "sub", "back"], fid: 25))
    var mode = Stat.unchanged
    mode.mode = FileMode(permissions: 0o600)
    XCTAssertEqual(try client.rpc(.twstat(fid: 25, stat: mode)), .rwstat)
    var status = stat()
    XCTAssertEqual(lstat(files + "/a.txt", &status), 0)
    XCTAssertEqual(status.st_mode & 0o777, 0o600)
    XCTAssertFalse(try walk(client, ["files", "up"], fid: 26))
    XCTAssertEqual(try String(contentsOfFile: outside + "/secret", encoding: .utf8), "secret\n")
  }

  // MARK: Host side, by descriptor (paths past PATH_MAX)

  /// The content of the file at `names` below `directory`, or nil.
  private static func hostRead(_ directory: String, _ names: [String]) -> String? {
    var fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    for (index, name) in names.enumerated() where fd >= 0 {
      let last = index == names.count - 1
      let next = openat(fd, name, (last ? O_RDONLY : O_RDONLY | O_DIRECTORY) | O_CLOEXEC)
      close(fd)
      fd = next
    }
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var buffer = [UInt8](repeating: 0, count: 4096)
    let count = Glibc.read(fd, &buffer, buffer.count)
    return count < 0 ? nil : String(decoding: buffer[0..<count], as: UTF8.self)
  }

  /// Removes `name` in `directory` and everything below it, however deep.
  private static func removeTree(named name: String, in directory: String) {
    let parent = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    guard parent >= 0 else { return }
    defer { close(parent) }
    removeTree(named: name, in: parent)
  }

  private static func removeTree(named name: String, in parent: Int32) {
    if unlinkat(parent, name, 0) == 0 || errno == ENOENT { return }
    let fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
    guard fd >= 0, let stream = fdopendir(fd) else { return }
    var names: [String] = []
    while let entry = readdir(stream) {
      let child = withUnsafePointer(to: &entry.pointee.d_name) {
        $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
      }
      if child != "." && child != ".." { names.append(child) }
    }
    for child in names { removeTree(named: child, in: dirfd(stream)) }
    closedir(stream)
    unlinkat(parent, name, AT_REMOVEDIR)
  }
}
