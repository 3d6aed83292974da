import BBSMount
import CSdBus
import NinePClient
import TerminalText

/// Tells systemd how the mount is, for a `Type=notify` unit (`mount9bbs@.service`): READY=1
/// once the kernel has the mount, STATUS= with the link whenever it changes, STOPPING=1 when
/// unmounting. Outside systemd (no `NOTIFY_SOCKET`) every call does nothing.
enum SystemdNotifier {
  static func ready(mountpoint: String, link: LinkState) {
    notify("READY=1\nSTATUS=\(status(link, mountpoint: mountpoint))")
  }

  static func linkChanged(_ link: LinkState, mountpoint: String) {
    notify("STATUS=\(status(link, mountpoint: mountpoint))")
  }

  static func stopping() {
    notify("STOPPING=1\nSTATUS=unmounting")
  }

  /// One line for `systemctl status`: the reason may hold the far end's text, so it is
  /// escaped (one line, no control characters).
  static func status(_ link: LinkState, mountpoint: String) -> String {
    let state: String
    switch link {
    case .up: state = "link up"
    case .down(let reason): state = "link down, reconnecting (\(reason))"
    case .closed: state = "link closed"
    }
    return TerminalText.escaped("mounted on \(mountpoint); \(state)")
  }

  private static func notify(_ message: String) {
    _ = sd_notify(0, message)
  }
}
