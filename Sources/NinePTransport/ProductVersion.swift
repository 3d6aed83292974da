/// The version of mount9bbs, 9bbsd and mount9bbs-bench (`--version` on each).
public enum ProductVersion {
  /// The release these binaries belong to.
  public static let current = "0.9.0"
}
