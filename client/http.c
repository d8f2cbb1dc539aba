/*
 * http.c — one HTTP/1.1 request per non-blocking socket (see http.h).
 *
 * State machine: CONNECTING (TCP only, until the socket is writable and
 * SO_ERROR is 0) → SENDING (until the whole request is written) →
 * RECEIVING (bytes go through http-parser until on_message_complete, or
 * EOF for a body delimited by the close) → DONE. Any failure → FAILED
 * with c->err. The response may start arriving while the request is still
 * being sent (an early 413); reading is therefore allowed in SENDING too.
 */
#include "http.h"

#include "error.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

int ifd_cli_http_target_unix(ifd_cli_http_target_t *t, const char *path)
{
    memset(t, 0, sizeof(*t));
    if (strlen(path) >= sizeof(t->path))
        return IFD_ETOOBIG;
    snprintf(t->path, sizeof(t->path), "%s", path);
    snprintf(t->host, sizeof(t->host), "localhost");
    snprintf(t->where, sizeof(t->where), "%s", path);
    return 0;
}

int ifd_cli_http_target_url(ifd_cli_http_target_t *t, const char *url, char *err, size_t errlen)
{
    memset(t, 0, sizeof(*t));
    t->tcp = true;
    if (strncasecmp(url, "https://", 8) == 0) {
        snprintf(err, errlen,
                 "https is not supported (use http:// on a trusted network, "
                 "or the Unix socket)");
        return IFD_EINVAL;
    }
    if (strncasecmp(url, "http://", 7) != 0) {
        snprintf(err, errlen, "'%s' is not an http:// URL", url);
        return IFD_EINVAL;
    }
    const char *hp = url + 7;
    size_t hlen = strcspn(hp, "/?#");
    if (hlen == 0 || hlen >= sizeof(t->host)) {
        snprintf(err, errlen, "'%s' has no host", url);
        return IFD_EINVAL;
    }
    memcpy(t->host, hp, hlen);
    t->host[hlen] = '\0';
    const char *pp = hp + hlen;
    size_t plen = strcspn(pp, "?#");
    while (plen > 0 && pp[plen - 1] == '/')
        plen--;
    if (plen >= 3 && strncmp(pp + plen - 3, "/v1", 3) == 0)
        plen -= 3;
    if (plen >= sizeof(t->prefix)) {
        snprintf(err, errlen, "URL path too long");
        return IFD_EINVAL;
    }
    memcpy(t->prefix, pp, plen);
    t->prefix[plen] = '\0';

    /* host, [v6], host:port, [v6]:port */
    char name[256], port[16] = "80";
    const char *h = t->host;
    if (h[0] == '[') {
        const char *close = strchr(h, ']');
        if (!close || (size_t)(close - h - 1) >= sizeof(name)) {
            snprintf(err, errlen, "bad IPv6 address in '%s'", url);
            return IFD_EINVAL;
        }
        memcpy(name, h + 1, (size_t)(close - h - 1));
        name[close - h - 1] = '\0';
        if (close[1] == ':')
            snprintf(port, sizeof(port), "%s", close + 2);
    } else {
        const char *colon = strrchr(h, ':');
        size_t n = colon ? (size_t)(colon - h) : strlen(h);
        memcpy(name, h, n);
        name[n] = '\0';
        if (colon)
            snprintf(port, sizeof(port), "%s", colon + 1);
    }
    if (port[0] == '\0' || strspn(port, "0123456789") != strlen(port)) {
        snprintf(err, errlen, "bad port in '%s'", url);
        return IFD_EINVAL;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(name, port, &hints, &res);
    if (rc != 0 || !res) {
        snprintf(err, errlen, "cannot resolve '%s': %s", name, gai_strerror(rc));
        return IFD_ENOTFOUND;
    }
    memcpy(&t->addr, res->ai_addr, res->ai_addrlen);
    t->addrlen = res->ai_addrlen;
    freeaddrinfo(res);
    snprintf(t->where, sizeof(t->where), "http://%s%s", t->host, t->prefix);
    return 0;
}

void ifd_cli_http_default_socket(char *out, size_t n)
{
    static const char sys[] = "/run/inferd/inferd.sock";
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    if (geteuid() == 0 || !xdg || !xdg[0]) {
        snprintf(out, n, "%s", sys);
        return;
    }
    snprintf(out, n, "%s/inferd.sock", xdg);
    struct stat st;
    if (stat(out, &st) != 0 && stat(sys, &st) == 0)
        snprintf(out, n, "%s", sys);
}

/* ---- http-parser callbacks ------------------------------------------------------------------- */

static int on_header_field(http_parser *p, const char *at, size_t len)
{
    ifd_cli_http_conn_t *c = p->data;
    if (c->hdr_value) {
        ifd_buf_clear(&c->field);
        c->hdr_value = false;
    }
    if (c->field.len + len > 256)
        return 0; /* a header we do not care about */
    return ifd_buf_append(&c->field, at, len) < 0 ? -1 : 0;
}

static void append_capped(char *dst, size_t cap, const char *at, size_t len)
{
    size_t have = strlen(dst);
    if (have + 1 >= cap)
        return;
    if (len > cap - 1 - have)
        len = cap - 1 - have;
    memcpy(dst + have, at, len);
    dst[have + len] = '\0';
}

static int on_header_value(http_parser *p, const char *at, size_t len)
{
    ifd_cli_http_conn_t *c = p->data;
    if (!c->hdr_value) {
        c->hdr_value = true;
        const char *f = c->field.data ? c->field.data : "";
        c->hdr = strcasecmp(f, "content-type") == 0 ? 1 : strcasecmp(f, "retry-after") == 0 ? 2 : 0;
    }
    if (c->hdr == 1)
        append_capped(c->content_type, sizeof(c->content_type), at, len);
    else if (c->hdr == 2)
        append_capped(c->retry_after, sizeof(c->retry_after), at, len);
    return 0;
}

static int on_headers_complete(http_parser *p)
{
    ifd_cli_http_conn_t *c = p->data;
    c->status = (int)p->status_code;
    if (c->head_cb)
        c->head_cb(c->ud, c->status);
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t len)
{
    ifd_cli_http_conn_t *c = p->data;
    int rc = c->body_cb ? c->body_cb(c->ud, at, len) : ifd_buf_append(&c->body, at, len);
    if (rc < 0) {
        c->err = rc;
        return -1;
    }
    return 0;
}

static int on_message_complete(http_parser *p)
{
    ifd_cli_http_conn_t *c = p->data;
    c->state = IFD_CLI_HTTP_DONE;
    http_parser_pause(p, 1); /* ignore anything after the one response */
    return 0;
}

static const http_parser_settings parser_settings = {
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* ---- connection ------------------------------------------------------------------------------ */

void ifd_cli_http_conn_init(ifd_cli_http_conn_t *c)
{
    memset(c, 0, sizeof(*c));
    c->fd = -1;
}

void ifd_cli_http_conn_set_cb(ifd_cli_http_conn_t *c, ifd_cli_http_head_cb head,
                              ifd_cli_http_body_cb body, void *ud)
{
    c->head_cb = head;
    c->body_cb = body;
    c->ud = ud;
}

static int conn_fail(ifd_cli_http_conn_t *c, int err)
{
    c->state = IFD_CLI_HTTP_FAILED;
    c->err = err;
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
    return err;
}

int ifd_cli_http_conn_start(ifd_cli_http_conn_t *c, const ifd_cli_http_target_t *t,
                            const char *method, const char *path, const char *accept,
                            const char *body, size_t len)
{
    int rc;
    ifd_buf_clear(&c->out);
    c->out_off = 0;
    rc = ifd_buf_printf(&c->out,
                        "%s %s%s HTTP/1.1\r\nHost: %s\r\nUser-Agent: infer/%s\r\n"
                        "Connection: close\r\n",
                        method, t->prefix, path, t->host, IFD_VERSION);
    if (rc == 0 && accept)
        rc = ifd_buf_printf(&c->out, "Accept: %s\r\n", accept);
    if (rc == 0 && t->api_key[0])
        rc = ifd_buf_printf(&c->out, "Authorization: Bearer %s\r\n", t->api_key);
    if (rc == 0 && body)
        rc = ifd_buf_printf(&c->out, "Content-Type: application/json\r\nContent-Length: %zu\r\n",
                            len);
    if (rc == 0)
        rc = ifd_buf_append(&c->out, "\r\n", 2);
    if (rc == 0 && body)
        rc = ifd_buf_append(&c->out, body, len);
    if (rc < 0)
        return conn_fail(c, rc);

    http_parser_init(&c->parser, HTTP_RESPONSE);
    c->parser.data = c;
    c->status = 0;
    c->err = 0;
    c->content_type[0] = c->retry_after[0] = '\0';
    c->hdr_value = true;

    int domain = t->tcp ? t->addr.ss_family : AF_UNIX;
    c->fd = socket(domain, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        return conn_fail(c, -errno);
    if (t->tcp) {
        rc = connect(c->fd, (const struct sockaddr *)&t->addr, t->addrlen);
    } else {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        memcpy(sa.sun_path, t->path, strlen(t->path) + 1);
        rc = connect(c->fd, (const struct sockaddr *)&sa, sizeof(sa));
    }
    if (rc < 0 && errno == EINPROGRESS) {
        c->state = IFD_CLI_HTTP_CONNECTING;
        return 0;
    }
    if (rc < 0) /* a Unix socket whose backlog is full answers EAGAIN: treat as refused */
        return conn_fail(c, errno == EAGAIN ? -ECONNREFUSED : -errno);
    c->state = IFD_CLI_HTTP_SENDING;
    return 0;
}

int ifd_cli_http_conn_fd(const ifd_cli_http_conn_t *c)
{
    return c->fd;
}

short ifd_cli_http_conn_events(const ifd_cli_http_conn_t *c)
{
    switch (c->state) {
    case IFD_CLI_HTTP_CONNECTING:
        return POLLOUT;
    case IFD_CLI_HTTP_SENDING:
        return POLLOUT | POLLIN;
    case IFD_CLI_HTTP_RECEIVING:
        return POLLIN;
    default:
        return 0;
    }
}

/* Feeds n bytes (n == 0: EOF) to the parser. 1 done, 0 more, error. */
static int conn_parse(ifd_cli_http_conn_t *c, const char *buf, size_t n)
{
    size_t used = http_parser_execute(&c->parser, &parser_settings, buf, n);
    if (c->state == IFD_CLI_HTTP_DONE)
        return 1;
    if (n == 0) /* EOF before the response was complete (whatever the parser thinks) */
        return conn_fail(c, c->err < 0 ? c->err : IFD_ECLOSED);
    enum http_errno he = HTTP_PARSER_ERRNO(&c->parser);
    if (he != HPE_OK || used != n) {
        if (c->err < 0)
            return conn_fail(c, c->err); /* a callback's error */
        return conn_fail(c, IFD_EFORMAT);
    }
    return 0;
}

static int conn_read(ifd_cli_http_conn_t *c)
{
    char buf[16384];
    for (;;) {
        ssize_t n = read(c->fd, buf, sizeof(buf));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                return 0;
            if (errno == ECONNRESET)
                return conn_parse(c, NULL, 0);
            return conn_fail(c, -errno);
        }
        int rc = conn_parse(c, buf, (size_t)n);
        if (rc != 0)
            return rc;
        if (n == 0) /* unreachable: conn_parse(…, 0) never returns 0 */
            return conn_fail(c, IFD_ECLOSED);
    }
}

int ifd_cli_http_conn_io(ifd_cli_http_conn_t *c, short revents)
{
    if (c->state == IFD_CLI_HTTP_DONE)
        return 1;
    if (c->state == IFD_CLI_HTTP_FAILED)
        return c->err;
    if (c->state == IFD_CLI_HTTP_CONNECTING) {
        if (!(revents & (POLLOUT | POLLERR | POLLHUP)))
            return 0;
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
            return conn_fail(c, -errno);
        if (soerr != 0)
            return conn_fail(c, -soerr);
        c->state = IFD_CLI_HTTP_SENDING;
        revents = POLLOUT;
    }
    if (revents & (POLLIN | POLLHUP | POLLERR)) {
        int rc = conn_read(c);
        if (rc != 0)
            return rc;
    }
    if (c->state == IFD_CLI_HTTP_SENDING && (revents & POLLOUT)) {
        while (c->out_off < c->out.len) {
            ssize_t n =
                send(c->fd, c->out.data + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == EAGAIN)
                    return 0;
                if (errno == EPIPE || errno == ECONNRESET) {
                    /* The peer stopped reading: it may have answered early (413). */
                    c->state = IFD_CLI_HTTP_RECEIVING;
                    ifd_buf_free(&c->out);
                    return conn_read(c);
                }
                return conn_fail(c, -errno);
            }
            c->out_off += (size_t)n;
        }
        c->state = IFD_CLI_HTTP_RECEIVING;
        ifd_buf_free(&c->out);
        c->out_off = 0;
    }
    return 0;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int ifd_cli_http_conn_wait(ifd_cli_http_conn_t *c, int timeout_ms, volatile sig_atomic_t *stop)
{
    int64_t last = now_ms();
    for (;;) {
        if (c->state == IFD_CLI_HTTP_DONE)
            return 0;
        if (c->state == IFD_CLI_HTTP_FAILED)
            return c->err;
        if (stop && *stop)
            return IFD_ECANCELED;
        int wait = 1000;
        if (timeout_ms > 0) {
            int64_t left = last + timeout_ms - now_ms();
            if (left <= 0)
                return IFD_ETIMEDOUT;
            if (left < wait)
                wait = (int)left;
        }
        struct pollfd pfd = {.fd = c->fd, .events = ifd_cli_http_conn_events(c)};
        int n = poll(&pfd, 1, wait);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return conn_fail(c, -errno);
        }
        if (n == 0)
            continue;
        last = now_ms();
        int rc = ifd_cli_http_conn_io(c, pfd.revents);
        if (rc < 0)
            return rc;
    }
}

void ifd_cli_http_conn_close(ifd_cli_http_conn_t *c)
{
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
    ifd_buf_free(&c->out);
    ifd_buf_free(&c->field);
    ifd_buf_free(&c->body);
}

int ifd_cli_http_fetch(const ifd_cli_http_target_t *t, const char *method, const char *path,
                       const char *body, size_t len, int timeout_ms, int *status, ifd_buf_t *out)
{
    ifd_cli_http_conn_t c;
    ifd_cli_http_conn_init(&c);
    int rc = ifd_cli_http_conn_start(&c, t, method, path, NULL, body, len);
    if (rc == 0)
        rc = ifd_cli_http_conn_wait(&c, timeout_ms, NULL);
    if (rc == 0) {
        *status = c.status;
        *out = c.body;
        c.body = (ifd_buf_t)IFD_BUF_INIT;
        if (!out->data && ifd_buf_append(out, "", 0) < 0)
            rc = IFD_ENOMEM;
    }
    ifd_cli_http_conn_close(&c);
    return rc;
}
