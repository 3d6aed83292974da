import Foundation
import NinePClient
import NinePProtocol
import NinePTransport
import TestSupport
import XCTest

@testable import BBSMount

/// Listings against a real device-profile `9bbsd` (one request at a time, as on a board),
/// counting the requests it logs: a directory listed again costs one re-read of its kept fid,
/// a short first reply answers at once, and a removed directory is walked afresh.
final class ListingCacheTests: XCTestCase {
  private var server: ServerProcess?
  private var session: Session?

  override func tearDown() {
    session?.close()
    server?.child.stop()
    super.tearDown()
  }

  private func start(extra: [String] = []) throws -> (ServerProcess, Session) {
    let server = try ServerProcess(
      transport: "seqpacket", profile: "device", extra: ["--log-level", "trace"] + extra)
    self.server = server
    let session = try Session.connect(
      transport: try dial(try TransportAddress(parsing: server.address)),
      configuration: SessionConfiguration(
        profile: .device, uname: "glenda", requestTimeout: .seconds(10)))
    self.session = session
    return (server, session)
  }

  /// Requests of the kinds listing uses that the server has logged so far.
  private func requests(_ server: ServerProcess) -> [String] {
    server.log.split(separator: "\n").compactMap { line in
      guard let range = line.range(of: "<- T") else { return nil }
      let kind = line[range.upperBound...].prefix { $0.isLetter }
      return ["walk", "open", "read", "clunk"].contains(String(kind)) ? String(kind) : nil
    }
  }

  private func list(
    _ cache: ListingCache, _ path: [String], maxAge: Duration? = nil, complete: Bool = false,
    asOfNow: Bool = false
  ) -> (names: [String], whole: Bool)? {
    let done = DispatchSemaphore(value: 0)
    let result = LockedBox<[String]?>(nil)
    cache.listing(path, maxAge: maxAge, complete: complete, asOfNow: asOfNow) { listed in
      if case .success(let listing) = listed { result.value = listing.stats.map(\.name) }
      done.signal()
    }
    guard done.wait(timeout: .now() + 10) == .success, let names = result.value else {
      return nil
    }
    return (names, cache.isComplete(path))
  }

  func testKeptDirectoryIsReadAgainWithOneRequestAndAShortReplyAnswersAtOnce() throws {
    let (server, session) = try start()
    let cache = ListingCache(lifetime: .seconds(1), keptDirectories: 4) { $0(.success(session)) }
    let before = requests(server).count

    // First listing: walk, open, one short read answers; the confirming read follows.
    let first = try XCTUnwrap(list(cache, ["chat"]))
    XCTAssertEqual(Set(first.names), ["lobby", "tech", "post", "users"])
    let whole = try XCTUnwrap(list(cache, ["chat"], complete: true))
    XCTAssertTrue(whole.whole)
    XCTAssertEqual(Set(whole.names), Set(first.names))
    XCTAssertTrue(waitUntil(timeout: 5) { self.requests(server).count - before == 4 })
    XCTAssertEqual(Array(requests(server).suffix(4)), ["walk", "open", "read", "read"])

    // Listed again: the kept fid is re-read from offset 0, no walk, open or clunk.
    let again = try XCTUnwrap(list(cache, ["chat"], maxAge: .zero, complete: true))
    XCTAssertEqual(Set(again.names), Set(first.names))
    XCTAssertTrue(waitUntil(timeout: 5) { self.requests(server).count - before == 6 })
    XCTAssertEqual(Array(requests(server).suffix(2)), ["read", "read"])

    // Removed (by us): the kept fid is clunked and the next listing walks anew.
    cache.forgetSubtree(["chat"])
    _ = try XCTUnwrap(list(cache, ["chat"], complete: true))
    XCTAssertTrue(waitUntil(timeout: 5) { self.requests(server).count - before == 11 })
    XCTAssertEqual(
      Array(requests(server).suffix(5)), ["clunk", "walk", "open", "read", "read"])
    XCTAssertEqual(server.violations, [])
  }

