// BBSDiscovery: finds 9BBS servers so nobody has to know an address, a PSM or an IP.
//
// Moving parts and who calls whom:
// - `BluetoothScanner` (BLE) talks to BlueZ over the D-Bus system bus through `SdBus`, a small
//   sd-bus wrapper. `scan` runs entirely on the caller's thread: it sets a discovery filter on
//   the 9PIS UUID, starts LE discovery, then loops on `sd_bus_process`/`sd_bus_wait` in slices
//   of at most 100 ms, applying BlueZ's InterfacesAdded/PropertiesChanged signals to its copy of
//   the object tree. Each matching device is connected (an asynchronous Connect, so devices
//   proceed side by side), its ServicesResolved awaited, its 9PIS characteristics read, and it
//   is disconnected again. Events go to the caller's closure on the same thread. `cancel()` is
//   the only cross-thread entry (an atomic flag, e.g. from a SIGINT handler).
// - `LANBrowser` (mDNS) browses `_9p._tcp` and `_9pfs._tcp` through libavahi-client with an
//   `AvahiSimplePoll` iterated on the caller's thread; Avahi's C callbacks run inside that
//   iteration and reach the browser through an unretained context pointer.
// - `LANAdvertiser` (for `9bbsd --advertise`) publishes services through an
//   `AvahiThreadedPoll`: Avahi's own thread runs every callback (collisions, daemon restarts);
//   `start`/`stop` take the poll's lock.
// - `DiscoveryCache` is a JSON file under `$XDG_CACHE_HOME/mount9bbs/`, rewritten atomically
//   by whichever process saw a board last; `BoardResolver` turns `ble!NAME`/`mdns!NAME` into
//   dial strings from it, scanning briefly when it has no answer.
// Nothing here depends on the mount or the 9P client; NinePTransport is used only for
// `TransportAddress`, the result of resolving a name.
