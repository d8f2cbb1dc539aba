/*
 * fuzz_http.c — HTTP request parsing as daemon/http.c does it: the strict
 * framing checker (daemon/httpframe.h) sees each byte first, http-parser
 * gets only what it accepted, and each complete request pauses the parser.
 * The input is a connection's byte stream, fed in pieces whose sizes come
 * from its first byte; each complete request's path goes through the API's
 * route table. Properties: no memory error; the checker and the
 * parser end every request at the same byte (the framing never disagrees);
 * a request the checker refused is never completed by the parser; the
 * callbacks' byte counts stay within the input.
 */
#include "fuzz.h"

#include "daemon/api.h"
#include "daemon/httpframe.h"

#include <http_parser.h>
#include <string.h>

typedef struct {
    size_t url, hdr, body;
    int complete;
    char path[512]; /* the current request's target, as much as fits */
    size_t path_len;
} ifd__counts_t;

static int ifd__on_url(http_parser *p, const char *at, size_t n)
{
    ifd__counts_t *c = p->data;
    c->url += n;
    for (size_t i = 0; i < n && c->path_len + 1 < sizeof c->path; i++)
        c->path[c->path_len++] = at[i];
    c->path[c->path_len] = '\0';
    return 0;
}

/* The route table on the request's path, as the API looks it up. */
static void ifd__route(ifd__counts_t *c, int method)
{
    char *q = strchr(c->path, '?');
    if (q)
        *q = '\0';
    bool known, open;
    int r = ifd_api_route_find(c->path, method, &known, &open);
    char allow[96];
    IFD_FUZZ_CHECK(ifd_api_route_allow(c->path, allow, sizeof allow) == 0);
    IFD_FUZZ_CHECK(r < 0 || known);
    IFD_FUZZ_CHECK(known == (allow[0] != '\0'));
    c->path_len = 0;
    c->path[0] = '\0';
}

static int ifd__on_hdr(http_parser *p, const char *at, size_t n)
{
    (void)at;
    ((ifd__counts_t *)p->data)->hdr += n;
    return 0;
}

static int ifd__on_body(http_parser *p, const char *at, size_t n)
{
    (void)at;
    ((ifd__counts_t *)p->data)->body += n;
    return 0;
}

/* as daemon/http.c: nothing is upgraded, so CONNECT and Upgrade: requests
 * are framed like any other */
static int ifd__on_headers_complete(http_parser *p)
{
    p->upgrade = 0;
    return 0;
}

static int ifd__on_complete(http_parser *p)
{
    ((ifd__counts_t *)p->data)->complete++;
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings ifd__settings = {
    .on_url = ifd__on_url,
    .on_header_field = ifd__on_hdr,
    .on_header_value = ifd__on_hdr,
    .on_headers_complete = ifd__on_headers_complete,
    .on_body = ifd__on_body,
    .on_message_complete = ifd__on_complete,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t piece = data[0] ? data[0] : size; /* 0: all at once */
    const char *in = (const char *)data + 1;
    size_t len = size - 1;
    ifd_httpframe_t f;
    ifd_httpframe_init(&f);
    http_parser p;
    ifd__counts_t cnt;
    memset(&cnt, 0, sizeof cnt);
    http_parser_init(&p, HTTP_REQUEST);
    p.data = &cnt;
    size_t off = 0, have = 0; /* parsed up to off; bytes "received" up to have */
    int requests = 0;
    while (have < len) {
        have = have + piece < len ? have + piece : len;
        while (off < have) {
            size_t ok = ifd_httpframe_feed(&f, in + off, have - off);
            size_t n = ok ? http_parser_execute(&p, &ifd__settings, in + off, ok) : 0;
            IFD_FUZZ_CHECK(n <= ok);
            off += n;
            enum http_errno err = HTTP_PARSER_ERRNO(&p);
            if (err == HPE_PAUSED) {
                /* the parser ended a request: the checker must have, at the same byte */
                IFD_FUZZ_CHECK(f.done && !f.status);
                IFD_FUZZ_CHECK(n == ok);
                ifd__route(&cnt, (int)p.method);
                http_parser_pause(&p, 0);
                ifd_httpframe_reset(&f);
                requests++;
                continue;
            }
            if (err != HPE_OK || f.status)
                return 0;            /* refused: the connection would get an error and close */
            IFD_FUZZ_CHECK(!f.done); /* the checker ended a request the parser did not */
            if (n < ok)
                return 0;
            break; /* everything received is parsed */
        }
    }
    IFD_FUZZ_CHECK(cnt.complete == requests);
    IFD_FUZZ_CHECK(cnt.url + cnt.hdr + cnt.body <= len);
    return 0;
}
