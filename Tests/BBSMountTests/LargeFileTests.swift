import Foundation
import TestSupport
import XCTest

/// Large server files through the mount with the tools people use: cat, dd with 128 KiB and
/// 1 MiB blocks at odd offsets, cp in and out, mmap, a second read from the page cache, and a
/// file changed on the server after it was cached.
final class LargeFileTests: XCTestCase {
  /// An odd size (not a multiple of a page, of msize or of a megabyte), a little over 5 MiB.
  static let size = 5 << 20 + 123_457

  /// Writes `size` pseudo-random bytes (seeded, so a failure repeats) to `path`.
  static func writeRandom(_ path: String, size: Int, seed: UInt64) throws {
    var state = seed
    var bytes = [UInt8](repeating: 0, count: size)
    for index in bytes.indices {
      state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
      bytes[index] = UInt8(truncatingIfNeeded: state >> 33)
    }
    try Data(bytes).write(to: URL(fileURLWithPath: path))
  }

  /// A server with a writable file area holding `big.bin`, mounted; the area's path.
  func start(_ setup: Setup = .multiplexTCP, size: Int = size) throws -> (MountRig, String) {
    let area = try makeTemporaryDirectory("mount9bbs-large")
    addTeardownBlock { try? FileManager.default.removeItem(atPath: area) }
    try Self.writeRandom(area + "/big.bin", size: size, seed: 15)
    let rig = try MountRig.start(
      setup, for: self, serverArguments: ["--files", area, "--files-rw"])
    return (rig, area)
  }

  func testReadsWithEveryBlockSizeAndOffsetMatchTheServerFile() throws {
    let (rig, area) = try start()
    let mounted = rig.path("files/big.bin")
    let original = area + "/big.bin"
    // Whole-file reads: cat (st_blksize buffers), dd with 128 KiB and 1 MiB blocks.
    try sh("cat \(mounted) | cmp - \(original)", timeout: 60)
    try sh("dd if=\(mounted) bs=128K status=none | cmp - \(original)", timeout: 60)
    try sh("dd if=\(mounted) bs=1M status=none | cmp - \(original)", timeout: 60)
    // Direct I/O (the kernel's 1 MiB requests straight to the mount) from an odd offset.
    try sh(
      "dd if=\(mounted) bs=1M skip=3 iflag=direct status=none | cmp - <(tail -c +\(3 << 20 + 1) \(original))"
        .bashed, timeout: 60)
    // Odd offsets and lengths that straddle chunk and megabyte boundaries.
    for (skip, count) in [(1, 1_048_577), (262_143, 700_001), (5 << 20, 200_000)] {
      try sh(
        "cmp <(tail -c +\(skip + 1) \(mounted) | head -c \(count)) <(tail -c +\(skip + 1) \(original) | head -c \(count))"
          .bashed, timeout: 60)
    }
    // A second read, from the page cache, is still right.
    try sh("dd if=\(mounted) bs=1M status=none | cmp - \(original)", timeout: 60)
    XCTAssertEqual(try sh("stat -c %s \(mounted)"), "\(Self.size)\n")
    rig.assertNoViolations()
  }

  /// A sequential reader has the next megabytes read ahead; a write through the mount in the
  /// meantime must reach it, not the bytes read before the write. Direct I/O, so the kernel's
  /// page cache cannot hide a stale read-ahead.
  func testReadAheadNeverServesBytesTheMountOverwrote() throws {
    let (rig, _) = try start()
    let script = """
      import mmap, os, sys, time
      path = sys.argv[1]
      reader = os.open(path, os.O_RDONLY | os.O_DIRECT)
      buffer = mmap.mmap(-1, 1 << 20)
      for offset in (0, 1 << 20):  # two reads in order: the next megabytes are read ahead
          assert os.preadv(reader, [buffer], offset) == 1 << 20
      time.sleep(0.3)
      writer = os.open(path, os.O_WRONLY)
      os.pwrite(writer, b'Z' * 4096, 2 << 20)
      os.close(writer)
      assert os.preadv(reader, [buffer], 2 << 20) == 1 << 20
      assert buffer[:4096] == b'Z' * 4096, bytes(buffer[:16])
      print('ok')
      """
    let scriptPath = rig.directory + "/read_ahead.py"
    try script.write(toFile: scriptPath, atomically: true, encoding: .utf8)
    XCTAssertEqual(
      try sh("python3 \(scriptPath) \(rig.path("files/big.bin"))", timeout: 60), "ok\n")
    rig.assertNoViolations()
  }

