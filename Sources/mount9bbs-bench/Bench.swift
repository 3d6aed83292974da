import Foundation
import Glibc
import LinkEmulation
import NinePClient
import NinePProtocol
import NinePTransport

/// The benchmark's state: paths, the running 9bbsd, and the rows gathered so far.
final class Bench: @unchecked Sendable {
  let settings: BenchSettings
  let work: String
  let area: String
  let bbsd: String
  let mount9bbs: String
  var rows: [Row] = []
  let rooms = ["lobby"] + (1...19).map { String(format: "r%02d", $0) }

  private var serverPID: pid_t?
  private(set) var serverPort: UInt16 = 0
  var largeSize: Int { settings.sizeMiB << 20 }
  private var bleSize: Int { settings.bleKiB << 10 }
  private var sequence = 0
  private var mounts = 0

  init(settings: BenchSettings) throws {
    self.settings = settings
    let pid = getpid()
    work = settings.workDir ?? "/tmp/mount9bbs-bench.\(pid)"
    // The file area lives in memory, so no disk is measured; drop_caches before each cat
    // empties the FUSE page caches.
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

  func cleanUp() {
    Supervisor.shared.cleanUp()
    try? FileManager.default.removeItem(atPath: area)
    // Keep the logs; remove the (now empty) mount points and sockets.
    for name in (try? FileManager.default.contentsOfDirectory(atPath: work)) ?? []
    where !name.hasSuffix(".log") && !name.hasPrefix("passthrough") {
      try? FileManager.default.removeItem(atPath: work + "/" + name)
    }
  }

  func add(_ row: Row) {
    rows.append(row)
    let value = row.value.map { String(format: "%.3f", $0) } ?? "n/a"
    log("\(row.section) · \(row.metric): \(value) \(row.unit) \(row.detail)")
  }

  func nextToken() -> Int {
    sequence += 1
    return sequence
  }

  // MARK: - Set-up

  func runAll() throws {
    try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
    // The mounts keep their outbox and room history in the work directory, not the user's.
    setenv("XDG_STATE_HOME", work + "/state", 1)
    try makeArea()
    let wants = settings.sections
    let local = ["cat", "client", "meta", "chat", "daemon", "people", "scripts", "chatclient"]
      .contains {
        wants.contains($0)
      }
    if local || wants.contains("awareness") {
      try startServer()
    }
    if wants.contains("cat") { try largeFileSection() }
    if wants.contains("client") { try clientSection() }
    if wants.contains("meta") { try metadataSection() }
    if wants.contains("chat") { try chatSection() }
    if wants.contains("daemon") { try daemonSection() }
    if wants.contains("awareness") { try awarenessSection() }
    // The people section (last, so the sections keep their numbers) needs the TCP server.
    if !["people", "scripts", "chatclient"].contains(where: wants.contains) { stopServer() }
    if wants.contains("ble") { try bleSection() }
    if wants.contains("people") { try peopleSection() }
    if wants.contains("scripts") { try scriptsSection() }
    if wants.contains("chatclient") { try chatClientSection() }
    stopServer()
  }

  private func stopServer() {
    if let pid = serverPID {
      Supervisor.shared.stop(pid)
      serverPID = nil
    }
  }

  private func makeArea() throws {
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

  private func startServer() throws {
    serverPort = freePort()
    serverPID = try Supervisor.shared.spawn(
      bbsd,
      [
        "--listen", "tcp!127.0.0.1!\(serverPort)", "--files", area, "--files-rw", "--rooms",
        rooms.joined(separator: ","), "--log-level", "warning",
      ], log: work + "/9bbsd.log")
    guard waitForListener(port: serverPort) else { throw BenchError("9bbsd did not start") }
    try seed(serverAddress, profile: .multiplex, rooms: rooms)
  }

  /// One message in every room: opening an empty room on the mount waits for its first message.
  func seed(_ address: TransportAddress, profile: ServerProfile, rooms: [String]) throws {
    let poster = try DirectClient(address: address, profile: profile, uname: "seed")
    defer { poster.close() }
    let fid = try poster.openFile("/chat/post", mode: .write)
    for room in rooms { try poster.post(fid, "\(room):welcome to \(room)") }
  }

  var serverAddress: TransportAddress { .tcp(host: "127.0.0.1", port: serverPort) }

  func mountServer(
    _ name: String, address: String, options: [String] = [], binary: String? = nil,
    uname: String? = nil
  ) throws -> MountedFS {
    // A fresh user name per mount: the server keeps a read cursor per user, and opening a room
    // with nothing unread for that user waits for the next post.
    mounts += 1
    var arguments = ["-f", "-o", "uname=\(uname ?? "bench\(mounts)")"]
    for option in options { arguments += ["-o", option] }
    arguments += [address, work + "/" + name]
    return try MountedFS.start(
      binary ?? mount9bbs, arguments, mountpoint: work + "/" + name, kind: "mount9bbs",
      log: work + "/\(name).log")
  }

  func unmount(_ fs: MountedFS) {
    fs.stop(mount9bbs: fs.kind == "mount9bbs" ? mount9bbs : nil)
  }

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

  // MARK: - 2. the client alone

  private func clientSection() throws {
    let section = "2 client alone"
    let client = try DirectClient(address: serverAddress, profile: .multiplex, uname: "bench")
    defer { client.close() }
    for depth in [1, 4] {
      var rates: [Double] = []
      for _ in 1...settings.runs {
        let fid = try client.openFile("/files/big.bin", mode: .read)
        let start = Clock.now
        let bytes = try client.read(fid, size: largeSize, depth: depth)
        let seconds = Clock.seconds(since: start)
        _ = try? blocking { client.session.clunk(fid, completion: $0) }
        guard bytes == largeSize else { throw BenchError("client read \(bytes) of \(largeSize)") }
        rates.append(Double(bytes) / seconds / 1e6)
      }
      add(
        Row(
          section, "NinePClient, \(depth) read\(depth > 1 ? "s" : "") in flight",
          Stats.median(rates), "MB/s", "msize \(client.session.msize), tcp"))
    }
  }

  // MARK: - 3. ls -l and stat, idle and with 20 blocked rooms

  private func metadataSection(
    mountpoint given: String? = nil, section: String = "3 metadata", samples: Int? = nil,
    runs: Int? = nil, lsTimeout: Double = 120
  ) throws {
    var fs: MountedFS?
    if given == nil { fs = try mountServer("mnt", address: "tcp!127.0.0.1!\(serverPort)") }
    defer { fs.map { unmount($0) } }
    let mountpoint = given ?? fs?.mountpoint ?? ""
    let directory = mountpoint + "/files/dir1000"
    let paths = (0..<1000).map { directory + String(format: "/f%04d", $0) }
    let samples = samples ?? settings.statSamples
    let runs = runs ?? settings.runs

    func lsRuns() -> (first: Double?, median: Double?) {
      var times: [Double] = []
      for _ in 0..<runs {
        guard
          let (status, seconds) = try? Supervisor.shared.run(
            "/bin/ls", ["-l", directory], timeout: lsTimeout), status == 0
        else { break }
        times.append(seconds * 1000)
      }
      return (times.first, Stats.median(times))
    }
    // ls -l first; then stats of distinct files once the kernel's attribute cache (1 s) has
    // expired, so every stat reaches the daemon.
    let idleLs = lsRuns()
    usleep(1_200_000)
    let idle = statLatencies(paths, samples: min(samples, paths.count))
    add(
      Row(section, "ls -l 1000 files, idle", idleLs.median, "ms", "first \(fmt(idleLs.first)) ms"))
    add(Row(section, "stat p50 idle (attr cache expired)", Stats.percentile(idle, 50), "ms"))
    add(Row(section, "stat p99 idle", Stats.percentile(idle, 99), "ms"))

    var tails: [pid_t] = []
    for room in rooms {
      if let pid = try? Supervisor.shared.spawn(
        "/usr/bin/tail", ["-f", mountpoint + "/chat/" + room])
      {
        tails.append(pid)
      }
    }
    defer {
      for pid in tails { kill(pid, SIGKILL) }
      for pid in tails { Supervisor.shared.wait(pid, timeout: 5) }
    }
    usleep(1_500_000)
    let busyLs = lsRuns()
    usleep(1_200_000)
    let busy = statLatencies(paths, samples: min(samples, paths.count))
    add(
      Row(
        section, "ls -l 1000 files, 20 rooms tailed", busyLs.median, "ms",
        "first \(fmt(busyLs.first)) ms"))
    add(Row(section, "stat p50, 20 rooms tailed", Stats.percentile(busy, 50), "ms"))
    add(Row(section, "stat p99, 20 rooms tailed", Stats.percentile(busy, 99), "ms"))
    add(
      Row(
        section, "stat p50 ratio tailed / idle",
        Stats.ratio(Stats.percentile(busy, 50), Stats.percentile(idle, 50)), "×", "target ≤ 1.2"))
  }

  // MARK: - 4. chat delivery latency

  private func chatSection(
    mountpoint given: String? = nil, poster address: TransportAddress? = nil,
    profile: ServerProfile = .multiplex, section: String = "4 chat delivery", posts: Int? = nil
  ) throws {
    var fs: MountedFS?
    if given == nil { fs = try mountServer("mnt", address: "tcp!127.0.0.1!\(serverPort)") }
    defer { fs.map { unmount($0) } }
    let mountpoint = given ?? fs?.mountpoint ?? ""
    let poster = try DirectClient(
      address: address ?? serverAddress, profile: profile, uname: "poster")
    defer { poster.close() }
    let postFid = try poster.openFile("/chat/post", mode: .write)
    let posts = posts ?? settings.posts
    for readerCount in [1, 10, 50] {
      var readers: [RoomReader] = []
      for _ in 0..<readerCount {
        let reader = try RoomReader(path: mountpoint + "/chat/lobby")
        reader.start()
        readers.append(reader)
      }
      let openCount = readers.filter { $0.waitOpened(seconds: 15) }.count
      guard openCount == readerCount else {
        throw BenchError("only \(openCount) of \(readerCount) readers could open the room")
      }
      usleep(300_000)  // let every reader block at the end
      var samples: [Double] = []
      var lost = 0
      for _ in 0..<posts {
        let token = nextToken()
        let start = Clock.now
        try poster.post(postFid, "lobby:bench #b\(token)#")
        for reader in readers {
          if let arrival = reader.arrival(of: token, seconds: 10) {
            samples.append(Double(arrival - start) / 1e6)
          } else {
            lost += 1
          }
        }
        usleep(5_000)
      }
      try poster.post(postFid, "lobby:bench #bEND#")
      for reader in readers { _ = reader.waitFinished(seconds: 10) }
      let detail = "\(samples.count) samples" + (lost > 0 ? ", \(lost) missing" : "")
      let p50 = Stats.percentile(samples, 50)
      let p99 = Stats.percentile(samples, 99)
      add(Row(section, "p50, \(readerCount) reader(s)", p50, "ms", detail))
      add(Row(section, "p99, \(readerCount) reader(s)", p99, "ms", detail))
      // On loopback, the same fan-out with nothing but libfuse behind it, in the same run.
      if given == nil, let floor = fanoutFloor(readers: readerCount, posts: posts) {
        add(
          Row(
            section, "bare-FUSE floor p50 / p99, \(readerCount) reader(s)", floor.p50, "ms",
            String(format: "p99 %.3f ms; libfuse answering from memory, no 9P", floor.p99)))
        add(
          Row(
            section, "p50 ratio mount / floor, \(readerCount) reader(s)",
            Stats.ratio(p50, floor.p50), "×", ""))
      }
    }
  }

  // MARK: - 5. daemon CPU and RSS

  /// CPU (% of one core) and RSS (MiB) of `pids` over the window.
  private func sample(_ pids: [(String, pid_t)], section: String, label: String) {
    let before = pids.map { ProcessSample(pid: $0.1) }
    let start = Clock.now
    usleep(UInt32(settings.window * 1e6))
    let seconds = Clock.seconds(since: start)
    for (index, (name, pid)) in pids.enumerated() {
      guard let first = before[index], let last = ProcessSample(pid: pid) else { continue }
      add(
        Row(
          section, "\(name) CPU, \(label)", (last.cpuSeconds - first.cpuSeconds) / seconds * 100,
          "% core",
          String(
            format: "over %.1f s (resolution %.2f%%)", seconds,
            100 / Double(sysconf(Int32(_SC_CLK_TCK))) / seconds)))
      add(Row(section, "\(name) RSS, \(label)", Double(last.rssKiB) / 1024, "MiB"))
    }
  }

  private func daemonSection() throws {
    let section = "5 daemons"
    do {
      let fs = try mountServer("mnt", address: "tcp!127.0.0.1!\(serverPort)")
      defer { unmount(fs) }
      var readers: [RoomReader] = []
      for index in 0..<100 {
        let reader = try RoomReader(path: fs.mountpoint + "/chat/" + rooms[index % rooms.count])
        reader.start()
        readers.append(reader)
      }
      let openCount = readers.filter { $0.waitOpened(seconds: 15) }.count
      add(Row(section, "room streams open", Double(openCount), "", "of 100, 20 rooms"))
      usleep(1_000_000)
      sample(
        [("mount9bbs", fs.pid), ("9bbsd", serverPID ?? 0)], section: section,
        label: "100 streams idle")
      let poster = try DirectClient(address: serverAddress, profile: .multiplex, uname: "poster")
      defer { poster.close() }
      let fid = try poster.openFile("/chat/post", mode: .write)
      for room in rooms { try poster.post(fid, "\(room):bench #bEND#") }
      for reader in readers { _ = reader.waitFinished(seconds: 10) }
    }

    // 8 feeds against a device-profile server (4 parking slots per session), through a
    // zero-delay emulator that counts the requests.
    let deviceRooms = ["lobby"] + (1...7).map { "d\($0)" }
    let socket = work + "/device.sock"
    let pid = try Supervisor.shared.spawn(
      bbsd,
      [
        "--profile", "device", "--listen", "seqpacket!\(socket)!245", "--rooms",
        deviceRooms.joined(separator: ","), "--log-level", "warning",
      ], log: work + "/9bbsd-device.log")
    defer { Supervisor.shared.stop(pid) }
    guard waitForListener(path: socket) else { throw BenchError("device 9bbsd did not start") }
    try seed(.seqpacket(path: socket, sduLimit: 245), profile: .device, rooms: deviceRooms)
    let counter = try LinkEmulator(
      listen: .seqpacket(path: work + "/count.sock", sduLimit: 245),
      server: .seqpacket(path: socket, sduLimit: 245),
      profile: LinkProfile(roundTrip: .zero, bytesPerSecond: 0, sduSize: 245))
    counter.start()
    defer { counter.close() }
    let fs = try mountServer("mnt-device", address: "seqpacket!\(work)/count.sock!245")
    defer { unmount(fs) }
    var readers: [RoomReader] = []
    for room in deviceRooms {
      let reader = try RoomReader(path: fs.mountpoint + "/chat/" + room)
      reader.start()
      readers.append(reader)
    }
    let openCount = readers.filter { $0.waitOpened(seconds: 5) }.count
    add(
      Row(
        section, "device rooms that opened within 5 s", Double(openCount), "",
        "of 8; the rest wait for a parking slot"))
    usleep(1_000_000)
    let before = counter.statistics()
    sample(
      [("mount9bbs", fs.pid), ("9bbsd device", pid)], section: section, label: "8 feeds, device")
    let window = counter.statistics().since(before)
    add(
      Row(
        section, "9P requests/s, 8 feeds idle, device",
        Double(window.upstream.messages)
          / (Double(window.timestamp) / 1e9), "req/s", "backoff at work when low"))
    let poster = try DirectClient(
      address: .seqpacket(path: socket, sduLimit: 245), profile: .device, uname: "poster")
    defer { poster.close() }
    let fid = try poster.openFile("/chat/post", mode: .write)
    for room in deviceRooms { try poster.post(fid, "\(room):bench #bEND#") }
    for reader in readers { _ = reader.waitFinished(seconds: 10) }
  }

  // MARK: - 6. over an emulated BLE link

  private func bleSection() throws {
    let section = "6 BLE link"
    let socket = work + "/board.sock"
    let pid = try Supervisor.shared.spawn(
      bbsd,
      [
        "--profile", "device", "--listen", "seqpacket!\(socket)!\(settings.bleSDU)", "--files",
        area, "--rooms", rooms.joined(separator: ","), "--log-level", "warning",
      ], log: work + "/9bbsd-board.log")
    defer { Supervisor.shared.stop(pid) }
    guard waitForListener(path: socket) else { throw BenchError("device 9bbsd did not start") }
    try seed(.seqpacket(path: socket, sduLimit: settings.bleSDU), profile: .device, rooms: rooms)
    let profile = LinkProfile(
      roundTrip: .microseconds(Int64(settings.bleRTTms * 1000)),
      bytesPerSecond: settings.bleRate, sduSize: settings.bleSDU)
    let link = try LinkEmulator(
      listen: .seqpacket(path: work + "/ble.sock", sduLimit: settings.bleSDU),
      server: .seqpacket(path: socket, sduLimit: settings.bleSDU), profile: profile)
    link.start()
    defer { link.close() }
    let fs = try mountServer("mnt-ble", address: "seqpacket!\(work)/ble.sock!\(settings.bleSDU)")
    defer { unmount(fs) }
    let rtt = settings.bleRTTms

    // ls mnt/chat on the fresh mount, then again.
    for label in ["first", "again"] {
      let before = link.statistics()
      let result = try? Supervisor.shared.run("/bin/ls", [fs.mountpoint + "/chat"], timeout: 60)
      let window = link.statistics().since(before)
      let ms = (result?.seconds ?? .nan) * 1000
      // The time waited less the time the link spent moving the bytes (a listing of 20 rooms
      // is seven SDUs): what is left is round trips.
      let moving = Double(window.upstream.busyNanoseconds + window.downstream.busyNanoseconds) / 1e6
      add(
        Row(
          section, "ls mnt/chat round trips, \(label)", (ms - moving) / rtt, "RTT",
          String(
            format: "%.0f ms, %.0f of them moving bytes; %d requests, %d link turns; target ≤ 3",
            ms, moving, window.upstream.messages, window.roundTrips)))
    }

    // cat of the BLE-sized file.
    let (rates, utilisation, goodput) = catOverLink(link, mountpoint: fs.mountpoint)
    add(Row(section, "cat \(settings.bleKiB) KiB", Stats.median(rates), "KB/s", "link \(profile)"))
    add(
      Row(
        section, "link utilisation during cat", Stats.median(utilisation), "×",
        "downstream link time / elapsed; target ≥ 0.85 where pipelining is allowed"))
    add(Row(section, "goodput / link rate", Stats.median(goodput), "×", "file bytes only"))
    try blePipelinedCat(section: section, profile: profile)

    try metadataSection(
      mountpoint: fs.mountpoint, section: section, samples: 30, runs: 1, lsTimeout: 180)
    try chatSection(
      mountpoint: fs.mountpoint, poster: .seqpacket(path: socket, sduLimit: settings.bleSDU),
      profile: .device, section: section, posts: min(settings.posts, 10))
  }

  /// `cat` of the BLE-sized file through a mount behind `link`, `bleRuns` times: KB/s, link
  /// utilisation (downstream link time / elapsed) and goodput (file bytes / link rate).
  private func catOverLink(_ link: LinkEmulator, mountpoint: String) -> (
    rates: [Double], utilisation: [Double], goodput: [Double]
  ) {
    var rates: [Double] = []
    var utilisation: [Double] = []
    var goodput: [Double] = []
    for _ in 1...settings.bleRuns {
      dropCaches()
      let before = link.statistics()
      guard
        let (status, seconds) = try? Supervisor.shared.run(
          "/bin/cat", [mountpoint + "/files/ble.bin"], timeout: 300), status == 0
      else { continue }
      let window = link.statistics().since(before)
      rates.append(Double(bleSize) / seconds / 1e3)
      utilisation.append(window.utilisation(\.downstream, elapsedNanoseconds: Int64(seconds * 1e9)))
      goodput.append(Double(bleSize) / seconds / Double(settings.bleRate))
    }
    return (rates, utilisation, goodput)
  }

  /// cat over the same emulated link to a server that allows pipelining (9bbsd's default
  /// profile on seqpacket; the mount with profile=multiplex).
  private func blePipelinedCat(section: String, profile: LinkProfile) throws {
    let socket = work + "/pipelined.sock"
    let pid = try Supervisor.shared.spawn(
      bbsd,
      [
        "--listen", "seqpacket!\(socket)!\(settings.bleSDU)", "--files", area, "--log-level",
        "warning",
      ], log: work + "/9bbsd-pipelined.log")
    defer { Supervisor.shared.stop(pid) }
    guard waitForListener(path: socket) else { throw BenchError("9bbsd did not start") }
    let link = try LinkEmulator(
      listen: .seqpacket(path: work + "/ble2.sock", sduLimit: settings.bleSDU),
      server: .seqpacket(path: socket, sduLimit: settings.bleSDU), profile: profile)
    link.start()
    defer { link.close() }
    let fs = try mountServer(
      "mnt-ble2", address: "seqpacket!\(work)/ble2.sock!\(settings.bleSDU)",
      options: ["profile=multiplex"])
    defer { unmount(fs) }
    let (rates, utilisation, _) = catOverLink(link, mountpoint: fs.mountpoint)
    add(
      Row(
        section, "cat \(settings.bleKiB) KiB, pipelining allowed", Stats.median(rates), "KB/s",
        "default-profile 9bbsd, mount profile=multiplex"))
    add(
      Row(
        section, "link utilisation, pipelining allowed", Stats.median(utilisation), "×",
        "target ≥ 0.85"))
  }

  // MARK: - Output

  func table() -> String {
    var lines: [String] = []
    let width = max(44, rows.map { $0.metric.count }.max() ?? 0)
    var current = ""
    for row in rows {
      if row.section != current {
        current = row.section
        lines.append("")
        lines.append("## " + current)
      }
      let value = row.value.map { format($0) } ?? "n/a"
      let metric = row.metric.padding(toLength: width, withPad: " ", startingAt: 0)
      let number = String(repeating: " ", count: max(0, 10 - value.count)) + value
      lines.append(
        "\(metric) \(number) \(row.unit.padding(toLength: 7, withPad: " ", startingAt: 0)) \(row.detail)"
      )
    }
    return lines.joined(separator: "\n")
  }

  private func format(_ value: Double) -> String {
    if abs(value) >= 100 { return String(format: "%.0f", value) }
    if abs(value) >= 10 { return String(format: "%.1f", value) }
    return String(format: "%.3f", value)
  }

  private func fmt(_ value: Double?) -> String { value.map { format($0) } ?? "n/a" }
}
