import Foundation
import Synchronization

/// The rows the sections measure, in the order they came, and the two ways they are printed:
/// a table per section, or JSON with the settings. Rows may come from any thread.
final class BenchReport: Sendable {
  private let rows = Mutex<[Row]>([])

  /// Appends `row` and shows it on stderr as progress.
  func add(_ row: Row) {
    rows.withLock { $0.append(row) }
    let value = row.value.map { String(format: "%.3f", $0) } ?? "n/a"
    log("\(row.section) · \(row.metric): \(value) \(row.unit) \(row.detail)")
  }

  func add(contentsOf rows: [Row]) {
    for row in rows { add(row) }
  }

  /// The rows so far.
  var all: [Row] { rows.withLock { $0 } }

  /// The rows under a `## SECTION` heading each, metric, value, unit and detail in columns.
  func table() -> String {
    let rows = all
    var lines: [String] = []
    let width = max(44, rows.map { $0.metric.count }.max() ?? 0)
    var current = ""
    for row in rows {
      if row.section != current {
        current = row.section
        lines.append("")
        lines.append("## " + current)
      }
      let value = row.value.map { Self.format($0) } ?? "n/a"
      let metric = row.metric.padding(toLength: width, withPad: " ", startingAt: 0)
      let number = String(repeating: " ", count: max(0, 10 - value.count)) + value
      lines.append(
        "\(metric) \(number) \(row.unit.padding(toLength: 7, withPad: " ", startingAt: 0)) \(row.detail)"
      )
    }
    return lines.joined(separator: "\n")
  }

  /// `{"settings": …, "rows": […]}`, pretty-printed with sorted keys.
  func json(settings: [String: String]) throws -> String {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    let document = Document(settings: settings, rows: all)
    return String(decoding: try encoder.encode(document), as: UTF8.self)
  }

  private struct Document: Codable {
    var settings: [String: String]
    var rows: [Row]
  }

  /// Three significant-ish figures: 1234, 12.3, 1.234.
  static func format(_ value: Double) -> String {
    if abs(value) >= 100 { return String(format: "%.0f", value) }
    if abs(value) >= 10 { return String(format: "%.1f", value) }
    return String(format: "%.3f", value)
  }

  /// `format`, or "n/a".
  static func format(_ value: Double?) -> String { value.map { format($0) } ?? "n/a" }
}

/// One line of the results.
struct Row: Codable, Sendable {
  var section: String
  var metric: String
  var value: Double?
  var unit: String
  var detail: String
  /// The counts and percentiles behind a delivery row (section 7), for --json.
  var delivery: Delivery?

  init(_ section: String, _ metric: String, _ value: Double?, _ unit: String, _ detail: String = "")
  {
    self.section = section
    self.metric = metric
    self.value = value.flatMap { $0.isFinite ? $0 : nil }
    self.unit = unit
    self.detail = detail
  }
}

/// Lines delivered to readers' output and how long they took, ms.
struct Delivery: Codable, Sendable {
  var delivered: Int
  var expected: Int
  var p50: Double?
  var p99: Double?
  var max: Double?

  init(latencies: [Double], expected: Int) {
    delivered = latencies.count
    self.expected = expected
    p50 = Stats.percentile(latencies, 50)
    p99 = Stats.percentile(latencies, 99)
    max = latencies.max()
  }
}
