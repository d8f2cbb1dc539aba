/*
 * test_respstore.c — the Responses store (daemon/respstore.h): put, get,
 * replace, delete; the entry and byte limits with least-recently-used
 * eviction (a get refreshes); an entry over the byte limit alone; limits
 * lowered between puts; a limit of 0 empties it; many ids (table growth)
 * against a plain array model of the recency order; the daemon's keep and
 * lookup under the configuration's limits (made at the first keep, freed
 * once a reload turned the store off).
 */
#include "testutil.h"

#include "daemon/respstore.h"
#include "error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BIG ((size_t)1 << 30)

static int put(ifd_respstore_t *s, size_t me, size_t mb, const char *id, const char *resp,
               const char *conv)
{
    return ifd_respstore_put(s, me, mb, id, resp, strlen(resp), conv, strlen(conv));
}

static size_t count(const ifd_respstore_t *s, size_t *bytes)
{
    size_t n, b;
    uint64_t ev;
    ifd_respstore_stats(s, &n, &b, &ev);
    if (bytes)
        *bytes = b;
    return n;
}

START_TEST(test_basic)
{
    ifd_respstore_t *s;
    ck_assert_int_eq(ifd_respstore_create(&s), 0);
    ck_assert_ptr_null(ifd_respstore_get(s, "resp_a"));
    ck_assert_int_eq(put(s, 10, BIG, "resp_a", "{\"id\":\"resp_a\"}", "[1]"), 0);
    const ifd_respstore_entry_t *e = ifd_respstore_get(s, "resp_a");
    ck_assert_ptr_nonnull(e);
    ck_assert_str_eq(e->id, "resp_a");
    ck_assert_str_eq(e->response, "{\"id\":\"resp_a\"}");
    ck_assert_uint_eq(e->response_len, 15);
    ck_assert_str_eq(e->conversation, "[1]");
    size_t b;
    ck_assert_uint_eq(count(s, &b), 1);
    ck_assert_uint_eq(b, 6 + 15 + 3 + 3 + IFD_RESPSTORE_ENTRY_OVERHEAD);
    /* replace */
    ck_assert_int_eq(put(s, 10, BIG, "resp_a", "x", "[]"), 0);
    ck_assert_uint_eq(count(s, NULL), 1);
    ck_assert_str_eq(ifd_respstore_get(s, "resp_a")->response, "x");
    /* lengths are taken as given: embedded text past them is not copied */
    ck_assert_int_eq(ifd_respstore_put(s, 10, BIG, "resp_b", "abcdef", 3, "[9]x", 3), 0);
    ck_assert_str_eq(ifd_respstore_get(s, "resp_b")->response, "abc");
    ck_assert_str_eq(ifd_respstore_get(s, "resp_b")->conversation, "[9]");
    ck_assert(ifd_respstore_delete(s, "resp_a"));
    ck_assert(!ifd_respstore_delete(s, "resp_a"));
    ck_assert_ptr_null(ifd_respstore_get(s, "resp_a"));
    ck_assert_uint_eq(count(s, NULL), 1);
    ifd_respstore_destroy(s);
    ifd_respstore_destroy(NULL);
}
END_TEST

START_TEST(test_limits_lru)
{
    ifd_respstore_t *s;
    ck_assert_int_eq(ifd_respstore_create(&s), 0);
    /* entry limit 3: a, b, c; get(a) makes b the oldest; d evicts b */
    ck_assert_int_eq(put(s, 3, BIG, "a", "1", ""), 0);
    ck_assert_int_eq(put(s, 3, BIG, "b", "2", ""), 0);
    ck_assert_int_eq(put(s, 3, BIG, "c", "3", ""), 0);
    ck_assert_ptr_nonnull(ifd_respstore_get(s, "a"));
    ck_assert_int_eq(put(s, 3, BIG, "d", "4", ""), 0);
    ck_assert_ptr_null(ifd_respstore_get(s, "b"));
    ck_assert_ptr_nonnull(ifd_respstore_get(s, "a"));
    ck_assert_ptr_nonnull(ifd_respstore_get(s, "c"));
    ck_assert_ptr_nonnull(ifd_respstore_get(s, "d"));
    size_t n, b;
    uint64_t ev;
    ifd_respstore_stats(s, &n, &b, &ev);
    ck_assert_uint_eq(n, 3);
    ck_assert_uint_eq(ev, 1);
    /* byte limit: room for two entries of this size; order now a, c, d (d newest) */
    const size_t one = 1 + 100 + 0 + 3 + IFD_RESPSTORE_ENTRY_OVERHEAD;
    char body[101];
    memset(body, 'x', 100);
    body[100] = 0;
    ck_assert_int_eq(put(s, 100, 2 * one, "e", body, ""), 0);
    ifd_respstore_stats(s, &n, &b, &ev);
    ck_assert_uint_le(b, 2 * one);
    ck_assert_ptr_nonnull(ifd_respstore_get(s, "e"));
    ck_assert_ptr_nonnull(ifd_respstore_get(s, "d")); /* the newest small one stays */
    ck_assert_ptr_null(ifd_respstore_get(s, "a"));
    ck_assert_ptr_null(ifd_respstore_get(s, "c"));
    /* over the byte limit alone: refused, the others kept, an older one of its id gone */
    ck_assert_int_eq(put(s, 100, one - 1, "e", body, ""), IFD_ETOOBIG);
    ck_assert_ptr_null(ifd_respstore_get(s, "e"));
    ck_assert_ptr_nonnull(ifd_respstore_get(s, "d"));
    /* a limit of 0 empties it */
    ck_assert_int_eq(put(s, 0, BIG, "f", "1", ""), IFD_ETOOBIG);
    ck_assert_uint_eq(count(s, &b), 0);
    ck_assert_uint_eq(b, 0);
    ifd_respstore_destroy(s);
}
END_TEST

