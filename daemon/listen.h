/*
 * listen.h — the daemon's listening sockets and its systemd integration.
 *
 * - A Unix socket at a path (default: /run/inferd/inferd.sock as root,
 *   $XDG_RUNTIME_DIR/inferd.sock otherwise) with a chosen mode (0660). A
 *   socket file left by a dead daemon (connect() is refused) is replaced;
 *   one a live daemon answers on is not (IFD_EEXIST), nor is a file that is
 *   not a socket. At exit the file is removed only if it is still ours
 *   (same device and inode), so a successor's socket is never unlinked.
 * - An optional TCP socket ("HOST:PORT", "[::1]:PORT"); whether it is on a
 *   loopback address is recorded (a non-loopback one needs an API key —
 *   enforced by the caller).
 * - systemd socket activation: sockets passed in LISTEN_FDS are adopted
 *   instead (Unix and TCP stream sockets; anything else is an error).
 * - sd_notify: READY=1 / STOPPING=1 / STATUS=…; a no-op without
 *   $NOTIFY_SOCKET.
 *
 * Ownership: a listener's fd is the caller's (usually handed to libuv,
 * which then closes it). Errors: 0 or -errno / IFD_E* with a one-line
 * reason in err. Threading: call from the main thread.
 */
#ifndef IFD_DAEMON_LISTEN_H
#define IFD_DAEMON_LISTEN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef enum {
    IFD_LISTEN_UNIX = 0,
    IFD_LISTEN_TCP = 1,
} ifd_listen_kind_t;

typedef struct {
    int fd;
    ifd_listen_kind_t kind;
    bool loopback;  /* TCP: bound to a loopback address (Unix: always true) */
    bool activated; /* passed by systemd */
    char name[256]; /* the path, or host:port, for logs */
    bool owns_path; /* we created the socket file (remove it at exit) */
    dev_t dev;
    ino_t ino;
} ifd_listener_t;

/* Writes the default socket path into buf. 0, or IFD_ENOTFOUND when not
 * root and $XDG_RUNTIME_DIR is unset (err says to pass --socket). */
int ifd_listen_default_socket(char *buf, size_t len, char *err, size_t errlen);

/* Creates, binds and listens on a Unix socket at path with `mode`
 * (creating the parent directory as root when it is /run/inferd). */
int ifd_listen_unix(ifd_listener_t *l, const char *path, unsigned mode, char *err, size_t errlen);

/* Binds and listens on TCP "HOST:PORT". PORT is decimal 0..65535 (anything
 * else is IFD_EINVAL, never a silent wrap-around); 0 lets the kernel pick a
 * free port. l->name is then the address really bound ("127.0.0.1:41234",
 * "[::1]:8000"), so the log shows the port clients must use. */
int ifd_listen_tcp(ifd_listener_t *l, const char *hostport, char *err, size_t errlen);

/* Adopts the sockets systemd passed (LISTEN_FDS, unsetting the variables).
 * *n = how many (0: not socket-activated). At most max. */
int ifd_listen_systemd(ifd_listener_t *out, int max, int *n, char *err, size_t errlen);

/* Removes the socket file if we created it and it is still ours. */
void ifd_listen_unlink(ifd_listener_t *l);

/* sd_notify with a printf format ("READY=1", "STATUS=%s"). Never fails. */
void ifd_notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
