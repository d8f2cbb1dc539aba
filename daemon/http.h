/*
 * http.h — the daemon's HTTP/1.1 server on a libuv loop: listeners,
 * connections, request parsing (http-parser), limits and timeouts, and
 * response writing (whole bodies, or chunked streams for SSE).
 *
 * One request at a time per connection. Pipelined requests are handled in
 * order: while a request is being answered, bytes that follow it are kept
 * (up to a cap, then reading pauses) and parsed once the response is
 * written. Keep-alive follows HTTP/1.1 rules (HTTP/1.0 and
 * "Connection: close" close after the response).
 *
 * Limits, each answered with an OpenAI-style JSON error and the connection
 * closed: request line + headers over max_header_bytes → 431; a body over
 * max_body_bytes → 413 (decided from Content-Length before the body is
 * read, or while a chunked body arrives); headers not complete within
 * header_timeout, or a body within body_timeout → 408; malformed HTTP →
 * 400; over max_connections → 503 and close at accept. An idle keep-alive
 * connection is closed after keepalive_timeout. "Expect: 100-continue" is
 * answered when the body is acceptable.
 *
 * CORS (cors.h): a preflight (OPTIONS with Origin and
 * Access-Control-Request-Method) is answered here, 204 or 403, before the
 * handler — hence before authentication; every other response, whoever
 * writes it (errors of this module and SSE streams included), carries the
 * CORS headers its request's Origin calls for.
 *
 * Output cap: bytes handed to a connection and not yet written by the
 * kernel are counted; ifd_http_stream_write refuses (IFD_ETOOBIG) once they
 * pass output_cap, so a client that stops reading cannot grow the daemon's
 * memory: the caller then cancels its work and the connection is closed.
 *
 * Request/response contract: the handler's on_request is called once per
 * request; it must answer exactly once, now or later, with ifd_http_respond
 * or ifd_http_stream_begin … ifd_http_stream_end. Until then the connection
 * stays open for it, unless the client goes away: then the abort callback
 * set with ifd_http_set_abort is called (from a libuv callback of this
 * module, never from inside an ifd_http_* call), after which the handler
 * must not touch the connection again. The request's strings stay valid
 * until the response is complete.
 *
 * Memory: connections are owned by the server and freed in their libuv
 * close callbacks. Threading: loop thread only.
 */
#ifndef IFD_DAEMON_HTTP_H
#define IFD_DAEMON_HTTP_H

#include "arena.h"
#include "cors.h"
#include "listen.h"
#include "metrics.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct ifd_http_server ifd_http_server_t;
typedef struct ifd_http_conn ifd_http_conn_t;

typedef struct {
    int method;              /* enum http_method (http_parser.h) */
    const char *method_name; /* "GET", "POST", … */
    const char *path;        /* without the query string */
    const char *query;       /* after '?', or "" */
    const char *body;        /* NUL-terminated; body_len bytes (may contain NULs) */
    size_t body_len;
    const char *authorization; /* header value, or NULL */
    const char *request_id;    /* X-Request-Id, or NULL */
    ifd_listen_kind_t transport;
    bool loopback; /* a Unix socket, or TCP on a loopback address */
    uint64_t t_ns; /* uv_hrtime() when the request was complete */
    /* Unix socket: the client process as the kernel saw it connect
     * (SO_PEERCRED); -1 when unknown or on TCP */
    int64_t peer_uid;
    int64_t peer_pid;
    const char *peer; /* "uid 1000 pid 4242" or "127.0.0.1:51234", for logs */
} ifd_http_request_t;

typedef struct {
    void *ctx;
    void (*on_request)(void *ctx, ifd_http_conn_t *c, const ifd_http_request_t *r);
    /* Optional (NULL: none). Called while the head of any response to a
     * request that carried "endpoint-load-metrics-format: FORMAT" is
     * written: appends whole header lines (an ORCA load report) to out, or
     * nothing for a format it does not know. 0 or IFD_ENOMEM. */
    int (*load_report)(void *ctx, const char *format, ifd_buf_t *out);
} ifd_http_handler_t;

typedef struct {
    int max_connections;
    size_t max_header_bytes;
    size_t max_body_bytes;
    size_t output_cap;
    uint64_t header_timeout_ms;
    uint64_t body_timeout_ms;
    uint64_t keepalive_timeout_ms;
    ifd_cors_t cors; /* allowed_origins (cors.h): preflights and every response's headers */
} ifd_http_limits_t;

/* metrics may be NULL. 0 or IFD_ENOMEM. */
int ifd_http_server_create(ifd_http_server_t **out, uv_loop_t *loop, const ifd_http_limits_t *lim,
                           const ifd_http_handler_t *h, ifd_metrics_t *metrics);

/* Starts accepting on a listening socket (the fd is adopted). 0 or a uv error. */
int ifd_http_server_listen(ifd_http_server_t *s, const ifd_listener_t *l);

/* New limits apply to new requests (SIGHUP). */
void ifd_http_server_set_limits(ifd_http_server_t *s, const ifd_http_limits_t *lim);

/* Stops accepting, closes idle connections, and makes every response from
 * now on close its connection; requests in progress continue. */
void ifd_http_server_drain(ifd_http_server_t *s);

/* Closes every listener and connection (aborting requests in progress);
 * handles finish closing on the next loop iterations, then the server is
 * freed. */
void ifd_http_server_destroy(ifd_http_server_t *s);

int ifd_http_server_connections(const ifd_http_server_t *s);

/* ---- answering a request ------------------------------------------------------------ */

/* extra_headers: NULL, or whole "Name: value\r\n" lines. Returns 0, or
 * IFD_ECLOSED when the connection is already gone (nothing is written). */
int ifd_http_respond(ifd_http_conn_t *c, int status, const char *content_type,
                     const char *extra_headers, const char *body, size_t len);

/* The same with a body the connection takes: body's memory is handed to
 * the write (no copy: a large response is held once) and freed when the
 * kernel has it; *body is empty afterwards, whatever the result. */
int ifd_http_respond_buf(ifd_http_conn_t *c, int status, const char *content_type,
                         const char *extra_headers, ifd_buf_t *body);

/* Starts a chunked (HTTP/1.1) or close-delimited (HTTP/1.0) response. */
int ifd_http_stream_begin(ifd_http_conn_t *c, int status, const char *content_type,
                          const char *extra_headers);

/* Writes len bytes (len 0 is a no-op). IFD_ETOOBIG: the client is not
 * reading (output cap reached; the connection is being closed and the
 * abort callback will NOT be called: the caller handles it); IFD_ECLOSED. */
int ifd_http_stream_write(ifd_http_conn_t *c, const char *data, size_t len);

/* The same with bytes the connection takes (no copy: a chunk of megabytes,
 * built on the thread pool, is held once); *data is empty afterwards,
 * whatever the result. */
int ifd_http_stream_write_buf(ifd_http_conn_t *c, ifd_buf_t *data);

/* Ends the stream; the connection then serves its next request or closes. */
int ifd_http_stream_end(ifd_http_conn_t *c);

/* Called if the client goes away before the response is complete. */
void ifd_http_set_abort(ifd_http_conn_t *c, void (*abort_cb)(void *ud), void *ud);

#endif
