/// One part of the benchmark: a few rows, measured on set-ups the rig provides and added to
/// its report.
protocol BenchSection {
  /// The name `--sections` selects it by.
  static var name: String { get }
  /// Whether it measures against the rig's loopback 9bbsd, which runs from before the first
  /// selected section that does until the last one has finished.
  static var usesLoopbackServer: Bool { get }
  init(rig: BenchRig)
  func run() throws
}

/// The sections, in the order they run and are printed. A new section is a file with a type
/// that conforms to `BenchSection`, and its line here.
enum BenchSections {
  static var all: [any BenchSection.Type] {
    [
      LargeFileSection.self,
      ClientSection.self,
      MetadataSection.self,
      DirectorySection.self,
      ChatDeliverySection.self,
      SecureChannelSection.self,
      DaemonSection.self,
      BLESection.self,
      PeopleSection.self,
      PostLatencySection.self,
      ScriptsSection.self,
      ChatClientSection.self,
      AwarenessSection.self,
    ]
  }

  /// Every section's name, comma-separated: `--sections`' default.
  static var names: String { all.map { $0.name }.joined(separator: ",") }

  /// Runs the sections named in `selected`, in the order of `all`, on `rig`.
  static func run(_ selected: Set<String>, on rig: BenchRig) throws {
    try rig.prepare()
    let sections = all.filter { selected.contains($0.name) }
    if sections.contains(where: { $0.usesLoopbackServer }) { try rig.startLoopbackServer() }
    for (index, section) in sections.enumerated() {
      // The loopback server stops once no section left needs it, so it idles in none of
      // the measurements that follow.
      if !sections[index...].contains(where: { $0.usesLoopbackServer }) {
        rig.stopLoopbackServer()
      }
      try section.init(rig: rig).run()
    }
    rig.stopLoopbackServer()
  }
}
