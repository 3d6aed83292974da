#ifndef CAVAHI_SHIM_H
#define CAVAHI_SHIM_H
// libavahi-client: mDNS/DNS-SD browsing, resolving and publishing through avahi-daemon.
#include <avahi-client/client.h>
#include <avahi-client/lookup.h>
#include <avahi-client/publish.h>
#include <avahi-common/address.h>
#include <avahi-common/alternative.h>
#include <avahi-common/error.h>
#include <avahi-common/malloc.h>
#include <avahi-common/simple-watch.h>
#include <avahi-common/strlst.h>
#include <avahi-common/thread-watch.h>
#endif
