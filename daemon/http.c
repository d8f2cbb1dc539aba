/*
 * http.c — see http.h.
 *
 * A connection moves through IDLE (waiting for a request: the keep-alive
 * timer, or the header timer on a fresh connection) → HEADERS (header
 * timer) → BODY (body timer) → BUSY (the handler owns the request; the
 * parser is paused, input is buffered) → IDLE again or closed. One uv_timer
 * per connection serves every timeout and, with 0 ms, the deferred
 * "parse what is buffered" step after a response: parsing the next
 * pipelined request is never done from inside the handler's own call
 * chain, so handlers are never re-entered.
 *
 * Input is read straight into c->in (alloc_cb reserves room there) and
 * parsed from c->in_off; parsed bytes are dropped once a batch is done.
 * Every write copies its bytes into one heap block holding the uv_write_t,
 * but a body handed over (ifd_http_respond_buf), which the block points to
 * and frees; c->pending counts bytes not yet completed by libuv.
 *
 * Freeing: ifd__close() marks the connection closing and uv_close()s its
 * stream and timer; the second close callback frees it. Write callbacks
 * cancelled by uv_close run before that.
 */
#include "http.h"

#include "error.h"
#include "httpframe.h"
#include "log.h"
#include "proto/openai.h"

#include <arpa/inet.h>
#include <http_parser.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#define IFD__MAX_PIPELINED (64u * 1024) /* buffered input while busy before reading pauses */
/* Free room each read gets: a request of a few KiB fits in one read. Not
 * 64 KiB: every connection would hold a 128 KiB block, 256 streams a 32 MiB
 * heap region whose resident pages drift upward as blocks are reused at
 * other places (docs/reliability.md, "Memory"). */
#define IFD__READ_ROOM (16u * 1024)
/* Buffers a connection keeps between requests at most: one that once
 * carried a large body does not hold that memory while it idles. */
#define IFD__KEEP_BYTES    (32u * 1024)
#define IFD__HDR_VALUE_MAX 4096

typedef enum {
    IFD__IDLE = 0,
    IFD__HEADERS,
    IFD__BODY,
    IFD__BUSY,
} ifd__state_t;

typedef enum {
    IFD__T_NONE = 0,
    IFD__T_TIMEOUT, /* 408 / idle close */
    IFD__T_RESUME,  /* parse buffered input */
} ifd__tact_t;

typedef struct ifd__listener {
    union {
        uv_pipe_t pipe;
        uv_tcp_t tcp;
        uv_stream_t stream;
        uv_handle_t handle;
    } h;
    ifd_http_server_t *srv;
    ifd_listen_kind_t kind;
    bool loopback;
    struct ifd__listener *next;
} ifd__listener_t;

typedef enum {
    IFD__H_OTHER = 0,
    IFD__H_AUTH,
    IFD__H_EXPECT,
    IFD__H_REQID,
    IFD__H_ORIGIN,
    IFD__H_ACR_METHOD,  /* Access-Control-Request-Method (a CORS preflight) */
    IFD__H_ACR_HEADERS, /* Access-Control-Request-Headers */
    IFD__H_LOAD_FORMAT, /* endpoint-load-metrics-format (an ORCA load report) */
    IFD__H_COUNT
} ifd__hdr_t;

/* The headers kept, by lower-case name (ifd__hdr_t's order from IFD__H_AUTH). */
static const char *const ifd__hdr_names[IFD__H_COUNT] = {
    NULL,
    "authorization",
    "expect",
    "x-request-id",
    "origin",
    "access-control-request-method",
    "access-control-request-headers",
    "endpoint-load-metrics-format",
};

struct ifd_http_conn {
    union {
        uv_pipe_t pipe;
        uv_tcp_t tcp;
        uv_stream_t stream;
        uv_handle_t handle;
    } h;
    uv_timer_t timer;
    int n_closed; /* close callbacks seen (2 = stream + timer) */
    ifd_http_server_t *srv;
    struct ifd_http_conn *prev, *next;
    ifd_listen_kind_t transport;
    bool loopback;
    int64_t peer_uid, peer_pid; /* SO_PEERCRED on a Unix socket, else -1 */
    char peer[64];              /* who, for the access log */

    http_parser parser;
    ifd_httpframe_t frame; /* strict framing, checked before the parser sees a byte */
    ifd__state_t state;
    ifd__tact_t tact;
    bool closing;
    bool close_after_write; /* close once pending reaches 0 */
    bool reading;
    bool eof;
    bool fresh; /* no request seen yet */

    ifd_buf_t in; /* raw input; in_off = first unparsed byte */
    size_t in_off;

    /* the request being parsed / served */
    ifd_buf_t url;
    ifd_buf_t body;
    ifd_buf_t hval[IFD__H_COUNT]; /* values of the interesting headers (ifd__hdr_t) */
    char field[32];
    size_t field_len;
    bool in_value;
    ifd__hdr_t cur_hdr;
    size_t hdr_bytes;
    int fail_status; /* a limit tripped while parsing */
    bool keep_alive;
    bool http10;
    bool expect_continue;
    bool head; /* a HEAD request: the response has headers only */

    /* the response */
    bool streaming;
    bool chunked;
    size_t pending;
    void (*abort_cb)(void *ud);
    void *abort_ud;
};

