/*
 * test_outcheck.c — the output check off the loop (daemon/outcheck.h): a
 * check whose work is large (uniqueItems over 1,400 long strings that
 * differ only at their end: ~a million comparisons of 2 KiB) runs on the
 * thread pool while the loop goes on ticking a 1 ms timer, and its verdicts
 * equal those of ifd_schema_check_text called directly — valid, invalid
 * with its message, and over the work limit; several items (a choice's tool
 * calls) stop at the first that fails.
 */
#include "testutil.h"

#include "daemon/outcheck.h"
#include "error.h"
#include "grammar/schema_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

typedef struct {
    int calls, rc;
    char why[256];
    unsigned ticks_at_done;
} result_t;

static unsigned g_ticks;

static void tick_cb(uv_timer_t *t)
{
    (void)t;
    g_ticks++;
}

static void done_cb(ifd_outcheck_t *job, int rc, const ifd_outcheck_item_t *item, const char *why,
                    void *ud)
{
    (void)job;
    (void)item;
    result_t *r = ud;
    r->calls++;
    r->rc = rc;
    snprintf(r->why, sizeof r->why, "%s", why);
    r->ticks_at_done = g_ticks;
}

static void close_cb(uv_handle_t *h)
{
    (void)h;
}

/* A JSON array of k strings of len bytes, equal but for their last 4
 * characters (the index; the last two equal when dup). */
static char *long_array(int k, size_t len, bool dup)
{
    size_t cap = (size_t)k * (len + 4) + 8, n = 0;
    char *s = malloc(cap);
    s[n++] = '[';
    for (int i = 0; i < k; i++) {
        s[n++] = '"';
        memset(s + n, 'a', len - 4);
        n += len - 4;
        n += (size_t)sprintf(s + n, "%04d", dup && i == k - 1 ? i - 1 : i);
        s[n++] = '"';
        s[n++] = i + 1 < k ? ',' : ']';
    }
    s[n] = '\0';
    return s;
}

START_TEST(test_off_the_loop)
{
    json_error_t je;
    json_t *schema = json_loads("{\"type\":\"array\",\"uniqueItems\":true,\"items\":"
                                "{\"type\":\"string\",\"minLength\":2}}",
                                0, &je);
    ck_assert_ptr_nonnull(schema);
    char *texts[3] = {long_array(1400, 2048, false), long_array(1400, 2048, true),
                      long_array(1500, 2048, false)};
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    uv_timer_t timer;
    uv_timer_init(&loop, &timer);
    uv_timer_start(&timer, tick_cb, 1, 1);
    ifd_outcheck_t jobs[3];
    ifd_outcheck_item_t items[3];
    result_t res[3] = {{0}};
    for (int i = 0; i < 3; i++) {
        g_ticks = 0;
        items[i] = (ifd_outcheck_item_t){schema, texts[i], strlen(texts[i]), NULL};
        ck_assert_int_eq(ifd_outcheck_queue(&loop, &jobs[i], &items[i], 1, done_cb, &res[i]), 0);
        while (!res[i].calls)
            uv_run(&loop, UV_RUN_ONCE);
        /* the loop went on while the check ran: its timer fired */
        IFD_CHECK(res[i].ticks_at_done > 0, "text %d: the loop stalled during the check", i);
    }
    uv_close((uv_handle_t *)&timer, close_cb);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    /* the verdicts are the direct check's */
    for (int i = 0; i < 3; i++) {
        char why[256];
        int rc = ifd_schema_check_text(schema, texts[i], strlen(texts[i]), why, sizeof why);
        ck_assert_int_eq(res[i].calls, 1);
        ck_assert_int_eq(res[i].rc, rc);
        ck_assert_str_eq(res[i].why, why);
    }
    ck_assert_int_eq(res[0].rc, 0);
    ck_assert_int_eq(res[1].rc, IFD_EINVAL);
    ck_assert_ptr_nonnull(strstr(res[1].why, "items 1398 and 1399 are equal"));
    ck_assert_int_eq(res[2].rc, IFD_ETOOBIG); /* 1,500 items: past the million comparisons */
    for (int i = 0; i < 3; i++)
        free(texts[i]);
    json_decref(schema);
}
END_TEST

static void item_cb(ifd_outcheck_t *job, int rc, const ifd_outcheck_item_t *item, const char *why,
                    void *ud)
{
    (void)job;
    const ifd_outcheck_item_t **out = ud;
    out[0] = item;
    ck_assert_int_eq(rc, item ? IFD_EINVAL : 0);
    ck_assert(!item || strstr(why, "/n: not of type integer"));
}

/* Several items (a choice's tool calls): checked in order, the first that
 * fails named; all valid, none. */
START_TEST(test_items)
{
    json_error_t je;
    json_t *a = json_loads("{\"properties\":{\"n\":{\"type\":\"integer\"}}}", 0, &je);
    json_t *b = json_loads("{\"type\":\"object\"}", 0, &je);
    ifd_outcheck_item_t items[3] = {
        {b, "{}", 2, "first"}, {a, "{\"n\":\"x\"}", 9, "second"}, {a, "{\"n\":1}", 7, "third"}};
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    ifd_outcheck_t job;
    const ifd_outcheck_item_t *got[1] = {&items[2]};
    ck_assert_int_eq(ifd_outcheck_queue(&loop, &job, items, 3, item_cb, got), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_ptr_eq(got[0], &items[1]);
    ck_assert_int_eq(ifd_outcheck_queue(&loop, &job, items, 1, item_cb, got), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_ptr_null(got[0]);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    json_decref(a);
    json_decref(b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("outcheck");
    ifd_test_case(s, "outcheck", 60, IFD_TESTS(test_off_the_loop, test_items));
    return ifd_test_run(s);
}
