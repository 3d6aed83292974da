import Foundation
import TestSupport
import XCTest

/// The `/files` area through a real mount, driven as programs drive a local disk (python's
/// open/append/mmap/fstat, cp, cat, stat, mkdir -m, df, ln -s, mkfifo): sizes and times follow
/// the mount's own changes at once, and what the mount cannot do fails as a Linux file system
/// that cannot do it fails.
final class PosixFileTests: XCTestCase {
  /// A writable file area, mounted; the area's path.
  private func start(_ setup: Setup = .multiplexTCP) throws -> (MountRig, String) {
    let area = try makeTemporaryDirectory("mount9bbs-posix")
    addTeardownBlock { try? FileManager.default.removeItem(atPath: area) }
    let rig = try MountRig.start(
      setup, for: self, serverArguments: ["--files", area, "--files-rw"])
    return (rig, area)
  }

  /// Runs a python script with `arguments`; its output.
  private func python(
    _ rig: MountRig, _ script: String, _ arguments: [String], timeout: TimeInterval = 30,
    file: StaticString = #filePath, line: UInt = #line
  ) throws -> String {
    let path = rig.directory + "/script-\(UUID().uuidString).py"
    try script.write(toFile: path, atomically: true, encoding: .utf8)
    let quoted = arguments.map { "'\($0)'" }.joined(separator: " ")
    return try sh("python3 \(path) \(quoted)", timeout: timeout, file: file, line: line)
  }

  /// A files area at its cap of open files refuses one more for now ("resource temporarily
  /// unavailable"): an open waits for a file of ours to close rather than failing open(2)
  /// with EAGAIN (fsstress -p 8 saw 1,336 of them while the kernel's releases of closed files
  /// were still on their way), and fails so only when nothing closes.
  func testAnOpenAtTheServersCapWaitsForACloseOfOurs() throws {
    let area = try makeTemporaryDirectory("mount9bbs-posix")
    addTeardownBlock { try? FileManager.default.removeItem(atPath: area) }
    let rig = try MountRig.start(
      .multiplexTCP, for: self,
      serverArguments: ["--files", area, "--files-rw", "--max-open-files", "2"])
    for name in ["a", "b", "c"] {
      try name.write(toFile: area + "/" + name, atomically: false, encoding: .utf8)
    }
    let script = """
      import errno, os, sys, threading, time
      a = os.open(sys.argv[1] + '/a', os.O_RDONLY)
      b = os.open(sys.argv[1] + '/b', os.O_RDONLY)
      threading.Timer(0.3, os.close, [a]).start()
      started = time.monotonic()
      c = os.open(sys.argv[1] + '/c', os.O_RDONLY)
      print('opened', os.read(c, 10).decode(), time.monotonic() - started >= 0.25)
      try:
          os.open(sys.argv[1] + '/a', os.O_RDONLY)
          print('opened a third')
      except OSError as error:
          print(errno.errorcode[error.errno])
      """
    XCTAssertEqual(try python(rig, script, [rig.path("files")]), "opened c True\nEAGAIN\n")
  }

  /// Ten appends of 100 bytes, each its own open (python's `open(f, 'a')`): every byte is kept
  /// and the size says so at once. The mount used to answer getattr with the size seen at
  /// open, the kernel believed it, and each append landed at the old end.
  func testTenAppendsKeepEveryByte() throws {
    let (rig, area) = try start()
    let script = """
      import os, sys
      path = sys.argv[1]
      for i in range(10):
          with open(path, 'a') as f:
              f.write(chr(97 + i) * 100)
      print(os.path.getsize(path))
      with open(path) as f:
          data = f.read()
      print(len(data), data == ''.join(chr(97 + i) * 100 for i in range(10)))
      """
    XCTAssertEqual(try python(rig, script, [rig.path("files/log.txt")]), "1000\n1000 True\n")
    XCTAssertEqual(
      try FileManager.default.attributesOfItem(atPath: area + "/log.txt")[.size] as? Int, 1000)
    rig.assertNoViolations()
  }

