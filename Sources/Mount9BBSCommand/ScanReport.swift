// What `mount9bbs scan` shows: each board or service found, as text on stdout (status lines on
// stderr) or as one JSON object a line (--json), with its trust against the pinned board keys.

import BBSDiscovery
import BBSIdentity
import BBSMount
import Foundation
import NinePTransport
import TerminalText

/// Writes scan results to stdout (text or JSON lines) and status lines to stderr.
final class ScanReport {
  let json: Bool
  let features: [String]
  /// Results shown (after the feature filter).
  private(set) var shown = 0
  /// Results left out by the feature filter.
  private(set) var skipped = 0

  init(json: Bool, features: [String]) {
    self.json = json
    self.features = features
  }

  func status(_ line: String) {
    Console.error(line)
  }

  func failure(_ line: String) {
    Console.error(line)
  }

  private func keeps(_ offered: [String]) -> Bool {
    features.allSatisfy { offered.contains($0) }
  }

  // MARK: Bluetooth

  func bluetooth(_ event: BluetoothScanEvent) {
    switch event {
    case .seen(let device):
      if json {
        emit(["event": "seen", "kind": "ble"].merging(Self.fields(device)) { $1 })
      } else {
        Console.error("  seen \(Self.heading(device)); reading its 9PIS…")
      }
    case .read(let device, let information):
      guard keeps(information.features) else {
        skipped += 1
        if !json {
          Console.error(
            "  skipped \(Self.safe(device.label)): features '\(Self.safe(information.featuresText ?? ""))' lack \(features.joined(separator: ","))"
          )
        }
        return
      }
      shown += 1
      board(device, information)
    case .unreadable(let device, let error):
      guard features.isEmpty else {
        skipped += 1
        return
      }
      shown += 1
      unreadable(device, error)
    }
  }

  /// A board whose 9PIS was read: every characteristic, its trust and how to mount it.
  private func board(_ device: BluetoothDevice, _ information: NinePInformation) {
    let board = CachedBoard(device, information: information)
    if json {
      var object = ["event": "board", "kind": "ble"].merging(Self.fields(device)) { $1 }
      for characteristic in NinePInformationService.Characteristic.allCases {
        if let value = information[characteristic] {
          object[Self.jsonKey(characteristic)] = value
        }
      }
      let transport = information.transport
      object["features"] = information.features
      object["psm"] = transport.psm.map { Int($0) }
      object["mtu"] = transport.mtu
      object["missing"] = information.missing.map(Self.jsonKey)
      object["dial"] = board.dialCandidates.map(\.description)
      object["mount"] = Self.mountName(device)
      object["trust"] = trust(of: board.dialCandidates).word
      emit(object)
      return
    }
    var lines = [Self.heading(device)]
    for characteristic in NinePInformationService.Characteristic.allCases {
      var value = information[characteristic].map(Self.safe) ?? "(not served)"
      if characteristic == .transportInformation {
        value += " → " + Self.dialSummary(board.dialCandidates)
      }
      lines.append("  " + Self.padded(characteristic.label) + value)
    }
    lines.append("  " + Self.padded("trust") + "\(trust(of: board.dialCandidates))")
    lines.append(
      "  " + Self.padded("mount") + "mount9bbs \(Self.shell(Self.mountName(device))) MOUNTPOINT")
    Console.output(lines.joined(separator: "\n"))
  }

  /// A board seen whose 9PIS could not be read: why, and how to mount it anyway.
  private func unreadable(_ device: BluetoothDevice, _ error: DiscoveryError) {
    let board = CachedBoard(device, information: nil)
    if json {
      var object = ["event": "error", "kind": "ble"].merging(Self.fields(device)) { $1 }
      object["error"] = "\(error)"
      object["dial"] = board.dialCandidates.map(\.description)
      object["mount"] = Self.mountName(device)
      emit(object)
      return
    }
    Console.output(
      [
        Self.heading(device),
        "  " + Self.padded("error") + Self.safe("\(error)"),
        "  " + Self.padded("mount")
          + "mount9bbs \(Self.shell(Self.mountName(device))) MOUNTPOINT  ("
          + Self.dialSummary(board.dialCandidates) + ")",
      ].joined(separator: "\n"))
  }

