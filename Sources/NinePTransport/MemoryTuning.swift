import Glibc

/// Keeps message-sized buffers (up to a few megabytes) on glibc's heap: raises its mmap
/// threshold to 4 MiB and its trim threshold to 32 MiB. By default a buffer of a megabyte is
/// a fresh mmap each time, page-faulted in and unmapped again, which costs more than the copy
/// into it. For processes that move large 9P messages (the mount, 9bbsd, the benchmark).
public func keepLargeBuffersOnTheHeap() {
  // `mallopt` is not in Swift's Glibc module (`<malloc.h>` is not part of it).
  typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
  guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallopt") else { return }
  let mallopt = unsafeBitCast(symbol, to: Mallopt.self)
  let trimThreshold: Int32 = -1  // M_TRIM_THRESHOLD
  let mmapThreshold: Int32 = -3  // M_MMAP_THRESHOLD
  _ = mallopt(mmapThreshold, 4 << 20)
  _ = mallopt(trimThreshold, 32 << 20)
}

/// Gives memory glibc holds free back to the system (`malloc_trim(0)`, every arena). With the
/// trim threshold raised above, buffers freed by ended connections stay in the process
/// otherwise; a server calls this after connections close.
public func returnFreeMemoryToTheSystem() {
  typealias MallocTrim = @convention(c) (Int) -> Int32
  guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_trim") else { return }
  _ = unsafeBitCast(symbol, to: MallocTrim.self)(0)
}

/// Caps glibc's malloc arenas at `count` (`M_ARENA_MAX`). glibc gives threads arenas of their
/// own, up to 8 per core; a server with a thread per connection then leaves what each
/// connection used stranded in arenas `malloc_trim` cannot shrink (2000 connections closed:
/// 125 MB kept with the default, 26 MB, what it started with, with 1). For 9bbsd, whose
/// threads mostly wait.
public func limitMallocArenas(to count: Int32) {
  typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
  guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallopt") else { return }
  let arenaMax: Int32 = -8  // M_ARENA_MAX
  _ = unsafeBitCast(symbol, to: Mallopt.self)(arenaMax, count)
}
