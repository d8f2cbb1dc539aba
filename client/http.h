/*
 * http.h — the client side of HTTP/1.1 over a Unix or TCP socket, small
 * enough to drive one request from a command or hundreds at once from the
 * load generator.
 *
 * A target says where the daemon is: a Unix socket path, or an http:// URL
 * (resolved once, when the target is made, so starting a connection never
 * blocks on DNS). A connection carries exactly one request: it is opened
 * non-blocking, the request is written as poll(2) allows, and the response
 * is parsed with http-parser as bytes arrive; the status and headers are
 * reported once, body bytes (de-chunked) are handed to a callback or
 * collected. Every request says "Connection: close": closing the socket is
 * how a client cancels (the daemon frees the request's KV blocks when it
 * sees the disconnect), and one request per connection keeps the state
 * machine trivial.
 *
 * Driving: ifd_cli_http_conn_events() says what to poll for, ifd_cli_http_conn_io()
 * advances on the poll result. ifd_cli_http_conn_wait() is the blocking driver
 * for one connection; it stops early when a signal flag is raised.
 *
 * Errors: -errno from socket calls (ENOENT: no socket file; ECONNREFUSED:
 * nothing listening; EACCES: no permission), IFD_ECLOSED when the peer hung
 * up before the response was complete, IFD_EFORMAT for a malformed
 * response, IFD_ETIMEDOUT, IFD_ECANCELED (the stop flag), IFD_ENOMEM.
 *
 * Ownership: a target is plain data (copy it freely). A connection is
 * embedded by its caller (_init/_close): _close releases the socket and
 * buffers and may be called in any state, also twice. Callbacks receive
 * pointers valid only during the call. Threading: one thread per
 * connection; nothing is shared between connections.
 */
#ifndef IFD_CLIENT_HTTP_H
#define IFD_CLIENT_HTTP_H

#include "arena.h"

#include <http_parser.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#define IFD_CLI_HTTP_API_KEY_MAX 512

/* Where requests go. Plain data. */
typedef struct {
    bool tcp;
    char path[108];               /* Unix socket path (tcp false) */
    char host[256];               /* Host header value (tcp: the URL's host[:port]) */
    char prefix[256];             /* path prefix from the URL, "" or "/x" (no trailing '/') */
    struct sockaddr_storage addr; /* tcp: the resolved address */
    socklen_t addrlen;
    char api_key[IFD_CLI_HTTP_API_KEY_MAX]; /* "" = send no Authorization header */
    char where[520];                    /* for messages: the socket path or the URL */
} ifd_cli_http_target_t;

/* A Unix socket target. 0, or IFD_ETOOBIG when the path does not fit
 * sun_path. */
int ifd_cli_http_target_unix(ifd_cli_http_target_t *t, const char *path);

/*
 * A TCP target from "http://HOST[:PORT][/PREFIX]" (port 80 by default; a
 * trailing "/v1" is dropped, so an OpenAI base URL works as it is).
 * Resolves HOST with getaddrinfo (blocking). 0; IFD_EINVAL (not an http://
 * URL; https is refused), IFD_ENOTFOUND (the name does not resolve), with
 * a one-line reason in err.
 */
int ifd_cli_http_target_url(ifd_cli_http_target_t *t, const char *url, char *err, size_t errlen);

/* The daemon's default socket: /run/inferd/inferd.sock as root, else
 * $XDG_RUNTIME_DIR/inferd.sock — unless that does not exist and the
 * system-wide one does (a user in the daemon's group). Writes into out. */
void ifd_cli_http_default_socket(char *out, size_t n);

typedef enum {
    IFD_CLI_HTTP_IDLE = 0,
    IFD_CLI_HTTP_CONNECTING,
    IFD_CLI_HTTP_SENDING,
    IFD_CLI_HTTP_RECEIVING,
    IFD_CLI_HTTP_DONE,
    IFD_CLI_HTTP_FAILED,
} ifd_cli_http_state_t;

/* Called once, when the status line and headers have been read. */
typedef void (*ifd_cli_http_head_cb)(void *ud, int status);
/* Called for each piece of body (after de-chunking). A negative return
 * aborts the response with that error. */
typedef int (*ifd_cli_http_body_cb)(void *ud, const char *data, size_t len);

typedef struct {
    /* read-only for the caller */
    ifd_cli_http_state_t state;
    int status; /* HTTP status, 0 until the headers are in */
    int err;    /* the error that failed the connection */
    char content_type[128];
    char retry_after[32]; /* Retry-After header, "" when absent */
    ifd_buf_t body;       /* the body, when no body callback was set */
    /* private */
    int fd;
    ifd_buf_t out;
    size_t out_off;
    http_parser parser;
    int hdr;        /* header being read: 0 other, 1 content-type, 2 retry-after */
    bool hdr_value; /* the last header callback was a value */
    ifd_buf_t field;
    ifd_cli_http_head_cb head_cb;
    ifd_cli_http_body_cb body_cb;
    void *ud;
} ifd_cli_http_conn_t;

/* Zeroes c (fd -1). Never fails. */
void ifd_cli_http_conn_init(ifd_cli_http_conn_t *c);

/* Sets the callbacks (both optional; without body_cb the body collects in
 * c->body). Call before ifd_cli_http_conn_start. */
void ifd_cli_http_conn_set_cb(ifd_cli_http_conn_t *c, ifd_cli_http_head_cb head,
                              ifd_cli_http_body_cb body, void *ud);

/*
 * Opens a non-blocking connection to t and queues the request
 * "METHOD PREFIX+PATH" with the given body (may be NULL for none; sent as
 * application/json) and an Authorization header when t has a key.
 * `accept` is the Accept header (NULL: any). A Unix connect fails here at
 * once (ENOENT, ECONNREFUSED, EACCES…); a TCP connect may finish later in
 * ifd_cli_http_conn_io. Returns 0 or an error (c is then FAILED; close it).
 */
int ifd_cli_http_conn_start(ifd_cli_http_conn_t *c, const ifd_cli_http_target_t *t,
                            const char *method, const char *path, const char *accept,
                            const char *body, size_t len);

/* The fd to poll (-1 when finished) and the events to ask for. */
int ifd_cli_http_conn_fd(const ifd_cli_http_conn_t *c);
short ifd_cli_http_conn_events(const ifd_cli_http_conn_t *c);

/* Advances after poll reported revents on the fd. Returns 1 when the
 * response is complete (c->state DONE), 0 when more I/O is needed, or an
 * error (c->state FAILED, c->err set). */
int ifd_cli_http_conn_io(ifd_cli_http_conn_t *c, short revents);

/*
 * Blocks until the response is complete: 0, or an error. Gives up with
 * IFD_ETIMEDOUT after timeout_ms without any progress (<= 0: never), and
 * with IFD_ECANCELED as soon as *stop becomes non-zero (a signal handler
 * that interrupts poll sets it; stop may be NULL).
 */
int ifd_cli_http_conn_wait(ifd_cli_http_conn_t *c, int timeout_ms, volatile sig_atomic_t *stop);

/* Closes the socket (the peer sees the disconnect) and frees buffers. */
void ifd_cli_http_conn_close(ifd_cli_http_conn_t *c);

/*
 * One blocking request with the body collected: *status and the body in
 * *out (caller frees with ifd_buf_free; NUL-terminated). Same errors as
 * ifd_cli_http_conn_start / ifd_cli_http_conn_wait.
 */
int ifd_cli_http_fetch(const ifd_cli_http_target_t *t, const char *method, const char *path,
                       const char *body, size_t len, int timeout_ms, int *status, ifd_buf_t *out);

#endif
