import NinePClient

/// How the mount behaves (the `-o` options that are not libfuse's).
public struct MountOptions: Sendable {
  /// Read-only mount: writes, creates and removes fail with EROFS.
  public var readOnly = false
  /// Extra paths treated as streams (`stream=GLOB`).
  public var streamGlobs: [String] = []
  /// How long attributes and entries of ordinary files are trusted.
  public var attributeTimeout: Duration = .seconds(1)
  /// How long a directory listing answers lookups.
  public var listingLifetime: Duration = .seconds(1)
  /// Owner shown for every file (the server's "zephyr" means nothing here).
  public var uid: UInt32
  public var gid: UInt32
  /// Permission bits cleared from every mode shown (`-o umask=`, as sshfs).
  public var umask: UInt32 = 0
  /// Room lines keep other users' control characters and escape sequences raw (`-o rawtext`);
  /// off, they are shown as visible text (``VisibleControls``).
  public var rawText = false
  /// The absolute mount point: tells a `tail -f` that follows only rooms from one that also
  /// follows files elsewhere (see ``RoomFollowing``). Nil: room `fstat`s never wait.
  public var mountpoint: String?
  /// Watching, mentions and notifications (`watch=`, `highlight=`, `notify=`, `notify-command=`).
  public var awareness = AwarenessOptions()

  public init(uid: UInt32, gid: UInt32) {
    self.uid = uid
    self.gid = gid
  }
}
