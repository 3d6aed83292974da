import Foundation
import TestSupport
import XCTest

/// mDNS with real components: a real `9bbsd --advertise`, a real avahi-daemon and dbus-daemon
/// in a throwaway namespace (only `lo`), `mount9bbs scan --lan` and a real FUSE mount by name.
/// Scans last a second (`--timeout 1`): the boards are the namespace's own avahi-daemon's
/// services, which a browse finds within about 0.1 s (a 0.1 s scan finds them already).
final class LANDiscoveryTests: XCTestCase {
  var namespace: AvahiNamespace!

  override func setUpWithError() throws {
    namespace = try AvahiNamespace()
    let namespace = namespace
    addTeardownBlock { namespace?.remove() }
  }

  /// Shell helpers for scenarios: bounded waits, and a teardown that unmounts.
  static let prelude = #"""
    wait_for() { # wait_for SECONDS COMMAND…: polls every 0.1 s
      local tries=$(( $1 * 10 )); shift
      for _ in $(seq "$tries"); do "$@" && return 0; sleep 0.1; done
      echo "timed out waiting for: $*"; return 1
    }
    mounted() { grep -q " $1 fuse" /proc/mounts; }
    cleanup() { mounted "$WORK/mnt" && fusermount3 -u -z "$WORK/mnt"; true; }
    trap cleanup EXIT
    mkdir -p "$WORK/mnt"

    """#

  /// A board advertised by 9bbsd is mounted by name with an empty cache (a short browse
  /// finds it), listed by `scan --lan` with its TXT record, and mounted by name again from
  /// the cache; `ls` of the mount shows the BBS.
  func testAdvertisedServerIsFoundAndMountedByName() throws {
    let result = try namespace.run(
      Self.prelude + #"""
        "$BIN/9bbsd" --listen 'tcp!127.0.0.1!5640' --advertise 'Test BBS' \
          --board-name 'The Test Board' --rooms lobby,tech >"$WORK/9bbsd.log" 2>&1 &
        wait_for 10 grep -q "advertising 'Test BBS'" "$WORK/9bbsd.log" || exit 11

        # 1. By name with an empty cache: a short browse resolves it.
        "$BIN/mount9bbs" -f 'mdns!Test BBS' "$WORK/mnt" >"$WORK/mount1.log" 2>&1 &
        wait_for 15 mounted "$WORK/mnt" || { cat "$WORK/mount1.log"; exit 12; }
        ls "$WORK/mnt" >"$WORK/ls1.txt"
        cat "$WORK/mnt/etc/boardname" >"$WORK/boardname.txt"
        "$BIN/mount9bbs" -u "$WORK/mnt" || exit 13
        wait_for 5 sh -c "! grep -q ' $WORK/mnt fuse' /proc/mounts" || exit 14

        # 2. scan --lan lists it.
        "$BIN/mount9bbs" scan --lan --timeout 1 --json >"$WORK/scan.json" 2>"$WORK/scan.err"
        echo "scan status $?" >"$WORK/scan.status"
        "$BIN/mount9bbs" scan --lan --timeout 1 >"$WORK/scan.txt" 2>&1

