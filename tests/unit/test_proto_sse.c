/*
 * test_proto_sse.c — SSE framing (proto/sse.h): the writer's exact bytes,
 * payloads with newlines round-tripping through the parser, the parser on
 * CRLF, comments, event names, multi-line data and input split at every
 * byte, and its limit on unbounded lines.
 */
#include "testutil.h"

#include "error.h"
#include "proto/sse.h"

#include <stdlib.h>
#include <string.h>

START_TEST(test_writer_bytes)
{
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_sse_data(&b, "{\"a\":1}", 7), 0);
    ck_assert_str_eq(b.data, "data: {\"a\":1}\n\n");
    ifd_buf_clear(&b);
    ck_assert_int_eq(ifd_sse_data(&b, "one\ntwo\r\n\nthree", 15), 0);
    ck_assert_str_eq(b.data, "data: one\ndata: two\ndata: \ndata: three\n\n");
    ifd_buf_clear(&b);
    ck_assert_int_eq(ifd_sse_data(&b, "", 0), 0);
    ck_assert_str_eq(b.data, "data: \n\n");
    ifd_buf_clear(&b);
    ck_assert_int_eq(ifd_sse_comment(&b, "ping\nx"), 0);
    ck_assert_str_eq(b.data, ": ping x\n\n");
    ck_assert_int_eq(ifd_sse_done(&b), 0);
    ck_assert_str_eq(b.data, ": ping x\n\ndata: [DONE]\n\n");
    ifd_buf_free(&b);
}
END_TEST

/* Feeds `in` in pieces of `step` bytes and collects "event|data" strings. */
static void parse_all(const char *in, size_t len, size_t step, ifd_buf_t *out)
{
    ifd_sse_parser_t p;
    ifd_sse_parser_init(&p, 0);
    for (size_t i = 0; i < len; i += step) {
        size_t n = len - i < step ? len - i : step;
        ck_assert_int_eq(ifd_sse_parser_feed(&p, in + i, n), 0);
        ifd_sse_event_t ev;
        int rc;
        while ((rc = ifd_sse_parser_next(&p, &ev)) == 1) {
            ck_assert_uint_eq(strlen(ev.data), ev.len);
            ifd_buf_printf(out, "%s|%s;", ev.event, ev.data);
        }
        ck_assert_int_eq(rc, 0);
    }
    ifd_sse_parser_close(&p);
}

START_TEST(test_parser)
{
    const char *in = ": keep-alive\r\n"
                     "data: {\"x\": 1}\r\n\r\n"
                     "event: error\n"
                     "id: 7\n"
                     "retry: 100\n"
                     "data:a\n"
                     "data:  b\n"
                     "\n"
                     "\n"                /* blank line with no data: nothing */
                     "event: lonely\n\n" /* an event name alone is dropped */
                     "data\n\n"          /* field without colon: empty data */
                     "data: [DONE]\n\n"
                     "data: unterminated";
    size_t len = strlen(in);
    ifd_buf_t whole = IFD_BUF_INIT;
    parse_all(in, len, len, &whole);
    ck_assert_str_eq(whole.data, "|{\"x\": 1};error|a\n b;|;|[DONE];");
    for (size_t step = 1; step < 8; step++) {
        ifd_buf_t b = IFD_BUF_INIT;
        parse_all(in, len, step, &b);
        ck_assert_str_eq(b.data, whole.data);
        ifd_buf_free(&b);
    }
    ifd_buf_free(&whole);
}
END_TEST

START_TEST(test_round_trip)
{
    static const char *payloads[] = {"plain", "", "multi\nline\n", "\n\n", "x\r\ny"};
    static const char *expect[] = {"plain", "", "multi\nline\n", "\n\n", "x\ny"};
    ifd_buf_t b = IFD_BUF_INIT;
    for (size_t i = 0; i < 5; i++)
        ck_assert_int_eq(ifd_sse_data(&b, payloads[i], strlen(payloads[i])), 0);
    ifd_sse_parser_t p;
    ifd_sse_parser_init(&p, 0);
    ck_assert_int_eq(ifd_sse_parser_feed(&p, b.data, b.len), 0);
    for (size_t i = 0; i < 5; i++) {
        ifd_sse_event_t ev;
        ck_assert_int_eq(ifd_sse_parser_next(&p, &ev), 1);
        ck_assert_str_eq(ev.data, expect[i]);
    }
    ifd_sse_event_t ev;
    ck_assert_int_eq(ifd_sse_parser_next(&p, &ev), 0);
    ifd_sse_parser_close(&p);
    ifd_buf_free(&b);
}
END_TEST

START_TEST(test_limits)
{
    ifd_sse_parser_t p;
    ifd_sse_event_t ev;
    ifd_sse_parser_init(&p, 64);
    char line[100];
    memset(line, 'a', sizeof(line));
    /* A line that never ends. */
    ck_assert_int_eq(ifd_sse_parser_feed(&p, line, sizeof(line)), 0);
    ck_assert_int_eq(ifd_sse_parser_next(&p, &ev), IFD_ETOOBIG);
    ifd_sse_parser_close(&p);

    /* Many short data lines adding up past the limit. */
    ifd_sse_parser_init(&p, 64);
    for (int i = 0; i < 20; i++)
        ck_assert_int_eq(ifd_sse_parser_feed(&p, "data: 0123456\n", 14), 0);
    ck_assert_int_eq(ifd_sse_parser_next(&p, &ev), IFD_ETOOBIG);
    ifd_sse_parser_close(&p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("proto_sse");
    TCase *tc = tcase_create("sse");
    tcase_add_test(tc, test_writer_bytes);
    tcase_add_test(tc, test_parser);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_limits);
    suite_add_tcase(s, tc);
    return ifd_test_run(s);
}
