import BBSIdentity
import NinePProtocol
import TerminalText

// Tversion, Tauth and Tattach: how a session starts and whose its fids are.
extension ConnectionHandler {
  func handleVersion(msize: UInt32, version: String, state: inout State) throws(NinePFailure)
    -> Message
  {
    // Gen-1 wants exactly 9P2000; HEAD leaves the session untouched on an unknown version.
    if gen1 && version != NineP.version { throw NinePFailure("unsupported version") }
    guard version.hasPrefix("9P2000") else {
      return .rversion(msize: UInt32(clamping: state.msize), version: "unknown")
    }
    // Never more than the client offered; a header-only msize cannot carry a reply.
    guard msize >= 64 else { throw NinePFailure("bad Tversion") }
    // A new version drops parked reads without replies and clunks every fid.
    reset(&state)
    state.versioned = true
    state.msize = min(Int(msize), configuration.maxMessageSize)
    return .rversion(msize: UInt32(state.msize), version: NineP.version)
  }

  func handleAuth(afid: Fid, uname: String, state: inout State) throws(NinePFailure) -> Message {
    guard configuration.auth != .off else { throw NinePFailure("authentication not required") }
    // An identity is the hex of 20 bytes; anything else is refused before it is kept or
    // logged.
    guard uname.utf8.count == 40, uname.utf8.allSatisfy(isASCIIHexDigit) else {
      logger.notice(
        "session \(id): Tauth refused: invalid identity '\(LogText.escaped(uname))'")
      throw NinePFailure("invalid identity")
    }
    let channel = channel()
    if signaturesNeedChannel && channel == nil {
      logger.notice(
        "session \(id): Tauth refused: '\(uname)' asked on a plain TCP connection; this board takes signatures only over its secure channel"
      )
      throw NinePFailure(Self.plainAuthRefusal)
    }
    do {
      try checkNewFid(afid, state)
    } catch {
      throw NinePFailure("cannot allocate afid")
    }
    return .rauth(
      aqid: try state.auth.begin(
        afid: afid, claimed: uname, boardKey: configuration.boardKey.flatMap(BoardKey.init(of:)),
        channelBinding: channel?.binding))
  }

  func handleAttach(fid: Fid, afid: Fid, uname: String, aname: String, state: inout State)
    throws(NinePFailure) -> Message
  {
    let user = try attachingUser(afid: afid, uname: uname, state: state)
    try checkNewFid(fid, state)
    // A full board lets a newcomer on probation in only if its user holds no session yet.
    if !state.attached, let refusal = admitAttach(user.id, isMember(user)) {
      throw NinePFailure(refusal)
    }
    var node = NamespaceNode.root
    for name in aname.split(separator: "/") where !name.isEmpty {
      guard let next = namespace.walk(from: node, name: String(name)) else {
        throw NinePFailure("aname not found")
      }
      node = next
    }
    namespace.board.etc.register(user: user.id)
    // Counted once per user a session attaches as, and for a bounded number of them.
    if !state.present.contains(user) && state.present.count < 64 {
      namespace.board.chat.arrive(user)
      state.present.append(user)
    }
    state.fids[fid] = FidState(node: node, user: user)
    state.attached = true
    attachedFlag.store(true, ordering: .relaxed)
    logger.debug(
      "session \(id): attach fid \(fid) uname '\(LogText.escaped(uname))' as \(LogText.escaped(user.description)) aname '\(LogText.escaped(aname))'"
    )
    return .rattach(qid: namespace.walkQid(node))
  }

  /// Who a Tattach's fid belongs to (docs/board-facts.md §6): unauthenticated, the uname; with
  /// it the identity its afid proved, else a guest, unless authentication is required.
  private func attachingUser(afid: Fid, uname: String, state: State) throws(NinePFailure)
    -> BoardUser
  {
    guard configuration.auth != .off else {
      // The uname is what chat lines and messages show: a control character in it could
      // forge a line or a header, a bidirectional control reorder it, an invisible one make
      // a second `alice`.
      if let problem = Self.unameProblem(uname) {
        logger.notice(
          "session \(id): attach refused: \(problem) in uname '\(LogText.escaped(uname))'")
        throw NinePFailure("invalid argument")
      }
      return BoardUser(uname)
    }
    if afid != NineP.noFid {
      if let identity = try state.auth.verifiedIdentity(afid: afid, uname: uname) {
        return BoardUser(
          id: identity.hex, name: configuration.nicknames[identity.hex] ?? identity.short)
      }
      if configuration.auth == .required { throw NinePFailure("authentication incomplete") }
    } else if configuration.auth == .required {
      throw NinePFailure("authentication required")
    }
    return .guest
  }
}

extension ConnectionHandler {
  /// The Rerror of a Tauth on a plain TCP connection to a board that offers the secure channel.
  static let plainAuthRefusal = "authentication only over the secure channel"

  /// What makes `uname` unfit to name a poster, or nil: a control character (C0, DEL, C1), a
  /// bidirectional control, an invisible character (``TerminalText/isUnsafe(_:)``, or any other
  /// default-ignorable code point but the variation selectors emoji use, and a zero width
  /// joiner between two emoji), or nothing visible at all. The empty uname stays: it is how a
  /// client attaches with no name.
  static func unameProblem(_ uname: String) -> String? {
    let scalars = Array(uname.unicodeScalars)
    for (index, scalar) in scalars.enumerated() {
      let value = scalar.value
      if value < 0x20 || (0x7F...0x9F).contains(value) { return "a control character" }
      if value == TerminalText.zeroWidthJoiner, index > 0, index + 1 < scalars.count,
        TerminalText.joinsEmoji(scalars[index - 1].value),
        TerminalText.joinsEmoji(scalars[index + 1].value)
      {
        continue
      }
      let ignorable =
        scalar.properties.isDefaultIgnorableCodePoint && !(0xFE00...0xFE0F).contains(value)
      if TerminalText.isUnsafe(scalar) || ignorable {
        return "an invisible or bidirectional character"
      }
    }
    if !scalars.isEmpty && scalars.allSatisfy({ $0.properties.isWhitespace }) {
      return "nothing visible"
    }
    return nil
  }
}

/// Whether `byte` is `0-9`, `a-f` or `A-F`.
private func isASCIIHexDigit(_ byte: UInt8) -> Bool {
  (0x30...0x39).contains(byte) || (0x41...0x46).contains(byte) || (0x61...0x66).contains(byte)
}
