import ChatTerminal
import Foundation
import XCTest

/// The chat client's pure core: formats, text safety, wrapping, editing, completion,
/// scrollback and the model's handling of keys and lines.
final class ChatCoreTests: XCTestCase {
  override class func setUp() {
    super.setUp()
    setlocale(LC_CTYPE, "C.UTF-8")  // wcwidth measures wide characters only in a UTF-8 locale
  }

  // MARK: Formats

  func testRoomLineParsesAndKeepsOddLinesWhole() {
    let line = RoomLine(parsing: "[14:38:11] alice: hi: there")
    XCTAssertEqual(line, RoomLine(stamp: "14:38:11", author: "alice", text: "hi: there"))
    XCTAssertEqual(line.stampSeconds, 14 * 3600 + 38 * 60 + 11)
    XCTAssertEqual(RoomLine(parsing: "no shape at all").text, "no shape at all")
    XCTAssertEqual(RoomLine(parsing: "[x] y").author, "")
  }

  func testLineSplitterKeepsPartialLines() {
    var splitter = LineSplitter(limit: 8)
    XCTAssertEqual(splitter.lines(adding: Array("ab\ncd".utf8)), ["ab"])
    XCTAssertEqual(splitter.lines(adding: Array("e\n".utf8)), ["cde"])
    XCTAssertEqual(splitter.lines(adding: Array("0123456789".utf8)), ["01234567"])
  }

  func testAwarenessFormats() {
    XCTAssertEqual(
      MountFormats.unread("lobby 0\nmy\\x20room 3\nbad\ntech x\nt\\tab 1\n"),
      ["lobby": 0, "my room": 3, "t\tab": 1])
    let mention = MountFormats.mention("tech [10:00:00] bob: alice look")
    XCTAssertEqual(mention?.room, "tech")
    XCTAssertEqual(mention?.line.author, "bob")
    // The mount writes a room's space as \x20, so the room stays one field.
    let spaced = MountFormats.mention("my\\x20room [10:00:00] bob: alice look")
    XCTAssertEqual(spaced?.room, "my room")
    XCTAssertEqual(spaced?.line.text, "alice look")
    // The line each open of chat/mentions starts with is the mount's, not a mention; a room
    // named "-" is written \x2d.
    XCTAssertNil(MountFormats.mention("- [10:00:00] mount9bbs: mentions of alice"))
    XCTAssertEqual(MountFormats.mention("\\x2d [10:00:00] bob: alice look")?.room, "-")
    XCTAssertEqual(MountFormats.outboxCount("ROOM\tAGE\tATTEMPTS\tLAST-ERROR\n"), 0)
    XCTAssertEqual(
      MountFormats.outboxCount("ROOM\tAGE\tATTEMPTS\tLAST-ERROR\nlobby\t3\t1\t-\ntech\t1\t0\t-\n"),
      2)
    XCTAssertEqual(MountFormats.users("alice (idle: 3s)\nbob (idle: 0s)\n"), ["alice", "bob"])
    XCTAssertEqual(
      MountFormats.event("2026-11-25T18:20:01.123Z\tlink\treconnecting\ttimed out"),
      .link(.reconnecting, reason: "timed out"))
    XCTAssertEqual(
      MountFormats.event("2026-11-25T18:20:01.123Z\tmessage\tmy\\troom\tbo\\x1Bb\\\\"),
      .message(room: "my\troom", author: "bo\u{1B}b\\"))
    XCTAssertEqual(
      MountFormats.event("2026-11-25T18:20:01.123Z\tpost\tsent\tlobby\t-"),
      .post(outcome: "sent", room: "lobby", reason: "-"))
    XCTAssertEqual(MountFormats.event("t\tfuture-kind\tx"), .other("future-kind"))
    XCTAssertNil(MountFormats.event("garbage"))
    XCTAssertNil(MountFormats.event("t\tlink\tsideways\tx"))
  }

