/*
 * fdpass.c — SCM_RIGHTS send/receive (see fdpass.h). The control buffer is
 * sized for IFD_FDPASS_MAX_FDS; received fds get O_CLOEXEC atomically
 * (MSG_CMSG_CLOEXEC) and are never leaked: on any failure after the kernel
 * installed them they are closed before returning.
 */
#include "fdpass.h"

#include "error.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

typedef union {
    char buf[CMSG_SPACE(sizeof(int) * IFD_FDPASS_MAX_FDS)];
    struct cmsghdr align;
} ifd__fdpass_cmsg_t;

int ifd_fdpass_send(int sock, const void *data, size_t len, const int *fds, int nfds)
{
    if (!data || len == 0 || nfds < 0 || nfds > IFD_FDPASS_MAX_FDS || (nfds > 0 && !fds))
        return IFD_EINVAL;
    struct iovec iov = {.iov_base = (void *)data, .iov_len = len};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    ifd__fdpass_cmsg_t cm;
    if (nfds > 0) {
        memset(&cm, 0, sizeof cm);
        msg.msg_control = cm.buf;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    }
    ssize_t n;
    do {
        n = sendmsg(sock, &msg, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    if ((size_t)n != len)
        return IFD_ETRUNC; /* the fds went with the first byte; the caller must resend data */
    return 0;
}

int ifd_fdpass_recv(int sock, void *data, size_t cap, size_t *len, int *fds, int max_fds, int *nfds)
{
    if (!data || cap == 0 || !len || !nfds || max_fds < 0 || (max_fds > 0 && !fds))
        return IFD_EINVAL;
    *len = 0;
    *nfds = 0;
    struct iovec iov = {.iov_base = data, .iov_len = cap};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    ifd__fdpass_cmsg_t cm;
    memset(&cm, 0, sizeof cm);
    msg.msg_control = cm.buf;
    msg.msg_controllen = sizeof cm.buf;
    ssize_t n;
    do {
        n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    /* Collect every fd the kernel installed, even the ones we cannot keep. */
    int got = 0, rc = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
            if (got < max_fds)
                fds[got++] = fd;
            else {
                close(fd);
                rc = IFD_ETRUNC;
            }
        }
    }
    if (msg.msg_flags & MSG_CTRUNC)
        rc = IFD_ETRUNC;
    if (rc == 0 && n == 0 && got == 0)
        rc = IFD_ECLOSED;
    if (rc) {
        for (int i = 0; i < got; i++)
            close(fds[i]);
        return rc;
    }
    *len = (size_t)n;
    *nfds = got;
    return 0;
}
