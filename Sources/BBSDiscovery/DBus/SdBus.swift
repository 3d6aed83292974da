import CSdBus
import Glibc

/// A D-Bus error reply or a failed sd-bus call.
struct BusError: Error, Sendable, CustomStringConvertible {
  /// The D-Bus error name (`org.bluez.Error.NotReady`), or `System.Error.E…` for local failures.
  let name: String
  /// The error's text.
  let message: String

  var description: String { message.isEmpty ? name : "\(message) (\(name))" }

  init(name: String, message: String) {
    self.name = name
    self.message = message
  }

  init(errno code: Int32, operation: String) {
    self.init(
      name: "System.Error.\(code)", message: "\(operation): \(String(cString: strerror(code)))")
  }

  init(_ error: UnsafePointer<sd_bus_error>?, errno code: Int32, operation: String) {
    if let error, let cName = error.pointee.name {
      self.init(
        name: String(cString: cName),
        message: error.pointee.message.map { String(cString: $0) } ?? "")
    } else {
      self.init(errno: -code, operation: operation)
    }
  }
}

/// One method call to send.
struct MethodCall {
  var destination: String
  var path: String
  var interface: String
  var member: String
  var arguments: [DBusValue] = []
}

/// A signal received through a match.
struct BusSignal {
  let sender: String
  let path: String
  let interface: String
  let member: String
  let body: [DBusValue]
}

/// A connection to a D-Bus bus through sd-bus, used from one thread only.
///
/// Signals that match an ``addMatch(_:)`` rule and replies to ``callAsync(_:timeout:_:)`` are
/// collected while ``process()`` runs and handed back from it, so callers never run inside an
/// sd-bus callback.
final class SdBus {
  let bus: OpaquePointer
  private var signals: [BusSignal] = []
  private var finished: [(Int, Result<[DBusValue], BusError>)] = []
  private var completions: [Int: (Result<[DBusValue], BusError>) -> Void] = [:]
  private var calls: [Int: PendingCall] = [:]
  private var nextCall = 1

  /// Ties an asynchronous call's reply back to this bus and the call's number.
  private final class PendingCall {
    weak var owner: SdBus?
    let id: Int
    init(owner: SdBus, id: Int) {
      self.owner = owner
      self.id = id
    }
  }

  /// Connects to the system bus (`DBUS_SYSTEM_BUS_ADDRESS`, else `/run/dbus/system_bus_socket`).
  static func system() throws(BusError) -> SdBus {
    var bus: OpaquePointer?
    let rc = sd_bus_open_system(&bus)
    guard rc >= 0, let bus else { throw BusError(errno: -rc, operation: "connect") }
    return SdBus(bus)
  }

  private init(_ bus: OpaquePointer) {
    self.bus = bus
  }

  deinit {
    sd_bus_flush_close_unref(bus)
  }

  // MARK: Calls

  /// Sends a call and waits for its reply.
  func call(_ method: MethodCall, timeout: Duration) throws(BusError) -> [DBusValue] {
    let message = try makeMessage(method)
    defer { sd_bus_message_unref(message) }
    var error = sd_bus_error()
    defer { sd_bus_error_free(&error) }
    var reply: OpaquePointer?
    let rc = sd_bus_call(bus, message, microseconds(timeout), &error, &reply)
    guard rc >= 0, let reply else {
      throw BusError(&error, errno: rc, operation: "\(method.interface).\(method.member)")
    }
    defer { sd_bus_message_unref(reply) }
    return try Self.read(reply)
  }

  /// Sends a call; `completion` runs from a later ``process()`` with the reply or the error.
  func callAsync(
    _ method: MethodCall, timeout: Duration,
    _ completion: @escaping (Result<[DBusValue], BusError>) -> Void
  ) {
    let id = nextCall
    nextCall += 1
    completions[id] = completion
    let message: OpaquePointer
    do {
      message = try makeMessage(method)
    } catch {
      finished.append((id, .failure(error)))
      return
    }
    defer { sd_bus_message_unref(message) }
    let pending = PendingCall(owner: self, id: id)
    calls[id] = pending
    let rc = sd_bus_call_async(
      bus, nil, message,
      { reply, userdata, _ in
        guard let userdata else { return 0 }
        let pending = Unmanaged<PendingCall>.fromOpaque(userdata).takeUnretainedValue()
        pending.owner?.received(reply: reply, for: pending.id)
        return 0
      }, Unmanaged.passUnretained(pending).toOpaque(), microseconds(timeout))
    if rc < 0 {
      calls[id] = nil
      finished.append(
        (id, .failure(BusError(errno: -rc, operation: "\(method.interface).\(method.member)"))))
    }
  }

  private func received(reply: OpaquePointer?, for id: Int) {
    calls[id] = nil
    guard let reply else {
      finished.append((id, .failure(BusError(name: "System.Error.NoReply", message: "no reply"))))
      return
    }
    if let error = sd_bus_message_get_error(reply), error.pointee.name != nil {
      finished.append(
        (id, .failure(BusError(error, errno: sd_bus_message_get_errno(reply), operation: "call"))))
      return
    }
    do {
      finished.append((id, .success(try Self.read(reply))))
    } catch {
      finished.append((id, .failure(error)))
    }
  }

