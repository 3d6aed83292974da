#ifndef CBLUEZ_SHIM_H
#define CBLUEZ_SHIM_H
// Header-only: socket constants and sockaddr_l2. No libbluetooth symbols are linked.
#include <sys/socket.h>
#include <bluetooth/bluetooth.h>
#include <bluetooth/l2cap.h>

// glibc declares these only under _GNU_SOURCE, which Swift's Glibc module does not define.
// NinePTransport needs them to create descriptors close-on-exec atomically.
extern int pipe2(int pipefd[2], int flags);
extern int accept4(int sockfd, struct sockaddr *addr, socklen_t *addrlen, int flags);
#endif
