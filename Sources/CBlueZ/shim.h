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
// And these to move a large reply from the socket into a pipe without copying it (Splice.swift).
extern long splice(int fd_in, long long *off_in, int fd_out, long long *off_out,
                   unsigned long len, unsigned int flags);
#endif
