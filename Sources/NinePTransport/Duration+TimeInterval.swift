extension Duration {
  /// Seconds as a `Double`, for Dispatch, Foundation and messages: the project's one
  /// `Duration` → seconds conversion.
  public var timeInterval: Double {
    Double(components.seconds) + Double(components.attoseconds) / 1e18
  }
}
