// libFuzzer entry point for the 9P2000 decoder (built with the NinePProtocol sources by
// fuzz/run). Every input is decoded as a reply frame and as a directory listing; whatever
// decodes must re-encode to the same message. A crash, a hang or a failed check is a bug.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzDecode(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
  let bytes = Array(UnsafeBufferPointer(start: data, count: size))
  if let (tag, message) = try? Message.decode(bytes, limits: DecodeLimits(maxFrameSize: 65536)) {
    let again = try? Message.decode(message.encoded(tag: tag), limits: .unbounded)
    if again?.message != message || again?.tag != tag {
      fatalError("re-encoding changed \(message)")
    }
  }
  if let entries = try? Stat.decodeDirectory(bytes) {
    let again = try? Stat.decodeDirectory(entries.flatMap { $0.encoded() })
    if again != entries { fatalError("re-encoding changed a directory listing") }
  }
  return 0
}