struct ifd_http_server {
    uv_loop_t *loop;
    ifd_http_limits_t lim;
    ifd_http_handler_t h;
    ifd_metrics_t *metrics;
    ifd__listener_t *listeners;
    ifd_http_conn_t *conns; /* doubly linked */
    int n_conns;            /* allocated (closing ones included) */
    int n_open;             /* not closing: what max_connections limits */
    bool draining;
    bool destroying;
    int n_listeners_open;
};

typedef struct {
    uv_write_t req;
    ifd_http_conn_t *c;
    size_t len;  /* every byte of the write (data[] and owned) */
    char *owned; /* a body taken from the caller, written after data[]; or NULL */
    char data[];
} ifd__wreq_t;

static void ifd__close(ifd_http_conn_t *c, bool notify);
static void ifd__parse(ifd_http_conn_t *c);
static void ifd__maybe_free_server(ifd_http_server_t *s);

/* Reason phrase of a status ("Not Found"). */
static const char *ifd__reason(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 413:
        return "Content Too Large";
    case 417:
        return "Expectation Failed";
    case 422:
        return "Unprocessable Content";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 503:
        return "Service Unavailable";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Unknown";
    }
}

/* ---- timers ----------------------------------------------------------------------------- */

static void ifd__timer_cb(uv_timer_t *t)
{
    ifd_http_conn_t *c = t->data;
    ifd__tact_t act = c->tact;
    c->tact = IFD__T_NONE;
    if (c->closing)
        return;
    if (act == IFD__T_RESUME) {
        ifd__parse(c);
        return;
    }
    if (act != IFD__T_TIMEOUT)
        return;
    if (c->state == IFD__HEADERS || c->state == IFD__BODY ||
        (c->state == IFD__IDLE && c->fresh && c->in.len > c->in_off)) {
        IFD_INFO("http: closing a connection that sent no complete request in time (408)");
        ifd_oai_error_t e;
        ifd_oai_error_set(&e, 408, NULL, "timeout", NULL,
                          c->state == IFD__BODY ? "The request body did not arrive in time."
                                                : "The request headers did not arrive in time.");
        ifd_buf_t b = IFD_BUF_INIT;
        ifd_oai_error_json(&b, &e);
        c->state = IFD__BUSY;
        c->keep_alive = false;
        ifd_http_respond(c, 408, "application/json", NULL, b.data ? b.data : "", b.len);
        ifd_buf_free(&b);
        return;
    }
    /* idle keep-alive (or a fresh connection that never sent a byte) */
    ifd__close(c, false);
}

static void ifd__arm(ifd_http_conn_t *c, uint64_t ms, ifd__tact_t act)
{
    c->tact = act;
    uv_timer_start(&c->timer, ifd__timer_cb, ms, 0);
}

static void ifd__disarm(ifd_http_conn_t *c)
{
    c->tact = IFD__T_NONE;
    uv_timer_stop(&c->timer);
}

/* ---- closing ------------------------------------------------------------------------------ */

static void ifd__conn_closed_cb(uv_handle_t *h)
{
    ifd_http_conn_t *c = h->data;
    if (++c->n_closed < 2)
        return;
    ifd_http_server_t *s = c->srv;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->n_conns--;
    ifd_buf_free(&c->in);
    ifd_buf_free(&c->url);
    ifd_buf_free(&c->body);
    for (int i = 0; i < IFD__H_COUNT; i++)
        ifd_buf_free(&c->hval[i]);
    free(c);
    ifd__maybe_free_server(s);
}

/* notify: the handler is told (abort callback) if a response is still owed */
static void ifd__close(ifd_http_conn_t *c, bool notify)
{
    if (c->closing)
        return;
    c->closing = true;
    c->srv->n_open--;
    if (c->abort_cb) {
        void (*cb)(void *) = c->abort_cb;
        void *ud = c->abort_ud;
        c->abort_cb = NULL;
        if (notify)
            cb(ud);
    }
    uv_timer_stop(&c->timer);
    uv_close((uv_handle_t *)&c->timer, ifd__conn_closed_cb);
    uv_close(&c->h.handle, ifd__conn_closed_cb);
}

/* ---- writing ------------------------------------------------------------------------------ */

static void ifd__write_cb(uv_write_t *req, int status)
{
    ifd__wreq_t *w = (ifd__wreq_t *)req;
    ifd_http_conn_t *c = w->c;
    c->pending -= w->len;
    free(w->owned);
    free(w);
    if (c->closing)
        return;
    if (status < 0) {
        IFD_DEBUG("http: write failed: %s", uv_strerror(status));
        ifd__close(c, true);
        return;
    }
    if (c->close_after_write && c->pending == 0)
        ifd__close(c, true);
}

/* Writes prefix + data + suffix (copied) and then, when `take` has bytes,
 * take's memory (handed to the write: *take is emptied, also on failure). */
