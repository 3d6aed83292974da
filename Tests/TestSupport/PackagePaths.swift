import Foundation

/// Paths inside the package, for tests that run its scripts and fixtures.
public enum PackagePaths {
  /// The package root (Tests/TestSupport/ is two levels below it).
  public static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    .deletingLastPathComponent().deletingLastPathComponent()

  /// `relative` under the package root.
  public static func path(_ relative: String) -> String {
    root.appendingPathComponent(relative).path
  }

  /// The Python interpreter a test uses: `$variable` if set (absolute, or relative to the
  /// package root), else the venv `scripts/test` makes (`fallback`, relative to the root).
  public static func python(environment variable: String, fallback: String) -> String {
    if let configured = ProcessInfo.processInfo.environment[variable], !configured.isEmpty {
      return configured.hasPrefix("/") ? configured : path(configured)
    }
    return path(fallback)
  }
}