  /// A caller that wants the directory as it is now (`asOfNow`: a `rewinddir`) is not
  /// answered by a listing asked for before it: a file made on the server after that
  /// listing's last read shows. (A rewound directory descriptor in a loaded full run missed a
  /// file made between its two reads: the second joined the first's confirming read, done
  /// at the server but not yet back.)
  func testAListingAskedForBeforeAFreshCallerDoesNotAnswerIt() throws {
    let area = try makeTemporaryDirectory("listing-fresh")
    FileManager.default.createFile(atPath: "\(area)/first", contents: Data())
    let server = try ServerProcess(
      transport: "unix", profile: "device", extra: ["--log-level", "trace", "--files", area])
    self.server = server
    // Answers come 300 ms late; requests reach the server at once.
    let proxy = try FaultProxy(
      listen: .unix(path: area + ".proxy"), server: try TransportAddress(parsing: server.address))
    addTeardownBlock { proxy.stop() }
    proxy.setReplyDelay(0.3)
    let session = try Session.connect(
      transport: try dial(proxy.listenAddress),
      configuration: SessionConfiguration(
        profile: .device, uname: "glenda", requestTimeout: .seconds(10)))
    self.session = session
    let cache = ListingCache(lifetime: .seconds(1), keptDirectories: 4) { $0(.success(session)) }
    let reads = { self.requests(server).filter { $0 == "read" }.count }
    let early = try XCTUnwrap(list(cache, ["files"]))
    XCTAssertEqual(early.names, ["first"])
    XCTAssertFalse(early.whole, "answered by the short first reply, the confirming read out")
    // The confirming read is done at the server; its answer is on its way back.
    XCTAssertTrue(waitUntil(timeout: 5) { reads() == 2 }, "\(self.requests(server))")
    FileManager.default.createFile(atPath: "\(area)/made-on-server", contents: Data())
    // An `ls` takes the listing on its way (a round trip less on a radio link)...
    let joined = try XCTUnwrap(list(cache, ["files"], maxAge: .zero))
    XCTAssertEqual(joined.names, ["first"])
    // ...a rewind does not. Another listing, answered by its short first reply; its
    // confirming read done at the server, the answer on its way.
    let second = try XCTUnwrap(list(cache, ["files"], maxAge: .zero))
    XCTAssertEqual(second.names.sorted(), ["first", "made-on-server"])
    XCTAssertFalse(second.whole)
    XCTAssertTrue(waitUntil(timeout: 5) { reads() == 4 }, "\(self.requests(server))")
    FileManager.default.createFile(atPath: "\(area)/made-later", contents: Data())
    let fresh = try XCTUnwrap(list(cache, ["files"], maxAge: .zero, asOfNow: true))
    XCTAssertEqual(fresh.names.sorted(), ["first", "made-later", "made-on-server"])
    XCTAssertEqual(server.violations, [])
  }

  /// A listing larger than one reply is never cut short: the first reply is full, so every
  /// caller waits for the rest.
  func testLongListingIsWholeEvenForTheFirstCaller() throws {
    let area = try makeTemporaryDirectory("listing-area")
    for index in 0..<400 {
      FileManager.default.createFile(atPath: "\(area)/file-\(index).txt", contents: Data())
    }
    let (_, session) = try start(extra: ["--files", area])
    let cache = ListingCache(lifetime: .seconds(1), keptDirectories: 4) { $0(.success(session)) }
    let first = try XCTUnwrap(list(cache, ["files"]))
    XCTAssertEqual(first.names.count, 400)
    XCTAssertTrue(first.whole)
  }

  /// The mount's own changes edit a kept listing, which then answers without a request; one
  /// that cannot take an edit (a rename of a name it lacks) is dropped and fetched again.
  func testEditsKeepAListingWithoutARequest() throws {
    let (server, session) = try start()
    let cache = ListingCache(lifetime: .seconds(60), keptDirectories: 4) {
      $0(.success(session))
    }
    let first = try XCTUnwrap(list(cache, ["etc"], complete: true))
    let reads = requests(server).filter { $0 == "read" }.count
    let template = try XCTUnwrap(lastStat(cache, ["etc"], first.names[0]))
    var made = template
    made.name = "made"
    cache.apply(.added(made), to: ["etc"])
    cache.apply(.removed(first.names[0]), to: ["etc"])
    cache.apply(.renamed(from: first.names[1], to: "moved"), to: ["etc"])
    let edited = try XCTUnwrap(list(cache, ["etc"]))
    XCTAssertEqual(
      Set(edited.names), Set(first.names.dropFirst(2) + ["made", "moved"]), "\(edited.names)")
    XCTAssertNotNil(cache.lastSeen(["etc"])?.stat(named: "moved"))
    XCTAssertNil(cache.lastSeen(["etc"])?.stat(named: first.names[0]))
    XCTAssertEqual(requests(server).filter { $0 == "read" }.count, reads, "no request")
    cache.apply(.renamed(from: "never-listed", to: "x"), to: ["etc"])
    XCTAssertNil(cache.lastSeen(["etc"]), "a listing that cannot take an edit is dropped")
  }

  private func lastStat(_ cache: ListingCache, _ path: [String], _ name: String) -> Stat? {
    cache.lastSeen(path)?.stat(named: name)
  }

  /// More directories than may be kept: the least recently used one is closed, and the fids
  /// in use never exceed the limit (a board has 32 for everything).
  func testKeptDirectoriesAreBounded() throws {
    let (server, session) = try start()
    let cache = ListingCache(lifetime: .seconds(1), keptDirectories: 2) { $0(.success(session)) }
    for path in [["chat"], ["etc"], [], ["chat"]] {
      XCTAssertNotNil(list(cache, path, maxAge: .zero, complete: true), "\(path)")
    }
    // A kept directory is clunked after the listing that pushed it out has answered: the
    // server may log that clunk a moment later.
    XCTAssertTrue(
      waitUntil(timeout: 5) { requests(server).filter { $0 == "clunk" }.count >= 2 },
      "\(requests(server))")
    let kinds = requests(server)
    XCTAssertEqual(kinds.filter { $0 == "walk" }.count, 4, "chat was closed to keep the root")
    XCTAssertEqual(kinds.filter { $0 == "clunk" }.count, 2)
  }
}

/// A value shared with a callback.
final class LockedBox<Value>: @unchecked Sendable {
  private let lock = NSLock()
  private var stored: Value
  init(_ value: Value) { stored = value }
  var value: Value {
    get { lock.withLock { stored } }
    set { lock.withLock { stored = newValue } }
  }
}