static int ifd__write(ifd_http_conn_t *c, const char *prefix, size_t plen, const char *data,
                      size_t len, const char *suffix, size_t slen, ifd_buf_t *take)
{
    char *owned = take ? take->data : NULL;
    size_t olen = owned ? take->len : 0;
    if (take)
        *take = (ifd_buf_t)IFD_BUF_INIT;
    if (c->closing) {
        free(owned);
        return IFD_ECLOSED;
    }
    size_t n = plen + len + slen;
    if (n + olen == 0 || olen > UINT_MAX) { /* uv_buf_t holds an unsigned length */
        free(owned);
        return olen ? IFD_ETOOBIG : 0;
    }
    ifd__wreq_t *w = malloc(sizeof *w + n);
    if (!w) {
        free(owned);
        return IFD_ENOMEM;
    }
    w->c = c;
    w->len = n + olen;
    w->owned = owned;
    if (plen)
        memcpy(w->data, prefix, plen);
    if (len)
        memcpy(w->data + plen, data, len);
    if (slen)
        memcpy(w->data + plen + len, suffix, slen);
    uv_buf_t b[2] = {uv_buf_init(w->data, (unsigned)n), uv_buf_init(owned, (unsigned)olen)};
    int rc = uv_write(&w->req, &c->h.stream, b, olen ? 2 : 1, ifd__write_cb);
    if (rc < 0) {
        free(owned);
        free(w);
        return IFD_ECLOSED;
    }
    c->pending += w->len;
    return 0;
}

/* A kept header's value, or NULL when the request did not carry it. */
static const char *ifd__hdr(const ifd_http_conn_t *c, ifd__hdr_t h)
{
    return c->hval[h].len ? c->hval[h].data : NULL;
}

/* Writes the status line and headers, followed by body[0..blen) in the same
 * write, or by take's bytes (taken: *take is emptied). */
static int ifd__head(ifd_http_conn_t *c, int status, const char *ctype, const char *extra,
                     bool stream, size_t len, const char *body, size_t blen, ifd_buf_t *take)
{
    ifd_http_server_t *s = c->srv;
    bool ka = c->keep_alive && !s->draining && !c->eof;
    if (stream && c->http10)
        ka = false; /* a close-delimited stream */
    c->keep_alive = ka;
    ifd_buf_t b = IFD_BUF_INIT;
    int rc = ifd_buf_printf(&b, "HTTP/1.1 %d %s\r\nServer: inferd/%s\r\n", status,
                            ifd__reason(status), IFD_VERSION);
    if (!rc && ctype)
        rc = ifd_buf_printf(&b, "Content-Type: %s\r\n", ctype);
    if (!rc && stream && !c->http10)
        rc = ifd_buf_puts(&b, "Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n");
    else if (!rc && stream)
        rc = ifd_buf_puts(&b, "Cache-Control: no-cache\r\n");
    else if (!rc && status != 204) /* a 204 has no Content-Length (RFC 9110, 8.6) */
        rc = ifd_buf_printf(&b, "Content-Length: %zu\r\n", len);
    if (!rc)
        rc = ifd_buf_printf(&b, "Connection: %s\r\n", ka ? "keep-alive" : "close");
    if (!rc && c->hval[IFD__H_REQID].len)
        rc = ifd_buf_printf(&b, "X-Request-Id: %s\r\n", c->hval[IFD__H_REQID].data);
    if (!rc)
        rc = ifd_cors_response_headers(&s->lim.cors, ifd__hdr(c, IFD__H_ORIGIN), &b);
    if (!rc && s->h.load_report && c->hval[IFD__H_LOAD_FORMAT].len)
        rc = s->h.load_report(s->h.ctx, c->hval[IFD__H_LOAD_FORMAT].data, &b);
    if (!rc && extra)
        rc = ifd_buf_puts(&b, extra);
    if (!rc)
        rc = ifd_buf_puts(&b, "\r\n");
    if (!rc)
        rc = ifd__write(c, b.data, b.len, body, c->head ? 0 : blen, NULL, 0, c->head ? NULL : take);
    ifd_buf_free(&b);
    if (take)
        ifd_buf_free(take); /* HEAD, or a failure before the write took it */
    if (s->metrics)
        ifd_metrics_count_status(s->metrics, status);
    /* one access-log line per response: who (the peer's uid and pid on the
     * Unix socket, its address on TCP), what, and the status; successful
     * probes (/health, /ping, /metrics, /version every few seconds) at debug */
    static const char *const probes[] = {"/health", "/ping", "/metrics", "/version"};
    ifd_log_level_t lvl = IFD_LOG_INFO;
    for (size_t i = 0; status < 400 && c->url.len && i < sizeof probes / sizeof probes[0]; i++)
        if (!strcmp(c->url.data, probes[i]))
            lvl = IFD_LOG_DEBUG;
    if (ifd_log_get_level() >= lvl)
        ifd_log(lvl, "http: %s %.200s %d (%s)",
                c->url.len ? http_method_str((enum http_method)c->parser.method) : "-",
                c->url.len ? c->url.data : "-", status, c->peer);
    return rc;
}

/* Drops a buffer grown past IFD__KEEP_BYTES (its content is no longer needed). */
static void ifd__shrink(ifd_buf_t *b)
{
    if (b->cap > IFD__KEEP_BYTES)
        ifd_buf_free(b);
}