  /// `cp` longer versions over files the mount has just read, then read them back at once:
  /// the new lengths, not the old ones.
  func testOverwriteWithLongerFilesReadsBackAtOnce() throws {
    let (rig, area) = try start()
    for index in 0..<20 {
      try "old \(index)\n".write(toFile: area + "/f\(index)", atomically: false, encoding: .utf8)
      try String(repeating: "new \(index) ", count: 50 + index).write(
        toFile: rig.directory + "/n\(index)", atomically: false, encoding: .utf8)
    }
    let files = rig.path("files")
    try sh("cat \(files)/f* > /dev/null")
    try sh(
      "for i in $(seq 0 19); do cp \(rig.directory)/n$i \(files)/f$i && cmp \(rig.directory)/n$i \(files)/f$i || exit 1; done",
      timeout: 60)
    try sh("for i in $(seq 0 19); do cmp \(rig.directory)/n$i \(area)/f$i || exit 1; done")
    rig.assertNoViolations()
  }

  /// fstat and SEEK_END see the mount's own writes and truncates (fsx's "Size error").
  func testSizeFollowsWritesAndTruncatesOnOneDescriptor() throws {
    let (rig, _) = try start()
    let script = """
      import os, sys
      fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
      os.pwrite(fd, b'x' * 128679, 0)
      a = os.fstat(fd).st_size
      os.ftruncate(fd, 1000)
      b = os.fstat(fd).st_size
      os.pwrite(fd, b'y' * 10, 5000)
      c = os.lseek(fd, 0, os.SEEK_END)
      os.close(fd)
      fd = os.open(sys.argv[1], os.O_RDWR | os.O_TRUNC)
      d = os.fstat(fd).st_size
      os.write(fd, b'z' * 77)
      e = os.stat(sys.argv[1]).st_size
      os.close(fd)
      print(a, b, c, d, e)
      """
    XCTAssertEqual(
      try python(rig, script, [rig.path("files/sized.bin")]), "128679 1000 5010 0 77\n")
    rig.assertNoViolations()
  }

  /// `open(O_CREAT)` without `O_EXCL` of a name made on the server since the mount last listed
  /// the directory opens the file (POSIX), rather than failing EEXIST.
  func testCreateOfANameMadeElsewhereOpensIt() throws {
    let (rig, area) = try start()
    try sh("ls \(rig.path("files")) > /dev/null")
    try "first\n".write(toFile: area + "/late.txt", atomically: false, encoding: .utf8)
    try sh("echo second >> \(rig.path("files/late.txt"))")
    XCTAssertEqual(
      try String(contentsOfFile: area + "/late.txt", encoding: .utf8), "first\nsecond\n")
    rig.assertNoViolations()
  }

  /// A writable shared mapping of a file that was empty when opened (SQLite's `-shm`, LMDB)
  /// works, and what is stored through it reaches the server.
  func testSharedWritableMmapOfAnEmptyFile() throws {
    let (rig, area) = try start()
    let script = """
      import mmap, os, sys
      fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
      os.ftruncate(fd, 8192)
      m = mmap.mmap(fd, 8192, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
      m[4096:4101] = b'hello'
      m.flush()
      m.close()
      os.close(fd)
      print('ok')
      """
    XCTAssertEqual(try python(rig, script, [rig.path("files/shm")]), "ok\n")
    let data = try Data(contentsOf: URL(fileURLWithPath: area + "/shm"))
    XCTAssertEqual(data.count, 8192)
    XCTAssertEqual(data.count == 8192 ? Array(data[4096..<4101]) : [], Array("hello".utf8))
    rig.assertNoViolations()
  }

  /// A file written and closed through the mount maps at once when opened read-only
  /// (xfstests generic/010: `mmap(MAP_SHARED, PROT_READ)` gave ENODEV for about 2 s, as the
  /// open went direct while the server's entry still said 0 bytes).
  func testAFileJustWrittenMapsSharedReadOnly() throws {
    let (rig, _) = try start()
    let script = """
      import mmap, os, sys
      for i in range(5):
          path = sys.argv[1] + str(i)
          with open(path, 'wb') as f:
              f.write(bytes([65 + i]) * 8192)
          fd = os.open(path, os.O_RDONLY)
          m = mmap.mmap(fd, 8192, mmap.MAP_SHARED, mmap.PROT_READ)
          assert m[:3] == bytes([65 + i]) * 3 and m[8191] == 65 + i, m[:3]
          m.close()
          os.close(fd)
      print('ok')
      """
    XCTAssertEqual(try python(rig, script, [rig.path("files/mapped")]), "ok\n")
    rig.assertNoViolations()
  }