  /// The mount writes a room name in `chat/unread` and `chat/mentions` escaped, as one field
  /// (a space as `\x20`): read back, it is the room's own name, the one `/join` uses.
  func testRoomFieldsAreUnescaped() {
    XCTAssertEqual(
      MountFormats.unread("sp\\x20ace 2\nnew\\nline 1\nback\\\\slash 3\nc1\\x85 4\n"),
      ["sp ace": 2, "new\nline": 1, "back\\slash": 3, "c1\u{85}": 4])
    let mention = MountFormats.mention("tab\\there\\x20x [10:00:00] bob: alice look")
    XCTAssertEqual(mention?.room, "tab\there x")
    XCTAssertEqual(mention?.line.author, "bob")
    XCTAssertEqual(
      MountFormats.event("t\tmessage\tc1\\x85\tbob"), .message(room: "c1\u{85}", author: "bob"))
    XCTAssertEqual(
      MountFormats.event("t\troom-added\tbidi\\u{202e}x"), .roomAdded("bidi\u{202E}x"))
  }

  // MARK: Text safety and layout

  func testHostileTextIsShownNotInterpreted() {
    let hostile = "look \u{1B}[31mRED\u{1B}]0;pwned\u{07} \r\u{202E}gnp.exe\tend"
    let safe = DisplayText.safe(hostile)
    XCTAssertFalse(
      safe.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) })
    XCTAssertFalse(safe.unicodeScalars.contains { $0.value == 0x202E })
    XCTAssertTrue(safe.contains("\\x1B[31mRED"), safe)
    XCTAssertTrue(safe.contains("\\u{202E}"), safe)
    // What the mount already made visible is shown as it is, not escaped twice.
    XCTAssertEqual(DisplayText.safe("look \\x1B[31mRED"), "look \\x1B[31mRED")
  }

  func testWidthsOfWideAndCombiningCharacters() {
    XCTAssertEqual(DisplayText.width(of: "abc"), 3)
    XCTAssertEqual(DisplayText.width(of: "日本"), 4)
    XCTAssertEqual(DisplayText.width(of: "e\u{301}"), 1)
  }

  func testWrappingBreaksAtSpacesWithHangingIndent() {
    let line = StyledLine(
      [
        Span("12:00:00 ", .stamp), Span("bob", .author(1)), Span(": ", .plain),
        Span("one two three four five", .plain),
      ], hangingIndent: 9)
    let rows = Wrapping.rows(of: line, width: 20)
    XCTAssertEqual(
      rows.map(\.plainText), ["12:00:00 bob: one", "         two three", "         four five"])
    XCTAssertEqual(rows[0].spans.first, Span("12:00:00 ", .stamp))
    XCTAssertEqual(
      Wrapping.rows(of: StyledLine([Span("abcdefgh", .plain)]), width: 3).map(\.plainText),
      ["abc", "def", "gh"])
    // A wide character never straddles two rows.
    let wide = Wrapping.rows(of: StyledLine([Span("a日本", .plain)]), width: 4)
    XCTAssertEqual(wide.map(\.plainText), ["a日", "本"])
  }

  // MARK: Input

  func testLineEditing() {
    var editor = LineEditor()
    editor.insert("hello world")
    editor.moveWordLeft()
    editor.insert("big ")
    XCTAssertEqual(editor.text, "hello big world")
    editor.deleteWordBackward()
    XCTAssertEqual(editor.text, "hello world")
    editor.moveToEnd()
    editor.deleteBackward()
    editor.moveToStart()
    editor.deleteForward()
    XCTAssertEqual(editor.text, "ello worl")
    editor.moveRight()
    editor.deleteToEnd()
    XCTAssertEqual(editor.text, "e")
    editor.insert("x")
    editor.deleteToStart()
    XCTAssertEqual(editor.text, "")
  }

  func testHistoryKeepsTheDraft() {
    var editor = LineEditor()
    editor.insert("first")
    XCTAssertEqual(editor.submit(), "first")
    editor.insert("second")
    _ = editor.submit()
    editor.insert("draft")
    editor.historyUp()
    XCTAssertEqual(editor.text, "second")
    editor.historyUp()
    editor.historyUp()
    XCTAssertEqual(editor.text, "first")
    editor.historyDown()
    editor.historyDown()
    XCTAssertEqual(editor.text, "draft")
  }

  func testLongInputScrollsToKeepTheCursorVisible() {
    var editor = LineEditor()
    editor.insert(String(repeating: "x", count: 30) + "END")
    let visible = editor.visible(width: 10)
    XCTAssertTrue(visible.text.hasSuffix("END"), visible.text)
    XCTAssertEqual(visible.cursorColumn, 9)
  }

  func testCompletion() {
    var completer = Completer()
    var editor = LineEditor()
    editor.insert("al")
    XCTAssertTrue(completer.complete(&editor, nicknames: ["bob", "alice", "alan"], rooms: []))
    XCTAssertEqual(editor.text, "alan: ")
    XCTAssertTrue(completer.complete(&editor, nicknames: ["bob", "alice", "alan"], rooms: []))
    XCTAssertEqual(editor.text, "alice: ")
    completer.reset()
    editor.replace(with: "hi bo and more", cursor: 5)
    XCTAssertTrue(completer.complete(&editor, nicknames: ["bob"], rooms: []))
    XCTAssertEqual(editor.text, "hi bob  and more")
    completer.reset()
    editor.replace(with: "/j te")
    XCTAssertTrue(completer.complete(&editor, nicknames: ["tess"], rooms: ["lobby", "tech"]))
    XCTAssertEqual(editor.text, "/j tech ")
    completer.reset()
    editor.replace(with: "/qu")
    XCTAssertTrue(completer.complete(&editor, nicknames: [], rooms: []))
    XCTAssertEqual(editor.text, "/quit ")
    completer.reset()
    editor.replace(with: "zz")
    XCTAssertFalse(completer.complete(&editor, nicknames: ["bob"], rooms: []))
  }

  func testAuthorColoursAreStableAndSpread() {
    XCTAssertEqual(AuthorColors.index(for: "alice"), AuthorColors.index(for: "alice"))
    let used = Set(
      ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"].map(AuthorColors.index))
    XCTAssertGreaterThan(used.count, 2)
    XCTAssertTrue(used.allSatisfy { (0..<AuthorColors.paletteSize).contains($0) })
  }

  func testMentionsAreWholeWords() {
    XCTAssertTrue(Mentions.mentions("hey Alice!", names: ["alice"]))
    XCTAssertTrue(Mentions.mentions("@alice: look", names: ["alice"]))
    XCTAssertFalse(Mentions.mentions("malice aforethought", names: ["alice"]))
    XCTAssertFalse(Mentions.mentions("alice_b", names: ["alice"]))
  }

  // MARK: Scrollback

  func testScrollbackPagesAndStaysPutWhileScrolled() {
    var scrollback = Scrollback(capacity: 100)
    for number in 1...30 {
      scrollback.append(StyledLine([Span("line \(number)", .plain)]), width: 20)
    }
    XCTAssertEqual(scrollback.visibleRows(height: 5, width: 20).last?.plainText, "line 30")
    scrollback.pageUp(height: 5, width: 20)
    XCTAssertEqual(scrollback.visibleRows(height: 5, width: 20).last?.plainText, "line 26")
    scrollback.append(StyledLine([Span("line 31", .plain)]), width: 20)
    XCTAssertEqual(scrollback.visibleRows(height: 5, width: 20).last?.plainText, "line 26")
    for _ in 0..<20 { scrollback.pageUp(height: 5, width: 20) }
    XCTAssertEqual(scrollback.visibleRows(height: 5, width: 20).first?.plainText, "line 1")
    for _ in 0..<20 { scrollback.pageDown(height: 5) }
    XCTAssertEqual(scrollback.offset, 0)
    XCTAssertEqual(scrollback.visibleRows(height: 5, width: 20).last?.plainText, "line 31")
  }

  func testScrollbackMarkerAndCapacity() {
    var scrollback = Scrollback(capacity: 5)
    for number in 1...4 { scrollback.append(StyledLine([Span("l\(number)", .plain)]), width: 20) }
    scrollback.markUnread(last: 2)
    XCTAssertEqual(
      scrollback.visibleRows(height: 10, width: 20).map(\.plainText),
      ["l1", "l2", "── new ──", "l3", "l4"])
    for number in 5...7 { scrollback.append(StyledLine([Span("l\(number)", .plain)]), width: 20) }
    XCTAssertEqual(scrollback.lines.count, 5)
    XCTAssertEqual(
      scrollback.visibleRows(height: 10, width: 20).map(\.plainText),
      ["── new ──", "l3", "l4", "l5", "l6", "l7"])
  }
}

