import Foundation
import Glibc
import LinkEmulation
import NinePClient
import NinePTransport
import Synchronization

/// What every section measures on: the paths, the file area, the loopback 9bbsd, device boards
/// on seqpacket, emulated links, mounts, the C helpers compiled against libfuse, and the report
/// the rows go to. Sections ask the rig for a set-up instead of building their own.
///
/// Children are spawned by `Supervisor`, which unmounts and kills whatever is left on every way
/// out; `cleanUp` is safe to call from the signal handler's queue.
final class BenchRig: Sendable {
  let settings: BenchSettings
  /// Mount points, sockets, logs and the mounts' state.
  let work: String
  /// The file area every 9bbsd serves: in memory, so no disk is measured; drop_caches before
  /// each cat empties the FUSE page caches.
  let area: String
  let bbsd: String
  let mount9bbs: String
  /// The rooms of the loopback server (and of the BLE board).
  let rooms = ["lobby"] + (1...19).map { String(format: "r%02d", $0) }
  let report = BenchReport()

  private struct State {
    var loopbackServer: pid_t?
    var loopbackPort: UInt16 = 0
    var tokens = 0
    var mounts = 0
  }

  private let state = Mutex(State())

  var largeSize: Int { settings.sizeMiB << 20 }
  var bleSize: Int { settings.bleKiB << 10 }

  init(settings: BenchSettings) throws {
    self.settings = settings
    let pid = getpid()
    work = settings.workDir ?? "/tmp/mount9bbs-bench.\(pid)"
    area = "/dev/shm/mount9bbs-bench.\(pid)"
    let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? ""
    let directory = (exe as NSString).deletingLastPathComponent
    bbsd = settings.bbsd ?? directory + "/9bbsd"
    mount9bbs = settings.mount9bbs ?? directory + "/mount9bbs"
    for tool in [bbsd, mount9bbs] where !FileManager.default.isExecutableFile(atPath: tool) {
      throw BenchError(
        "\(tool) is missing: build everything first (swift build -c release), or pass --bbsd/--mount9bbs"
      )
    }
  }

  var settingsDescription: [String: String] {
    [
      "runs": "\(settings.runs)", "size_mib": "\(settings.sizeMiB)", "posts": "\(settings.posts)",
      "people_posts": "\(settings.peoplePosts)",
      "stat_samples": "\(settings.statSamples)", "window_s": "\(settings.window)",
      "ble": "rtt \(settings.bleRTTms) ms, \(settings.bleRate) B/s, SDU \(settings.bleSDU)",
      "ble_kib": "\(settings.bleKiB)", "ble_runs": "\(settings.bleRuns)",
      "cores": "\(sysconf(Int32(_SC_NPROCESSORS_ONLN)))",
    ]
  }

  /// A number no other caller gets: message tokens, file and user names.
  func nextToken() -> Int {
    state.withLock {
      $0.tokens += 1
      return $0.tokens
    }
  }

  // MARK: - Work directory and file area

  /// The work directory and the file area: a large file, the BLE-sized file and a 1000-file
  /// directory.
  func prepare() throws {
    try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
    // The mounts keep their outbox and room history in the work directory, not the user's.
    setenv("XDG_STATE_HOME", work + "/state", 1)
    let manager = FileManager.default
    try? manager.removeItem(atPath: area)
    try manager.createDirectory(atPath: area + "/dir1000", withIntermediateDirectories: true)
    var block = [UInt8](repeating: 0, count: 1 << 20)
    for index in block.indices {
      block[index] = UInt8(truncatingIfNeeded: index &* 2_654_435_761 >> 7)
    }
    guard
      let big = FileHandle(forWritingAtPath: area + "/big.bin")
        ?? {
          _ = manager.createFile(atPath: area + "/big.bin", contents: nil)
          return FileHandle(forWritingAtPath: area + "/big.bin")
        }()
    else { throw BenchError("cannot create \(area)/big.bin") }
    for _ in 0..<settings.sizeMiB { big.write(Data(block)) }
    try big.close()
    _ = manager.createFile(atPath: area + "/ble.bin", contents: Data(block.prefix(bleSize)))
    if bleSize > block.count {
      var data = Data()
      while data.count < bleSize { data.append(contentsOf: block) }
      _ = manager.createFile(atPath: area + "/ble.bin", contents: data.prefix(bleSize))
    }
    for index in 0..<1000 {
      _ = manager.createFile(
        atPath: area + String(format: "/dir1000/f%04d", index),
        contents: Data("file \(index)\n".utf8))
    }
  }

  /// Stops every child, unmounts, removes the file area, mount points and sockets; keeps the
  /// logs.
  func cleanUp() {
    Supervisor.shared.cleanUp()
    try? FileManager.default.removeItem(atPath: area)
    for name in (try? FileManager.default.contentsOfDirectory(atPath: work)) ?? []
    where !name.hasSuffix(".log") && !name.hasPrefix("passthrough") {
      try? FileManager.default.removeItem(atPath: work + "/" + name)
    }
  }

