import Glibc
import NinePClient

/// Why a board refused a post, in words a member can act on. A board answers a refused
/// Twrite with one of its errno strings ("invalid argument", "file not found"); the mount
/// knows the post, so it can say what was wrong with it.
enum PostRefusal {
  /// What to tell about the refusal of `payload` (`room:text`) with `error`.
  static func explain(_ error: NinePError, payload: [UInt8]) -> String {
    let room = PostQueue.room(of: payload)
    let text = payload.drop { $0 != UInt8(ascii: ":") }.dropFirst()
    let said: String
    if case .server(let ename, _) = error {
      said = "the board said \"\(ename)\""
    } else {
      said = error.description
    }
    switch error.errno {
    case EINVAL:
      if text.contains(where: { ($0 < 0x20 && $0 != 0x09) || $0 == 0x7F }) {
        return "it holds a control character, which the board does not take (\(said))"
      }
      return "the board does not take it as it is (\(said))"
    case ENOENT:
      return "the board has no room \"\(room)\" (\(said))"
    case EAGAIN:
      return "the board takes no more posts from you for now; try again in a while (\(said))"
    case ENOSPC:
      return "room \(room) is full on the board (\(said))"
    case EACCES, EPERM:
      return "the board does not let you post there (\(said))"
    default:
      return said
    }
  }
}
