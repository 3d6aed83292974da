// libFuzzer entry point for the layers above the codec (built and run by fuzz/run-listing). Each
// input is what a server answers to directory reads: a real Session reads it through the
// mount's ListingCache and MountTree, which number the entries, decide their kinds and build the
// attributes the kernel would get, then look one of them up. Whatever the bytes, the listing
// must end, and what it yields must be something a file system can show: no name longer than
// 255 bytes or with a slash, no name twice, sizes and block counts never negative. A crash, a
// hang or a failed check is a bug.

import Dispatch
import Foundation
import FuseKit
import Logging
import NinePClient
import NinePProtocol
import NinePTransport

@testable import BBSMount

/// A transport whose far end is a 9P server answering in the sending thread: walks to
/// anything, opens anything, and reads `listing` (the fuzz input) by offset.
final class ListingServerTransport: MessageTransport, @unchecked Sendable {
  let address = TransportAddress.unix(path: "fuzz")
  let sendSDULimit: Int? = nil
  private let condition = NSCondition()
  private var inbox: [[UInt8]] = []
  private var closed = false
  private var listing: [UInt8] = []
  /// The first bytes of the input choose how the server cuts its replies.
  private var chunk = 8192

  func serve(_ bytes: [UInt8]) {
    condition.lock()
    chunk = bytes.first.map { Int($0) * 40 + 24 } ?? 8192
    listing = Array(bytes.dropFirst())
    condition.unlock()
  }

  func send(_ message: [UInt8]) throws(TransportError) {
    guard let (tag, request) = try? Message.decode(message, limits: .unbounded) else { return }
    condition.lock()
    defer { condition.unlock() }
    let reply: Message
    switch request {
    case .tversion(let msize, _): reply = .rversion(msize: min(msize, 8192), version: "9P2000")
    case .tattach: reply = .rattach(qid: Qid(type: .directory, path: 1))
    case .twalk(_, _, let names):
      reply = .rwalk(qids: names.map { _ in Qid(type: .directory, path: 2) })
    case .topen: reply = .ropen(qid: Qid(type: .directory, path: 2), iounit: 0)
    case .tread(_, let offset, let count):
      let start = Int(min(offset, UInt64(listing.count)))
      let end = min(listing.count, start + min(Int(count), chunk))
      reply = .rread(data: Array(listing[start..<end]))
    case .tstat:
      reply = .rstat(stat: Stat(qid: Qid(path: 3), mode: FileMode(permissions: 0o644), name: "x"))
    case .tclunk: reply = .rclunk
    case .tflush: reply = .rflush
    default: reply = .rerror(ename: "operation not supported")
    }
    inbox.append(reply.encoded(tag: tag))
    condition.signal()
  }

  func receive(limit: Int) throws(TransportError) -> [UInt8]? {
    condition.lock()
    defer { condition.unlock() }
    while inbox.isEmpty && !closed { condition.wait() }
    if inbox.isEmpty { return nil }
    return inbox.removeFirst()
  }

  func close() {
    condition.lock()
    closed = true
    condition.broadcast()
    condition.unlock()
  }
}

/// What every input shares: one session, one tree (the cache is bypassed by reading fresh).
struct Fixture: @unchecked Sendable {
  let transport: ListingServerTransport
  let tree: MountTree
  let directory: InodeTable.Node

  init() {
    var quiet = Logger(label: "fuzz")
    quiet.logLevel = .critical
    let transport = ListingServerTransport()
    guard
      let session = try? Session.connect(
        transport: transport,
        configuration: SessionConfiguration(
          profile: .multiplex, uname: "fuzz", requestTimeout: .seconds(10)),
        logger: quiet)
    else { fatalError("the in-process server did not attach") }
    let sessions: SessionProvider = { $0(.success(session)) }
    let options = MountOptions(uid: 1000, gid: 1000)
    let pool = Pool(
      address: .unix(path: "unused"),
      configuration: SessionConfiguration(profile: .multiplex, uname: "fuzz"), maxSessions: 1)
    let attributes = NodeAttributes(
      options: options, classifier: PathClassifier(),
      feeds: RoomFeeds(pool: pool, historyDirectory: nil, logger: quiet) { _ in }, started: Date())
    let inodes = InodeTable()
    let listings = ListingCache(
      lifetime: .seconds(1), sessions: sessions,
      limits: DirectoryLimits(rounds: 64, bytes: 1 << 20, entries: 4096, duration: .seconds(5)),
      logger: quiet)
    tree = MountTree(
      inodes: inodes, listings: listings, attributes: attributes,
      remote: Remote(sessions: sessions), logger: quiet)
    directory = inodes.record(path: ["dir"], kind: .directory, stat: nil)
    self.transport = transport
  }
}

let fixture = Fixture()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzListing(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
  fixture.transport.serve(Array(UnsafeBufferPointer(start: data, count: size)))
  let done = DispatchSemaphore(value: 0)
  nonisolated(unsafe) var listed: Result<[DirectoryEntry], NinePError>?
  fixture.tree.entries(of: fixture.directory) { result in
    listed = result
    done.signal()
  }
  // Every listing ends: the limits above bound it well inside this.
  guard done.wait(timeout: .now() + 30) == .success, let listed else {
    fatalError("a listing did not end")
  }
  guard case .success(let entries) = listed else { return 0 }
  var names = Set<String>()
  for entry in entries.dropFirst(2) {
    if entry.name.utf8.count > 255 || entry.name.contains("/") || entry.name.isEmpty {
      fatalError("unusable name listed: \(String(reflecting: entry.name))")
    }
    if !names.insert(entry.name).inserted { fatalError("\(entry.name) listed twice") }
  }
  for entry in entries.dropFirst(2) {
    guard let inode = fixture.tree.inodes.inode(for: ["dir", entry.name]),
      let node = fixture.tree.inodes.node(inode)
    else { fatalError("listed \(entry.name) has no node") }
    let attributes = fixture.tree.attributes.attributes(for: node)
    if attributes.st_size < 0 || attributes.st_blocks < 0 {
      fatalError("negative size for \(entry.name): \(attributes.st_size) \(attributes.st_blocks)")
    }
  }
  // A lookup answered from the listing just read (or, for a missing name, after it).
  if let first = entries.dropFirst(2).first {
    let looked = DispatchSemaphore(value: 0)
    fixture.tree.lookup(["dir"], first.name) { _ in looked.signal() }
    if looked.wait(timeout: .now() + 30) != .success { fatalError("a lookup did not end") }
  }
  return 0
}