/* The response is complete: next request, or close. */
static void ifd__done(ifd_http_conn_t *c)
{
    ifd__shrink(&c->body); /* the request's strings are dead now (http.h) */
    c->abort_cb = NULL;
    c->abort_ud = NULL;
    c->streaming = false;
    c->state = IFD__IDLE;
    if (c->closing)
        return;
    if (!c->keep_alive || c->srv->draining || c->eof) {
        if (c->reading) {
            uv_read_stop(&c->h.stream);
            c->reading = false;
        }
        ifd__disarm(c);
        if (c->pending == 0)
            ifd__close(c, false);
        else
            c->close_after_write = true;
        return;
    }
    /* parse what is buffered (pipelined requests) outside the caller's stack */
    ifd__arm(c, 0, IFD__T_RESUME);
}

/* A whole response: body[0..len) copied, or take's bytes handed over. */
static int ifd__respond(ifd_http_conn_t *c, int status, const char *content_type,
                        const char *extra_headers, const char *body, size_t len, ifd_buf_t *take)
{
    if (c->closing) {
        if (take)
            ifd_buf_free(take);
        return IFD_ECLOSED;
    }
    int rc = ifd__head(c, status, content_type, extra_headers, false, take ? take->len : len, body,
                       len, take);
    if (rc) {
        c->abort_cb = NULL;
        ifd__close(c, false);
        return rc;
    }
    ifd__done(c);
    return 0;
}

int ifd_http_respond(ifd_http_conn_t *c, int status, const char *content_type,
                     const char *extra_headers, const char *body, size_t len)
{
    return ifd__respond(c, status, content_type, extra_headers, body, len, NULL);
}

int ifd_http_respond_buf(ifd_http_conn_t *c, int status, const char *content_type,
                         const char *extra_headers, ifd_buf_t *body)
{
    return ifd__respond(c, status, content_type, extra_headers, NULL, 0, body);
}

int ifd_http_stream_begin(ifd_http_conn_t *c, int status, const char *content_type,
                          const char *extra_headers)
{
    if (c->closing)
        return IFD_ECLOSED;
    c->streaming = true;
    c->chunked = !c->http10;
    int rc = ifd__head(c, status, content_type, extra_headers, true, 0, NULL, 0, NULL);
    if (rc) {
        c->abort_cb = NULL;
        ifd__close(c, false);
    }
    return rc;
}

int ifd_http_stream_write(ifd_http_conn_t *c, const char *data, size_t len)
{
    if (c->closing)
        return IFD_ECLOSED;
    if (!len)
        return 0;
    if (c->pending > c->srv->lim.output_cap) {
        IFD_WARN("http: client is not reading (%zu bytes unsent): dropping it", c->pending);
        c->abort_cb = NULL;
        ifd__close(c, false);
        return IFD_ETOOBIG;
    }
    int rc;
    if (c->chunked) {
        char pre[24];
        int pl = snprintf(pre, sizeof pre, "%zx\r\n", len);
        rc = ifd__write(c, pre, (size_t)pl, data, len, "\r\n", 2, NULL);
    } else {
        rc = ifd__write(c, data, len, NULL, 0, NULL, 0, NULL);
    }
    if (rc) {
        c->abort_cb = NULL;
        ifd__close(c, false);
    }
    return rc;
}

int ifd_http_stream_write_buf(ifd_http_conn_t *c, ifd_buf_t *data)
{
    if (c->closing) {
        ifd_buf_free(data);
        return IFD_ECLOSED;
    }
    if (!data->len) {
        ifd_buf_free(data);
        return 0;
    }
    if (c->pending > c->srv->lim.output_cap) {
        IFD_WARN("http: client is not reading (%zu bytes unsent): dropping it", c->pending);
        ifd_buf_free(data);
        c->abort_cb = NULL;
        ifd__close(c, false);
        return IFD_ETOOBIG;
    }
    int rc;
    if (c->chunked) { /* the chunk's size line, then the bytes with their CRLF */
        char pre[24];
        int pl = snprintf(pre, sizeof pre, "%zx\r\n", data->len);
        rc = ifd_buf_append(data, "\r\n", 2);
        rc = rc ? rc : ifd__write(c, pre, (size_t)pl, NULL, 0, NULL, 0, data);
    } else {
        rc = ifd__write(c, NULL, 0, NULL, 0, NULL, 0, data);
    }
    ifd_buf_free(data); /* empty unless the append failed */
    if (rc) {
        c->abort_cb = NULL;
        ifd__close(c, false);
    }
    return rc;
}

int ifd_http_stream_end(ifd_http_conn_t *c)
{
    if (c->closing)
        return IFD_ECLOSED;
    int rc = 0;
    if (c->chunked)
        rc = ifd__write(c, "0\r\n\r\n", 5, NULL, 0, NULL, 0, NULL);
    else
        c->keep_alive = false;
    if (rc) {
        c->abort_cb = NULL;
        ifd__close(c, false);
        return rc;
    }
    ifd__done(c);
    return 0;
}

void ifd_http_set_abort(ifd_http_conn_t *c, void (*abort_cb)(void *ud), void *ud)
{
    c->abort_cb = abort_cb;
    c->abort_ud = ud;
}

/* An error found by this module: JSON body, then close. */
static void ifd__fail(ifd_http_conn_t *c, int status, const char *code, const char *msg)
{
    ifd_oai_error_t e;
    ifd_oai_error_set(&e, status, NULL, code, NULL, "%s", msg);
    ifd_buf_t b = IFD_BUF_INIT;
    ifd_oai_error_json(&b, &e);
    c->keep_alive = false;
    c->state = IFD__BUSY;
    ifd__disarm(c);
    if (c->reading) {
        uv_read_stop(&c->h.stream);
        c->reading = false;
    }
    ifd_http_respond(c, status, "application/json", NULL, b.data ? b.data : "", b.len);
    ifd_buf_free(&b);
}

