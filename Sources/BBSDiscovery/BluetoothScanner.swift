import Foundation
import Logging
import NinePTransport
import Synchronization

/// A Bluetooth LE device that advertises the 9P Information Service.
public struct BluetoothDevice: Sendable, Hashable {
  /// The device address, `XX:XX:XX:XX:XX:XX`.
  public var address: String
  /// Public or (static) random; Zephyr boards usually use random.
  public var addressType: BluetoothAddressType
  /// The advertised name (usually from the scan response), if any.
  public var name: String?
  /// The signal strength in dBm when last seen.
  public var rssi: Int?

  /// A device with the given properties.
  public init(
    address: String, addressType: BluetoothAddressType, name: String? = nil, rssi: Int? = nil
  ) {
    self.address = address
    self.addressType = addressType
    self.name = name
    self.rssi = rssi
  }

  /// `NAME (ADDRESS)`, or the address alone.
  public var label: String { name.map { "\($0) (\(address))" } ?? address }
}

/// What a Bluetooth scan reports, in the order it happens.
public enum BluetoothScanEvent: Sendable {
  /// A device advertising 9PIS was seen; its characteristics are being read.
  case seen(BluetoothDevice)
  /// A device's 9PIS characteristics were read (some may be missing).
  case read(BluetoothDevice, NinePInformation)
  /// A device was seen but its characteristics could not be read.
  case unreadable(BluetoothDevice, DiscoveryError)
}

/// How long and how thoroughly to scan.
public struct BluetoothScanOptions: Sendable {
  /// How long LE discovery runs.
  public var duration: Duration
  /// How long connecting and resolving one device's services may take.
  public var readTimeout: Duration
  /// Connect to each device and read its 9PIS characteristics.
  public var readsInformation: Bool

  /// Options with the given values.
  public init(
    duration: Duration = .seconds(10), readTimeout: Duration = .seconds(10),
    readsInformation: Bool = true
  ) {
    self.duration = duration
    self.readTimeout = readTimeout
    self.readsInformation = readsInformation
  }
}

/// The outcome of a whole scan.
public struct BluetoothScanSummary: Sendable {
  /// The adapter used, e.g. `hci0`.
  public var adapter: String
  /// Devices seen advertising 9PIS.
  public var seen: Int
  /// Devices whose characteristics were read.
  public var read: Int
}

/// Finds 9BBS boards over Bluetooth LE through BlueZ's D-Bus API.
///
/// ``scan(options:onEvent:)`` runs on the caller's thread: it checks BlueZ and the adapter,
/// sets a discovery filter on the 9PIS UUID (LE only), starts discovery, reports each
/// matching device, connects to it, waits for its services to resolve, reads the five
/// characteristics and disconnects again. Discovery stops when the duration ends or
/// ``cancel()`` is called (from any thread, or from `onEvent`).
public final class BluetoothScanner: Sendable {
  private let cancelled = Atomic<Bool>(false)
  private let logger: Logger

  /// A scanner that logs to `logger`.
  public init(logger: Logger = Logger(label: "mount9bbs.discovery")) {
    self.logger = logger
  }

  /// Ends a running scan soon: discovery stops, devices being read are disconnected.
  public func cancel() {
    cancelled.store(true, ordering: .relaxed)
  }

  var isCancelled: Bool { cancelled.load(ordering: .relaxed) }

  /// Scans, calling `onEvent` on this thread as devices appear and are read.
  /// - Throws: the first failure that stops the whole scan (no bus, no BlueZ, no adapter,
  ///   adapter off); failures of single devices are reported as events.
  @discardableResult
  public func scan(
    options: BluetoothScanOptions = BluetoothScanOptions(),
    onEvent: (BluetoothScanEvent) -> Void
  ) throws(DiscoveryError) -> BluetoothScanSummary {
    let session = try BlueZScan(scanner: self, options: options, logger: logger)
    return try session.run(onEvent)
  }
}