  // MARK: - The loopback server

  /// The loopback 9bbsd (multiplex profile, TCP) with the file area (writable) and `rooms`,
  /// each seeded with one line.
  func startLoopbackServer() throws {
    let port = freePort()
    let pid = try Supervisor.shared.spawn(
      bbsd,
      [
        "--listen", "tcp!127.0.0.1!\(port)", "--files", area, "--files-rw", "--rooms",
        rooms.joined(separator: ","), "--log-level", "warning",
      ], log: work + "/9bbsd.log")
    state.withLock {
      $0.loopbackServer = pid
      $0.loopbackPort = port
    }
    guard waitForListener(port: port) else { throw BenchError("9bbsd did not start") }
    try seed(loopbackAddress, profile: .multiplex, rooms: rooms)
  }

  func stopLoopbackServer() {
    let pid = state.withLock { state in
      defer { state.loopbackServer = nil }
      return state.loopbackServer
    }
    if let pid { Supervisor.shared.stop(pid) }
  }

  /// The loopback 9bbsd's process, while it runs.
  var loopbackServer: pid_t? { state.withLock { $0.loopbackServer } }

  /// The loopback server for a 9P client.
  var loopbackAddress: TransportAddress {
    .tcp(host: "127.0.0.1", port: state.withLock { $0.loopbackPort })
  }

  /// The loopback server for `mount9bbs`.
  var loopbackMountAddress: String { "tcp!127.0.0.1!\(state.withLock { $0.loopbackPort })" }

  /// One message in every room: opening an empty room on the mount waits for its first message.
  func seed(_ address: TransportAddress, profile: ServerProfile, rooms: [String]) throws {
    let poster = try DirectClient(address: address, profile: profile, uname: "seed")
    defer { poster.close() }
    let fid = try poster.openFile("/chat/post", mode: .write)
    for room in rooms { try poster.post(fid, "\(room):welcome to \(room)") }
  }

  // MARK: - Boards on seqpacket

  /// A 9bbsd on `NAME.sock` (log `9bbsd-NAME.log`): device profile unless `deviceProfile` is
  /// false, with `rooms` (each with one line if `seeded`) and the file area if `files`.
  func startBoard(
    _ name: String, deviceProfile: Bool = true, rooms: [String] = [], files: Bool = false,
    sdu: Int, seeded: Bool
  ) throws -> Board {
    let socket = work + "/\(name).sock"
    var arguments = deviceProfile ? ["--profile", "device"] : []
    arguments += ["--listen", "seqpacket!\(socket)!\(sdu)"]
    if files { arguments += ["--files", area] }
    if !rooms.isEmpty { arguments += ["--rooms", rooms.joined(separator: ",")] }
    arguments += ["--log-level", "warning"]
    let pid = try Supervisor.shared.spawn(bbsd, arguments, log: work + "/9bbsd-\(name).log")
    let board = Board(pid: pid, socket: socket, sdu: sdu, isDevice: deviceProfile)
    guard waitForListener(path: socket) else {
      board.stop()
      throw BenchError(deviceProfile ? "device 9bbsd did not start" : "9bbsd did not start")
    }
    do {
      if seeded { try seed(board.address, profile: board.profile, rooms: rooms) }
    } catch {
      board.stop()
      throw error
    }
    return board
  }

  /// A 9bbsd on a seqpacket socket, from `startBoard`.
  struct Board {
    let pid: pid_t
    let socket: String
    let sdu: Int
    let isDevice: Bool

    /// The board for a 9P client.
    var address: TransportAddress { .seqpacket(path: socket, sduLimit: sdu) }
    /// The board for `mount9bbs`.
    var mountAddress: String { "seqpacket!\(socket)!\(sdu)" }
    var profile: ServerProfile { isDevice ? .device : .multiplex }

    func stop() { Supervisor.shared.stop(pid) }
  }

  // MARK: - Emulated links

  /// The emulated BLE link of the settings, with segments of `sdu` bytes.
  func bleProfile(sdu: Int) -> LinkProfile {
    LinkProfile(
      roundTrip: .microseconds(Int64(settings.bleRTTms * 1000)),
      bytesPerSecond: settings.bleRate, sduSize: sdu)
  }

  /// A started `LinkEmulator` listening on `NAME.sock` in front of `board`.
  func startLink(_ name: String, to board: Board, profile: LinkProfile) throws -> Link {
    let socket = work + "/\(name).sock"
    let emulator = try LinkEmulator(
      listen: .seqpacket(path: socket, sduLimit: board.sdu), server: board.address,
      profile: profile)
    emulator.start()
    return Link(emulator: emulator, mountAddress: "seqpacket!\(socket)!\(board.sdu)")
  }

  /// An emulated link in front of a board, from `startLink`.
  struct Link {
    let emulator: LinkEmulator
    /// The link's near end for `mount9bbs`.
    let mountAddress: String