/* ---- parsing ------------------------------------------------------------------------------ */

static int ifd__count(ifd_http_conn_t *c, size_t n)
{
    c->hdr_bytes += n;
    if (c->hdr_bytes > c->srv->lim.max_header_bytes) {
        c->fail_status = 431;
        return -1;
    }
    return 0;
}

static int ifd__on_message_begin(http_parser *p)
{
    ifd_http_conn_t *c = p->data;
    ifd_buf_clear(&c->url);
    ifd_buf_clear(&c->body);
    for (int i = 0; i < IFD__H_COUNT; i++)
        ifd_buf_clear(&c->hval[i]);
    c->field_len = 0;
    c->in_value = false;
    c->cur_hdr = IFD__H_OTHER;
    c->hdr_bytes = 0;
    c->fail_status = 0;
    c->expect_continue = false;
    c->head = false;
    c->fresh = false;
    c->state = IFD__HEADERS;
    ifd__arm(c, c->srv->lim.header_timeout_ms, IFD__T_TIMEOUT);
    return 0;
}

static int ifd__on_url(http_parser *p, const char *at, size_t len)
{
    ifd_http_conn_t *c = p->data;
    if (ifd__count(c, len))
        return -1;
    return ifd_buf_append(&c->url, at, len) ? -1 : 0;
}

static int ifd__on_header_field(http_parser *p, const char *at, size_t len)
{
    ifd_http_conn_t *c = p->data;
    if (ifd__count(c, len))
        return -1;
    if (c->in_value) {
        c->in_value = false;
        c->field_len = 0;
    }
    for (size_t i = 0; i < len; i++) {
        if (c->field_len + 1 < sizeof c->field)
            c->field[c->field_len] = at[i];
        c->field_len++;
    }
    return 0;
}

static int ifd__on_header_value(http_parser *p, const char *at, size_t len)
{
    ifd_http_conn_t *c = p->data;
    if (ifd__count(c, len))
        return -1;
    if (!c->in_value) {
        c->in_value = true;
        c->cur_hdr = IFD__H_OTHER;
        if (c->field_len < sizeof c->field) {
            c->field[c->field_len] = '\0';
            for (int i = IFD__H_AUTH; i < IFD__H_COUNT; i++)
                if (!strcasecmp(c->field, ifd__hdr_names[i]))
                    c->cur_hdr = (ifd__hdr_t)i;
        }
        if (c->cur_hdr != IFD__H_OTHER)
            ifd_buf_clear(&c->hval[c->cur_hdr]);
    }
    if (c->cur_hdr == IFD__H_OTHER)
        return 0;
    ifd_buf_t *v = &c->hval[c->cur_hdr];
    if (v->len + len > IFD__HDR_VALUE_MAX) {
        c->fail_status = 431;
        return -1;
    }
    return ifd_buf_append(v, at, len) ? -1 : 0;
}

static int ifd__on_headers_complete(http_parser *p)
{
    ifd_http_conn_t *c = p->data;
    ifd_http_server_t *s = c->srv;
    /* Nothing is ever upgraded (no CONNECT tunnels, no WebSocket, no h2c):
     * without this http-parser would end a CONNECT or "Upgrade:" request
     * right after its head and leave its body for another protocol, framing
     * it unlike the checker (found by tests/fuzz/fuzz_http.c). The request
     * is then routed like any other (404/405). */
    p->upgrade = 0;
    c->http10 = p->http_major == 1 && p->http_minor == 0;
    c->keep_alive = http_should_keep_alive(p) != 0;
    if ((p->flags & F_CONTENTLENGTH) && p->content_length > s->lim.max_body_bytes) {
        c->fail_status = 413;
        return -1;
    }
    if (c->hval[IFD__H_EXPECT].len) {
        if (strcasecmp(c->hval[IFD__H_EXPECT].data, "100-continue") != 0) {
            c->fail_status = 417;
            return -1;
        }
        c->expect_continue = true;
    }
    /* X-Request-Id is echoed: keep it to printable ASCII */
    ifd_buf_t *rid = &c->hval[IFD__H_REQID];
    for (size_t i = 0; i < rid->len; i++)
        if ((unsigned char)rid->data[i] < 0x21 || (unsigned char)rid->data[i] > 0x7e)
            rid->data[i] = '_';
    if (rid->len > 128) {
        rid->len = 128;
        rid->data[128] = '\0';
    }
    c->state = IFD__BODY;
    ifd__arm(c, s->lim.body_timeout_ms, IFD__T_TIMEOUT);
    if (c->expect_continue && ((p->flags & F_CHUNKED) || p->content_length > 0))
        ifd__write(c, "HTTP/1.1 100 Continue\r\n\r\n", 25, NULL, 0, NULL, 0, NULL);
    return 0;
}

static int ifd__on_body(http_parser *p, const char *at, size_t len)
{
    ifd_http_conn_t *c = p->data;
    if (c->body.len + len > c->srv->lim.max_body_bytes) {
        c->fail_status = 413;
        return -1;
    }
    return ifd_buf_append(&c->body, at, len) ? -1 : 0;
}

