import Foundation
import TestSupport

#if canImport(Glibc)
  import Glibc
#endif

/// A model-based file exerciser, in the manner of xfstests' fsx: random writes, truncates
/// (`ftruncate` and `O_TRUNC`), reads, `O_APPEND` writes, `MAP_SHARED` reads and writes (with
/// `msync`), `O_DIRECT` reads and writes, close and reopen, each checked against an in-memory
/// copy of what the file must hold, with an `fstat` size check after every operation.
///
/// Runs are seeded: the same seed makes the same operations. A failure is a
/// ``FileModelFailure`` that names the seed, the operation, the first differing offset and
/// the last operations run.
final class FileModelChecker {
  /// One operation, as the log shows it.
  enum Operation: CustomStringConvertible {
    case write(offset: Int, length: Int)
    case append(length: Int)
    case read(offset: Int, length: Int)
    case truncate(size: Int)
    case truncateOnOpen
    case mappedRead(offset: Int, length: Int)
    case mappedWrite(offset: Int, length: Int)
    case directRead(offset: Int, length: Int)
    case directWrite(offset: Int, length: Int)
    case reopen

    var description: String {
      switch self {
      case .write(let offset, let length): "pwrite    \(range(offset, length))"
      case .append(let length): "append    \(length) bytes (O_APPEND)"
      case .read(let offset, let length): "pread     \(range(offset, length))"
      case .truncate(let size): "ftruncate to \(size)"
      case .truncateOnOpen: "open O_TRUNC"
      case .mappedRead(let offset, let length): "mmap read \(range(offset, length))"
      case .mappedWrite(let offset, let length): "mmap write \(range(offset, length)) + msync"
      case .directRead(let offset, let length): "O_DIRECT pread  \(range(offset, length))"
      case .directWrite(let offset, let length): "O_DIRECT pwrite \(range(offset, length))"
      case .reopen: "close, reopen"
      }
    }

    private func range(_ offset: Int, _ length: Int) -> String {
      "0x\(String(offset, radix: 16))..0x\(String(offset + length, radix: 16)) (\(length) bytes)"
    }
  }

  /// The kinds of I/O a run may use; a file system that cannot map or bypass the cache leaves
  /// them out.
  struct Features: OptionSet {
    let rawValue: Int
    static let mmap = Features(rawValue: 1)
    static let directIO = Features(rawValue: 2)
    /// `ftruncate`. Without it, each `ftruncate` must fail with `EPERM` and change nothing (a
    /// board has no Twstat; `O_TRUNC` still empties a file).
    static let setSize = Features(rawValue: 4)
    static let all: Features = [.mmap, .directIO, .setSize]
  }

  let path: String
  let seed: UInt64
  let features: Features
  /// The file never grows past this (writes are placed below it).
  let maximumSize: Int
  /// How many operations a failure report lists.
  let logLength = 40

  private var random: SplitMix64
  private var model: [UInt8]
  private var descriptor: Int32 = -1
  private var log: [(index: Int, operation: Operation)] = []
  private var count = 0

  /// O_DIRECT, which Glibc's Swift module leaves out (it is a _GNU_SOURCE flag).
  #if arch(arm64)
    static let directFlag: Int32 = 0o200000
  #else
    static let directFlag: Int32 = 0o40000
  #endif
  /// The alignment O_DIRECT offsets, lengths and buffers keep.
  static let directAlignment = 4096

  /// Opens `path`: created empty, or, given `initialContents` (what the file holds already,
  /// written by someone else), kept as it is.
  init(
    path: String, seed: UInt64, features: Features = .all, maximumSize: Int = 256 << 10,
    initialContents: [UInt8]? = nil
  ) throws {
    self.path = path
    self.seed = seed
    self.features = features
    self.maximumSize = maximumSize
    random = SplitMix64(seed: seed)
    model = initialContents ?? []
    let flags = O_RDWR | O_CREAT | (initialContents == nil ? O_TRUNC : 0)
    descriptor = open(path, flags, 0o644)
    guard descriptor >= 0 else { throw failure("open \(path): \(errorText())") }
    try checkSize()
  }

  deinit {
    if descriptor >= 0 { close(descriptor) }
  }

  /// Runs `operations` more random operations.
  func run(operations: Int) throws {
    for _ in 0..<operations {
      let operation = nextOperation()
      count += 1
      log.append((count, operation))
      if log.count > logLength { log.removeFirst(log.count - logLength) }
      try perform(operation)
      try checkSize()
    }
  }

