/*
 * listen.c — see listen.h. Plain BSD sockets; libuv adopts the fds later
 * (uv_pipe_open / uv_tcp_open), so nothing here depends on the loop.
 */
#include "listen.h"

#include "error.h"
#include "log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

int ifd_listen_default_socket(char *buf, size_t len, char *err, size_t errlen)
{
    if (geteuid() == 0) {
        snprintf(buf, len, "/run/inferd/inferd.sock");
        return 0;
    }
    const char *x = getenv("XDG_RUNTIME_DIR");
    if (!x || !*x) {
        ifd_errbuf(err, errlen, "XDG_RUNTIME_DIR is not set: pass --socket PATH");
        return IFD_ENOTFOUND;
    }
    snprintf(buf, len, "%s/inferd.sock", x);
    return 0;
}

/* Is a daemon answering on the socket file at path? 1 yes, 0 stale, <0 error. */
static int ifd__socket_live(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
    int e = errno;
    close(fd);
    if (rc == 0)
        return 1;
    if (e == ECONNREFUSED || e == ENOENT)
        return 0;
    if (e == EAGAIN) /* backlog full: somebody is listening */
        return 1;
    return -e;
}

int ifd_listen_unix(ifd_listener_t *l, const char *path, unsigned mode, char *err, size_t errlen)
{
    memset(l, 0, sizeof *l);
    l->fd = -1;
    l->kind = IFD_LISTEN_UNIX;
    l->loopback = true;
    snprintf(l->name, sizeof l->name, "%s", path);
    struct sockaddr_un sa;
    if (strlen(path) >= sizeof sa.sun_path) {
        ifd_errbuf(err, errlen, "socket path %s is longer than %zu bytes", path,
                 sizeof sa.sun_path - 1);
        return IFD_EINVAL;
    }
    if (!strcmp(path, "/run/inferd/inferd.sock") && geteuid() == 0)
        mkdir("/run/inferd", 0755); /* systemd's RuntimeDirectory= makes it otherwise */

    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            ifd_errbuf(err, errlen, "%s exists and is not a socket: not touching it", path);
            return IFD_EEXIST;
        }
        int live = ifd__socket_live(path);
        if (live == 1) {
            ifd_errbuf(err, errlen, "another daemon is listening on %s", path);
            return IFD_EEXIST;
        }
        if (live < 0) {
            ifd_errbuf(err, errlen, "probing %s: %s", path, strerror(-live));
            return live;
        }
        IFD_INFO("removing stale socket %s (no daemon answers on it)", path);
        if (unlink(path) != 0 && errno != ENOENT) {
            int e = errno;
            ifd_errbuf(err, errlen, "unlink(%s): %s", path, strerror(e));
            return -e;
        }
    }

    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        int e = errno;
        ifd_errbuf(err, errlen, "socket(AF_UNIX): %s", strerror(e));
        return -e;
    }
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    /* the umask makes the file appear with the right mode, no window */
    mode_t old = umask((mode_t)(~mode & 0777));
    int rc = bind(fd, (struct sockaddr *)&sa, sizeof sa);
    int e = errno;
    umask(old);
    if (rc != 0) {
        ifd_errbuf(err, errlen, "bind(%s): %s", path, strerror(e));
        close(fd);
        return -e;
    }
    if (chmod(path, mode) != 0)
        IFD_WARN("chmod(%s, %o): %s", path, mode, strerror(errno));
    if (listen(fd, 511) != 0) {
        e = errno;
        ifd_errbuf(err, errlen, "listen(%s): %s", path, strerror(e));
        unlink(path);
        close(fd);
        return -e;
    }
    if (stat(path, &st) == 0) {
        l->owns_path = true;
        l->dev = st.st_dev;
        l->ino = st.st_ino;
    }
    l->fd = fd;
    return 0;
}

static bool ifd__is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr))
            return true;
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
            return in6->sin6_addr.s6_addr[12] == 127;
    }
    return false;
}

/* l->name = "HOST:PORT" (IPv6 as "[HOST]:PORT") of the bound TCP socket l->fd;
 * also sets l->loopback. Keeps the old name if getsockname fails. */
static void ifd__tcp_name(ifd_listener_t *l)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char h[INET6_ADDRSTRLEN] = "?";
    if (getsockname(l->fd, (struct sockaddr *)&ss, &sl) != 0)
        return;
    l->loopback = ifd__is_loopback((struct sockaddr *)&ss);
    if (ss.ss_family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &in->sin_addr, h, sizeof h);
        snprintf(l->name, sizeof l->name, "%s:%d", h, ntohs(in->sin_port));
    } else if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &in6->sin6_addr, h, sizeof h);
        snprintf(l->name, sizeof l->name, "[%s]:%d", h, ntohs(in6->sin6_port));
    }
}

