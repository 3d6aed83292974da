import NinePTransport
import XCTest

final class DialStringTests: XCTestCase {
  func testValidDialStrings() throws {
    let table: [(String, TransportAddress, String)] = [
      ("tcp!bbs.local!564", .tcp(host: "bbs.local", port: 564), "tcp!bbs.local!564"),
      ("tcp!bbs.local", .tcp(host: "bbs.local", port: 564), "tcp!bbs.local!564"),
      ("TCP!10.0.0.1!9564", .tcp(host: "10.0.0.1", port: 9564), "tcp!10.0.0.1!9564"),
      ("tcp!::1!564", .tcp(host: "::1", port: 564), "tcp!::1!564"),
      ("tcp![::1]!564", .tcp(host: "::1", port: 564), "tcp!::1!564"),
      ("tcp!0.0.0.0!0", .tcp(host: "0.0.0.0", port: 0), "tcp!0.0.0.0!0"),
      ("localhost:5640", .tcp(host: "localhost", port: 5640), "tcp!localhost!5640"),
      ("[fe80::1%eth0]:564", .tcp(host: "fe80::1%eth0", port: 564), "tcp!fe80::1%eth0!564"),
      ("unix!/run/9bbs.sock", .unix(path: "/run/9bbs.sock"), "unix!/run/9bbs.sock"),
      ("unix!relative/sock", .unix(path: "relative/sock"), "unix!relative/sock"),
      ("seqpacket!/tmp/s", .seqpacket(path: "/tmp/s", sduLimit: 245), "seqpacket!/tmp/s"),
      ("seqpacket!/tmp/s!64", .seqpacket(path: "/tmp/s", sduLimit: 64), "seqpacket!/tmp/s!64"),
      (
        "l2cap!C0:FF:EE:00:00:01!0x0080",
        .l2cap(address: "C0:FF:EE:00:00:01", psm: 0x80, addressType: .random),
        "l2cap!C0:FF:EE:00:00:01!0x0080"
      ),
      (
        "l2cap!c0:ff:ee:0a:0b:0c!9!public",
        .l2cap(address: "C0:FF:EE:0A:0B:0C", psm: 9, addressType: .public),
        "l2cap!C0:FF:EE:0A:0B:0C!0x0009!public"
      ),
      (
        "l2cap!00:11:22:33:44:55!0xFFFF!Random",
        .l2cap(address: "00:11:22:33:44:55", psm: 0xFFFF, addressType: .random),
        "l2cap!00:11:22:33:44:55!0xFFFF"
      ),
      // A PSM alone: every local adapter, for a listener.
      (
        "l2cap!0x0080", .l2cap(address: "00:00:00:00:00:00", psm: 0x80, addressType: .public),
        "l2cap!0x0080"
      ),
      (
        "l2cap!128", .l2cap(address: "00:00:00:00:00:00", psm: 0x80, addressType: .public),
        "l2cap!0x0080"
      ),
      ("fd!3", .fd(read: 3, write: 3), "fd!3"),
      ("fd!3!4", .fd(read: 3, write: 4), "fd!3!4"),
      ("-", .fd(read: 0, write: 1), "fd!0!1"),
    ]
    for (text, expected, canonical) in table {
      let parsed = try TransportAddress(parsing: text)
      XCTAssertEqual(parsed, expected, text)
      XCTAssertEqual(parsed.description, canonical, text)
      XCTAssertEqual(try TransportAddress(parsing: canonical), expected, "round trip of \(text)")
    }
  }