/// What a hostile or busy room does to the pane: a long line, a full scrollback.
final class ChatPaneLoadTests: XCTestCase {
  func testA64KiBLineAndAFullScrollbackStayQuick() {
    var scrollback = Scrollback(capacity: 5000)
    for number in 0..<5000 {
      scrollback.append(
        StyledLine([Span("line \(number) " + String(repeating: "w ", count: 60), .plain)]),
        width: 80)
    }
    scrollback.append(StyledLine([Span(String(repeating: "x", count: 65536), .plain)]), width: 80)
    let start = Date()
    for _ in 0..<20 { scrollback.pageUp(height: 30, width: 80) }
    let rows = scrollback.visibleRows(height: 30, width: 80)
    XCTAssertEqual(rows.count, 30)
    XCTAssertLessThan(Date().timeIntervalSince(start), 5, "20 PgUps took too long")
  }
}

/// Bracketed paste: what the terminal sends is split into keys and whole pastes, however the
/// reads cut it.
final class BracketedPasteTests: XCTestCase {
  private func scalars(_ text: String) -> [BracketedPaste.Input] {
    text.unicodeScalars.map { .scalar($0.value) }
  }

  func testAPasteIsOneInputWithItsTabsAndLineEnds() {
    var decoder = BracketedPaste()
    let decoded = decoder.decode(scalars("x\u{1B}[200~a\tb\rc\u{1B}[201~y"))
    XCTAssertEqual(
      decoded,
      [
        .scalar(UInt32(("x" as Unicode.Scalar).value)), .paste("a\tb\rc"),
        .scalar(UInt32(("y" as Unicode.Scalar).value)),
      ])
  }

