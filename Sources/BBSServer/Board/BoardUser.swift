/// Who a request comes from, as the board sees it.
///
/// Without authentication a user is the uname it attached with (``id`` and ``name`` alike, as
/// on a Gen-1 board). With Tauth (docs/board-facts.md §6) the ``id`` is the verified identity (40
/// hex characters) and the ``name`` its nickname or short form; a guest is `""` for both, which
/// the chat shows as `guest`.
public struct BoardUser: Hashable, Sendable, ExpressibleByStringInterpolation,
  CustomStringConvertible
{
  /// What read cursors, presence and sysop rights are keyed by.
  public var id: String
  /// What chat lines, messages and `/chat/users` show.
  public var name: String

  public init(id: String, name: String) {
    self.id = id
    self.name = name
  }

  /// A user known by one name: the uname of an unauthenticated attach.
  public init(_ name: String) {
    self.init(id: name, name: name)
  }

  public init(stringLiteral value: String) {
    self.init(value)
  }

  /// An unauthenticated attach on a board that authenticates.
  public static let guest = BoardUser("")

  public var description: String {
    id == name ? (id.isEmpty ? "guest" : id) : "\(name) (\(id))"
  }
}