  func testMmapReadsTheServerFile() throws {
    let (rig, area) = try start()
    let script = """
      import mmap, sys
      with open(sys.argv[1], 'rb') as m, open(sys.argv[2], 'rb') as o:
          mapped = mmap.mmap(m.fileno(), 0, prot=mmap.PROT_READ)
          want = o.read()
          assert len(mapped) == len(want), (len(mapped), len(want))
          for start in (0, 4095, 1 << 20, len(want) - 5000):
              assert mapped[start:start + 70000] == want[start:start + 70000], start
          assert mapped[:] == want
      print('ok')
      """
    let scriptPath = rig.directory + "/check_mapping.py"
    try script.write(toFile: scriptPath, atomically: true, encoding: .utf8)
    XCTAssertEqual(
      try sh("python3 \(scriptPath) \(rig.path("files/big.bin")) \(area)/big.bin", timeout: 60),
      "ok\n")
    rig.assertNoViolations()
  }

  /// cp into the file area (many megabyte writes, each several Twrites at once), dd writes at
  /// odd offsets into an existing file, and cp back out.
  func testWritesLandIntact() throws {
    let (rig, area) = try start()
    try sh("cp \(area)/big.bin \(rig.path("files/copy.bin"))", timeout: 60)
    try sh("cmp \(area)/big.bin \(area)/copy.bin")
    // Overwrite 1.5 MiB from an odd offset, in 1 MiB blocks, keeping the rest.
    try Self.writeRandom(rig.directory + "/patch.bin", size: 3 << 19, seed: 99)
    try sh(
      "dd if=\(rig.directory)/patch.bin of=\(rig.path("files/copy.bin")) bs=1M seek=777777 oflag=seek_bytes conv=notrunc status=none",
      timeout: 60)
    try sh(
      "cp \(area)/big.bin \(rig.directory)/want.bin && dd if=\(rig.directory)/patch.bin of=\(rig.directory)/want.bin bs=1M seek=777777 oflag=seek_bytes conv=notrunc status=none"
    )
    try sh("cmp \(rig.directory)/want.bin \(area)/copy.bin")
    // And the mount reads back what it wrote.
    try sh("cp \(rig.path("files/copy.bin")) \(rig.directory)/back.bin", timeout: 60)
    try sh("cmp \(rig.directory)/want.bin \(rig.directory)/back.bin")
    rig.assertNoViolations()
  }

  /// Writes answered before they land (write-behind) still land in order where they overlap:
  /// each later write wins, as on a local disk, and a read on the same descriptor sees them.
  func testOverlappingWritesLandInOrder() throws {
    let (rig, area) = try start(size: 4096)
    let script = """
      import os, sys
      want = bytearray()
      def put(fd, offset, data):
          global want
          os.pwrite(fd, data, offset)
          if len(want) < offset + len(data):
              want.extend(b'\\0' * (offset + len(data) - len(want)))
          want[offset:offset + len(data)] = data
      fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
      put(fd, 0, b'a' * (3 << 20))
      for step in range(200):
          put(fd, (step * 7919) % (3 << 20), bytes([98 + step % 20]) * (1000 + step * 37))
      put(fd, 1 << 20, b'z' * (1 << 20))
      put(fd, (1 << 20) + 12345, b'y' * 10)
      assert os.pread(fd, 100, (1 << 20) + 12340) == bytes(want[(1 << 20) + 12340:(1 << 20) + 12440])
      # A truncate right after writes must not be overtaken by them.
      put(fd, 0, b'q' * (1 << 20))
      os.ftruncate(fd, (2 << 20) + 3)
      want = want[:(2 << 20) + 3]
      os.close(fd)
      with open(sys.argv[2], 'rb') as f:
          assert f.read() == bytes(want), 'server copy differs'
      print('ok')
      """
    let scriptPath = rig.directory + "/overlap.py"
    try script.write(toFile: scriptPath, atomically: true, encoding: .utf8)
    XCTAssertEqual(
      try sh(
        "python3 \(scriptPath) \(rig.path("files/overlap.bin")) \(area)/overlap.bin", timeout: 60),
      "ok\n")
    rig.assertNoViolations()
  }