  func testAPasteSplitAcrossReadsIsWholeAndControlsInItAreDropped() {
    var decoder = BracketedPaste()
    XCTAssertEqual(decoder.decode(scalars("\u{1B}[200~one\u{07}\n")), [])
    XCTAssertEqual(decoder.decode([.code(0x103)] + scalars("two")), [])
    XCTAssertEqual(decoder.decode(scalars("\u{1B}[201~")), [.paste("one\ntwo")])
  }

  func testAltKeysAndALoneEscapeStayKeys() {
    var decoder = BracketedPaste()
    XCTAssertEqual(
      decoder.decode(scalars("\u{1B}2\u{1B}")), [.alt(UInt32(("2" as Unicode.Scalar).value))])
  }

  func testAPasteBeyondTheLimitIsCut() {
    var decoder = BracketedPaste(limit: 4)
    XCTAssertEqual(decoder.decode(scalars("\u{1B}[200~abcdef\u{1B}[201~")), [.paste("abcd")])
  }

  func testOneLineGoesToTheInputAndSeveralWaitForAYes() {
    var model = ChatModel(ownNames: ["alice"])
    model.join("lobby")
    XCTAssertEqual(model.handle(.paste("a\ttab\n")), [])
    XCTAssertEqual(String(model.editor.characters), "a\ttab")
    XCTAssertEqual(model.editor.visible(width: 40).text, "a→tab")
    model.editor.clear()
    XCTAssertEqual(model.handle(.paste("one\r\ntwo\n\nfour")), [])
    XCTAssertEqual(model.pendingPaste, ["one", "two", "", "four"])
    XCTAssertEqual(model.handle(.character("x")), [.bell])
    XCTAssertEqual(
      model.handle(.enter),
      [
        .post(room: "lobby", text: "one"), .post(room: "lobby", text: "two"),
        .post(room: "lobby", text: "four"),
      ])
    XCTAssertNil(model.pendingPaste)
    _ = model.handle(.paste("/quit\nrm -rf\n"))
    XCTAssertEqual(model.handle(.interrupt), [])
    XCTAssertNil(model.pendingPaste)
  }
}

