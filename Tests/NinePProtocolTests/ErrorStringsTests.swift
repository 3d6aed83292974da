import Glibc
import XCTest

@testable import NinePProtocol

final class ErrorStringsTests: XCTestCase {
  /// Every 9p4z HEAD ename maps back to the errno it came from (facts §7.6).
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
      // Tauth and Tattach (facts §6).
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