  static func heading(_ device: BluetoothDevice) -> String {
    var text =
      (device.name.map(Self.safe) ?? "(no name)")
      + "  \(Self.safe(device.address)) (\(device.addressType.rawValue))"
    if let rssi = device.rssi { text += "  RSSI \(rssi) dBm" }
    return text
  }

  static func fields(_ device: BluetoothDevice) -> [String: Any] {
    var object: [String: Any] = [
      "address": device.address, "addressType": device.addressType.rawValue,
    ]
    object["name"] = device.name
    object["rssi"] = device.rssi
    return object
  }

  static func jsonKey(_ characteristic: NinePInformationService.Characteristic) -> String {
    switch characteristic {
    case .serviceDescription: return "description"
    case .features: return "featuresText"
    case .transportInformation: return "transport"
    case .appLink: return "appLink"
    case .protocolVersion: return "protocolVersion"
    }
  }

  static func mountName(_ device: BluetoothDevice) -> String {
    "ble:" + (device.name ?? device.address)
  }

  static func dialSummary(_ candidates: [TransportAddress]) -> String {
    let psms = candidates.compactMap { address -> String? in
      guard case .l2cap(_, let psm, _) = address else { return nil }
      let hex = String(psm, radix: 16)
      return "0x" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
    }
    return psms.count == 1 ? "PSM \(psms[0])" : "PSM " + psms.joined(separator: ", then ")
  }

  static func padded(_ label: String) -> String {
    label.padding(toLength: 13, withPad: " ", startingAt: 0)
  }

  // MARK: LAN

  func lan(_ event: LANScanEvent) {
    switch event {
    case .found(let service):
      guard keeps(service.features) else {
        skipped += 1
        if !json {
          Console.error(
            "  skipped \(Self.safe(service.name)): features '\(Self.safe(service.txt["features"] ?? ""))' lack \(features.joined(separator: ","))"
          )
        }
        return
      }
      shown += 1
      if json {
        emit([
          "event": "board", "kind": "mdns", "name": service.name, "type": service.type,
          "host": service.host, "address": service.address, "port": Int(service.port),
          "txt": service.txt, "features": service.features,
          "dial": [service.dialAddress.description], "mount": "mdns:" + service.name,
          "trust": trust(of: service).word,
        ])
        return
      }
      var lines = [
        "\(Self.safe(service.name))  \(Self.safe(service.address)) port \(service.port)  (\(Self.safe(service.host)), \(Self.safe(service.type)))"
      ]
      for key in service.txt.keys.sorted() {
        lines.append("  " + Self.padded(Self.safe(key)) + Self.safe(service.txt[key] ?? ""))
      }
      lines.append("  " + Self.padded("trust") + Self.safe("\(trust(of: service))"))
      lines.append(
        "  " + Self.padded("mount") + "mount9bbs \(Self.shell("mdns:" + service.name)) MOUNTPOINT")
      Console.output(lines.joined(separator: "\n"))
    case .removed(let name):
      if json {
        emit(["event": "removed", "kind": "mdns", "name": name])
      } else {
        Console.output("gone: \(Self.safe(name)) (no longer advertised)")
      }
    case .unresolved(let name, let error):
      if json {
        emit(["event": "error", "kind": "mdns", "name": name, "error": "\(error)"])
      } else {
        Console.error("  " + Self.safe("\(error)"))
      }
    }
  }

  /// The user's pinned board keys.
  private let pins = BoardPins(path: BoardPins.defaultPath())

  /// A Bluetooth board's trust: by address only (9PIS advertises no key).
  private func trust(of addresses: [TransportAddress]) -> BoardPins.Trust {
    pins.trust(at: addresses.map(\.description), advertised: nil, advertisesKeys: false)
  }

  /// A LAN board's trust: its address and the key fingerprint in its TXT `boardkey`.
  private func trust(of service: LANService) -> BoardPins.Trust {
    pins.trust(
      at: [service.dialAddress.description], advertised: service.txt["boardkey"],
      advertisesKeys: true)
  }

  /// A server-chosen string as one visible line.
  static func safe(_ text: String) -> String { TerminalText.escaped(text) }

  /// A server-chosen word quoted for pasting into a shell.
  static func shell(_ word: String) -> String { TerminalText.shellQuoted(word) }

  private func emit(_ object: [String: Any]) {
    guard
      let data = try? JSONSerialization.data(
        withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
    else { return }
    Console.output(String(decoding: data, as: UTF8.self))
  }
}
