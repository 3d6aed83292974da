import Foundation
import GRDB

/// A ``BoardStore`` in an SQLite database (`<dir>/9bbs.sqlite` for `9bbsd --data <dir>`).
///
/// Keeps each chat room's recent history, board rooms and messages, `/etc` values and BBS
/// users across restarts. The schema is created and upgraded with GRDB's `DatabaseMigrator`.
///
/// The database is in WAL mode, so a reader (say `sqlite3` run by the admin) never blocks a
/// write, and a write that finds the database locked all the same waits up to
/// ``busyTimeout`` before it fails; a failed write is an error to the caller, never dropped.
public final class SQLiteBoardStore: BoardStore {
  private let queue: DatabasePool

  /// How long a write waits for a lock another process holds (a checkpoint, a writer).
  public static let busyTimeout: TimeInterval = 5

  /// The most the write-ahead log keeps on disk after a checkpoint (bytes).
  static let walSizeLimit = 1 << 20

  /// The database file name inside a data directory.
  public static let fileName = "9bbs.sqlite"

  /// Opens (creating if needed) the database in `directory`, creating the directory too
  /// (0700: it holds every member's messages).
  public convenience init(directory: String) throws(BoardError) {
    do {
      try FileManager.default.createDirectory(
        atPath: directory, withIntermediateDirectories: true,
        attributes: [.posixPermissions: 0o700])
    } catch {
      throw BoardError.storage("cannot create data directory \(directory): \(error)")
    }
    try self.init(path: (directory as NSString).appendingPathComponent(Self.fileName))
  }

  /// Opens (creating if needed) the database file at `path`. The database and its WAL files
  /// are the owner's alone (0600), whatever the umask: they hold every member's messages,
  /// also on an `--auth required` board.
  public init(path: String) throws(BoardError) {
    let created = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
    if created < 0 {
      throw BoardError.storage("cannot create \(path): \(String(cString: strerror(errno)))")
    }
    close(created)
    do {
      var configuration = Configuration()
      configuration.busyMode = .timeout(Self.busyTimeout)
      // SQLite keeps the write-ahead log at its largest size after a checkpoint: a flood of
      // 60 KB messages left 4 MB of it on disk for good. Cut it back after each checkpoint.
      configuration.prepareDatabase { db in
        try db.execute(sql: "PRAGMA journal_size_limit = \(Self.walSizeLimit)")
      }
      // A pool opens the database in WAL mode.
      queue = try DatabasePool(path: path, configuration: configuration)
      try Self.migrator.migrate(queue)
    } catch {
      throw BoardError.storage("cannot open \(path): \(error)")
    }
    // SQLite gives its -wal and -shm files the database's mode; a database made world-readable
    // by an earlier 9bbsd is made private again.
    for file in [path, path + "-wal", path + "-shm"]
    where chmod(file, 0o600) != 0 && errno != ENOENT {
      throw BoardError.storage("cannot make \(file) private: \(String(cString: strerror(errno)))")
    }
  }

  private static var migrator: DatabaseMigrator {
    var migrator = DatabaseMigrator()
    migrator.registerMigration("v1") { db in
      try db.create(table: "chatMessage") { t in
        t.column("room", .text).notNull()
        t.column("id", .integer).notNull()
        t.column("author", .text).notNull()
        t.column("text", .blob).notNull()
        t.column("stamp", .integer).notNull()
        t.primaryKey(["room", "id"])
      }
      try db.create(table: "boardRoom") { t in
        t.autoIncrementedPrimaryKey("seq")
        t.column("name", .text).notNull().unique()
      }
      try db.create(table: "boardMessage") { t in
        t.column("room", .text).notNull()
        t.column("id", .integer).notNull()
        t.column("sequence", .integer).notNull()
        t.column("author", .text).notNull()
        t.column("subject", .text).notNull()
        t.column("body", .blob).notNull()
        t.column("date", .integer).notNull()
        t.column("signature", .text).notNull()
        t.primaryKey(["room", "id"])
      }
      try db.create(table: "etc") { t in
        t.primaryKey("field", .text)
        t.column("value", .text).notNull()
      }
      try db.create(table: "bbsUser") { t in
        t.autoIncrementedPrimaryKey("seq")
        t.column("name", .text).notNull().unique()
      }
    }
    return migrator
  }

