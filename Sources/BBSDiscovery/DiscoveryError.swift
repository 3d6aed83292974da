import Foundation

/// Why finding, reading or advertising a board failed. Every `description` says what to do.
public enum DiscoveryError: Error, Sendable, Equatable, CustomStringConvertible {
  /// The D-Bus system bus cannot be reached.
  case noSystemBus(reason: String)
  /// BlueZ (`org.bluez`) is not on the system bus.
  case bluezNotRunning
  /// The bus policy refused a BlueZ call.
  case bluetoothAccessDenied(reason: String)
  /// BlueZ runs but has no Bluetooth adapter.
  case noAdapter
  /// The adapter is powered off; `blocked` when rfkill blocks it.
  case adapterOff(adapter: String, blocked: Bool)
  /// A BlueZ call failed in a way not covered above.
  case bluezFailed(operation: String, reason: String)
  /// Connecting to a device failed.
  case connectFailed(device: String, reason: String)
  /// The device connected but its GATT services did not resolve in time.
  case servicesNotResolved(device: String, seconds: Double)
  /// The device serves no 9PIS service over GATT.
  case noInformationService(device: String)
  /// Nothing was found within the scan time.
  case nothingFound(seconds: Double, lan: Bool)
  /// A board asked for by name was not in the cache and not found by a scan.
  case boardNotFound(name: String, lan: Bool, seconds: Double)
  /// A `ble!…` or `mdns!…` name is unusable.
  case badBoardName(String, reason: String)
  /// avahi-daemon is not running (or not reachable over D-Bus).
  case noAvahiDaemon(reason: String)
  /// An Avahi operation failed.
  case avahiFailed(operation: String, reason: String)
  /// A LAN service was seen but could not be resolved to an address.
  case lanResolveFailed(service: String, reason: String)
  /// The discovery cache could not be written.
  case cacheUnwritable(path: String, reason: String)

  public var description: String {
    switch self {
    case .noSystemBus(let reason):
      return
        "cannot reach the D-Bus system bus (\(reason)); Bluetooth discovery needs dbus and BlueZ running (sudo systemctl start dbus bluetooth)"
    case .bluezNotRunning:
      return
        "BlueZ is not running (no org.bluez on the system bus); start it with: sudo systemctl start bluetooth"
    case .bluetoothAccessDenied(let reason):
      return
        "BlueZ refused access (\(reason)); run as a user the BlueZ D-Bus policy allows (e.g. in the 'bluetooth' group) or as root"
    case .noAdapter:
      return
        "no Bluetooth adapter found; plug one in or check `bluetoothctl list` (and `rfkill list`)"
    case .adapterOff(let adapter, let blocked):
      return blocked
        ? "the Bluetooth adapter \(adapter) is blocked by rfkill; run: rfkill unblock bluetooth && bluetoothctl power on"
        : "the Bluetooth adapter \(adapter) is powered off; run: bluetoothctl power on"
    case .bluezFailed(let operation, let reason):
      return "BlueZ \(operation) failed: \(reason)"
    case .connectFailed(let device, let reason):
      return
        "cannot connect to \(device): \(reason); check that the board is powered and near, and not connected to another phone or computer"
    case .servicesNotResolved(let device, let seconds):
      return
        "\(device) connected but its GATT services did not resolve within \(Self.format(seconds)) s; move closer and scan again"
    case .noInformationService(let device):
      return
        "\(device) serves no 9P Information Service over GATT; it may not be a 9BBS board (mount it with an explicit l2cap!ADDRESS!PSM)"
    case .nothingFound(let seconds, let lan):
      return lan
        ? "no 9P server found on the LAN within \(Self.format(seconds)) s; is it running with --advertise, and is avahi-daemon running here and there?"
        : "no 9BBS board found within \(Self.format(seconds)) s; check that the board is powered and advertising, move closer, or scan longer with --timeout"
    case .boardNotFound(let name, let lan, let seconds):
      return lan
        ? "no LAN server named '\(name)' found within \(Self.format(seconds)) s; list them with: mount9bbs scan --lan"
        : "no board named '\(name)' found within \(Self.format(seconds)) s; list them with: mount9bbs scan"
    case .badBoardName(let text, let reason):
      return "cannot use '\(text)': \(reason)"
    case .noAvahiDaemon(let reason):
      return
        "no Avahi daemon is running (\(reason)); install and start it: sudo apt-get install avahi-daemon && sudo systemctl start avahi-daemon"
    case .avahiFailed(let operation, let reason):
      return "Avahi \(operation) failed: \(reason)"
    case .lanResolveFailed(let service, let reason):
      return "cannot resolve the LAN service '\(service)': \(reason)"
    case .cacheUnwritable(let path, let reason):
      return "cannot write the discovery cache \(path): \(reason)"
    }
  }

  static func format(_ seconds: Double) -> String {
    seconds == seconds.rounded() ? String(Int(seconds)) : String(format: "%.1f", seconds)
  }
}