  /// A directory renamed over keeps no links for a descriptor still open on it (xfstests
  /// generic/035: `st_nlink` stayed 2), as a file renamed over does.
  func testRenamedOverEntriesHaveNoLinks() throws {
    let (rig, _) = try start()
    let script = """
      import os, sys
      root = sys.argv[1]
      os.mkdir(root + '/a'); os.mkdir(root + '/b')
      fd = os.open(root + '/b', os.O_RDONLY | os.O_DIRECTORY)
      os.rename(root + '/a', root + '/b')
      directory = os.fstat(fd).st_nlink
      os.close(fd)
      for name in ('f', 'g'):
          with open(root + '/' + name, 'w') as f: f.write(name)
      with open(root + '/g') as g:
          os.rename(root + '/f', root + '/g')
          file = os.fstat(g.fileno()).st_nlink
      print(directory, file, os.stat(root + '/b').st_nlink)
      """
    let area = rig.path("files/over")
    try FileManager.default.createDirectory(atPath: area, withIntermediateDirectories: true)
    XCTAssertEqual(try python(rig, script, [area]), "0 0 2\n")
    rig.assertNoViolations()
  }

  /// `fstat` of a file open and then unlinked answers from what the mount knows of it.
  func testFstatOfAnOpenUnlinkedFile() throws {
    let (rig, _) = try start()
    let script = """
      import os, sys
      with open(sys.argv[1], 'w+') as f:
          f.write('abc')
          f.flush()
          os.unlink(sys.argv[1])
          st = os.fstat(f.fileno())
          print(st.st_size, st.st_nlink, os.path.exists(sys.argv[1]))
      """
    XCTAssertEqual(try python(rig, script, [rig.path("files/gone.txt")]), "3 0 False\n")
    rig.assertNoViolations()
  }

  /// New files and directories carry the time they were made, and a directory's mtime moves
  /// when an entry is created, removed, made or renamed in it through the mount.
  func testTimesOfNewEntriesAndTheirParents() throws {
    let (rig, area) = try start()
    for directory in ["create", "unlink", "mkdir", "rename"] {
      try FileManager.default.createDirectory(
        atPath: area + "/" + directory, withIntermediateDirectories: false)
    }
    try "x".write(toFile: area + "/unlink/victim", atomically: false, encoding: .utf8)
    try "x".write(toFile: area + "/rename/before", atomically: false, encoding: .utf8)
    try sh(
      "touch -d '2001-01-01 00:00:00' \(area)/create \(area)/unlink \(area)/mkdir \(area)/rename")
    let files = rig.path("files")
    // The mount sees the old times first.
    try sh("ls -lR \(files) > /dev/null")
    XCTAssertEqual(try sh("stat -c %Y \(files)/create"), "978307200\n")
    let script = """
      import os, sys, time
      root = sys.argv[1]
      before = int(time.time())
      open(root + '/create/new', 'w').close()
      os.unlink(root + '/unlink/victim')
      os.mkdir(root + '/mkdir/sub')
      os.rename(root + '/rename/before', root + '/rename/after')
      late = []
      for path in ['create', 'unlink', 'mkdir', 'rename', 'create/new', 'mkdir/sub']:
          st = os.stat(root + '/' + path)
          if st.st_mtime < before or st.st_ctime < before:
              late.append((path, int(st.st_mtime), int(st.st_ctime)))
      print('late', late)
      """
    XCTAssertEqual(try python(rig, script, [files]), "late []\n")
    rig.assertNoViolations()
  }

  /// `mkdir -m` shows the mode the server has.
  /// `mv top/a top/b` then `cat top/b/f`: the file is found under its directory's new name at
  /// once (it used to give ENOENT until the directory was listed again).
  func testFilesOfARenamedDirectoryOpenAtTheirNewPath() throws {
    let (rig, area) = try start()
    try sh(
      "mkdir -p '\(rig.path("files/top/a/d"))' && echo inside > '\(rig.path("files/top/a/f"))'")
    try sh("echo deeper > '\(rig.path("files/top/a/d/g"))'")
    XCTAssertEqual(try sh("cat '\(rig.path("files/top/a/f"))'"), "inside\n")
    try sh("mv '\(rig.path("files/top/a"))' '\(rig.path("files/top/b"))'")
    XCTAssertEqual(try sh("cat '\(rig.path("files/top/b/f"))'"), "inside\n")
    XCTAssertEqual(try sh("cat '\(rig.path("files/top/b/d/g"))'"), "deeper\n")
    try sh("echo more >> '\(rig.path("files/top/b/f"))'")
    XCTAssertEqual(
      try String(contentsOfFile: area + "/top/b/f", encoding: .utf8), "inside\nmore\n")
    rig.assertNoViolations()
  }