static int ifd__on_message_complete(http_parser *p)
{
    ifd_http_conn_t *c = p->data;
    c->state = IFD__BUSY;
    ifd__disarm(c);
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings ifd__settings = {
    .on_message_begin = ifd__on_message_begin,
    .on_url = ifd__on_url,
    .on_header_field = ifd__on_header_field,
    .on_header_value = ifd__on_header_value,
    .on_headers_complete = ifd__on_headers_complete,
    .on_body = ifd__on_body,
    .on_message_complete = ifd__on_message_complete,
};

/* A CORS preflight, answered here before any authentication (cors.h): the
 * handler never sees it. */
static void ifd__preflight(ifd_http_conn_t *c)
{
    ifd_buf_t h = IFD_BUF_INIT;
    char why[320];
    int st = ifd_cors_preflight(&c->srv->lim.cors, ifd__hdr(c, IFD__H_ORIGIN),
                                ifd__hdr(c, IFD__H_ACR_METHOD), ifd__hdr(c, IFD__H_ACR_HEADERS), &h,
                                why, sizeof why);
    if (st == 204) {
        ifd_http_respond(c, 204, NULL, h.data, "", 0);
    } else if (st == 403) {
        /* a refused preflight grants nothing: its head carries no CORS header */
        ifd_buf_clear(&c->hval[IFD__H_ORIGIN]);
        ifd_oai_error_t e;
        ifd_oai_error_set(&e, 403, NULL, "cors_not_allowed", NULL, "%s", why);
        ifd_buf_t b = IFD_BUF_INIT;
        ifd_oai_error_json(&b, &e);
        ifd_http_respond(c, 403, "application/json", NULL, b.data ? b.data : "", b.len);
        ifd_buf_free(&b);
    } else {
        ifd__fail(c, 500, NULL, "Out of memory.");
    }
    ifd_buf_free(&h);
}

static void ifd__dispatch(ifd_http_conn_t *c)
{
    ifd_http_request_t r;
    memset(&r, 0, sizeof r);
    if (ifd_buf_puts(&c->url, "") || ifd_buf_puts(&c->body, "")) {
        ifd__fail(c, 500, NULL, "Out of memory.");
        return;
    }
    char *q = strchr(c->url.data, '?');
    if (q) {
        *q = '\0';
        r.query = q + 1;
    } else {
        r.query = "";
    }
    r.method = (int)c->parser.method;
    c->head = c->parser.method == HTTP_HEAD;
    r.method_name = http_method_str((enum http_method)c->parser.method);
    r.path = c->url.data;
    r.body = c->body.data;
    r.body_len = c->body.len;
    r.authorization = c->hval[IFD__H_AUTH].len ? c->hval[IFD__H_AUTH].data : NULL;
    r.request_id = c->hval[IFD__H_REQID].len ? c->hval[IFD__H_REQID].data : NULL;
    r.transport = c->transport;
    r.loopback = c->loopback;
    r.peer_uid = c->peer_uid;
    r.peer_pid = c->peer_pid;
    r.peer = c->peer;
    r.t_ns = uv_hrtime();
    IFD_DEBUG("http: %s %s (%zu body bytes)", r.method_name, r.path, r.body_len);
    if (ifd_cors_is_preflight(c->parser.method == HTTP_OPTIONS, ifd__hdr(c, IFD__H_ORIGIN),
                              ifd__hdr(c, IFD__H_ACR_METHOD))) {
        ifd__preflight(c);
        return;
    }
    c->srv->h.on_request(c->srv->h.ctx, c, &r);
}

static void ifd__read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);
static void ifd__alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf);

/* Parses buffered input while the connection is not busy. The framing
 * checker sees each byte first and the parser only what it accepted, so the
 * two stay at the same position: both end a request at the same byte. */