  /// Reads the whole file on a fresh descriptor and compares it with the model.
  func verifyWholeFile() throws {
    let reader = open(path, O_RDONLY)
    guard reader >= 0 else { throw failure("open for the final read: \(errorText())") }
    defer { close(reader) }
    var contents = [UInt8](repeating: 0, count: model.count + 4096)
    var filled = 0
    while filled < contents.count {
      let got = contents.withUnsafeMutableBytes {
        pread(reader, $0.baseAddress.map { $0 + filled }, $0.count - filled, off_t(filled))
      }
      if got < 0 && errno == EINTR { continue }
      guard got >= 0 else { throw failure("final read at \(filled): \(errorText())") }
      if got == 0 { break }
      filled += got
    }
    try compare(Array(contents[..<filled]), at: 0, expectedLength: model.count, what: "final read")
  }

  /// Closes the descriptor (flushing what was written behind) and says what the file must
  /// hold.
  func finish() throws -> [UInt8] {
    if descriptor >= 0 {
      let closed = close(descriptor)
      descriptor = -1
      guard closed == 0 else { throw failure("close: \(errorText())") }
    }
    return model
  }

  /// A failure with the run's context: seed, operation count, the operations leading to it.
  func failure(_ what: String, firstDifference: Int? = nil) -> FileModelFailure {
    FileModelFailure(
      path: path, seed: seed, operationIndex: count, what: what,
      firstDifference: firstDifference,
      recentOperations: log.map { "#\($0.index) \($0.operation)" }, modelSize: model.count)
  }

  // MARK: Choosing operations

  private func nextOperation() -> Operation {
    let size = model.count
    while true {
      switch random.next(below: 100) {
      case 0..<22:
        let offset = random.next(below: maximumSize - 1)
        return .write(offset: offset, length: length(upTo: maximumSize - offset))
      case 22..<30:
        guard size < maximumSize else { continue }
        return .append(length: length(upTo: maximumSize - size))
      case 30..<50:
        let offset = random.next(below: max(size, 1) + 4096)
        return .read(offset: offset, length: length(upTo: 1 << 17))
      case 50..<57:
        // Shrink more often than grow, so the file keeps a size that moves both ways.
        let size =
          random.next(below: 3) == 0
          ? random.next(below: maximumSize + 1) : random.next(below: size + 1)
        return .truncate(size: size)
      case 57..<59:
        return .truncateOnOpen
      case 59..<67:
        guard features.contains(.mmap), size > 0 else { continue }
        let offset = random.next(below: size)
        return .mappedRead(offset: offset, length: length(upTo: size - offset))
      case 67..<75:
        guard features.contains(.mmap), size > 0 else { continue }
        let offset = random.next(below: size)
        return .mappedWrite(offset: offset, length: length(upTo: size - offset))
      case 75..<83:
        guard features.contains(.directIO) else { continue }
        let blocks = (max(size, 1) + 4095) / Self.directAlignment + 1
        return .directRead(
          offset: random.next(below: blocks) * Self.directAlignment,
          length: (1 + random.next(below: 8)) * Self.directAlignment)
      case 83..<91:
        guard features.contains(.directIO) else { continue }
        let blocks = maximumSize / Self.directAlignment
        let first = random.next(below: blocks)
        return .directWrite(
          offset: first * Self.directAlignment,
          length: (1 + random.next(below: min(8, blocks - first))) * Self.directAlignment)
      default:
        return .reopen
      }
    }
  }

  /// A length in 1...limit: mostly small (within a page), sometimes pages, now and then large.
  private func length(upTo limit: Int) -> Int {
    let cap: Int
    switch random.next(below: 10) {
    case 0..<5: cap = 4096
    case 5..<9: cap = 32 << 10
    default: cap = 128 << 10
    }
    return 1 + random.next(below: max(1, min(cap, limit)))
  }

  // MARK: Performing them

