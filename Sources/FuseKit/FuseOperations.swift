import CFuse3
import Glibc

// The dispatch table: libfuse low-level op → FuseFileSystem method. Each entry records the
// request as outstanding (FuseUserdata.begin), copies the arguments out of libfuse's buffers
// (they are only valid during the call), traces it, and calls the file system.

extension FuseUserdata {
  /// The low-level ops table handed to `fuse_session_new`, one group of ops at a time. Each op
  /// is a closure that captures nothing, as a C function pointer must: what it needs comes
  /// through the session's userdata.
  static func operations() -> fuse_lowlevel_ops {
    var ops = fuse_lowlevel_ops()
    installSessionOps(in: &ops)
    installNodeOps(in: &ops)
    installEntryOps(in: &ops)
    installDirectoryOps(in: &ops)
    installFileOps(in: &ops)
    installDataOps(in: &ops)
    return ops
  }

  /// The session: init and destroy, and statfs, which is also the session's own wake-up
  /// call at exit.
  private static func installSessionOps(in ops: inout fuse_lowlevel_ops) {
    ops.`init` = { userdata, conn in
      guard let core = FuseUserdata.from(userdata), let conn else { return }
      var c = FuseConnection(conn.pointee)
      c.want.remove([.readdirplus, .readdirplusAuto])  // opt-in: see FuseFileSystem.initialize
      core.fileSystem.initialize(&c, notifier: FuseNotifier(core: core))
      if let maxRead = core.maxRead, c.maxRead != maxRead {
        // libfuse refuses to start if init and the max_read mount option disagree.
        c.maxRead = maxRead
      }
      c.apply(to: &conn.pointee)
      core.logger.debug(
        "FUSE \(c.protocolMajor).\(c.protocolMinor) ready: max_read=\(c.maxRead) max_write=\(c.maxWrite) max_background=\(c.maxBackground) want=0x\(String(c.want.intersection(c.capable).rawValue, radix: 16))"
      )
    }

    ops.destroy = { userdata in
      guard let core = FuseUserdata.from(userdata) else { return }
      core.fileSystem.destroy()
    }

    ops.statfs = { req, ino in
      guard let (core, r) = beginRequest(req) else { return }
      core.traceOp(r, "statfs ino=\(ino)")
      if core.isExiting {
        // Most likely the session's own wake-up call: do not wait for the file system.
        var s = statvfs()
        s.f_namemax = 255
        r.replyStatfs(s)
        return
      }
      core.fileSystem.statfs(r, inode: ino)
    }
  }

  /// Nodes: finding them by name, their lifetimes (forget) and their attributes.
  private static func installNodeOps(in ops: inout fuse_lowlevel_ops) {
    ops.lookup = { req, parent, name in
      guard let (core, r) = beginRequest(req), let name else { return }
      let n = String(cString: name)
      core.traceOp(r, "lookup parent=\(parent) name=\(n)")
      core.fileSystem.lookup(r, parent: parent, name: n)
    }

    ops.forget = { req, ino, nlookup in
      guard let req, let core = FuseUserdata.from(fuse_req_userdata(req)) else { return }
      if core.trace { core.logger.debug("forget ino=\(ino) n=\(nlookup)") }
      core.fileSystem.forget(inode: ino, lookups: nlookup)
      fuse_reply_none(req)
    }

    ops.forget_multi = { req, count, forgets in
      guard let req, let core = FuseUserdata.from(fuse_req_userdata(req)) else { return }
      if core.trace { core.logger.debug("forget_multi count=\(count)") }
      if let forgets {
        for f in UnsafeBufferPointer(start: forgets, count: count) {
          core.fileSystem.forget(inode: f.ino, lookups: f.nlookup)
        }
      }
      fuse_reply_none(req)
    }

    ops.getattr = { req, ino, fi in
      guard let (core, r) = beginRequest(req) else { return }
      core.traceOp(r, "getattr ino=\(ino)")
      core.fileSystem.getattr(r, inode: ino, file: fi.map { FuseFileInfo($0) })
    }

    ops.setattr = { req, ino, attr, toSet, fi in
      guard let (core, r) = beginRequest(req), let attr else { return }
      let changes = FuseSetAttributes(rawValue: toSet)
      core.traceOp(r, "setattr ino=\(ino) changes=0x\(String(toSet, radix: 16))")
      core.fileSystem.setattr(
        r, inode: ino, attributes: attr.pointee, changes: changes,
        file: fi.map { FuseFileInfo($0) })
    }

    ops.readlink = { req, ino in
      guard let (core, r) = beginRequest(req) else { return }
      core.traceOp(r, "readlink ino=\(ino)")
      core.fileSystem.readlink(r, inode: ino)
    }
  }

