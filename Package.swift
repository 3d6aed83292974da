// swift-tools-version:6.1
import Foundation
import PackageDescription

let package = Package(
  name: "mount9bbs",
  platforms: [.macOS(.v15)],
  products: [
    .executable(name: "mount9bbs", targets: ["Mount9BBSCommand"]),
    .executable(name: "9bbsd", targets: ["BBSDaemonCommand"]),
    .executable(name: "mount9bbs-bench", targets: ["BenchCommand"]),
    .library(name: "NinePProtocol", targets: ["NinePProtocol"]),
    .library(name: "NinePTransport", targets: ["NinePTransport"]),
    .library(name: "NinePClient", targets: ["NinePClient"]),
    .library(name: "BBSServer", targets: ["BBSServer"]),
    .library(name: "FuseKit", targets: ["FuseKit"]),
    .library(name: "BBSMount", targets: ["BBSMount"]),
    .library(name: "BBSDiscovery", targets: ["BBSDiscovery"]),
    .library(name: "BBSIdentity", targets: ["BBSIdentity"]),
  ],
  dependencies: [
    .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
    .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
    .package(url: "https://github.com/apple/swift-system", from: "1.8.1"),
    .package(url: "https://github.com/apple/swift-collections", from: "1.6.0"),
    .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
    .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
  ],
  targets: [
    // System libraries.
    .systemLibrary(name: "CFuse3", pkgConfig: "fuse3", providers: [.apt(["libfuse3-dev"])]),
    .systemLibrary(name: "CBlueZ", providers: [.apt(["libbluetooth-dev"])]),
    .systemLibrary(
      name: "CSdBus", pkgConfig: "libsystemd", providers: [.apt(["libsystemd-dev"])]),
    .systemLibrary(
      name: "CAvahi", pkgConfig: "avahi-client", providers: [.apt(["libavahi-client-dev"])]),
    .systemLibrary(
      name: "CNcursesw", pkgConfig: "ncursesw", providers: [.apt(["libncurses-dev"])]),
    .systemLibrary(
      name: "COpenSSLCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),

    // Pure 9P2000 codec: messages, qids, stats, error strings <-> errno. No I/O.
    .target(name: "NinePProtocol"),

    // Dial strings, sockets, framing and SDU segmentation.
    .target(
      name: "NinePTransport",
      dependencies: [
        "CBlueZ",
        .product(name: "SystemPackage", package: "swift-system"),
        .product(name: "Logging", package: "swift-log"),
        .product(name: "DequeModule", package: "swift-collections"),
      ]),

    // Sessions, tags, fids, flush, server profiles, pool.
    .target(
      name: "NinePClient",
      dependencies: [
        "NinePProtocol", "NinePTransport",
        .product(name: "Logging", package: "swift-log"),
        .product(name: "DequeModule", package: "swift-collections"),
      ]),

    // The secure channel: Noise_XX_25519_ChaChaPoly_SHA256 on swift-crypto (the handshake) and
    // OpenSSL's libcrypto (records sealed in place), asked for with a Tversion, and 9P messages
    // in its encrypted records.
    .target(
      name: "SecureChannel",
      dependencies: [
        "NinePProtocol", "NinePTransport", "COpenSSLCrypto",
        .product(name: "Crypto", package: "swift-crypto"),
      ]),

    // Who you are: Ed25519 / P-256 keys (our files, OpenSSH's, ssh-agent's), identities and
    // the Tauth challenge response, signed and verified.
    .target(
      name: "BBSIdentity",
      dependencies: ["TerminalText", .product(name: "Crypto", package: "swift-crypto")]),

    // The reference 9BBS server, with its device-emulation profile.
    .target(
      name: "BBSServer",
      dependencies: [
        "NinePProtocol", "NinePTransport", "BBSIdentity", "TerminalText", "SecureChannel",
        .product(name: "Logging", package: "swift-log"),
        .product(name: "DequeModule", package: "swift-collections"),
        .product(name: "GRDB", package: "GRDB.swift"),
      ]),

    // The libfuse3 low-level layer: sessions, requests, exactly-once replies. Knows no 9P.
    .target(
      name: "FuseKit",
      dependencies: ["CFuse3", .product(name: "Logging", package: "swift-log")]),

    // Text from a server made safe to print and to paste (names, error strings, room lines).
    .target(name: "TerminalText"),

    // The FUSE adapter: the BBS as a file system.
    .target(
      name: "BBSMount",
      dependencies: [
        "FuseKit", "NinePProtocol", "NinePTransport", "NinePClient", "CSdBus", "TerminalText",
        .product(name: "Logging", package: "swift-log"),
        .product(name: "DequeModule", package: "swift-collections"),
      ]),

    // Finding 9BBS servers: BLE (9PIS through BlueZ over sd-bus) and LAN (mDNS through Avahi).
    .target(
      name: "BBSDiscovery",
      dependencies: [
        "CSdBus", "CAvahi", "NinePTransport",
        .product(name: "Logging", package: "swift-log"),
      ]),

    // `mount9bbs chat`: a one-terminal chat client on a mount's files. A pure core (editing,
    // completion, wrapping, scrollback, the files' formats) and an ncursesw view.
    .target(
      name: "ChatTerminal",
      dependencies: ["CNcursesw", "TerminalText"]),

    // A user-space link emulator (delay, rate, SDU size) between clients and a server socket.
    .target(name: "LinkEmulation", dependencies: ["NinePTransport"]),

    // Thin executables.
    .executableTarget(
      name: "Mount9BBSCommand",
      dependencies: [
        "BBSMount", "FuseKit", "BBSServer", "NinePClient", "NinePTransport", "BBSDiscovery",
        "BBSIdentity", "CSdBus", "ChatTerminal", "TerminalText", "SecureChannel",
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
        .product(name: "Logging", package: "swift-log"),
      ]),
    .executableTarget(
      name: "BBSDaemonCommand",
      dependencies: [
        "BBSServer", "NinePTransport", "BBSDiscovery",
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
        .product(name: "Logging", package: "swift-log"),
      ]),
    .executableTarget(
      name: "BenchCommand",
      dependencies: [
        "LinkEmulation", "NinePClient", "NinePTransport", "NinePProtocol",
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
      ]),

    // Tests.
    .target(
      name: "TestSupport",
      dependencies: ["NinePProtocol", "NinePTransport"],
      path: "Tests/TestSupport"),
    .testTarget(name: "NinePProtocolTests", dependencies: ["NinePProtocol"]),
    .testTarget(name: "NinePTransportTests", dependencies: ["NinePTransport"]),
    .testTarget(
      name: "NinePClientTests",
      dependencies: [
        "NinePClient", "NinePProtocol", "NinePTransport", "BBSServer", "BBSIdentity", "TestSupport",
      ]),
    .testTarget(
      name: "BBSServerTests",
      dependencies: [
        "BBSServer", "BBSIdentity", "NinePProtocol", "NinePTransport", "SecureChannel",
        "TestSupport",
      ]),
    .testTarget(name: "BBSIdentityTests", dependencies: ["BBSIdentity", "TestSupport"]),
    .testTarget(
      name: "SecureChannelTests",
      dependencies: ["SecureChannel", "NinePProtocol", "NinePTransport", "TestSupport"]),
    .testTarget(
      name: "LinkEmulationTests", dependencies: ["LinkEmulation", "NinePTransport", "TestSupport"]),
    .testTarget(
      name: "FuseKitTests",
      dependencies: ["FuseKit", .product(name: "Logging", package: "swift-log")]),
    .testTarget(
      name: "BBSMountTests",
      dependencies: [
        "BBSMount", "FuseKit", "NinePClient", "BBSServer", "BBSIdentity", "TestSupport",
        "TerminalText", "SecureChannel", "BBSDiscovery",
      ]),
    .testTarget(
      name: "ChatTerminalTests",
      dependencies: ["ChatTerminal", "TestSupport"]),
    .testTarget(
      name: "BBSDiscoveryTests",
      dependencies: ["BBSDiscovery", "BBSIdentity", "NinePTransport", "TestSupport"]),
  ],
  swiftLanguageModes: [.v6]
)

// The listing fuzz target (fuzz/run-listing), only when asked for: it is built with the fuzzer
// sanitizer and linked by that script, never by an ordinary build.
if ProcessInfo.processInfo.environment["MOUNT9BBS_FUZZ"] != nil {
  package.targets.append(
    .target(
      name: "FuzzListing",
      dependencies: [
        "BBSMount", "FuseKit", "NinePClient", "NinePProtocol", "NinePTransport",
        .product(name: "Logging", package: "swift-log"),
      ],
      path: "fuzz/FuzzListing"))
}
