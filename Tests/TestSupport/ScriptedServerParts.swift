import Foundation
import NinePProtocol
import NinePTransport
import Synchronization

/// A TCP listener on 127.0.0.1 for the 9P servers tests script in their own process: from
/// ``start(_:)`` on, each accepted connection is handed to `serve` on a thread of its own;
/// ``stop()`` stops listening and closes every connection, so each `serve` sees its transport
/// end.
public final class ScriptedListener: Sendable {
  /// The dial string for `mount9bbs`.
  public let address: String
  private let listener: Listener

  private struct Accepted {
    var connections: [SocketTransport] = []
    var closed = false
  }

  private let accepted = Mutex(Accepted())

  /// Listens on an ephemeral port.
  public init() throws {
    listener = try Listener(address: .tcp(host: "127.0.0.1", port: 0))
    guard case .tcp(let host, let port) = listener.boundAddress else {
      throw HarnessError("listener is not TCP: \(listener.boundAddress)")
    }
    address = "tcp!\(host)!\(port)"
  }

  /// Accepts connections, each served by `serve` on a thread of its own.
  public func start(_ serve: @escaping @Sendable (SocketTransport) -> Void) {
    Thread { [self] in acceptLoop(serve) }.start()
  }

  public func stop() {
    let open = accepted.withLock {
      $0.closed = true
      return $0.connections
    }
    listener.close()
    for connection in open { connection.close() }
  }

  private func acceptLoop(_ serve: @escaping @Sendable (SocketTransport) -> Void) {
    while let transport = try? listener.accept() {
      let taken = accepted.withLock { state -> Bool in
        guard !state.closed else { return false }
        state.connections.append(transport)
        return true
      }
      guard taken else { return transport.close() }
      Thread { serve(transport) }.start()
    }
  }
}

/// The fids of one connection to a scripted server, each naming a path ("" is the root), and
/// the replies to Tversion, Tattach, Twalk and Tclunk, which such servers give alike.
public final class ScriptedFids: Sendable {
  private struct State {
    var fids: [Fid: String] = [:]
    var msize: UInt32 = 8192
  }

  private let state = Mutex(State())

  public init() {}

  /// The path `fid` names, if it is in use.
  public func path(_ fid: Fid) -> String? { state.withLock { $0.fids[fid] } }

  /// The largest Rread payload the agreed msize allows.
  public var readLimit: UInt32 { state.withLock { $0.msize } - UInt32(NineP.readOverhead) }

  /// Rversion of 9P2000 with msize at most 8192; every fid is forgotten.
  public func version(_ size: UInt32) -> Message {
    state.withLock {
      $0.msize = min(size, 8192)
      $0.fids.removeAll()
    }
    return .rversion(msize: min(size, 8192), version: "9P2000")
  }

  /// `fid` names the root.
  public func attach(_ fid: Fid) -> Message {
    state.withLock { $0.fids[fid] = "" }
    return .rattach(qid: Qid(type: .directory, path: 1))
  }

  /// Walks `names` from `fid`'s path, each step found by `stat`; `newfid` names the end if
  /// every step was found. Rwalk of the steps found, or Rerror if the first was not.
  public func walk(_ fid: Fid, to newfid: Fid, _ names: [String], stat: (String) -> Stat?)
    -> Message
  {
    guard let base = path(fid) else { return .rerror(ename: "unknown fid") }
    var current = base
    var qids: [Qid] = []
    for name in names {
      let next = current.isEmpty ? name : current + "/" + name
      guard let found = stat(next) else { break }
      qids.append(found.qid)
      current = next
    }
    if qids.count < names.count {
      return qids.isEmpty ? .rerror(ename: "file not found") : .rwalk(qids: qids)
    }
    state.withLock { $0.fids[newfid] = current }
    return .rwalk(qids: qids)
  }

  /// `fid` is free again.
  public func clunk(_ fid: Fid) -> Message {
    state.withLock { $0.fids[fid] = nil }
    return .rclunk
  }
}
