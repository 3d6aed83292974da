// Objects this process serves on the bus (a board's GATT application and LE advertisement for
// bluetoothd): method calls under a path prefix go to one Swift handler, which answers with
// values or a D-Bus error. Handlers run inside ``SdBus/process()`` and must not call the bus.

import CSdBus
import Glibc

/// A method call another peer made on one of our objects.
struct IncomingCall {
  let path: String
  let interface: String
  let member: String
  let arguments: [DBusValue]
}

extension SdBus {
  /// What a handler answers: the reply's values, or an error; nil leaves the call to sd-bus
  /// (which answers `UnknownMethod`).
  typealias ObjectHandler = (IncomingCall) -> Result<[DBusValue], BusError>?

  /// Keeps a handler alive for as long as the bus serves it.
  final class ServedObjects {
    let handler: ObjectHandler
    weak var bus: SdBus?
    init(_ handler: @escaping ObjectHandler) { self.handler = handler }
  }

  /// Serves every method call on `prefix` and the paths below it with `handler`; the
  /// returned value must be kept as long as the objects are served.
  func serve(under prefix: String, _ handler: @escaping ObjectHandler) throws(BusError)
    -> ServedObjects
  {
    let served = ServedObjects(handler)
    served.bus = self
    let rc = sd_bus_add_fallback(
      bus, nil, prefix,
      { message, userdata, _ in
        guard let message, let userdata else { return 0 }
        let served = Unmanaged<ServedObjects>.fromOpaque(userdata).takeUnretainedValue()
        return served.bus?.answer(message, with: served.handler) ?? 0
      }, Unmanaged.passUnretained(served).toOpaque())
    if rc < 0 { throw BusError(errno: -rc, operation: "serve \(prefix)") }
    return served
  }

  /// Answers one incoming call; 1 if answered, 0 to let sd-bus go on.
  private func answer(_ message: OpaquePointer, with handler: ObjectHandler) -> Int32 {
    guard sd_bus_message_is_method_call(message, nil, nil) > 0 else { return 0 }
    func text(_ value: UnsafePointer<CChar>?) -> String { value.map { String(cString: $0) } ?? "" }
    let call = IncomingCall(
      path: text(sd_bus_message_get_path(message)),
      interface: text(sd_bus_message_get_interface(message)),
      member: text(sd_bus_message_get_member(message)),
      arguments: (try? Self.read(message)) ?? [])
    guard let result = handler(call) else { return 0 }
    var reply: OpaquePointer?
    switch result {
    case .success(let values):
      guard sd_bus_message_new_method_return(message, &reply) >= 0, let made = reply else {
        return 0
      }
      do {
        for value in values { try Self.append(value, to: made) }
      } catch {
        sd_bus_message_unref(made)
        return replyError(
          to: message, BusError(name: "org.freedesktop.DBus.Error.Failed", message: "\(error)"))
      }
    case .failure(let error):
      return replyError(to: message, error)
    }
    guard let reply else { return 0 }
    defer { sd_bus_message_unref(reply) }
    _ = sd_bus_send(bus, reply, nil)
    return 1
  }

  private func replyError(to message: OpaquePointer, _ error: BusError) -> Int32 {
    var busError = sd_bus_error()
    defer { sd_bus_error_free(&busError) }
    _ = sd_bus_error_set(&busError, error.name, error.message)
    _ = sd_bus_reply_method_error(message, &busError)
    return 1
  }
}