  /// Entries of a directory: making, linking, removing and renaming them.
  private static func installEntryOps(in ops: inout fuse_lowlevel_ops) {
    ops.mknod = { req, parent, name, mode, rdev in
      guard let (core, r) = beginRequest(req), let name else { return }
      let n = String(cString: name)
      core.traceOp(r, "mknod parent=\(parent) name=\(n) mode=0\(String(mode, radix: 8))")
      core.fileSystem.mknod(r, parent: parent, name: n, mode: mode, device: rdev)
    }

    ops.symlink = { req, target, parent, name in
      guard let (core, r) = beginRequest(req), let target, let name else { return }
      let (t, n) = (String(cString: target), String(cString: name))
      core.traceOp(r, "symlink parent=\(parent) name=\(n) target=\(t)")
      core.fileSystem.symlink(r, target: t, parent: parent, name: n)
    }

    ops.link = { req, ino, newParent, newName in
      guard let (core, r) = beginRequest(req), let newName else { return }
      let n = String(cString: newName)
      core.traceOp(r, "link ino=\(ino) → \(newParent)/\(n)")
      core.fileSystem.link(r, inode: ino, newParent: newParent, newName: n)
    }

    ops.mkdir = { req, parent, name, mode in
      guard let (core, r) = beginRequest(req), let name else { return }
      let n = String(cString: name)
      core.traceOp(r, "mkdir parent=\(parent) name=\(n) mode=0\(String(mode, radix: 8))")
      core.fileSystem.mkdir(r, parent: parent, name: n, mode: mode)
    }

    ops.unlink = { req, parent, name in
      guard let (core, r) = beginRequest(req), let name else { return }
      let n = String(cString: name)
      core.traceOp(r, "unlink parent=\(parent) name=\(n)")
      core.fileSystem.unlink(r, parent: parent, name: n)
    }

    ops.rmdir = { req, parent, name in
      guard let (core, r) = beginRequest(req), let name else { return }
      let n = String(cString: name)
      core.traceOp(r, "rmdir parent=\(parent) name=\(n)")
      core.fileSystem.rmdir(r, parent: parent, name: n)
    }

    ops.rename = { req, parent, name, newParent, newName, flags in
      guard let (core, r) = beginRequest(req), let name, let newName else { return }
      let (n, nn) = (String(cString: name), String(cString: newName))
      core.traceOp(r, "rename \(parent)/\(n) → \(newParent)/\(nn) flags=\(flags)")
      core.fileSystem.rename(
        r, parent: parent, name: n, newParent: newParent, newName: nn,
        flags: FuseRenameFlags(rawValue: flags))
    }
  }

  /// Open directories: listing them.
  private static func installDirectoryOps(in ops: inout fuse_lowlevel_ops) {
    ops.opendir = { req, ino, fi in
      guard let (core, r) = beginRequest(req), let fi else { return }
      core.traceOp(r, "opendir ino=\(ino)")
      core.fileSystem.opendir(r, inode: ino, file: FuseFileInfo(fi))
    }

    ops.readdir = { req, ino, size, off, fi in
      guard let (core, r) = beginRequest(req), let fi else { return }
      let f = FuseFileInfo(fi)
      core.traceOp(r, "readdir ino=\(ino) fh=\(f.handle) size=\(size) off=\(off)")
      core.fileSystem.readdir(r, inode: ino, size: size, offset: Int64(off), file: f)
    }

    ops.readdirplus = { req, ino, size, off, fi in
      guard let (core, r) = beginRequest(req), let fi else { return }
      let f = FuseFileInfo(fi)
      core.traceOp(r, "readdirplus ino=\(ino) fh=\(f.handle) size=\(size) off=\(off)")
      core.fileSystem.readdirplus(r, inode: ino, size: size, offset: Int64(off), file: f)
    }

    ops.releasedir = { req, ino, fi in
      guard let (core, r) = beginRequest(req), let fi else { return }
      let f = FuseFileInfo(fi)
      core.traceOp(r, "releasedir ino=\(ino) fh=\(f.handle)")
      core.fileSystem.releasedir(r, inode: ino, file: f)
    }
  }

