import FuseKit
import Glibc
import XCTest

@testable import BBSMount

/// The "is this `tail -f`?" policy of room getattrs, every branch, without a mount: which
/// getattrs are held, which are answered at once, and which facts about the caller (each a
/// `/proc` read or a counted pass) are asked for only when the decision needs them.
final class FollowDecisionTests: XCTestCase {
  private struct Room: FollowedRoom {
    var opener: pid_t = 100
    var inode: FuseInode = 7
    var endsAtEnd = false
    var nonBlocking = false
    var isCaughtUp = true
  }

  /// A caller whose facts are set by the test, recording which were asked.
  private final class Caller: FollowCaller {
    let pid: pid_t
    var terminal: Bool
    var filesOnlyUnderMount: Bool
    var quietPass: Bool
    private(set) var asked: [String] = []

    init(
      pid: pid_t = 100, terminal: Bool = true, filesOnlyUnderMount: Bool = true,
      quietPass: Bool = true
    ) {
      self.pid = pid
      self.terminal = terminal
      self.filesOnlyUnderMount = filesOnlyUnderMount
      self.quietPass = quietPass
    }

    var writesToTerminal: Bool {
      asked.append("terminal")
      return terminal
    }

    func opensFilesOnlyUnder(_ mountpoint: String) -> Bool {
      asked.append("files under \(mountpoint)")
      return filesOnlyUnderMount
    }

    func startPass() -> Bool {
      asked.append("pass")
      return quietPass
    }
  }

  private func decide(
    inode: FuseInode = 7, fileHandle: UInt64? = nil, _ caller: Caller,
    _ rooms: [(id: UInt64, room: Room)], mountpoint: String? = "/mnt/bbs"
  ) -> FollowDecision {
    FollowDecision(
      inode: inode, fileHandle: fileHandle, caller: caller, rooms: rooms, mountpoint: mountpoint)
  }

  /// `tail -f room` on a terminal, read up to the size it was told: held, on this room.
  func testATerminalTailReadToTheEndIsHeld() {
    let caller = Caller()
    let decision = decide(caller, [(3, Room())])
    XCTAssertEqual(decision.reply, .hold(here: [3], followed: [3]))
    XCTAssertFalse(decision.catchesUp)
    XCTAssertEqual(caller.asked, ["files under /mnt/bbs", "terminal"], "no pass counted")
  }

  /// A getattr that carries a handle (lseek(SEEK_END)): answered at once for that handle,
  /// seeking, and nothing asked of /proc.
  func testAGetattrWithAHandleIsAnsweredSeeking() {
    let caller = Caller()
    let decision = decide(fileHandle: 4, caller, [(3, Room()), (4, Room())])
    XCTAssertEqual(decision.reply, .answer(updating: [4], seeking: true))
    XCTAssertFalse(decision.catchesUp)
    XCTAssertEqual(caller.asked, [])
  }

  /// `ls -l` or `stat` of a room the caller has not open: at once, the room catching up,
  /// /proc never read.
  func testAStatOfARoomNotOpenIsAnsweredAndCatchesUp() {
    let caller = Caller(pid: 200)
    let decision = decide(caller, [(3, Room(opener: 100))])
    XCTAssertEqual(decision.reply, .answer(updating: [], seeking: false))
    XCTAssertTrue(decision.catchesUp)
    XCTAssertEqual(caller.asked, [])
    // Another room of the same caller open: this one still catches up.
    let other = decide(inode: 8, Caller(), [(3, Room())])
    XCTAssertTrue(other.catchesUp)
    XCTAssertEqual(other.reply, .answer(updating: [], seeking: false))
  }

  /// A copy (O_NOFOLLOW) and a poller (O_NONBLOCK) do not follow: answered at once, and the
  /// room, open by the caller, does not catch up for a stat.
  func testCopiesAndPollersAreNeverHeld() {
    for room in [Room(endsAtEnd: true), Room(nonBlocking: true)] {
      let caller = Caller()
      let decision = decide(caller, [(3, room)])
      XCTAssertEqual(decision.reply, .answer(updating: [], seeking: false))
      XCTAssertFalse(decision.catchesUp)
      XCTAssertEqual(caller.asked, [])
    }
  }

  /// A reader behind in any room it follows has not finished its pass: answered at once.
  func testAReaderBehindInAnyFollowedRoomIsAnswered() {
    let caller = Caller()
    let decision = decide(caller, [(3, Room()), (5, Room(inode: 8, isCaughtUp: false))])
    XCTAssertEqual(decision.reply, .answer(updating: [3], seeking: false))
    XCTAssertEqual(caller.asked, [])
    let here = decide(Caller(), [(3, Room(isCaughtUp: false))])
    XCTAssertEqual(here.reply, .answer(updating: [3], seeking: false))
  }

  /// `tail -f room /var/log/syslog`: a regular file open outside the mount is polled too, so
  /// nothing is held; nor without a known mountpoint.
  func testFilesOutsideTheMountOrNoMountpointAnswerAtOnce() {
    let caller = Caller(filesOnlyUnderMount: false)
    XCTAssertEqual(decide(caller, [(3, Room())]).reply, .answer(updating: [3], seeking: false))
    XCTAssertEqual(caller.asked, ["files under /mnt/bbs"])
    let unknown = Caller()
    XCTAssertEqual(
      decide(unknown, [(3, Room())], mountpoint: nil).reply, .answer(updating: [3], seeking: false))
    XCTAssertEqual(unknown.asked, [])
  }

  /// Rooms of other callers count for nothing: another process's unread room does not stop
  /// this one's hold, nor is it followed.
  func testOtherCallersRoomsAreLeftOut() {
    let decision = decide(
      Caller(), [(2, Room(opener: 300, isCaughtUp: false)), (3, Room()), (4, Room(opener: 300))])
    XCTAssertEqual(decision.reply, .hold(here: [3], followed: [3]))
  }

  /// Several rooms followed on a terminal: the fstat of any of them is held on all.
  func testATerminalTailOfSeveralRoomsHoldsEach() {
    let rooms: [(id: UInt64, room: Room)] = [(3, Room()), (5, Room(inode: 8))]
    XCTAssertEqual(decide(inode: 8, Caller(), rooms).reply, .hold(here: [5], followed: [3, 5]))
    XCTAssertEqual(decide(inode: 7, Caller(), rooms).reply, .hold(here: [3], followed: [3, 5]))
  }

  /// Into a pipe: held only at the first room of a pass (the one opened first) after a pass
  /// that read nothing; the pass is counted only there.
  func testAPipedTailIsHeldOnlyWhereAQuietPassBegins() {
    let rooms: [(id: UInt64, room: Room)] = [(5, Room(inode: 8)), (3, Room())]
    let quiet = Caller(terminal: false, quietPass: true)
    XCTAssertEqual(decide(inode: 7, quiet, rooms).reply, .hold(here: [3], followed: [5, 3]))
    XCTAssertEqual(quiet.asked, ["files under /mnt/bbs", "terminal", "pass"])

    let busy = Caller(terminal: false, quietPass: false)
    XCTAssertEqual(decide(inode: 7, busy, rooms).reply, .answer(updating: [3], seeking: false))
    XCTAssertEqual(busy.asked.last, "pass")

    // Not the first room of the pass: answered, and no pass begins.
    let second = Caller(terminal: false, quietPass: true)
    XCTAssertEqual(decide(inode: 8, second, rooms).reply, .answer(updating: [5], seeking: false))
    XCTAssertEqual(second.asked, ["files under /mnt/bbs", "terminal"])
  }
}