  /// A server whose disk fills up: writes answered before they landed must not let `cp` report
  /// success. The failure comes back on a later write or at close, and cp says so.
  func testAFullServerDiskFailsTheCopy() throws {
    let (rig, area) = try start(size: 4096)
    let tiny = area + "/tiny"
    try FileManager.default.createDirectory(atPath: tiny, withIntermediateDirectories: false)
    try sh("mount -t tmpfs -o size=1m tmpfs \(tiny)")
    addTeardownBlock { _ = try? shell("umount -l \(tiny)") }
    try Self.writeRandom(rig.directory + "/five.bin", size: 5 << 20, seed: 5)
    let copy = try shell(
      "cp \(rig.directory)/five.bin \(rig.path("files/tiny/five.bin"))", timeout: 60)
    XCTAssertNotEqual(copy.status, 0, "cp reported success on a full disk: \(copy.output)")
    XCTAssertTrue(
      copy.output.contains("No space left") || copy.output.contains("error"), copy.output)
    rig.assertNoViolations()
  }

  /// A file read into the page cache and then replaced on the server (another length) is
  /// read afresh once the mount sees the new entry: kept pages never outlive their version.
  func testAFileChangedOnTheServerIsNotServedFromTheCache() throws {
    let (rig, area) = try start(size: 3 << 20)
    let mounted = rig.path("files/big.bin")
    try sh("cat \(mounted) | cmp - \(area)/big.bin", timeout: 60)
    try Self.writeRandom(area + "/new.bin", size: 2 << 20 + 5, seed: 7)
    try sh("mv \(area)/new.bin \(area)/big.bin")
    // The mount's attributes live for a while; a listing refreshes them.
    XCTAssertTrue(
      waitUntil(timeout: 15, interval: 0.2) {
        _ = try? shell("ls -l \(rig.path("files")) >/dev/null")
        return (try? shell("stat -c %s \(mounted)"))?.output == "\(2 << 20 + 5)\n"
      })
    try sh("cat \(mounted) | cmp - \(area)/big.bin", timeout: 60)
    rig.assertNoViolations()
  }

  /// The mount raises its readahead and tells programs to use megabyte buffers: what lets
  /// cat, cp and the kernel keep the link full.
  func testMountAsksForLargeRequests() throws {
    let (rig, _) = try start(size: 4096)
    // Any request after init applies the readahead.
    try sh("ls \(rig.mountpoint) > /dev/null")
    let device = try sh("mountpoint -d \(rig.mountpoint)").trimmingCharacters(
      in: .whitespacesAndNewlines)
    XCTAssertEqual(try sh("cat /sys/class/bdi/\(device)/read_ahead_kb"), "8192\n")
    XCTAssertEqual(try sh("stat -c %o \(rig.path("files/big.bin"))"), "\(1 << 20)\n")
  }

  /// Over a device link (one request at a time, 245-byte SDUs), big readahead and pipelining
  /// must not break the board's rules.
  func testDeviceLinkReadsAndWritesKeepTheDiscipline() throws {
    let (rig, area) = try start(.deviceSeqpacket, size: 300_001)
    try sh(
      "dd if=\(rig.path("files/big.bin")) bs=1M status=none | cmp - \(area)/big.bin", timeout: 120)
    try sh("cp \(area)/big.bin \(rig.path("files/copy.bin"))", timeout: 120)
    try sh("cmp \(area)/big.bin \(area)/copy.bin")
    rig.assertNoViolations()
  }
}

extension String {
  /// The command run by bash (for process substitution), quoted for `sh -c`.
  fileprivate var bashed: String {
    "bash -c '" + replacingOccurrences(of: "'", with: "'\\''") + "'"
  }
}