/* Many ids through a small limit against a model: an array, most recent last. */
START_TEST(test_many_against_model)
{
    enum { CAP = 37, N = 3000 };
    ifd_respstore_t *s;
    ck_assert_int_eq(ifd_respstore_create(&s), 0);
    int model[CAP], nm = 0;
    srand(7);
    for (int i = 0; i < N; i++) {
        char id[32], resp[32];
        int k = rand() % 200;
        snprintf(id, sizeof id, "resp_%d", k);
        snprintf(resp, sizeof resp, "r%d", i);
        int at = -1;
        for (int j = 0; j < nm; j++)
            if (model[j] == k)
                at = j;
        if (rand() % 3 == 0) { /* get */
            const ifd_respstore_entry_t *e = ifd_respstore_get(s, id);
            ck_assert_int_eq(e != NULL, at >= 0);
            if (at >= 0) {
                memmove(model + at, model + at + 1, (size_t)(nm - at - 1) * sizeof *model);
                model[nm - 1] = k;
            }
            continue;
        }
        ck_assert_int_eq(put(s, CAP, BIG, id, resp, "[]"), 0);
        if (at >= 0) {
            memmove(model + at, model + at + 1, (size_t)(nm - at - 1) * sizeof *model);
            nm--;
        }
        if (nm == CAP) {
            memmove(model, model + 1, (size_t)(nm - 1) * sizeof *model);
            nm--;
        }
        model[nm++] = k;
        ck_assert_uint_eq(count(s, NULL), (size_t)nm);
    }
    for (int k = 0; k < 200; k++) {
        char id[32];
        snprintf(id, sizeof id, "resp_%d", k);
        int in = 0;
        for (int j = 0; j < nm; j++)
            in |= model[j] == k;
        ck_assert_int_eq(ifd_respstore_delete(s, id), in);
    }
    ck_assert_uint_eq(count(s, NULL), 0);
    ifd_respstore_destroy(s);
}
END_TEST

/* The daemon's store: ifd_respstore_keep / _lookup under a configuration. */
START_TEST(test_keep_lookup)
{
    ifd_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.responses_store_entries = 2;
    cfg.responses_store_bytes = 1 << 20;
    ck_assert(ifd_respstore_enabled(&cfg));
    ifd_respstore_t *s = NULL;
    ck_assert_ptr_null(ifd_respstore_lookup(&s, &cfg, "resp_a")); /* nothing made yet */
    ck_assert_ptr_null(s);
    ifd_respstore_keep(&s, &cfg, "resp_a", "{\"a\":1}", 7, "[1]", 3);
    ck_assert_ptr_nonnull(s);
    const ifd_respstore_entry_t *e = ifd_respstore_lookup(&s, &cfg, "resp_a");
    ck_assert_ptr_nonnull(e);
    ck_assert_str_eq(e->conversation, "[1]");
    ifd_respstore_keep(&s, &cfg, "resp_b", "b", 1, "[]", 2);
    ifd_respstore_keep(&s, &cfg, "resp_c", "c", 1, "[]", 2); /* over 2 entries: a goes */
    ck_assert_ptr_null(ifd_respstore_lookup(&s, &cfg, "resp_a"));
    ck_assert_ptr_nonnull(ifd_respstore_lookup(&s, &cfg, "resp_c"));
    /* too big alone: not kept, logged, the others stay */
    char big[101];
    memset(big, 'x', 100);
    big[100] = 0;
    cfg.responses_store_bytes = 200;
    ifd_respstore_keep(&s, &cfg, "resp_d", big, 100, "[]", 2);
    ck_assert_ptr_null(ifd_respstore_lookup(&s, &cfg, "resp_d"));
    ck_assert_ptr_nonnull(ifd_respstore_lookup(&s, &cfg, "resp_c"));
    /* a reload turns it off: freed at the next use, keep or lookup */
    cfg.responses_store_entries = 0;
    ck_assert(!ifd_respstore_enabled(&cfg));
    ck_assert_ptr_null(ifd_respstore_lookup(&s, &cfg, "resp_c"));
    ck_assert_ptr_null(s);
    cfg.responses_store_entries = 2;
    cfg.responses_store_bytes = 1 << 20;
    ifd_respstore_keep(&s, &cfg, "resp_e", "e", 1, "[]", 2);
    ck_assert_ptr_nonnull(s);
    cfg.responses_store_bytes = 0;
    ifd_respstore_keep(&s, &cfg, "resp_f", "f", 1, "[]", 2);
    ck_assert_ptr_null(s);
    ifd_respstore_destroy(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("respstore");
    TCase *tc = tcase_create("respstore");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_basic);
    tcase_add_test(tc, test_limits_lru);
    tcase_add_test(tc, test_many_against_model);
    tcase_add_test(tc, test_keep_lookup);
    suite_add_tcase(s, tc);
    return ifd_test_run(s);
}