        # 3. By name again, detached this time: the cache answers.
        "$BIN/mount9bbs" 'mdns!test bbs' "$WORK/mnt" >"$WORK/mount2.log" 2>&1 || exit 15
        ls "$WORK/mnt/chat" >"$WORK/ls2.txt"
        "$BIN/mount9bbs" -u "$WORK/mnt" || exit 16
        cp "$XDG_CACHE_HOME/mount9bbs/boards.json" "$WORK/boards.json"
        echo done
        """#)
    XCTAssertEqual(result.status, 0, "\(result.output)\n9bbsd: \(namespace.file("9bbsd.log"))")

    XCTAssertEqual(namespace.file("ls1.txt"), "chat\netc\nrooms\n")
    XCTAssertEqual(namespace.file("boardname.txt"), "The Test Board\n")
    XCTAssertTrue(
      namespace.file("mount1.log").contains("looking for Test BBS on the LAN"),
      namespace.file("mount1.log"))
    XCTAssertEqual(namespace.file("scan.status"), "scan status 0\n", namespace.file("scan.err"))
    let lines = namespace.file("scan.json").split(separator: "\n")
    XCTAssertEqual(lines.count, 1, namespace.file("scan.json"))
    let board = try XCTUnwrap(
      (try? JSONSerialization.jsonObject(with: Data((lines.first ?? "").utf8))) as? [String: Any])
    XCTAssertEqual(board["event"] as? String, "board")
    XCTAssertEqual(board["name"] as? String, "Test BBS")
    XCTAssertEqual(board["address"] as? String, "127.0.0.1")
    XCTAssertEqual(board["port"] as? Int, 5640)
    XCTAssertEqual(board["host"] as? String, "ns9bbs.local")
    XCTAssertTrue(["_9p._tcp", "_9pfs._tcp"].contains(board["type"] as? String ?? ""))
    XCTAssertEqual(
      board["txt"] as? [String: String],
      [
        "version": "9P2000", "features": "chat,messaging", "board": "The Test Board",
        "secure": "noise1",
      ])
    XCTAssertEqual(board["dial"] as? [String], ["tcp!127.0.0.1!5640"])
    XCTAssertEqual(board["mount"] as? String, "mdns:Test BBS")
    XCTAssertTrue(
      namespace.file("scan.txt").contains(
        """
        Test BBS  127.0.0.1 port 5640  (ns9bbs.local, _9p
        """.dropLast(0)), namespace.file("scan.txt"))
    XCTAssertTrue(
      namespace.file("scan.txt").contains("  mount        mount9bbs 'mdns:Test BBS' MOUNTPOINT"),
      namespace.file("scan.txt"))
    XCTAssertEqual(
      namespace.file("ls2.txt"),
      "events\nlobby\nlog\nmentions\noutbox\npost\ntech\nunread\nusers\n")
    XCTAssertFalse(
      namespace.file("mount2.log").contains("looking for"), namespace.file("mount2.log"))
    XCTAssertTrue(namespace.file("boards.json").contains("\"lastSeen\""))
  }

  /// A board with a key advertises its fingerprint (TXT `boardkey`); `scan --lan` shows it
  /// unknown until a mount pins it, pinned after, and CHANGED once the board at that address
  /// advertises another key, which a mount then refuses.
  func testScanShowsEachBoardsKeyAgainstThePins() throws {
    let result = try namespace.run(
      Self.prelude + #"""
        export XDG_CONFIG_HOME="$WORK/config" XDG_STATE_HOME="$WORK/state"
        "$BIN/mount9bbs" keygen >/dev/null 2>&1 || exit 31
        board() {
          "$BIN/9bbsd" --listen 'tcp!127.0.0.1!5642' --advertise 'Keyed BBS' --auth optional \
            --board-key "$WORK/$1" >"$WORK/9bbsd-$1.log" 2>&1 &
          server=$!
          wait_for 10 grep -q "advertising 'Keyed BBS'" "$WORK/9bbsd-$1.log" || exit 32
        }
        board key-a
        "$BIN/mount9bbs" scan --lan --timeout 1 --json >"$WORK/scan1.json" 2>/dev/null
        "$BIN/mount9bbs" 'mdns!Keyed BBS' "$WORK/mnt" >"$WORK/mount1.log" 2>&1 || exit 33
        "$BIN/mount9bbs" -u "$WORK/mnt" || exit 34
        "$BIN/mount9bbs" scan --lan --timeout 1 >"$WORK/scan2.txt" 2>/dev/null
        kill "$server"; wait "$server"
        board key-b
        "$BIN/mount9bbs" scan --lan --timeout 1 >"$WORK/scan3.txt" 2>/dev/null
        "$BIN/mount9bbs" 'mdns!Keyed BBS' "$WORK/mnt" >"$WORK/mount2.log" 2>&1 && exit 35
        echo done
        """#)
    XCTAssertEqual(result.status, 0, "\(result.output)\n\(namespace.file("9bbsd-key-a.log"))")
    let fingerprint = try XCTUnwrap(
      namespace.file("9bbsd-key-a.log").split(separator: "\n").first {
        $0.contains("board key SHA256:")
      }?
      .split(separator: " ").last.map(String.init))
    let scan1 = namespace.file("scan1.json")
    XCTAssertTrue(scan1.contains("\"boardkey\":\"\(fingerprint)\""), scan1)
    XCTAssertTrue(scan1.contains("\"trust\":\"unknown\""), scan1)
    XCTAssertTrue(
      namespace.file("mount1.log").contains("new board key for tcp!127.0.0.1!5642: \(fingerprint)"),
      namespace.file("mount1.log"))
    XCTAssertTrue(
      namespace.file("scan2.txt").contains("  trust        pinned (\(fingerprint))"),
      namespace.file("scan2.txt"))
    XCTAssertTrue(
      namespace.file("scan3.txt").contains("  trust        CHANGED: advertises SHA256:"),
      namespace.file("scan3.txt"))
    XCTAssertTrue(
      namespace.file("mount2.log").contains("but the key pinned for it is \(fingerprint)"),
      namespace.file("mount2.log"))
  }

  /// A server named to attack the user (a quote that ends the suggested command early, an
  /// escape sequence): `scan --lan` shows the name escaped, and its suggested mount command,
  /// pasted into an interactive bash, passes the name as one word and runs nothing.
  func testHostileNameIsPrintedSafely() throws {
    let result = try namespace.run(
      Self.prelude + #"""
        name=$(printf "Evil'; touch pwned; echo '\033[31m!x")
        "$BIN/9bbsd" --listen 'tcp!127.0.0.1!5645' --advertise "$name" >"$WORK/9bbsd.log" 2>&1 &
        wait_for 10 grep -q "advertising 'Evil" "$WORK/9bbsd.log" || exit 51
        "$BIN/mount9bbs" scan --lan --timeout 1 >"$WORK/scan.txt" 2>&1 || exit 52
        # The suggested command, with printf in place of mount9bbs, pasted into a terminal.
        { echo 'set -H'
          grep '^  mount ' "$WORK/scan.txt" | sed 's/^  mount *mount9bbs /printf "%s\\n" /'
          echo exit
        } >"$WORK/paste.sh"
        cd "$WORK" && bash --norc --noprofile -i <paste.sh >pasted.txt 2>paste.err
        printf 'mdns:%s\nMOUNTPOINT\n' "$name" >"$WORK/expected.txt"
        echo done
        """#)
    XCTAssertEqual(result.status, 0, "\(result.output)\n\(namespace.file("9bbsd.log"))")
    let scan = namespace.file("scan.txt")
    XCTAssertFalse(scan.contains("\u{1B}"), "an escape sequence reached the terminal: \(scan)")
    XCTAssertTrue(scan.contains("Evil'; touch pwned; echo '\\x1B[31m!x  127.0.0.1"), scan)
    XCTAssertFalse(
      FileManager.default.fileExists(atPath: namespace.directory + "/pwned"),
      "pasting the suggested command ran the name: \(namespace.file("paste.sh"))")
    XCTAssertEqual(
      namespace.file("pasted.txt"), namespace.file("expected.txt"),
      "\(namespace.file("paste.sh"))\n\(namespace.file("paste.err"))")
  }

  /// A running scan reports a server that vanishes (killed outright) as gone.
  func testVanishedServerDisappearsFromARunningScan() throws {
    let result = try namespace.run(
      Self.prelude + #"""
        "$BIN/mount9bbs" scan --lan --timeout 30 >"$WORK/scan.txt" 2>"$WORK/scan.err" &
        scan=$!
        "$BIN/9bbsd" --listen 'tcp!127.0.0.1!5641' --advertise 'Fleeting' >"$WORK/9bbsd.log" 2>&1 &
        server=$!
        wait_for 15 grep -q "^Fleeting " "$WORK/scan.txt" || exit 21
        kill -KILL "$server"
        wait_for 15 grep -q "^gone: Fleeting" "$WORK/scan.txt" || exit 22
        kill -INT "$scan"
        wait_for 5 sh -c "! kill -0 $scan 2>/dev/null" || exit 23
        wait "$scan"; echo "scan status $?" >"$WORK/scan.status"
        echo done
        """#)
    XCTAssertEqual(result.status, 0, "\(result.output)\nscan: \(namespace.file("scan.txt"))")
    let scan = namespace.file("scan.txt")
    XCTAssertTrue(scan.hasPrefix("Fleeting  127.0.0.1 port 5641"), scan)
    XCTAssertTrue(scan.hasSuffix("gone: Fleeting (no longer advertised)\n"), scan)
    XCTAssertEqual(namespace.file("scan.status"), "scan status 0\n", "Ctrl-C ends a scan cleanly")
  }

  /// Two servers asking for one name: the second is renamed and both are found.
  func testNameCollisionRenames() throws {
    let result = try namespace.run(
      Self.prelude + #"""
        "$BIN/9bbsd" --listen 'tcp!127.0.0.1!5642' --advertise 'Twin' --board-name A >"$WORK/a.log" 2>&1 &
        wait_for 10 grep -q "advertising 'Twin'" "$WORK/a.log" || exit 31
        "$BIN/9bbsd" --listen 'tcp!127.0.0.1!5643' --advertise 'Twin' --board-name B >"$WORK/b.log" 2>&1 &
        wait_for 15 grep -q "advertising 'Twin #2'" "$WORK/b.log" || exit 32
        "$BIN/mount9bbs" scan --lan --timeout 1 --json >"$WORK/scan.json" 2>&1
        "$BIN/mount9bbs" -f 'mdns!Twin #2' "$WORK/mnt" >"$WORK/mount.log" 2>&1 &
        wait_for 15 mounted "$WORK/mnt" || exit 33
        cat "$WORK/mnt/etc/boardname" >"$WORK/boardname.txt"
        echo done
        """#)
    XCTAssertEqual(
      result.status, 0, "\(result.output)\n\(namespace.file("a.log"))\n\(namespace.file("b.log"))")
    XCTAssertTrue(
      namespace.file("b.log").contains(
        "the name 'Twin' is taken on the network; advertising as 'Twin #2'"),
      namespace.file("b.log"))
    let ports = Dictionary(
      uniqueKeysWithValues: namespace.file("scan.json").split(separator: "\n").compactMap {
        line -> (String, Int)? in
        guard
          let object = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any],
          let name = object["name"] as? String, let port = object["port"] as? Int
        else { return nil }
        return (name, port)
      })
    XCTAssertEqual(ports, ["Twin": 5642, "Twin #2": 5643], namespace.file("scan.json"))
    XCTAssertEqual(namespace.file("boardname.txt"), "B\n", "mdns!Twin #2 is the second server")
  }

  /// Without avahi-daemon: scan and mount by name fail fast with what to do; 9bbsd warns,
  /// keeps serving, and advertises as soon as the daemon starts.
  func testNoAvahiDaemon() throws {
    let result = try namespace.run(
      Self.prelude + #"""
        start=$(date +%s%N)
        "$BIN/mount9bbs" scan --lan >"$WORK/scan.out" 2>"$WORK/scan.err"
        echo "$? $(( ($(date +%s%N) - start) / 1000000 ))" >"$WORK/scan.status"
        "$BIN/mount9bbs" -f 'mdns!Late' "$WORK/mnt" >"$WORK/mount.log" 2>&1
        echo "$?" >"$WORK/mount.status"
        "$BIN/9bbsd" --listen 'tcp!127.0.0.1!5644' --advertise 'Late' >"$WORK/9bbsd.log" 2>&1 &
        wait_for 10 grep -q "not advertised yet" "$WORK/9bbsd.log" || exit 41
        start_avahi || exit 42
        wait_for 20 grep -q "advertising 'Late'" "$WORK/9bbsd.log" || exit 43
        "$BIN/mount9bbs" scan --lan --timeout 1 >"$WORK/scan2.txt" 2>&1 || exit 44
        echo done
        """#, startAvahi: false)
    XCTAssertEqual(result.status, 0, "\(result.output)\n\(namespace.file("9bbsd.log"))")
    let status = namespace.file("scan.status").split(separator: " ")
    XCTAssertEqual(status.first, "1", namespace.file("scan.err"))
    XCTAssertLessThan(
      Int(status.last?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "") ?? 99_999, 3000)
    XCTAssertEqual(
      namespace.file("scan.err").split(separator: "\n").last,
      "mount9bbs: no Avahi daemon is running (Daemon not running); install and start it: sudo apt-get install avahi-daemon && sudo systemctl start avahi-daemon"
    )
    XCTAssertEqual(namespace.file("mount.status"), "1\n")
    XCTAssertTrue(
      namespace.file("mount.log").contains("mount9bbs: no Avahi daemon is running"),
      namespace.file("mount.log"))
    XCTAssertTrue(
      namespace.file("9bbsd.log").contains(
        "no Avahi daemon is running, so 'Late' is not advertised yet; it will be once avahi-daemon starts"
      ), namespace.file("9bbsd.log"))
    XCTAssertTrue(namespace.file("scan2.txt").contains("Late  127.0.0.1 port 5644"))
  }
}