  /// A directory renamed over a non-empty one, and a truncate past what the server's file
  /// system holds, fail as they do on a local disk (they were "wstat failed": EIO, shown as
  /// EPERM).
  func testRenameOverANonEmptyDirectoryAndAHugeTruncateSayWhy() throws {
    let (rig, _) = try start()
    try sh("mkdir -p '\(rig.path("files/a"))' '\(rig.path("files/b/c"))'")
    let script = """
      import errno, os, sys
      try:
          os.rename(sys.argv[1], sys.argv[2])
          print("renamed")
      except OSError as e:
          print(errno.errorcode[e.errno])
      open(sys.argv[3], "w").close()
      try:
          os.truncate(sys.argv[3], 999999999999999)
          print("truncated")
      except OSError as e:
          print(errno.errorcode[e.errno])
      """
    XCTAssertEqual(
      try python(rig, script, [rig.path("files/a"), rig.path("files/b"), rig.path("files/big")]),
      "ENOTEMPTY\nEFBIG\n")
    rig.assertNoViolations()
  }

  func testMkdirModeIsShownAsMade() throws {
    let (rig, area) = try start()
    try sh("mkdir -m 0151 \(rig.path("files/odd"))")
    XCTAssertEqual(try sh("stat -c %a \(area)/odd"), "151\n")
    XCTAssertEqual(try sh("stat -c %a \(rig.path("files/odd"))"), "151\n")
    rig.assertNoViolations()
  }

  /// `df` shows a file system with room in it, and names of up to 255 bytes.
  func testStatvfsReportsRoom() throws {
    let (rig, _) = try start()
    let script = """
      import os, sys
      s = os.statvfs(sys.argv[1])
      print(s.f_blocks > 0, s.f_bavail > 0, s.f_bfree >= s.f_bavail, s.f_files > 0, s.f_ffree > 0, s.f_namemax)
      """
    XCTAssertEqual(try python(rig, script, [rig.path("files")]), "True True True True True 255\n")
    rig.assertNoViolations()
  }

  /// A 256-byte name is ENAMETOOLONG for every call, as on a local disk.
  func testOverlongNameIsNameTooLong() throws {
    let (rig, _) = try start()
    let script = """
      import errno, os, sys
      path = sys.argv[1] + '/' + 'n' * 256
      results = []
      for call in [lambda: open(path, 'w'), lambda: os.stat(path), lambda: os.mkdir(path),
                   lambda: os.rename(sys.argv[1] + '/ok', path), lambda: os.unlink(path)]:
          try:
              call()
              results.append('ok')
          except OSError as e:
              results.append(errno.errorcode.get(e.errno, str(e.errno)))
      print(results)
      """
    try sh("echo hi > \(rig.path("files/ok"))")
    XCTAssertEqual(
      try python(rig, script, [rig.path("files")]),
      "['ENAMETOOLONG', 'ENAMETOOLONG', 'ENAMETOOLONG', 'ENAMETOOLONG', 'ENAMETOOLONG']\n")
    rig.assertNoViolations()
  }

  /// Symbolic and hard links, FIFOs, device nodes and sockets are EPERM (what Linux file
  /// systems without them say), and `mknod` of a regular file makes the file.
  func testNodesTheServerCannotHoldAreRefusedAsPermissionDenied() throws {
    let (rig, area) = try start()
    let script = """
      import errno, os, socket, stat, sys
      root = sys.argv[1]
      open(root + '/target', 'w').close()
      results = []
      calls = [
          lambda: os.symlink('target', root + '/link'),
          lambda: os.link(root + '/target', root + '/hard'),
          lambda: os.mkfifo(root + '/fifo'),
          lambda: os.mknod(root + '/chr', 0o644 | stat.S_IFCHR, os.makedev(1, 3)),
          lambda: socket.socket(socket.AF_UNIX).bind(root + '/sock'),
          lambda: os.mknod(root + '/plain', 0o640 | stat.S_IFREG),
      ]
      for call in calls:
          try:
              call()
              results.append('ok')
          except OSError as e:
              results.append(errno.errorcode.get(e.errno, str(e.errno)))
      print(results, oct(os.stat(root + '/plain').st_mode))
      """
    XCTAssertEqual(
      try python(rig, script, [rig.path("files")]),
      "['EPERM', 'EPERM', 'EPERM', 'EPERM', 'EPERM', 'ok'] 0o100640\n")
    XCTAssertTrue(FileManager.default.fileExists(atPath: area + "/plain"))
    rig.assertNoViolations()
  }
  /// A directory's link count is 2 plus its subdirectories, as on ext4 and tmpfs, through
  /// the mount's own mkdir, rmdir and rename (pjdfstest rename/24); it used to stay 2.
  func testDirectoryLinkCountCountsSubdirectories() throws {
    let (rig, _) = try start()
    let parent = rig.path("files/parent")
    try sh("mkdir \(parent) \(parent)/a \(parent)/b && touch \(parent)/file")
    XCTAssertEqual(try sh("stat -c %h \(parent) \(parent)/a"), "4\n2\n")
    try sh("rmdir \(parent)/a && mv \(parent)/b \(parent)/c && mkdir \(parent)/c/d")
    XCTAssertEqual(try sh("stat -c %h \(parent) \(parent)/c"), "3\n3\n")
    // A directory renamed over an empty one takes its place.
    try sh("mkdir \(parent)/e \(parent)/f && mv -T \(parent)/e \(parent)/f")
    XCTAssertEqual(try sh("stat -c %h \(parent)"), "4\n")
    rig.assertNoViolations()
  }

