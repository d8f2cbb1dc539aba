/*
 * test_httpframe.c — the strict HTTP/1.1 framing checker (daemon/httpframe.h):
 * a table of requests, each with the status it must get (0 = accepted) and,
 * when accepted, where it must end; every case is also fed one byte at a
 * time and must give the same answer; pipelined requests end one by one.
 */
#include "testutil.h"

#include "daemon/httpframe.h"

#include <string.h>

typedef struct {
    const char *req;
    int status;  /* 0: accepted */
    int end_off; /* accepted: bytes up to the end of the request (-1: all) */
} ifd__case_t;

#define H11 "Host: x\r\n"

static const ifd__case_t ifd__cases[] = {
    /* accepted */
    {"GET /health HTTP/1.1\r\n" H11 "\r\n", 0, -1},
    {"GET /health HTTP/1.0\r\n\r\n", 0, -1}, /* 1.0 needs no Host */
    {"\r\n\r\nGET / HTTP/1.1\r\n" H11 "\r\n", 0, -1},
    {"POST /x HTTP/1.1\r\n" H11 "Content-Length: 5\r\n\r\nhello", 0, -1},
    {"POST /x HTTP/1.1\r\n" H11 "content-length:   5  \r\n\r\nhello", 0, -1},
    {"POST /x HTTP/1.1\r\n" H11 "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 0, -1},
    {"POST /x HTTP/1.1\r\n" H11 "Transfer-Encoding: CHUNKED\r\n\r\n5;a=b\r\nhello\r\n0\r\n\r\n", 0,
     -1},
    {"POST /x HTTP/1.1\r\n" H11 "Transfer-Encoding: chunked\r\n\r\nA\r\n0123456789\r\n0\r\n\r\n", 0,
     -1},
    {"GET /a?b=c HTTP/1.1\r\n" H11 "X-Thing: \x80\xff ok\t\r\n\r\n", 0, -1},
    {"GET / HTTP/1.1\r\n" H11 "\r\nGARBAGE", 0, 27}, /* ends before the next request */
    {"POST /x HTTP/1.1\r\n" H11 "Content-Length: 0\r\n\r\n", 0, -1},
    /* the failures of issue 17 */
    {"POST /x HTTP/1.1\r\n" H11 "Content-Length : 5\r\n\r\nhello", 400, 0},
    {"POST /x HTTP/1.1\r\n" H11 "Transfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n", 400, 0},
    {"POST /x HTTP/1.1\r\n" H11 "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r0\r\n\r\n", 400, 0},
    {"POST /x HTTP/1.1\r\n" H11 "Transfer-Encoding: identity, chunked\r\n\r\n0\r\n\r\n", 501, 0},
    {"GET /health HTTP/9.9\r\n" H11 "\r\n", 505, 0},
    {"GET /health HTTP/2.0\r\n" H11 "\r\n", 505, 0},
    {"GET /health HTTP/1.2\r\n" H11 "\r\n", 505, 0},
    {"GET /health\r\n\r\n", 400, 0},
    {"GET /health HTTP/1.1x\r\n\r\n", 400, 0},
    {"GET /health http/1.1\r\n\r\n", 400, 0},
    /* more smuggling material */
    {"POST /x HTTP/1.1\r\n" H11 "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400, 0},
    {"POST /x HTTP/1.1\r\n" H11 "Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello", 400, 0},
    {"POST /x HTTP/1.1\r\n" H11 "Content-Length: 5, 5\r\n\r\nhello", 400, 0},
    {"POST /x HTTP/1.1\r\n" H11 "Content-Length: +5\r\n\r\nhello", 400, 0},
    {"POST /x HTTP/1.1\r\n" H11 "Content-Length: 1234567890123456789\r\n\r\n", 400, 0},
    {"POST /x HTTP/1.1\r\n" H11 "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
     501, 0},
    {"POST /x HTTP/1.1\r\n" H11 "Transfer-Encoding: gzip\r\n\r\n", 501, 0},
    {"POST /x HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, 0},
    {"GET / HTTP/1.1\r\n" H11 "X-A: b\r\n c\r\n\r\n", 400, 0}, /* obs-fold */
    {"GET / HTTP/1.1\r\n \r\n" H11 "\r\n", 400, 0},
    {"GET / HTTP/1.1\r\n" H11 "X-A: b\nX-B: c\r\n\r\n", 400, 0}, /* bare LF */
    {"GET / HTTP/1.1\r\n" H11 "X-A: b\rX-B: c\r\n\r\n", 400, 0}, /* bare CR */
    {"GET / HTTP/1.1\n" H11 "\r\n", 400, 0},
    {"GET / HTTP/1.1\r\n" H11 "X-A: b\x01\r\n\r\n", 400, 0}, /* control byte */
    {"GET / HTTP/1.1\r\n" H11 "X-A: b\x7f\r\n\r\n", 400, 0},
    {"GET / HTTP/1.1\r\n" H11 "X(A): b\r\n\r\n", 400, 0}, /* not a token */
    {"GET / HTTP/1.1\r\n" H11 ": b\r\n\r\n", 400, 0},
    {"GET / HTTP/1.1\r\n\r\n", 400, 0},            /* no Host */
    {"GET / HTTP/1.1\r\n" H11 H11 "\r\n", 400, 0}, /* two */
    {"GET  / HTTP/1.1\r\n" H11 "\r\n", 400, 0},
    {"GET /\x01 HTTP/1.1\r\n" H11 "\r\n", 400, 0},
    {"GET / x HTTP/1.1\r\n" H11 "\r\n", 400, 0},
    {"G@T / HTTP/1.1\r\n" H11 "\r\n", 400, 0},
    {" GET / HTTP/1.1\r\n" H11 "\r\n", 400, 0},
    {"\x00GET / HTTP/1.1\r\n\r\n", 400, 0},
    {"POST /x HTTP/1.1\r\n" H11 "Transfer-Encoding: chunked\r\n\r\nZ\r\n", 400, 0},
    {"POST /x HTTP/1.1\r\n" H11 "Transfer-Encoding: chunked\r\n\r\n\r\n", 400, 0},
    {"POST /x HTTP/1.1\r\n" H11 "Transfer-Encoding: chunked\r\n\r\n5x\r\n", 400, 0},
    {"POST /x HTTP/1.1\r\n" H11 "Transfer-Encoding: chunked\r\n\r\n1000000000000000\r\n", 400, 0},
    {"POST /x HTTP/1.1\r\n" H11 "Transfer-Encoding: chunked\r\n\r\n0\r\nX-T: 1\r\n\r\n", 400, 0},
    {"POST /x HTTP/1.1\r\n" H11 "Transfer-Encoding: chunked\r\n\r\n1;\x01\r\n", 400, 0},
};

/* Feeds req whole (or byte by byte); returns bytes accepted, fills f. */
static size_t feed(ifd_httpframe_t *f, const char *req, size_t len, bool bytewise)
{
    ifd_httpframe_init(f);
    if (!bytewise)
        return ifd_httpframe_feed(f, req, len);
    size_t total = 0;
    for (size_t i = 0; i < len; i++) {
        size_t n = ifd_httpframe_feed(f, req + i, 1);
        total += n;
        if (n == 0)
            break;
    }
    return total;
}

START_TEST(test_cases)
{
    const ifd__case_t *k = &ifd__cases[_i];
    size_t len = strlen(k->req);
    if (k->req[0] == '\0') /* the case that starts with a NUL byte */
        len = 1 + strlen(k->req + 1);
    for (int bw = 0; bw < 2; bw++) {
        ifd_httpframe_t f;
        size_t n = feed(&f, k->req, len, bw);
        ck_assert_msg(f.status == k->status, "case %d (%s) %s: status %d (%s), wanted %d", _i,
                      k->req, bw ? "bytewise" : "whole", f.status, f.why ? f.why : "", k->status);
        if (k->status) {
            ck_assert_ptr_nonnull(f.why);
            ck_assert(!f.done);
            ck_assert_uint_lt(n, len);
            ck_assert_uint_eq(ifd_httpframe_feed(&f, k->req + n, len - n), 0); /* stays failed */
        } else {
            ck_assert_msg(f.done, "case %d not done", _i);
            ck_assert_uint_eq(n, k->end_off < 0 ? len : (size_t)k->end_off);
        }
    }
}
END_TEST

START_TEST(test_pipelined_and_partial)
{
    const char *two = "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
                      "POST /y HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                      "3\r\ndef\r\n0\r\n\r\n";
    size_t len = strlen(two), first;
    ifd_httpframe_t f;
    ifd_httpframe_init(&f);
    size_t n = ifd_httpframe_feed(&f, two, len);
    ck_assert(f.done && !f.status);
    first = n;
    ck_assert_uint_eq(first, strlen("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"));
    ck_assert_uint_eq(ifd_httpframe_feed(&f, two + n, len - n), 0); /* done until reset */
    ifd_httpframe_reset(&f);
    n = ifd_httpframe_feed(&f, two + first, len - first);
    ck_assert(f.done && !f.status && f.chunked);
    ck_assert_uint_eq(first + n, len);
    /* a partial request: everything accepted, not done */
    ifd_httpframe_init(&f);
    const char *part = "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc";
    ck_assert_uint_eq(ifd_httpframe_feed(&f, part, strlen(part)), strlen(part));
    ck_assert(!f.done && !f.status);
    ck_assert_uint_eq(f.remain, 7);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("httpframe");
    TCase *tc = tcase_create("httpframe");
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, test_cases, 0, (int)(sizeof ifd__cases / sizeof ifd__cases[0]));
    tcase_add_test(tc, test_pipelined_and_partial);
    suite_add_tcase(s, tc);
    return ifd_test_run(s);
}