  private func perform(_ operation: Operation) throws {
    switch operation {
    case .write(let offset, let length):
      let data = pattern(offset: offset, length: length)
      try writeAll(descriptor, data, at: offset, what: "pwrite")
      apply(data, at: offset)
    case .append(let length):
      let appender = try openFile(O_WRONLY | O_APPEND, what: "open O_APPEND")
      defer { close(appender) }
      let data = pattern(offset: model.count, length: length)
      let written = data.withUnsafeBytes { write(appender, $0.baseAddress, $0.count) }
      guard written == length else { throw failure("append wrote \(written): \(errorText())") }
      apply(data, at: model.count)
      let end = lseek(appender, 0, SEEK_CUR)
      guard end == off_t(model.count) else {
        throw failure("after an O_APPEND write the offset is \(end), not \(model.count)")
      }
    case .read(let offset, let length):
      var buffer = [UInt8](repeating: 0, count: length)
      let got = buffer.withUnsafeMutableBytes {
        pread(descriptor, $0.baseAddress, length, off_t(offset))
      }
      guard got >= 0 else { throw failure("pread: \(errorText())") }
      try compare(
        Array(buffer[..<got]), at: offset, expectedLength: expectedLength(offset, length),
        what: "pread")
    case .truncate(let size):
      let result = ftruncate(descriptor, off_t(size))
      if !features.contains(.setSize) {
        guard result == -1, errno == EPERM else {
          throw failure("ftruncate must fail with EPERM here; it gave \(result) \(errorText())")
        }
        return
      }
      guard result == 0 else { throw failure("ftruncate: \(errorText())") }
      resize(to: size)
    case .truncateOnOpen:
      close(descriptor)
      descriptor = -1  // never closed twice, whatever the open below does
      descriptor = try openFile(O_RDWR | O_TRUNC, what: "open O_TRUNC")
      model = []
    case .mappedRead(let offset, let length):
      try withMapping(PROT_READ) { bytes in
        let got = Array(UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + length]))
        try compare(got, at: offset, expectedLength: length, what: "mmap read")
      }
    case .mappedWrite(let offset, let length):
      let data = pattern(offset: offset, length: length)
      try withMapping(PROT_READ | PROT_WRITE) { bytes in
        data.withUnsafeBytes {
          UnsafeMutableRawBufferPointer(rebasing: bytes[offset..<offset + length])
            .copyMemory(from: $0)
        }
        guard msync(bytes.baseAddress, bytes.count, MS_SYNC) == 0 else {
          throw failure("msync: \(errorText())")
        }
      }
      apply(data, at: offset)
    case .directRead(let offset, let length):
      let reader = try openFile(O_RDONLY | Self.directFlag, what: "open O_RDONLY|O_DIRECT")
      defer { close(reader) }
      let buffer = try AlignedBuffer(length)
      let got = pread(reader, buffer.pointer, length, off_t(offset))
      guard got >= 0 else { throw failure("O_DIRECT pread: \(errorText())") }
      try compare(
        Array(UnsafeRawBufferPointer(start: buffer.pointer, count: got)), at: offset,
        expectedLength: expectedLength(offset, length), what: "O_DIRECT pread")
    case .directWrite(let offset, let length):
      let writer = try openFile(O_WRONLY | Self.directFlag, what: "open O_WRONLY|O_DIRECT")
      defer { close(writer) }
      let data = pattern(offset: offset, length: length)
      let buffer = try AlignedBuffer(length)
      UnsafeMutableRawBufferPointer(start: buffer.pointer, count: length).copyBytes(from: data)
      let written = pwrite(writer, buffer.pointer, length, off_t(offset))
      guard written == length else {
        throw failure("O_DIRECT pwrite wrote \(written) of \(length): \(errorText())")
      }
      apply(data, at: offset)
    case .reopen:
      let closed = close(descriptor)
      descriptor = -1
      guard closed == 0 else { throw failure("close: \(errorText())") }
      descriptor = try openFile(O_RDWR, what: "reopen")
    }
  }

  /// fstat's size is the model's.
  private func checkSize() throws {
    var status = stat()
    guard fstat(descriptor, &status) == 0 else { throw failure("fstat: \(errorText())") }
    guard status.st_size == off_t(model.count) else {
      throw failure(
        "size error: fstat says \(status.st_size), the file must be \(model.count) bytes",
        firstDifference: min(Int(status.st_size), model.count))
    }
  }

  /// Compares bytes read at `offset` with the model: the same length, the same bytes.
  private func compare(_ got: [UInt8], at offset: Int, expectedLength: Int, what: String) throws {
    let want = Array(model[min(offset, model.count)..<min(offset + expectedLength, model.count)])
    let common = min(got.count, want.count)
    let same = got.withUnsafeBytes { got in
      want.withUnsafeBytes { want in
        guard let got = got.baseAddress, let want = want.baseAddress else { return true }
        return memcmp(got, want, common) == 0
      }
    }
    if !same, let index = (0..<common).first(where: { got[$0] != want[$0] }) {
      let at = offset + index
      throw failure(
        "\(what) read wrong data: first differing offset 0x\(String(at, radix: 16)) (\(at)):"
          + " got \(hex(got, from: index)), want \(hex(want, from: index))",
        firstDifference: at)
    }
    guard got.count == want.count else {
      throw failure(
        "\(what) returned \(got.count) bytes, want \(want.count)"
          + " (the file is \(model.count) bytes)",
        firstDifference: offset + common)
    }
  }

  /// How many bytes a read of `length` at `offset` returns.
  private func expectedLength(_ offset: Int, _ length: Int) -> Int {
    max(0, min(length, model.count - offset))
  }

  private func hex(_ bytes: [UInt8], from index: Int) -> String {
    bytes[index..<min(index + 8, bytes.count)].map { String(format: "%02x", $0) }.joined(
      separator: " ")
  }

  /// Maps the whole file (shared) and runs `body` on its bytes.
  private func withMapping(
    _ protection: Int32, _ body: (UnsafeMutableRawBufferPointer) throws -> Void
  ) throws {
    let length = model.count
    let mapped = mmap(nil, length, protection, MAP_SHARED, descriptor, 0)
    guard let mapped, mapped != MAP_FAILED else { throw failure("mmap: \(errorText())") }
    defer { munmap(mapped, length) }
    try body(UnsafeMutableRawBufferPointer(start: mapped, count: length))
  }

  private func openFile(_ flags: Int32, what: String) throws -> Int32 {
    let opened = open(path, flags)
    guard opened >= 0 else { throw failure("\(what): \(errorText())") }
    return opened
  }

  private func writeAll(_ descriptor: Int32, _ data: [UInt8], at offset: Int, what: String) throws {
    let written = data.withUnsafeBytes {
      pwrite(descriptor, $0.baseAddress, $0.count, off_t(offset))
    }
    guard written == data.count else {
      throw failure("\(what) wrote \(written) of \(data.count): \(errorText())")
    }
  }

  /// Bytes that say who wrote them: a function of the position and the operation's number,
  /// so a byte in the wrong place or from an older write shows up.
  private func pattern(offset: Int, length: Int) -> [UInt8] {
    let stamp = UInt8(truncatingIfNeeded: count &* 37 &+ 1)
    return [UInt8](unsafeUninitializedCapacity: length) { bytes, initialized in
      for index in 0..<length {
        bytes[index] = UInt8(truncatingIfNeeded: (offset &+ index) / 3) ^ stamp
      }
      initialized = length
    }
  }

  private func apply(_ data: [UInt8], at offset: Int) {
    if model.count < offset + data.count {
      model += [UInt8](repeating: 0, count: offset + data.count - model.count)
    }
    model.replaceSubrange(offset..<offset + data.count, with: data)
  }

  private func resize(to size: Int) {
    if size < model.count {
      model.removeLast(model.count - size)
    } else {
      model += [UInt8](repeating: 0, count: size - model.count)
    }
  }

  private func errorText() -> String {
    let code = errno
    return "\(String(cString: strerror(code))) (errno \(code))"
  }
}