  /// A path deeper than PATH_MAX below the mount (22 names of 200 bytes, made and used
  /// through directory descriptors as pjdfstest's */03.t do) works end to end: the server
  /// walks it a name at a time. It used to fail with EIO once the server's own prefix and
  /// the path passed PATH_MAX.
  func testPathsDeeperThanPathMax() throws {
    let (rig, _) = try start()
    let script = """
      import os, sys
      fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
      for level in range(22):
          name = 'd' * 198 + '%02d' % level
          os.mkdir(name, 0o755, dir_fd=fd)
          child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
          os.close(fd)
          fd = child
      leaf = os.open('leaf', os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644, dir_fd=fd)
      os.write(leaf, b'deep\\n')
      os.close(leaf)
      os.rename('leaf', 'moved', src_dir_fd=fd, dst_dir_fd=fd)
      leaf = os.open('moved', os.O_RDONLY, dir_fd=fd)
      print(os.read(leaf, 100), os.stat('moved', dir_fd=fd).st_size, os.listdir(fd))
      os.close(leaf)
      os.unlink('moved', dir_fd=fd)
      print(os.listdir(fd))
      """
    XCTAssertEqual(
      try python(rig, script, [rig.path("files")]), "b'deep\\n' 5 ['moved']\n[]\n")
    rig.assertNoViolations()
  }

  /// Times 9P2000's 32-bit seconds cannot hold (from 2106-02-07 on, or before 1970) are
  /// refused whole with EOVERFLOW and change nothing; the last second that fits is kept
  /// exactly (pjdfstest utimensat/09).
  func testTimesPastThe32BitRangeAreEOVERFLOW() throws {
    let (rig, _) = try start()
    let script = """
      import errno, os, sys
      path = sys.argv[1] + '/t'
      open(path, 'w').close()
      os.utime(path, (1000, 2000))
      results = []
      for times in [(2**31, 2**32), (-1, 3000), (2**31, 2**32 - 2)]:
          try:
              os.utime(path, times)
              results.append('ok')
          except OSError as e:
              results.append(errno.errorcode.get(e.errno, str(e.errno)))
          s = os.stat(path)
          results.append((int(s.st_atime), int(s.st_mtime)))
      print(results)
      """
    XCTAssertEqual(
      try python(rig, script, [rig.path("files")]),
      "['EOVERFLOW', (1000, 2000), 'EOVERFLOW', (1000, 2000), 'ok', (2147483648, 4294967294)]\n")
    rig.assertNoViolations()
  }
  /// A directory descriptor lists the directory as it is when it is read or rewound
  /// (`rewinddir(3)`), not as it was at `opendir`: files made since, by the mount or on the
  /// server, show. The mount used to serve the listing made at opendir for the handle's life.
  func testDirectoryDescriptorListsTheDirectoryAsItIsNow() throws {
    let (rig, area) = try start()
    let script = """
      import os, sys
      fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
      open(sys.argv[1] + '/made-by-mount', 'w').close()
      first = sorted(os.listdir(fd))
      open(sys.argv[2] + '/made-on-server', 'w').close()
      print(first, sorted(os.listdir(fd)))
      """
    try sh("mkdir \(area)/d")
    XCTAssertEqual(
      try python(rig, script, [rig.path("files/d"), area + "/d"]),
      "['made-by-mount'] ['made-by-mount', 'made-on-server']\n")
    rig.assertNoViolations()
  }
}
