// mount(8)'s helper convention: installed as `mount.mount9bbs` or `mount.fuse.mount9bbs`,
// mount9bbs is called as `mount.TYPE SOURCE DIR [-sfnv] [-o OPTIONS]`.

/// What a mount helper is asked to do.
enum MountHelperCall: Equatable {
  /// Mount with these mount9bbs arguments.
  case mount([String])
  /// `-f`: mount(8)'s "fake" run; do nothing and succeed.
  case fake
  case invalid(String)

  /// Translates `SOURCE DIR [-sfnv] [-o OPTIONS] [-t TYPE]` (mount(8)'s helper call) into
  /// `mount SOURCE DIR -o OPTIONS`.
  static func translate(_ given: [String]) -> MountHelperCall {
    var positional: [String] = []
    var options: [String] = []
    var index = 0
    while index < given.count {
      let argument = given[index]
      switch argument {
      case "-o", "-t", "-N":
        guard index + 1 < given.count else { return .invalid("\(argument) needs a value") }
        if argument == "-o" { options.append(given[index + 1]) }
        if argument == "-N" { return .invalid("-N (mount namespaces) is not supported") }
        index += 2
        continue
      case "-f": return .fake
      case "-s", "-n", "-v", "-r", "-w":
        if argument == "-r" { options.append("ro") }
      case "-h", "--help", "-V", "--version":
        return .mount([argument])
      default:
        if argument.hasPrefix("-o") && argument.count > 2 {
          options.append(String(argument.dropFirst(2)))
        } else if argument.hasPrefix("-") && argument != "-" {
          return .invalid("unknown flag \(argument)")
        } else {
          positional.append(argument)
        }
      }
      index += 1
    }
    guard positional.count == 2 else {
      return .invalid("usage: mount.mount9bbs ADDRESS MOUNTPOINT [-o OPTIONS]")
    }
    return .mount(
      ["mount", positional[0], positional[1]]
        + (options.isEmpty ? [] : ["-o", options.joined(separator: ",")]))
  }
}
