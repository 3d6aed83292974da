import Foundation

/// Tab completion of nicknames, room names and commands, cycling through candidates on
/// repeated Tabs.
public struct Completer: Sendable {
  /// The cycle in progress: the line before the word, the word's prefix, the text after the
  /// cursor, the candidates and which one is shown.
  private var cycle:
    (before: String, after: String, candidates: [String], index: Int, suffix: String)?

  public init() {}

  /// Any key but Tab ends a cycle.
  public mutating func reset() { cycle = nil }

  /// The commands `/` completes to.
  public static let commands = [
    "/help", "/join", "/me", "/next", "/prev", "/quit", "/rooms", "/users",
  ]

  /// Completes the word before the editor's cursor (or the next candidate, on a repeated Tab).
  /// Nicknames at the start of the line get `: `; rooms after `/join` or `/j`. Returns false
  /// when nothing matched (the view rings the bell).
  public mutating func complete(
    _ editor: inout LineEditor, nicknames: [String], rooms: [String]
  ) -> Bool {
    if var cycle {
      cycle.index = (cycle.index + 1) % cycle.candidates.count
      self.cycle = cycle
      apply(cycle, to: &editor)
      return true
    }
    let characters = editor.characters
    var start = editor.cursor
    while start > 0 && characters[start - 1] != " " { start -= 1 }
    let word = String(characters[start..<editor.cursor])
    let before = String(characters[..<start])
    let after = String(characters[editor.cursor...])
    var pool: [String]
    var suffix = " "
    let trimmed = before.trimmingCharacters(in: .whitespaces)
    if start == 0 && word.hasPrefix("/") {
      pool = Self.commands
    } else if trimmed == "/join" || trimmed == "/j" {
      pool = rooms
    } else {
      pool = nicknames
      if start == 0 { suffix = ": " }
    }
    let lowered = word.lowercased()
    var seen = Set<String>()
    let candidates = pool.filter {
      $0.lowercased().hasPrefix(lowered) && $0 != word && seen.insert($0).inserted
    }.sorted { $0.lowercased() < $1.lowercased() }
    guard !candidates.isEmpty else { return false }
    let new = (before: before, after: after, candidates: candidates, index: 0, suffix: suffix)
    cycle = new
    apply(new, to: &editor)
    return true
  }

  private func apply(
    _ cycle: (before: String, after: String, candidates: [String], index: Int, suffix: String),
    to editor: inout LineEditor
  ) {
    let head = cycle.before + cycle.candidates[cycle.index] + cycle.suffix
    editor.replace(with: head + cycle.after, cursor: head.count)
  }
}