  // MARK: Signals and the loop

  /// Subscribes to signals matching a D-Bus match rule; they come back from ``process()``.
  func addMatch(_ rule: String) throws(BusError) {
    let rc = sd_bus_add_match(
      bus, nil, rule,
      { message, userdata, _ in
        guard let message, let userdata else { return 0 }
        Unmanaged<SdBus>.fromOpaque(userdata).takeUnretainedValue().received(signal: message)
        return 0
      }, Unmanaged.passUnretained(self).toOpaque())
    if rc < 0 { throw BusError(errno: -rc, operation: "add match \(rule)") }
  }

  private func received(signal message: OpaquePointer) {
    guard let body = try? Self.read(message) else { return }
    func text(_ value: UnsafePointer<CChar>?) -> String { value.map { String(cString: $0) } ?? "" }
    signals.append(
      BusSignal(
        sender: text(sd_bus_message_get_sender(message)),
        path: text(sd_bus_message_get_path(message)),
        interface: text(sd_bus_message_get_interface(message)),
        member: text(sd_bus_message_get_member(message)), body: body))
  }

  /// Processes everything that has arrived, runs finished calls' completions, and returns the
  /// signals received, in order.
  func process() throws(BusError) -> [BusSignal] {
    while true {
      let rc = sd_bus_process(bus, nil)
      if rc < 0 { throw BusError(errno: -rc, operation: "read from the bus") }
      if rc == 0 { break }
    }
    let done = finished
    finished.removeAll()
    for (id, result) in done {
      if let completion = completions.removeValue(forKey: id) { completion(result) }
    }
    let received = signals
    signals.removeAll()
    return received
  }

  /// Waits until something arrives or `timeout` passes.
  func wait(upTo timeout: Duration) throws(BusError) {
    let rc = sd_bus_wait(bus, microseconds(timeout))
    if rc < 0 && rc != -EINTR { throw BusError(errno: -rc, operation: "wait on the bus") }
  }

  // MARK: Messages

  private func makeMessage(_ method: MethodCall) throws(BusError) -> OpaquePointer {
    var message: OpaquePointer?
    let rc = sd_bus_message_new_method_call(
      bus, &message, method.destination, method.path, method.interface, method.member)
    guard rc >= 0, let message else {
      throw BusError(errno: -rc, operation: "\(method.interface).\(method.member)")
    }
    do {
      for argument in method.arguments { try Self.append(argument, to: message) }
    } catch {
      sd_bus_message_unref(message)
      throw error
    }
    return message
  }

  private static func check(_ rc: Int32, _ operation: String) throws(BusError) {
    if rc < 0 { throw BusError(errno: -rc, operation: operation) }
  }

  private static func typeCode(_ signature: String) -> CChar {
    CChar(bitPattern: signature.utf8.first ?? 0)
  }

  static func append(_ value: DBusValue, to message: OpaquePointer) throws(BusError) {
    func basic<T>(_ code: String, _ value: T) throws(BusError) {
      var copy = value
      try check(
        withUnsafePointer(to: &copy) { sd_bus_message_append_basic(message, typeCode(code), $0) },
        "append")
    }
    func text(_ code: String, _ string: String) throws(BusError) {
      try check(
        string.withCString { sd_bus_message_append_basic(message, typeCode(code), $0) }, "append")
    }
    switch value {
    case .byte(let v): try basic("y", v)
    case .bool(let v): try basic("b", Int32(v ? 1 : 0))
    case .int16(let v): try basic("n", v)
    case .uint16(let v): try basic("q", v)
    case .int32(let v): try basic("i", v)
    case .uint32(let v): try basic("u", v)
    case .int64(let v): try basic("x", v)
    case .uint64(let v): try basic("t", v)
    case .double(let v): try basic("d", v)
    case .unixFD(let v): try basic("h", v)
    case .string(let v): try text("s", v)
    case .objectPath(let v): try text("o", v)
    case .signature(let v): try text("g", v)
    case .array(let element, let items):
      try check(sd_bus_message_open_container(message, typeCode("a"), element), "open array")
      for item in items { try append(item, to: message) }
      try check(sd_bus_message_close_container(message), "close array")
    case .dictionary(let key, let valueType, let map):
      try check(
        sd_bus_message_open_container(message, typeCode("a"), "{" + key + valueType + "}"),
        "open dictionary")
      for (entryKey, entryValue) in map {
        try check(
          sd_bus_message_open_container(message, typeCode("e"), key + valueType), "open entry")
        try append(entryKey, to: message)
        try append(entryValue, to: message)
        try check(sd_bus_message_close_container(message), "close entry")
      }
      try check(sd_bus_message_close_container(message), "close dictionary")
    case .variant(let inner):
      try check(
        sd_bus_message_open_container(message, typeCode("v"), inner.signature), "open variant")
      try append(inner, to: message)
      try check(sd_bus_message_close_container(message), "close variant")
    case .structure(let fields):
      let contents = fields.map(\.signature).joined()
      try check(sd_bus_message_open_container(message, typeCode("r"), contents), "open struct")
      for field in fields { try append(field, to: message) }
      try check(sd_bus_message_close_container(message), "close struct")
    }
  }

