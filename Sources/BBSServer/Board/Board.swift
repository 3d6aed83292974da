import Logging

/// The 9BBS content model with no 9P in it: chat, board rooms, `/etc` and users, backed by a
/// ``BoardStore``. Every part is thread-safe and can be used from any thread.
public final class Board: Sendable {
  /// Chat rooms, posting, cursors, presence and parked-read waiters.
  public let chat: ChatHub
  /// Board rooms and their messages.
  public let rooms: MessageBoard
  /// `/etc` values and the BBS user registry.
  public let etc: EtcFiles
  /// The limits in force.
  public let limits: BoardLimits
  private let logger: Logger

  /// Builds a board from a configuration, loading what `store` holds.
  public init(
    configuration: BoardConfiguration, store: any BoardStore = InMemoryBoardStore(),
    clock: any BoardClock = SystemBoardClock(), logger: Logger = Logger(label: "9bbs.board")
  ) throws(BoardError) {
    limits = configuration.limits
    self.logger = logger
    chat = try ChatHub(
      rooms: configuration.chatRooms, limits: configuration.limits, clock: clock, store: store,
      logger: logger)
    rooms = try MessageBoard(
      initialRooms: configuration.initialBoardRooms, limits: configuration.limits, clock: clock,
      store: store, logger: logger)
    etc = try EtcFiles(
      defaults: configuration.etcDefaults, sysops: configuration.sysops,
      firstUserIsSysop: configuration.firstUserIsSysop, store: store, logger: logger)
  }

  /// Tcreate of a directory at the BBS root: creates a board room. In the device profile the
  /// room is created and then ``BoardError/storage(_:)`` is thrown anyway, as a device reports
  /// `create failed` (docs/board-facts.md §1.6).
  public func createRoomAtRoot(_ name: String) throws(BoardError) {
    try rooms.createRoom(name)
    if limits.failsRootRoomCreate {
      logger.debug("board: room \(name) created; reporting failure like a device")
      throw BoardError.storage("room created but its node cannot be looked up")
    }
  }
}