  /// The colon forms need no quoting in a shell (bash expands `!` in history), and each
  /// parses to the same address as its `!` form; `colonForm` gives them back.
  func testColonFormsEqualBangForms() throws {
    let table: [(String, String, String)] = [
      ("tcp:bbs.local:5640", "tcp!bbs.local!5640", "tcp:bbs.local:5640"),
      ("tcp:bbs.local", "tcp!bbs.local", "tcp:bbs.local:564"),
      ("TCP:10.0.0.1:9564", "tcp!10.0.0.1!9564", "tcp:10.0.0.1:9564"),
      ("tcp:[::1]:564", "tcp!::1!564", "tcp:[::1]:564"),
      ("tcp:[::1]", "tcp![::1]", "tcp:[::1]:564"),
      ("unix:/run/9bbs.sock", "unix!/run/9bbs.sock", "unix:/run/9bbs.sock"),
      ("seqpacket:/tmp/s", "seqpacket!/tmp/s", "seqpacket:/tmp/s"),
      ("seqpacket:/tmp/s:64", "seqpacket!/tmp/s!64", "seqpacket:/tmp/s:64"),
      (
        "l2cap:C0:FF:EE:00:00:01:0x0080", "l2cap!C0:FF:EE:00:00:01!0x0080",
        "l2cap:C0:FF:EE:00:00:01:0x0080"
      ),
      (
        "l2cap:c0:ff:ee:0a:0b:0c:9:public", "l2cap!c0:ff:ee:0a:0b:0c!9!public",
        "l2cap:C0:FF:EE:0A:0B:0C:0x0009:public"
      ),
      ("l2cap:0x80", "l2cap!0x80", "l2cap:0x0080"),
      ("fd:3", "fd!3", "fd:3"),
      ("fd:3:4", "fd!3!4", "fd:3:4"),
    ]
    for (colon, bang, canonical) in table {
      let parsed = try TransportAddress(parsing: colon)
      XCTAssertEqual(parsed, try TransportAddress(parsing: bang), colon)
      XCTAssertEqual(parsed.colonForm, canonical, colon)
      XCTAssertEqual(try TransportAddress(parsing: canonical), parsed, "round trip of \(colon)")
      XCTAssertFalse(parsed.colonForm.contains("!"), canonical)
    }
  }

  func testInvalidColonForms() {
    let table: [(String, String)] = [
      ("tcp:a:1:2", "tcp:host:port"),
      ("tcp:host:http", "port 'http'"),
      ("tcp:", "host name is empty"),
      ("unix:", "path is empty"),
      ("seqpacket:/tmp/s:0", "SDU size '0'"),
      ("l2cap:C0:FF:EE:00:00:01", "l2cap:BDADDR:PSM"),
      ("l2cap:C0:FF:EE:00:00:0G:0x80", "not a Bluetooth address"),
      ("l2cap:C0FFEE000001:0x80", "six hex pairs"),
      ("l2cap:C0:FF:EE:00:00:01:0", "PSM '0'"),
      ("fd:x", "descriptor 'x'"),
      // The hint names 9bbsd's port and the colon form, never a `!` that bash would expand.
      ("bbs.local", "bbs.local:5640"),
      ("/run/9bbs.sock", "unix:/run/9bbs.sock"),
    ]
    for (text, fragment) in table {
      XCTAssertThrowsError(try TransportAddress(parsing: text), "'\(text)' parsed") { error in
        guard case .badDialString(_, let reason) = error as? TransportError else {
          return XCTFail("'\(text)': unexpected error \(error)")
        }
        XCTAssertTrue(reason.contains(fragment), "'\(text)': reason '\(reason)'")
        if text == "bbs.local" { XCTAssertFalse(reason.contains("!"), reason) }
      }
    }
  }

