/*
 * fdpass.h — send and receive file descriptors (plus a small payload) over
 * a Unix-domain socket with SCM_RIGHTS: how the router hands the KV pool's
 * memfds to a worker, and a worker hands a CUDA VMM fd back.
 *
 * One call sends one message: up to IFD_FDPASS_MAX_FDS fds and 1..len bytes
 * of payload (SCM_RIGHTS needs at least one byte of data on stream sockets).
 * On a SOCK_STREAM socket the receiver must read the same payload length
 * the sender wrote; SOCK_SEQPACKET/SOCK_DGRAM keep message boundaries.
 *
 * Ownership: sent fds stay open in the sender (the kernel dups them into
 * the receiver). Received fds belong to the caller, are close-on-exec, and
 * are closed by ifd_fdpass_recv itself on any error. Both calls retry on
 * EINTR; they are blocking or not as the socket is. Thread-safe as far as
 * the socket is used by one thread at a time.
 */
#ifndef IFD_FDPASS_H
#define IFD_FDPASS_H

#include <stddef.h>

#define IFD_FDPASS_MAX_FDS 32

/* Sends data[0..len-1] (len ≥ 1) with fds[0..nfds-1] attached.
 * Returns 0, IFD_EINVAL, IFD_ETRUNC (short write), or -errno (sendmsg). */
int ifd_fdpass_send(int sock, const void *data, size_t len, const int *fds, int nfds);

/* Receives one message into data (up to cap bytes; *len set) and up to
 * max_fds fds into fds (*nfds set). Returns 0, IFD_ECLOSED (peer closed
 * before any byte), IFD_ETRUNC (fds or control data were cut: every fd
 * received is closed), or -errno (recvmsg). */
int ifd_fdpass_recv(int sock, void *data, size_t cap, size_t *len, int *fds, int max_fds,
                    int *nfds);

#endif