/// The input line keeps characters whole however their scalars arrive.
final class LineEditorGraphemeTests: XCTestCase {
  func testAnEmojiWithASkinToneTypedScalarByScalarIsOneCharacter() {
    var editor = LineEditor()
    editor.insert("a")
    editor.insert("\u{1F44D}")  // 👍
    editor.insert("\u{1F3FD}")  // its skin tone, a key of its own
    XCTAssertEqual(editor.characters.count, 2)
    editor.moveLeft()  // Ctrl-B
    editor.insert("b")
    XCTAssertEqual(editor.text, "ab\u{1F44D}\u{1F3FD}")
    editor.moveToEnd()
    editor.deleteBackward()
    XCTAssertEqual(editor.text, "ab")
  }
}

/// Scrolled back, the status line says how many lines came below the view.
final class NewBelowTests: XCTestCase {
  func testLinesArrivingWhileScrolledBackAreCountedUntilTheViewFollowsAgain() {
    var model = ChatModel(ownNames: ["alice"])
    model.paneWidth = 40
    model.paneHeight = 5
    model.join("lobby")
    let now = Date()
    for index in 0..<30 {
      _ = model.receive("lobby", line: "[10:00:\(10 + index)] bob: line \(index)", now: now)
    }
    _ = model.handle(.pageUp)
    XCTAssertTrue(model.statusLine().contains("scrolled back (PgDn)"), model.statusLine())
    for index in 0..<3 {
      _ = model.receive("lobby", line: "[10:01:0\(index)] bob: later \(index)", now: now)
    }
    XCTAssertTrue(model.statusLine().contains("3 new below (PgDn)"), model.statusLine())
    _ = model.handle(.pageDown)
    _ = model.handle(.pageDown)
    XCTAssertFalse(model.statusLine().contains("below"), model.statusLine())
    XCTAssertFalse(model.statusLine().contains("scrolled back"), model.statusLine())
  }
}

/// `-o highlight=` words: the client learns them from the line `chat/mentions` starts with and
/// marks the lines that have them, as the mount counts them (the status bar counted @3 while
/// only the 2 lines naming you were marked).
final class HighlightWordsTests: XCTestCase {
  func testTheMentionsHeaderGivesTheWords() {
    XCTAssertEqual(
      MountFormats.mentionWords("- [10:00:00] mount9bbs: mentions of alice, deploy, on\\x2ccall"),
      ["alice", "deploy", "on,call"])
    XCTAssertNil(MountFormats.mentionWords("lobby [10:00:01] bob: alice: hi"))
  }

  func testALineWithAHighlightWordIsAMention() {
    var model = ChatModel(ownNames: ["alice"])
    model.join("lobby")
    let now = Date()
    XCTAssertFalse(model.receive("lobby", line: "[10:00:01] bob: time to deploy", now: now))
    model.highlightWords = ["deploy"]
    XCTAssertTrue(model.receive("lobby", line: "[10:00:02] bob: time to Deploy now", now: now))
    XCTAssertFalse(model.receive("lobby", line: "[10:00:03] bob: redeploying", now: now))
    XCTAssertFalse(model.receive("lobby", line: "[10:00:04] alice: I deploy", now: now))
  }
}
