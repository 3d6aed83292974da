import CNcursesw
import Glibc

/// What a key press read from curses is.
enum KeyInput {
  case key(Key)
  case resize
}

/// The screen, through ncursesw: the transcript pane, a status line, the input line. All
/// curses calls happen here, on the client's one thread.
///
/// Why ncursesw: the pane must keep its place while the input line is edited and lines
/// arrive, and must redraw on resize; readline/libedit own only the input line, so the pane
/// would be hand-written escape sequences. ncursesw (Debian's libncursesw) knows every
/// terminal from terminfo (tmux, screen, xterm over ssh), handles UTF-8 and wide
/// characters, and sends only what changed.
final class CursesView {
  private let colors: Bool
  /// Pastes arrive marked (bracketed paste, turned on at start and off at the end).
  private var paste = BracketedPaste(limit: ChatModel.pasteLimit)
  private static let bracketedPasteOn = "\u{1B}[?2004h"
  private static let bracketedPasteOff = "\u{1B}[?2004l"
  /// Rows of the transcript pane.
  private(set) var paneHeight = 1
  private(set) var width = 1

  /// Starts curses (the alternate screen, raw keys: Ctrl-C and Ctrl-D come as keys).
  init(colors wanted: Bool) {
    setlocale(LC_ALL, "")
    initscr()
    raw()
    noecho()
    nonl()
    chat_keypad()
    set_escdelay(25)
    colors = wanted && has_colors()
    if colors {
      start_color()
      use_default_colors()
      let palette: [Int16] = [
        Int16(COLOR_RED), Int16(COLOR_GREEN), Int16(COLOR_YELLOW), Int16(COLOR_BLUE),
        Int16(COLOR_MAGENTA), Int16(COLOR_CYAN),
      ]
      for (index, colour) in palette.enumerated() { init_pair(Int16(index + 1), colour, -1) }
      init_pair(7, Int16(COLOR_RED), -1)  // errors
      init_pair(8, Int16(COLOR_YELLOW), -1)  // mentions
    }
    measure()
    Self.writeToTerminal(Self.bracketedPasteOn)
  }

  private static func writeToTerminal(_ text: String) {
    let bytes = Array(text.utf8)
    _ = bytes.withUnsafeBytes { write(STDOUT_FILENO, $0.baseAddress, $0.count) }
  }

  /// What undoes curses' screen, for a crash handler that cannot call `endwin`: the
  /// terminal's own strings (normal cursor, no attributes, keypad off, leave the alternate
  /// screen) and a newline.
  static func leaveSequence() -> [UInt8] {
    var bytes: [UInt8] = []
    for name in ["cnorm", "sgr0", "rmkx", "rmcup"] {
      if let value = chat_capability(name) { bytes += Array(String(cString: value).utf8) }
    }
    return bytes + Array(bracketedPasteOff.utf8) + [0x0D, 0x0A]
  }

  func close() {
    Self.writeToTerminal(Self.bracketedPasteOff)
    endwin()
  }

  /// Takes the terminal's new size (after SIGWINCH).
  func resize() {
    var size = winsize()
    if ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0 && size.ws_row > 0 && size.ws_col > 0 {
      resizeterm(Int32(size.ws_row), Int32(size.ws_col))
    }
    measure()
    clearok(chat_stdscr(), true)
  }

  func forceRedraw() { clearok(chat_stdscr(), true) }

  private func measure() {
    width = max(1, Int(chat_cols()))
    paneHeight = max(1, Int(chat_lines()) - 2)
  }

  func bell() { beep() }