int ifd_listen_tcp(ifd_listener_t *l, const char *hostport, char *err, size_t errlen)
{
    memset(l, 0, sizeof *l);
    l->fd = -1;
    l->kind = IFD_LISTEN_TCP;
    snprintf(l->name, sizeof l->name, "%s", hostport);
    char host[256];
    const char *colon = strrchr(hostport, ':');
    if (!colon || !colon[1] || (size_t)(colon - hostport) >= sizeof host) {
        ifd_errbuf(err, errlen, "listen: '%s' is not HOST:PORT", hostport);
        return IFD_EINVAL;
    }
    /* the port: decimal digits, 0..65535 (0: the kernel picks a free one) */
    const char *ps = colon + 1;
    unsigned long port = 0;
    for (const char *q = ps; *q; q++) {
        if (*q < '0' || *q > '9' || q - ps >= 5) {
            port = 65536;
            break;
        }
        port = port * 10 + (unsigned long)(*q - '0');
    }
    if (port > 65535) {
        ifd_errbuf(err, errlen, "listen: port '%s' in '%s' is not a number from 0 to 65535", ps,
                 hostport);
        return IFD_EINVAL;
    }
    size_t hl = (size_t)(colon - hostport);
    memcpy(host, hostport, hl);
    host[hl] = '\0';
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int g = getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, &res);
    if (g != 0) {
        ifd_errbuf(err, errlen, "listen %s: %s", hostport, gai_strerror(g));
        return IFD_EINVAL;
    }
    int rc = IFD_EINVAL;
    int fd =
        socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, res->ai_protocol);
    if (fd < 0) {
        rc = -errno;
        ifd_errbuf(err, errlen, "socket(%s): %s", hostport, strerror(-rc));
        goto out;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 511) != 0) {
        rc = -errno;
        ifd_errbuf(err, errlen, "bind/listen %s: %s", hostport, strerror(-rc));
        close(fd);
        goto out;
    }
    l->loopback = ifd__is_loopback(res->ai_addr);
    l->fd = fd;
    ifd__tcp_name(l); /* the port really bound: port 0 means "any free one" */
    rc = 0;
out:
    freeaddrinfo(res);
    return rc;
}

int ifd_listen_systemd(ifd_listener_t *out, int max, int *n, char *err, size_t errlen)
{
    *n = 0;
    int got = sd_listen_fds(1);
    if (got < 0) {
        ifd_errbuf(err, errlen, "sd_listen_fds: %s", strerror(-got));
        return got;
    }
    if (got > max) {
        ifd_errbuf(err, errlen, "systemd passed %d sockets, at most %d are supported", got, max);
        return IFD_EINVAL;
    }
    for (int i = 0; i < got; i++) {
        int fd = SD_LISTEN_FDS_START + i;
        ifd_listener_t *l = &out[i];
        memset(l, 0, sizeof *l);
        l->fd = fd;
        l->activated = true;
        if (sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0) > 0) {
            struct sockaddr_un sa;
            socklen_t sl = sizeof sa;
            memset(&sa, 0, sizeof sa);
            l->kind = IFD_LISTEN_UNIX;
            l->loopback = true;
            if (getsockname(fd, (struct sockaddr *)&sa, &sl) == 0 && sa.sun_path[0])
                snprintf(l->name, sizeof l->name, "%s", sa.sun_path);
            else
                snprintf(l->name, sizeof l->name, "systemd fd %d", fd);
        } else if (sd_is_socket_inet(fd, 0, SOCK_STREAM, 1, 0) > 0) {
            l->kind = IFD_LISTEN_TCP;
            snprintf(l->name, sizeof l->name, "systemd fd %d", fd);
            ifd__tcp_name(l);
        } else {
            ifd_errbuf(err, errlen, "systemd fd %d is not a listening stream socket", fd);
            return IFD_EINVAL;
        }
        (*n)++;
    }
    return 0;
}

void ifd_listen_unlink(ifd_listener_t *l)
{
    struct stat st;
    if (!l->owns_path || l->kind != IFD_LISTEN_UNIX)
        return;
    if (lstat(l->name, &st) == 0 && st.st_dev == l->dev && st.st_ino == l->ino)
        unlink(l->name);
    l->owns_path = false;
}

void ifd_notify(const char *fmt, ...)
{
    if (!getenv("NOTIFY_SOCKET"))
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* Not sd_notify(): it sends on a blocking socket, and a manager that
     * reads slowly (its queue holds ~10 datagrams) would then stall the
     * loop — the watchdog pings come from the loop. A full queue drops the
     * message instead (a late watchdog ping is the manager's to judge). */
    const char *path = getenv("NOTIFY_SOCKET");
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    size_t pl = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || pl >= sizeof sa.sun_path) {
        IFD_WARN("NOTIFY_SOCKET=%s: not a socket path", path);
        return;
    }
    memcpy(sa.sun_path, path, pl);
    if (path[0] == '@')
        sa.sun_path[0] = '\0'; /* an abstract socket */
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        IFD_WARN("notify: socket: %s", strerror(errno));
        return;
    }
    ssize_t n = sendto(fd, msg, strlen(msg), MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&sa,
                       (socklen_t)(offsetof(struct sockaddr_un, sun_path) + pl));
    if (n < 0)
        IFD_WARN("notify(%s): %s", msg, strerror(errno));
    close(fd);
}