  private func read<T>(_ body: (Database) throws -> T) throws(BoardError) -> T {
    do {
      return try queue.read(body)
    } catch {
      throw BoardError.storage("\(error)")
    }
  }

  private func write<T>(_ body: (Database) throws -> T) throws(BoardError) -> T {
    do {
      return try queue.write(body)
    } catch {
      throw BoardError.storage("\(error)")
    }
  }

  public func chatMessages(room: String, limit: Int) throws(BoardError) -> [ChatMessage] {
    try read { db in
      let rows = try Row.fetchAll(
        db,
        sql: """
          SELECT id, author, text, stamp FROM chatMessage WHERE room = ?
          ORDER BY id DESC LIMIT ?
          """, arguments: [room, limit])
      return rows.reversed().map { row in
        ChatMessage(
          room: room, id: UInt64(row["id"] as Int64), author: row["author"],
          text: [UInt8](row["text"] as Data), stamp: UInt64(row["stamp"] as Int64))
      }
    }
  }

  public func appendChatMessages(_ messages: [ChatMessage], keep: Int) throws(BoardError) {
    guard let last = messages.last else { return }
    try write { db in
      for message in messages {
        try db.execute(
          sql:
            "INSERT OR REPLACE INTO chatMessage (room, id, author, text, stamp) VALUES (?,?,?,?,?)",
          arguments: [
            message.room, Int64(message.id), message.author, Data(message.text),
            Int64(message.stamp),
          ])
      }
      try db.execute(
        sql: "DELETE FROM chatMessage WHERE room = ? AND id <= ?",
        arguments: [last.room, Int64(last.id) - Int64(keep)])
    }
  }

  public func boardRooms() throws(BoardError) -> [String] {
    try read { db in try String.fetchAll(db, sql: "SELECT name FROM boardRoom ORDER BY seq") }
  }

  public func addBoardRoom(_ name: String) throws(BoardError) {
    try write { db in
      try db.execute(sql: "INSERT OR IGNORE INTO boardRoom (name) VALUES (?)", arguments: [name])
    }
  }

  public func boardMessages(room: String) throws(BoardError) -> [BoardMessage] {
    try read { db in
      try Row.fetchAll(
        db, sql: "SELECT * FROM boardMessage WHERE room = ? ORDER BY sequence", arguments: [room]
      ).map { row in
        BoardMessage(
          room: room, id: UInt32(truncatingIfNeeded: row["id"] as Int64),
          author: row["author"], subject: row["subject"], body: [UInt8](row["body"] as Data),
          date: UInt64(row["date"] as Int64), signature: row["signature"],
          sequence: row["sequence"])
      }
    }
  }

  public func saveBoardMessage(_ message: BoardMessage) throws(BoardError) {
    try write { db in
      try db.execute(
        sql: """
          INSERT OR REPLACE INTO boardMessage
            (room, id, sequence, author, subject, body, date, signature)
          VALUES (?,?,?,?,?,?,?,?)
          """,
        arguments: [
          message.room, Int64(message.id), message.sequence, message.author, message.subject,
          Data(message.body), Int64(message.date), message.signature,
        ])
    }
  }

  public func deleteBoardMessage(room: String, id: UInt32) throws(BoardError) {
    try write { db in
      try db.execute(
        sql: "DELETE FROM boardMessage WHERE room = ? AND id = ?", arguments: [room, Int64(id)])
    }
  }

  public func etcValues() throws(BoardError) -> [EtcField: String] {
    try read { db in
      var values: [EtcField: String] = [:]
      for row in try Row.fetchAll(db, sql: "SELECT field, value FROM etc") {
        if let field = EtcField(rawValue: row["field"]) { values[field] = row["value"] }
      }
      return values
    }
  }

  public func setEtcValue(_ value: String, for field: EtcField) throws(BoardError) {
    try write { db in
      try db.execute(
        sql: "INSERT OR REPLACE INTO etc (field, value) VALUES (?, ?)",
        arguments: [field.rawValue, value])
    }
  }

  public func users() throws(BoardError) -> [String] {
    try read { db in try String.fetchAll(db, sql: "SELECT name FROM bbsUser ORDER BY seq") }
  }

  public func addUser(_ name: String) throws(BoardError) {
    try write { db in
      try db.execute(sql: "INSERT OR IGNORE INTO bbsUser (name) VALUES (?)", arguments: [name])
    }
  }
}