static void ifd__parse(ifd_http_conn_t *c)
{
    while (!c->closing && !c->close_after_write && c->state != IFD__BUSY && c->in_off < c->in.len) {
        size_t avail = c->in.len - c->in_off;
        const char *at = c->in.data + c->in_off;
        size_t ok = ifd_httpframe_feed(&c->frame, at, avail);
        size_t n = ok ? http_parser_execute(&c->parser, &ifd__settings, at, ok) : 0;
        c->in_off += n;
        enum http_errno err = HTTP_PARSER_ERRNO(&c->parser);
        if (err == HPE_PAUSED) {
            http_parser_pause(&c->parser, 0);
            if (!c->frame.done || n != ok) {
                /* cannot happen for a request the checker accepts; refuse, never guess */
                IFD_WARN("http: the parser and the framing checker disagree on a request's end");
                ifd__fail(c, 400, NULL, "Malformed HTTP request (ambiguous framing).");
                return;
            }
            ifd_httpframe_reset(&c->frame);
            ifd__dispatch(c);
            continue;
        }
        if (err != HPE_OK) {
            int st = c->fail_status;
            if (!st && err == HPE_HEADER_OVERFLOW)
                st = 431;
            if (st == 413)
                ifd__fail(c, 413, "request_too_large", "The request body is too large.");
            else if (st == 431)
                ifd__fail(c, 431, NULL, "The request headers are too large.");
            else if (st == 417)
                ifd__fail(c, 417, NULL, "Unsupported Expect header.");
            else if (st)
                ifd__fail(c, st, NULL, "The request could not be read.");
            else if (c->frame.status)
                ifd__fail(c, c->frame.status, NULL, c->frame.why);
            else
                ifd__fail(c, 400, NULL, "Malformed HTTP request.");
            return;
        }
        if (c->frame.status) {
            IFD_DEBUG("http: refused: %s", c->frame.why);
            ifd__fail(c, c->frame.status, NULL, c->frame.why);
            return;
        }
        if (c->frame.done) {
            IFD_WARN("http: the framing checker ended a request the parser did not");
            ifd__fail(c, 400, NULL, "Malformed HTTP request (ambiguous framing).");
            return;
        }
        if (n < avail)
            break; /* cannot happen without an error; be safe */
    }
    if (c->closing)
        return;
    /* drop parsed bytes */
    if (c->in_off) {
        ifd_buf_consume(&c->in, c->in_off);
        c->in_off = 0;
    }
    if (!c->in.len) /* all parsed: a streaming or idle connection holds no input block */
        ifd_buf_free(&c->in);
    if (c->state == IFD__IDLE && !c->tact) {
        if (c->eof) {
            ifd__close(c, false);
            return;
        }
        ifd__arm(c, c->fresh ? c->srv->lim.header_timeout_ms : c->srv->lim.keepalive_timeout_ms,
                 IFD__T_TIMEOUT);
    }
    /* resume reading when it was paused for a busy connection */
    if (!c->reading && !c->eof && !c->close_after_write && c->state != IFD__BUSY) {
        if (uv_read_start(&c->h.stream, ifd__alloc_cb, ifd__read_cb) == 0)
            c->reading = true;
    }
}

static void ifd__alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    ifd_http_conn_t *c = h->data;
    if (ifd_buf_reserve(&c->in, IFD__READ_ROOM)) {
        *buf = uv_buf_init(NULL, 0);
        return;
    }
    *buf = uv_buf_init(c->in.data + c->in.len, (unsigned)(c->in.cap - c->in.len - 1));
}

static void ifd__read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    ifd_http_conn_t *c = st->data;
    if (c->closing)
        return;
    if (nread < 0) {
        /* EOF or error: a request being served has lost its client */
        c->eof = true;
        uv_read_stop(st);
        c->reading = false;
        if (c->state == IFD__BUSY && c->abort_cb) {
            IFD_DEBUG("http: client went away during a request");
            ifd__close(c, true);
        } else if (c->state != IFD__BUSY && c->pending == 0) {
            ifd__close(c, true);
        } else if (c->state != IFD__BUSY) {
            c->close_after_write = true;
        }
        return;
    }
    if (nread == 0)
        return;
    c->in.len += (size_t)nread;
    c->in.data[c->in.len] = '\0';
    if (c->state == IFD__BUSY) {
        if (c->in.len - c->in_off > IFD__MAX_PIPELINED) {
            uv_read_stop(st);
            c->reading = false;
        }
        return;
    }
    if (c->state == IFD__IDLE && c->tact == IFD__T_TIMEOUT && !c->fresh)
        ifd__disarm(c); /* the next request has begun: on_message_begin arms the header timer */
    ifd__parse(c);
}

/* ---- accepting ----------------------------------------------------------------------------- */

static void ifd__reject(ifd_http_conn_t *c)
{
    static const char body[] = "{\"error\":{\"message\":\"Too many connections.\","
                               "\"type\":\"service_unavailable_error\",\"param\":null,"
                               "\"code\":null}}";
    char head[256];
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nRetry-After: 1\r\nConnection: close\r\n\r\n",
                      sizeof body - 1);
    c->close_after_write = true;
    if (ifd__write(c, head, (size_t)hl, body, sizeof body - 1, NULL, 0, NULL))
        ifd__close(c, false);
}

/* Who is on the other end: SO_PEERCRED on a Unix socket (uid and pid as
 * the kernel recorded them at connect(); they cannot be forged by the
 * client), the address on TCP. */
static void ifd__identify_peer(ifd_http_conn_t *c)
{
    c->peer_uid = c->peer_pid = -1;
    snprintf(c->peer, sizeof c->peer, "?");
    uv_os_fd_t fd;
    if (uv_fileno(&c->h.handle, &fd) != 0)
        return;
    if (c->transport == IFD_LISTEN_UNIX) {
        struct ucred cr;
        socklen_t len = sizeof cr;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0 && len == sizeof cr) {
            c->peer_uid = (int64_t)cr.uid;
            c->peer_pid = (int64_t)cr.pid;
            snprintf(c->peer, sizeof c->peer, "uid %lld pid %lld", (long long)c->peer_uid,
                     (long long)c->peer_pid);
        }
        return;
    }
    struct sockaddr_storage ss;
    int sl = (int)sizeof ss;
    if (uv_tcp_getpeername(&c->h.tcp, (struct sockaddr *)&ss, &sl) != 0)
        return;
    char host[INET6_ADDRSTRLEN] = "?";
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&ss;
        uv_ip4_name(in, host, sizeof host);
        snprintf(c->peer, sizeof c->peer, "%s:%d", host, ntohs(in->sin_port));
    } else if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&ss;
        uv_ip6_name(in6, host, sizeof host);
        snprintf(c->peer, sizeof c->peer, "[%s]:%d", host, ntohs(in6->sin6_port));
    }
}