  /// Keys waiting (never blocks: the caller polls standard input first).
  func readKeys() -> [KeyInput] {
    var inputs: [BracketedPaste.Input] = []
    var value: UInt32 = 0
    while true {
      let result = chat_get_wch(&value)
      if result == ERR { break }
      inputs.append(result == KEY_CODE_YES ? .code(value) : .scalar(value))
    }
    var keys: [KeyInput] = []
    for input in paste.decode(inputs) {
      switch input {
      case .code(let code):
        switch Int32(code) {
        case KEY_RESIZE: keys.append(.resize)
        case KEY_UP: keys.append(.key(.up))
        case KEY_DOWN: keys.append(.key(.down))
        case KEY_LEFT: keys.append(.key(.left))
        case KEY_RIGHT: keys.append(.key(.right))
        case KEY_HOME: keys.append(.key(.home))
        case KEY_END: keys.append(.key(.end))
        case KEY_PPAGE: keys.append(.key(.pageUp))
        case KEY_NPAGE: keys.append(.key(.pageDown))
        case KEY_BACKSPACE: keys.append(.key(.backspace))
        case KEY_DC: keys.append(.key(.delete))
        case KEY_ENTER: keys.append(.key(.enter))
        default: break
        }
      case .alt(let next):
        if let scalar = Unicode.Scalar(next) { keys.append(.key(.alt(Character(scalar)))) }
      case .paste(let text):
        keys.append(.key(.paste(text)))
      case .scalar(let value):
        if let key = Self.controlKey(value) {
          keys.append(.key(key))
        } else if value >= 0x20 && value != 0x7F, let scalar = Unicode.Scalar(value),
          !TerminalTextCheck.isUnsafe(scalar)
        {
          keys.append(.key(.character(Character(scalar))))
        }
      }
    }
    return keys
  }

  /// The control keys the input line knows (emacs-style, as readline).
  static func controlKey(_ value: UInt32) -> Key? {
    switch value {
    case 0x01: .home
    case 0x02: .left
    case 0x03: .interrupt
    case 0x04: .endOfInput
    case 0x05: .end
    case 0x06: .right
    case 0x08, 0x7F: .backspace
    case 0x09: .tab
    case 0x0A, 0x0D: .enter
    case 0x0B: .deleteToEnd
    case 0x0C: .redraw
    case 0x0E: .down
    case 0x10: .up
    case 0x15: .deleteToStart
    case 0x17: .deleteWord
    default: nil
    }
  }

  /// Draws the whole screen from the model (curses sends only what changed).
  func draw(_ model: ChatModel) {
    chat_erase()
    if let room = model.currentRoom {
      let rows = room.scrollback.visibleRows(height: paneHeight, width: width)
      let top = paneHeight - rows.count
      for (index, row) in rows.enumerated() {
        chat_move(Int32(top + index), Int32(row.indent))
        for span in row.spans {
          chat_attrset(attributes(span.style))
          chat_addstr(span.text)
        }
      }
    }
    chat_attrset(chat_attr_reverse())
    chat_move(Int32(paneHeight), 0)
    let status = Self.clip(model.statusLine(), width: width)
    chat_addstr(
      status + String(repeating: " ", count: max(0, width - DisplayText.width(of: status))))
    chat_attrset(chat_attr_normal())
    let prompt = "> "
    let visible = model.editor.visible(width: max(2, width - prompt.count - 1))
    chat_move(Int32(paneHeight + 1), 0)
    chat_addstr(prompt + visible.text)
    chat_move(Int32(paneHeight + 1), Int32(prompt.count + visible.cursorColumn))
    chat_refresh()
  }

  private func attributes(_ style: TextStyle) -> Int32 {
    let pair = { (number: Int32) in self.colors ? chat_color_pair(number) : 0 }
    switch style {
    case .plain: return chat_attr_normal()
    case .stamp: return chat_attr_dim()
    case .author(let index): return pair(Int32(index + 1)) | (colors ? 0 : chat_attr_bold())
    case .ownName: return chat_attr_bold() | chat_attr_underline()
    case .mention: return chat_attr_bold() | pair(8)
    case .notice: return chat_attr_dim()
    case .marker: return chat_attr_bold()
    case .error: return chat_attr_bold() | pair(7)
    }
  }

  /// `text` cut to `width` columns.
  static func clip(_ text: String, width: Int) -> String {
    var used = 0
    var result = ""
    for character in text {
      let columns = DisplayText.width(of: character)
      if used + columns > width { break }
      used += columns
      result.append(character)
    }
    return result
  }
}

/// TerminalText's test for characters a terminal acts on, for keys typed.
enum TerminalTextCheck {
  static func isUnsafe(_ scalar: Unicode.Scalar) -> Bool {
    DisplayText.safe(String(scalar)) != String(scalar)
  }
}