/// What a ``FileModelChecker`` run found wrong, with what it takes to repeat it.
struct FileModelFailure: Error, CustomStringConvertible {
  let path: String
  let seed: UInt64
  let operationIndex: Int
  let what: String
  /// The first offset where the file and the model part (for a size error: the smaller size).
  let firstDifference: Int?
  let recentOperations: [String]
  let modelSize: Int

  var description: String {
    """
    \(path): operation #\(operationIndex) (seed \(seed)): \(what)
    the model holds \(modelSize) bytes\(firstDifference.map { "; first differing offset \($0)" } ?? "")
    last \(recentOperations.count) operations:
    \(recentOperations.joined(separator: "\n"))
    """
  }
}

/// A page-aligned buffer for O_DIRECT.
private final class AlignedBuffer {
  let pointer: UnsafeMutableRawPointer

  init(_ length: Int) throws {
    var memory: UnsafeMutableRawPointer?
    guard posix_memalign(&memory, FileModelChecker.directAlignment, max(length, 1)) == 0,
      let memory
    else { throw HarnessError("posix_memalign(\(length)) failed") }
    pointer = memory
  }

  deinit { free(pointer) }
}

/// A small, fast, seedable generator (Steele, Lea and Flood's SplitMix64): the same seed gives
/// the same operations on every machine.
struct SplitMix64 {
  private var state: UInt64

  init(seed: UInt64) { state = seed }

  mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }

  /// A number in 0..<bound (bound ≥ 1).
  mutating func next(below bound: Int) -> Int {
    Int(next() % UInt64(max(bound, 1)))
  }
}
