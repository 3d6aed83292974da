#ifndef CBLUEZ_SHIM_H
#define CBLUEZ_SHIM_H
// Header-only: socket constants and sockaddr_l2. No libbluetooth symbols are linked.
#include <sys/socket.h>
#include <bluetooth/bluetooth.h>
#include <bluetooth/l2cap.h>
#endif