  func testInvalidDialStrings() {
    let longPath = "/" + String(repeating: "x", count: 107)
    // Each bad string with a fragment its reason must contain.
    let table: [(String, String)] = [
      ("", "empty"),
      ("bbs.local", "no port"),
      ("::1:564", "brackets"),
      ("[::1", "']'"),
      ("[::1]564", "':port'"),
      ("host:", "port ''"),
      ("host:70000", "port '70000'"),
      (":564", "host name is empty"),
      ("tcp!", "host name is empty"),
      ("tcp!host!http", "port 'http'"),
      ("tcp!a!1!2", "tcp!host"),
      ("udp!host!564", "unknown network 'udp'"),
      ("unix!", "path is empty"),
      ("unix!" + longPath, "longer than 107"),
      ("seqpacket!", "path is empty"),
      ("seqpacket!/tmp/s!0", "SDU size '0'"),
      ("seqpacket!/tmp/s!big", "SDU size 'big'"),
      ("seqpacket!/tmp/s!70000", "SDU size '70000'"),
      ("seqpacket!/a!1!2", "seqpacket!/path"),
      ("l2cap!C0:FF:EE:00:00:01", "l2cap!BDADDR!PSM"),
      ("l2cap!C0:FF:EE:00:00!0x80", "not a Bluetooth address"),
      ("l2cap!C0:FF:EE:00:00:0G!0x80", "not a Bluetooth address"),
      ("l2cap!C0:FF:EE:00:00:001!0x80", "not a Bluetooth address"),
      ("l2cap!C0FFEE000001!0x80", "not a Bluetooth address"),
      ("l2cap!C0:FF:EE:00:00:01!0", "PSM '0'"),
      ("l2cap!C0:FF:EE:00:00:01!0x10000", "PSM '0x10000'"),
      ("l2cap!C0:FF:EE:00:00:01!psm", "PSM 'psm'"),
      ("l2cap!C0:FF:EE:00:00:01!0x80!static", "address type 'static'"),
      ("l2cap!C0:FF:EE:00:00:01!0x80!public!x", "l2cap!BDADDR!PSM"),
      ("fd!", "descriptor ''"),
      ("fd!-1", "descriptor '-1'"),
      ("fd!x!1", "descriptor 'x'"),
      ("fd!1!2!3", "fd!N"),
    ]
    for (text, fragment) in table {
      XCTAssertThrowsError(try TransportAddress(parsing: text), "'\(text)' parsed") { error in
        guard case .badDialString(let string, let reason) = error as? TransportError else {
          return XCTFail("'\(text)': unexpected error \(error)")
        }
        XCTAssertEqual(string, text)
        XCTAssertTrue(reason.contains(fragment), "'\(text)': reason '\(reason)'")
        XCTAssertTrue(
          String(describing: error).hasPrefix("Cannot use dial string '\(text)': "), "\(error)")
      }
    }
  }

  func testPacketTransportHint() throws {
    XCTAssertTrue(try TransportAddress(parsing: "seqpacket!/tmp/s").isPacketTransport)
    XCTAssertTrue(try TransportAddress(parsing: "l2cap!C0:FF:EE:00:00:01!0x80").isPacketTransport)
    XCTAssertFalse(try TransportAddress(parsing: "tcp!h!1").isPacketTransport)
    XCTAssertFalse(try TransportAddress(parsing: "unix!/s").isPacketTransport)
    XCTAssertFalse(try TransportAddress(parsing: "-").isPacketTransport)
  }

  func testErrorDescriptionsAreSentences() {
    let errors: [TransportError] = [
      .badDialString("x", reason: "why"),
      .connectFailed(address: "tcp!h!1", reason: "Connection refused"),
      .resolveFailed(host: "h", reason: "unknown host"),
      .timedOut(address: "tcp!h!1"),
      .bluetoothUnavailable(reason: "no adapter"),
      .listenFailed(address: "unix!/s", reason: "Address already in use"),
      .unsupported(operation: "listen", address: "fd!3"),
      .frameTooSmall(size: 3),
      .frameTooLarge(size: 100_000, limit: 8192),
      .sduTooLarge(size: 300, limit: 245),
      .truncatedMessage(bufferedBytes: 5),
      .closed,
      .io(operation: "receive", errno: 104),
    ]
    for error in errors {
      let text = error.description
      XCTAssertTrue(text.hasSuffix("."), text)
      XCTAssertTrue(text.first?.isUppercase ?? false, text)
    }
    XCTAssertEqual(
      TransportError.io(operation: "receive", errno: 104).description,
      "The receive failed: Connection reset by peer.")
  }
}
