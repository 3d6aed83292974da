import Glibc
import XCTest

@testable import NinePProtocol

final class ErrorStringsTests: XCTestCase {
  /// Every 9p4z HEAD ename maps back to the errno it came from (docs/board-facts.md §7.6).
  func testNinePForZTableRoundTrips() {
    let codes: [Int32] = [
      EACCES, EPERM, ENOENT, ENOTDIR, EISDIR, EEXIST, ENOSPC, ENOMEM, EINVAL, ENOTSUP, EAGAIN,
      ETIMEDOUT,
    ]
    for code in codes {
      let text = ErrorStrings.ename(for: code, operation: "read")
      XCTAssertEqual(ErrorStrings.errno(for: text), code, text)
    }
    XCTAssertEqual(ErrorStrings.ename(for: EIO, operation: "write"), "write failed")
  }

  /// Every Rerror text 9bbsd can send, and every one 9p4z sends (docs/board-facts.md §7.6), is in
  /// the exact table: none reaches a program as an EIO by default. 9bbsd's texts are read from
  /// its sources, so a new one cannot be added without a mapping.
  func testEveryTextTheServersSendIsMapped() throws {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
      .deletingLastPathComponent().deletingLastPathComponent()
    let server = root.appendingPathComponent("Sources/BBSServer")
    var texts: Set<String> = []
    let enumerator = FileManager.default.enumerator(at: server, includingPropertiesForKeys: nil)
    let pattern = try NSRegularExpression(
      pattern: #"(?:NinePFailure\(|ename: |ename = )"([^"\\]+)""#)
    while let file = enumerator?.nextObject() as? URL {
      guard file.pathExtension == "swift" else { continue }
      let source = try String(contentsOf: file, encoding: .utf8)
      let range = NSRange(source.startIndex..., in: source)
      for match in pattern.matches(in: source, range: range) {
        if let text = Range(match.range(at: 1), in: source) { texts.insert(String(source[text])) }
      }
    }
    XCTAssertGreaterThan(texts.count, 20, "the scan of 9bbsd's sources found too little")
    // What 9bbsd's NinePFailure(errno:operation:) can say: the table's texts and the fallbacks.
    for operation in ["open", "read", "write", "create", "stat", "remove", "wstat"] {
      texts.insert("\(operation) failed")
    }
    // The 9p4z core's protocol-level texts (docs/board-facts.md §7.6).
    texts.formUnion([
      "unknown fid", "fid not open", "fid not open for reading", "fid not open for writing",
      "fid already open", "cannot walk an open fid", "too many name elements",
      "malformed walk message", "cannot allocate newfid", "FID already in use", "malformed Tread",
      "malformed Twrite", "malformed Tcreate", "bad Tversion", "create not supported",
      "write not supported", "remove not supported", "wstat not supported",
      "operation not supported", "rstat build failed", "rwrite build failed",
      "rcreate build failed", "cannot get root", "get_root not implemented",
      "filesystem not configured", "aname not found",
    ])
    for text in texts.sorted() {
      XCTAssertNotNil(
        ErrorStrings.exact[text], "\(String(reflecting: text)) has no errno of its own")
    }
    XCTAssertEqual(ErrorStrings.errno(for: "malformed Tread"), EPROTO)
    XCTAssertEqual(ErrorStrings.errno(for: "version not negotiated"), EPROTO)
    XCTAssertEqual(ErrorStrings.errno(for: "filesystem not configured"), ENXIO)
  }

  func testTableEntries() {
    let cases: [(String, Int32)] = [
      ("file not found", ENOENT), ("file does not exist", ENOENT), ("permission denied", EACCES),
      ("not authorized", EPERM), ("wstat not supported", EPERM), ("directory not empty", ENOTEMPTY),
      ("cannot allocate newfid", EMFILE), ("unknown fid", EBADF), ("fid already open", EBUSY),
      ("cannot walk an open fid", EBUSY), ("too many name elements", ENAMETOOLONG),
      ("read failed", EIO), ("write failed", EIO), ("create failed", EIO), ("open failed", EIO),
      ("remove failed", EIO), ("stat failed", EIO), ("aname not found", ENOENT),
      ("unsupported version", EPROTONOSUPPORT), ("Permission Denied", EACCES),
      ("'/x' does not exist", ENOENT), ("something odd happened", EIO), ("", EIO),
      // Tauth and Tattach (docs/board-facts.md §6).
      ("authentication not required", EOPNOTSUPP), ("invalid identity", EINVAL),
      ("authentication timeout", ETIMEDOUT), ("invalid auth response size", EINVAL),
      ("must read challenge first", EINVAL), ("authentication failed", EACCES),
      ("uname does not match authenticated identity", EACCES),
      ("authentication required", EACCES), ("authentication incomplete", EACCES),
      ("too many concurrent authentications", EAGAIN), ("cannot allocate afid", EMFILE),
    ]
    for (text, code) in cases {
      XCTAssertEqual(ErrorStrings.errno(for: text), code, text)
    }
    XCTAssertFalse(ErrorStrings.isKnown("something odd happened"))
    XCTAssertTrue(ErrorStrings.isKnown("read failed"))
  }
}
