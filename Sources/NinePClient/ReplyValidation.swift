import NinePProtocol

/// Whether a reply fits the request it answers: its type, and no more data, qids or bytes
/// written than asked for. A misfit is a protocol violation: the session closes.
enum ReplyValidation {
  /// Checks that a reply fits its request; returns what is wrong, or nil.
  static func validate(reply: Message, for request: Message) -> String? {
    if case .rerror = reply {
      if case .tflush = request { return "Tflush answered with Rerror" }
      return nil
    }
    guard reply.type.rawValue == request.type.rawValue + 1 else {
      return "\(request.type) answered with \(reply.type)"
    }
    switch (request, reply) {
    case (.tread(_, _, let count), .rread(let data)) where data.count > Int(count):
      return ProtocolError.readReplyTooLong(asked: count, got: data.count).description
    case (.twalk(_, _, let names), .rwalk(let qids)) where qids.count > names.count:
      return ProtocolError.walkReplyTooLong(asked: names.count, got: qids.count).description
    case (.twalk(_, _, let names), .rwalk(let qids)) where qids.isEmpty && !names.isEmpty:
      return "Rwalk with no qids for \(names.count) names (a failed first name must be Rerror)"
    case (.twrite(_, _, let data), .rwrite(let count)) where Int(count) > data.count:
      return "Rwrite count \(count) exceeds the \(data.count) bytes written"
    default:
      return nil
    }
  }
}