  /// Open files: opening, creating and closing them, and making their data durable.
  private static func installFileOps(in ops: inout fuse_lowlevel_ops) {
    ops.open = { req, ino, fi in
      guard let (core, r) = beginRequest(req), let fi else { return }
      let f = FuseFileInfo(fi)
      core.traceOp(r, "open ino=\(ino) flags=0\(String(f.flags, radix: 8))")
      core.fileSystem.open(r, inode: ino, file: f)
    }

    ops.create = { req, parent, name, mode, fi in
      guard let (core, r) = beginRequest(req), let name, let fi else { return }
      let n = String(cString: name)
      let f = FuseFileInfo(fi)
      core.traceOp(r, "create parent=\(parent) name=\(n) mode=0\(String(mode, radix: 8))")
      core.fileSystem.create(r, parent: parent, name: n, mode: mode, file: f)
    }

    ops.flush = { req, ino, fi in
      guard let (core, r) = beginRequest(req), let fi else { return }
      let f = FuseFileInfo(fi)
      core.traceOp(r, "flush ino=\(ino) fh=\(f.handle)")
      core.fileSystem.flush(r, inode: ino, file: f)
    }

    ops.release = { req, ino, fi in
      guard let (core, r) = beginRequest(req), let fi else { return }
      let f = FuseFileInfo(fi)
      core.traceOp(r, "release ino=\(ino) fh=\(f.handle)")
      core.fileSystem.release(r, inode: ino, file: f)
    }

    ops.fsync = { req, ino, datasync, fi in
      guard let (core, r) = beginRequest(req), let fi else { return }
      let f = FuseFileInfo(fi)
      core.traceOp(r, "fsync ino=\(ino) fh=\(f.handle) datasync=\(datasync)")
      core.fileSystem.fsync(r, inode: ino, dataOnly: datasync != 0, file: f)
    }
  }

  /// The data of open files: reading, writing, and waiting until it can be read (poll).
  private static func installDataOps(in ops: inout fuse_lowlevel_ops) {
    ops.read = { req, ino, size, off, fi in
      guard let (core, r) = beginRequest(req), let fi else { return }
      let f = FuseFileInfo(fi)
      core.traceOp(r, "read ino=\(ino) fh=\(f.handle) size=\(size) off=\(off)")
      core.fileSystem.read(r, inode: ino, size: size, offset: Int64(off), file: f)
    }

    ops.write = { req, ino, buf, size, off, fi in
      guard let (core, r) = beginRequest(req), let fi else { return }
      let f = FuseFileInfo(fi)
      let data = buf.map { [UInt8](UnsafeRawBufferPointer(start: $0, count: size)) } ?? []
      core.traceOp(r, "write ino=\(ino) fh=\(f.handle) size=\(size) off=\(off)")
      core.fileSystem.write(r, inode: ino, data: data, offset: Int64(off), file: f)
    }

    ops.poll = { req, ino, fi, ph in
      guard let (core, r) = beginRequest(req), let fi else {
        if let ph { fuse_pollhandle_destroy(ph) }
        return
      }
      let f = FuseFileInfo(fi)
      let handle = ph.map { FusePollHandle(raw: $0, core: core) }
      core.traceOp(r, "poll ino=\(ino) fh=\(f.handle) events=\(f.pollEvents) handle=\(ph != nil)")
      core.fileSystem.poll(r, inode: ino, file: f, handle: handle)
    }
  }
}

/// Finds the userdata of `req` and records the request as outstanding.
private func beginRequest(_ req: fuse_req_t?) -> (FuseUserdata, FuseRequest)? {
  guard let req, let core = FuseUserdata.from(fuse_req_userdata(req)),
    let request = core.begin(req)
  else { return nil }
  return (core, request)
}