    func statistics() -> LinkStatistics { emulator.statistics() }
    func close() { emulator.close() }
  }

  // MARK: - Mounts

  /// `mount9bbs -f` of `address` on `WORK/NAME`, once mounted. Plain 9P (`secure=off`) unless
  /// `options` say otherwise (or `binary`, a --baseline build, may not know the option): the sections measure the 9P client, and section 4b the secure
  /// channel's cost against it.
  func mount(
    _ name: String, address: String, options: [String] = [], binary: String? = nil,
    uname: String? = nil
  ) throws -> MountedFS {
    // A fresh user name per mount: the server keeps a read cursor per user, and opening a room
    // with nothing unread for that user waits for the next post.
    let number = state.withLock {
      $0.mounts += 1
      return $0.mounts
    }
    var arguments = ["-f", "-o", "uname=\(uname ?? "bench\(number)")"]
    // A --baseline binary may predate the option (and the channel).
    let plain =
      binary != nil || options.contains { $0.hasPrefix("secure=") } ? [] : ["secure=off"]
    for option in plain + options { arguments += ["-o", option] }
    arguments += [address, work + "/" + name]
    return try MountedFS.start(
      binary ?? mount9bbs, arguments, mountpoint: work + "/" + name, kind: "mount9bbs",
      log: work + "/\(name).log")
  }

  /// libfuse's passthrough_ll (`binary`, from `buildPassthrough`) over the file area on
  /// `WORK/bare-CACHE`, or nil if it did not mount.
  func mountPassthrough(_ binary: String, cache: String) -> MountedFS? {
    let mountpoint = work + "/bare-\(cache)"
    return try? MountedFS.start(
      binary, ["-f", "-o", "source=\(area),cache=\(cache)", mountpoint],
      mountpoint: mountpoint, kind: "passthrough_ll",
      log: work + "/passthrough_ll-\(cache).log")
  }

  func unmount(_ fs: MountedFS) {
    fs.stop(mount9bbs: fs.kind == "mount9bbs" ? mount9bbs : nil)
  }

  // MARK: - C helpers

  /// Compiles libfuse's passthrough_ll example; its path, or nil.
  func buildPassthrough() -> String? {
    let examples = "/usr/share/doc/libfuse3-dev/examples"
    guard FileManager.default.fileExists(atPath: examples + "/passthrough_ll.c") else {
      log("no \(examples)/passthrough_ll.c (apt-get install libfuse3-dev)")
      return nil
    }
    return compileAgainstLibfuse(
      examples + "/passthrough_ll.c", into: "passthrough_ll", flags: "-I\(examples)")
  }

  /// Compiles the bare-FUSE delivery floor (``FanoutFloor``); its path, or nil.
  private func buildFanoutFloor() -> String? {
    let source = work + "/fanout_floor.c"
    guard FileManager.default.createFile(atPath: source, contents: Data(FanoutFloor.source.utf8))
    else { return nil }
    return compileAgainstLibfuse(source, into: "fanout_floor", flags: "-pthread")
  }

  /// `cc` of one C file against libfuse3 into the work directory (once per run); the
  /// executable's path, or nil with the compiler's output in `NAME-build.log`.
  private func compileAgainstLibfuse(_ source: String, into name: String, flags: String)
    -> String?
  {
    let output = work + "/" + name
    if FileManager.default.isExecutableFile(atPath: output) { return output }
    let script =
      "cc -O2 -Wall \(flags) -o \(output) \(source) $(pkg-config --cflags --libs fuse3)"
    let buildLog = work + "/\(name)-build.log"
    guard
      let (status, _) = try? Supervisor.shared.run("/bin/sh", ["-c", script], log: buildLog),
      status == 0
    else {
      log("\(name) did not compile; see \(buildLog)")
      return nil
    }
    return output
  }

  /// Delivery p50 and p99 (ms) of the bare-FUSE floor with `readers` readers, or nil.
  func fanoutFloor(readers: Int, posts: Int) -> (p50: Double, p99: Double)? {
    guard let binary = buildFanoutFloor() else { return nil }
    let mountpoint = work + "/floor"
    try? FileManager.default.createDirectory(atPath: mountpoint, withIntermediateDirectories: true)
    let output = work + "/fanout-floor-\(readers).out"
    guard
      let (status, _) = try? Supervisor.shared.run(
        binary, [mountpoint, String(readers), String(posts)], timeout: 120, log: output),
      status == 0,
      let text = try? String(contentsOfFile: output, encoding: .utf8)
    else {
      _ = try? Supervisor.shared.run("/bin/fusermount3", ["-u", "-z", mountpoint], timeout: 10)
      return nil
    }
    // The last line is the result (libfuse may have written to stderr before it).
    let last = text.split(separator: "\n").last ?? ""
    let fields = last.split(separator: " ").compactMap { Double($0) }
    guard fields.count >= 2 else { return nil }
    return (fields[0], fields[1])
  }
}