static void ifd__connection_cb(uv_stream_t *server, int status)
{
    ifd__listener_t *l = server->data;
    ifd_http_server_t *s = l->srv;
    if (status < 0) {
        IFD_WARN("http: accept: %s", uv_strerror(status));
        return;
    }
    ifd_http_conn_t *c = calloc(1, sizeof *c);
    if (!c) {
        IFD_ERROR("http: out of memory for a connection");
        return;
    }
    c->srv = s;
    c->transport = l->kind;
    c->loopback = l->loopback;
    c->fresh = true;
    int rc = l->kind == IFD_LISTEN_UNIX ? uv_pipe_init(s->loop, &c->h.pipe, 0)
                                        : uv_tcp_init(s->loop, &c->h.tcp);
    if (rc < 0) {
        free(c);
        return;
    }
    uv_timer_init(s->loop, &c->timer);
    c->h.handle.data = c;
    c->timer.data = c;
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->n_conns++;
    s->n_open++;
    if (uv_accept(server, &c->h.stream) < 0) {
        ifd__close(c, false);
        return;
    }
    if (l->kind == IFD_LISTEN_TCP)
        uv_tcp_nodelay(&c->h.tcp, 1);
    ifd__identify_peer(c);
    if (s->metrics)
        s->metrics->connections_total++;
    if (s->n_open > s->lim.max_connections || s->draining) {
        if (s->metrics && !s->draining)
            s->metrics->connections_rejected++;
        ifd__reject(c);
        return;
    }
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    ifd_httpframe_init(&c->frame);
    if (uv_read_start(&c->h.stream, ifd__alloc_cb, ifd__read_cb) < 0) {
        ifd__close(c, false);
        return;
    }
    c->reading = true;
    ifd__arm(c, s->lim.header_timeout_ms, IFD__T_TIMEOUT);
}

int ifd_http_server_create(ifd_http_server_t **out, uv_loop_t *loop, const ifd_http_limits_t *lim,
                           const ifd_http_handler_t *h, ifd_metrics_t *metrics)
{
    ifd_http_server_t *s = calloc(1, sizeof *s);
    if (!s)
        return IFD_ENOMEM;
    s->loop = loop;
    s->lim = *lim;
    s->h = *h;
    s->metrics = metrics;
    *out = s;
    return 0;
}

int ifd_http_server_listen(ifd_http_server_t *s, const ifd_listener_t *l)
{
    ifd__listener_t *x = calloc(1, sizeof *x);
    if (!x)
        return IFD_ENOMEM;
    x->srv = s;
    x->kind = l->kind;
    x->loopback = l->loopback;
    int rc;
    if (l->kind == IFD_LISTEN_UNIX) {
        rc = uv_pipe_init(s->loop, &x->h.pipe, 0);
        if (!rc)
            rc = uv_pipe_open(&x->h.pipe, l->fd);
    } else {
        rc = uv_tcp_init(s->loop, &x->h.tcp);
        if (!rc)
            rc = uv_tcp_open(&x->h.tcp, l->fd);
    }
    x->h.handle.data = x;
    if (!rc)
        rc = uv_listen(&x->h.stream, 511, ifd__connection_cb);
    if (rc) {
        IFD_ERROR("http: listening on %s: %s", l->name, uv_strerror(rc));
        free(x);
        return rc;
    }
    x->next = s->listeners;
    s->listeners = x;
    s->n_listeners_open++;
    return 0;
}

void ifd_http_server_set_limits(ifd_http_server_t *s, const ifd_http_limits_t *lim)
{
    s->lim = *lim;
}

static void ifd__listener_closed_cb(uv_handle_t *h)
{
    ifd__listener_t *l = h->data;
    ifd_http_server_t *s = l->srv;
    free(l);
    s->n_listeners_open--;
    ifd__maybe_free_server(s);
}

static void ifd__close_listeners(ifd_http_server_t *s)
{
    ifd__listener_t *l = s->listeners;
    s->listeners = NULL;
    while (l) {
        ifd__listener_t *next = l->next;
        uv_close(&l->h.handle, ifd__listener_closed_cb);
        l = next;
    }
}

void ifd_http_server_drain(ifd_http_server_t *s)
{
    if (s->draining)
        return;
    s->draining = true;
    ifd__close_listeners(s);
    for (ifd_http_conn_t *c = s->conns; c; c = c->next)
        if (!c->closing && c->state == IFD__IDLE && c->pending == 0)
            ifd__close(c, false);
}

static void ifd__maybe_free_server(ifd_http_server_t *s)
{
    if (s->destroying && s->n_conns == 0 && s->n_listeners_open == 0)
        free(s);
}

void ifd_http_server_destroy(ifd_http_server_t *s)
{
    if (!s)
        return;
    s->draining = true;
    s->destroying = true;
    ifd__close_listeners(s);
    for (ifd_http_conn_t *c = s->conns; c; c = c->next)
        ifd__close(c, true);
    ifd__maybe_free_server(s);
}

int ifd_http_server_connections(const ifd_http_server_t *s)
{
    return s->n_open;
}
