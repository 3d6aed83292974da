#ifndef CSDBUS_SHIM_H
#define CSDBUS_SHIM_H
// sd-bus, libsystemd's D-Bus client: BBSDiscovery talks to BlueZ through it.
#include <systemd/sd-bus.h>
// sd-journal: mount9bbs's detached daemon logs to the journal through it.
#include <systemd/sd-journal.h>
// sd-daemon: mount9bbs tells systemd (Type=notify) when the mount is ready and how the link is.
#include <systemd/sd-daemon.h>
#endif