  /// Every value of a message's body, from the start.
  static func read(_ message: OpaquePointer) throws(BusError) -> [DBusValue] {
    try check(sd_bus_message_rewind(message, 1), "rewind")
    var values: [DBusValue] = []
    while let value = try readNext(message) { values.append(value) }
    return values
  }

  /// The next value in the current container, or nil at its end.
  private static func readNext(_ message: OpaquePointer) throws(BusError) -> DBusValue? {
    var type: CChar = 0
    var contentsPointer: UnsafePointer<CChar>?
    let rc = sd_bus_message_peek_type(message, &type, &contentsPointer)
    try check(rc, "peek")
    if rc == 0 { return nil }
    if let value = try readBasic(message, type: type) { return value }
    let contents = contentsPointer.map { String(cString: $0) } ?? ""
    return try readContainer(message, type: type, contents: contents)
  }

  /// The next value if its `type` is basic (a number, boolean, string, path, signature or
  /// file descriptor); nil for a container, which is left unread.
  private static func readBasic(_ message: OpaquePointer, type: CChar) throws(BusError)
    -> DBusValue?
  {
    func basic<T>(_ initial: T) throws(BusError) -> T {
      var storage = initial
      try check(
        withUnsafeMutablePointer(to: &storage) {
          sd_bus_message_read_basic(message, type, $0)
        }, "read")
      return storage
    }
    func text() throws(BusError) -> String {
      var pointer: UnsafePointer<CChar>?
      try check(sd_bus_message_read_basic(message, type, &pointer), "read string")
      return pointer.map { String(cString: $0) } ?? ""
    }

    switch UInt8(bitPattern: type) {
    case UInt8(ascii: "y"): return .byte(try basic(UInt8(0)))
    case UInt8(ascii: "b"): return .bool(try basic(Int32(0)) != 0)
    case UInt8(ascii: "n"): return .int16(try basic(Int16(0)))
    case UInt8(ascii: "q"): return .uint16(try basic(UInt16(0)))
    case UInt8(ascii: "i"): return .int32(try basic(Int32(0)))
    case UInt8(ascii: "u"): return .uint32(try basic(UInt32(0)))
    case UInt8(ascii: "x"): return .int64(try basic(Int64(0)))
    case UInt8(ascii: "t"): return .uint64(try basic(UInt64(0)))
    case UInt8(ascii: "d"): return .double(try basic(Double(0)))
    case UInt8(ascii: "h"): return .unixFD(try basic(Int32(0)))
    case UInt8(ascii: "s"): return .string(try text())
    case UInt8(ascii: "o"): return .objectPath(try text())
    case UInt8(ascii: "g"): return .signature(try text())
    default: return nil
    }
  }

  /// The next value, a container of `type` holding `contents` (a variant, structure,
  /// dictionary entry or array); a type not known here is skipped.
  private static func readContainer(
    _ message: OpaquePointer, type: CChar, contents: String
  ) throws(BusError) -> DBusValue {
    switch UInt8(bitPattern: type) {
    case UInt8(ascii: "v"):
      return .variant(
        try readContents(message, type: type, contents: contents).first ?? .structure([]))
    case UInt8(ascii: "r"):
      return .structure(try readContents(message, type: type, contents: contents))
    case UInt8(ascii: "e"):
      // Only reached inside an array (see below); read as a two-field structure.
      return .structure(try readContents(message, type: type, contents: contents))
    case UInt8(ascii: "a"):
      let items = try readContents(message, type: type, contents: contents)
      if contents.hasPrefix("{") && contents.hasSuffix("}") {
        let inner = contents.dropFirst().dropLast()
        let key = String(inner.prefix(1))
        let valueType = String(inner.dropFirst())
        var map: [DBusValue: DBusValue] = [:]
        for case .structure(let pair) in items where pair.count == 2 { map[pair[0]] = pair[1] }
        return .dictionary(key: key, value: valueType, map)
      }
      return .array(element: contents, items)
    default:
      try check(
        sd_bus_message_skip(message, String(UnicodeScalar(UInt8(bitPattern: type)))), "skip")
      return .structure([])
    }
  }

  /// Enters the container at hand, reads its values to its end and leaves it.
  private static func readContents(
    _ message: OpaquePointer, type: CChar, contents: String
  ) throws(BusError) -> [DBusValue] {
    try check(sd_bus_message_enter_container(message, type, contents), "enter container")
    var values: [DBusValue] = []
    while let value = try readNext(message) { values.append(value) }
    try check(sd_bus_message_exit_container(message), "exit container")
    return values
  }
}

/// A duration in whole microseconds, as sd-bus takes timeouts (0 would mean "the default").
func microseconds(_ duration: Duration) -> UInt64 {
  let (seconds, attoseconds) = duration.components
  let total = max(0, seconds) * 1_000_000 + max(0, attoseconds) / 1_000_000_000_000
  return UInt64(max(1, total))
}
