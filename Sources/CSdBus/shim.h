#ifndef CSDBUS_SHIM_H
#define CSDBUS_SHIM_H
// sd-bus, libsystemd's D-Bus client: BBSDiscovery talks to BlueZ through it.
#include <systemd/sd-bus.h>
#endif
