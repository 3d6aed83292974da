/// The mount-local files of `chat/` that tell the user what happened.
public enum AwarenessFile: String, Sendable, Equatable, CaseIterable {
  /// `ROOM COUNT` per room, re-rendered at each open.
  case unread
  /// A stream of `ROOM LINE` per line that mentions the user.
  case mentions
  /// A stream of `TIME\tKIND\tFIELDS…` per event.
  case events

  static let allNames = Set(allCases.map(\.rawValue))

  /// Whether reads of it block and each open starts from now (a stream), or it is read whole.
  var isStream: Bool { self != .unread }
}
