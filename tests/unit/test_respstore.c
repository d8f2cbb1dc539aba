/*
 * test_respstore.c — the Responses store (daemon/respstore.h): put, get,
 * replace, delete; the entry and byte limits with least-recently-used
 * eviction (a get refreshes); an entry over the byte limit alone; limits
 * lowered between puts; a limit of 0 empties it; many ids (table growth)
 * against a plain array model of the recency order; the daemon's keep and
 * lookup under the configuration's limits (made at the first keep, freed
 * once a reload turned the store off); owners: another owner's id is not
 * found (get, delete) and not refreshed; eviction takes the largest
 * owner's oldest, so a flood evicts only the flooder's entries (and a model
 * of that rule under random operations by five owners).
 */
#include "testutil.h"

#include "daemon/respstore.h"
#include "error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BIG ((size_t)1 << 30)
#define ME  "uid:1000" /* the owner of the single-owner cases */

static int put(ifd_respstore_t *s, size_t me, size_t mb, const char *id, const char *resp,
               const char *conv)
{
    return ifd_respstore_put(s, me, mb, ME, id, resp, strlen(resp), conv, strlen(conv));
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
    ck_assert_ptr_null(ifd_respstore_get(s, ME, "resp_a"));
    ck_assert_int_eq(put(s, 10, BIG, "resp_a", "{\"id\":\"resp_a\"}", "[1]"), 0);
    const ifd_respstore_entry_t *e = ifd_respstore_get(s, ME, "resp_a");
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
    ck_assert_str_eq(ifd_respstore_get(s, ME, "resp_a")->response, "x");
    /* lengths are taken as given: embedded text past them is not copied */
    ck_assert_int_eq(ifd_respstore_put(s, 10, BIG, ME, "resp_b", "abcdef", 3, "[9]x", 3), 0);
    ck_assert_str_eq(ifd_respstore_get(s, ME, "resp_b")->response, "abc");
    ck_assert_str_eq(ifd_respstore_get(s, ME, "resp_b")->conversation, "[9]");
    ck_assert(ifd_respstore_delete(s, ME, "resp_a"));
    ck_assert(!ifd_respstore_delete(s, ME, "resp_a"));
    ck_assert_ptr_null(ifd_respstore_get(s, ME, "resp_a"));
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
    ck_assert_ptr_nonnull(ifd_respstore_get(s, ME, "a"));
    ck_assert_int_eq(put(s, 3, BIG, "d", "4", ""), 0);
    ck_assert_ptr_null(ifd_respstore_get(s, ME, "b"));
    ck_assert_ptr_nonnull(ifd_respstore_get(s, ME, "a"));
    ck_assert_ptr_nonnull(ifd_respstore_get(s, ME, "c"));
    ck_assert_ptr_nonnull(ifd_respstore_get(s, ME, "d"));
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
    ck_assert_ptr_nonnull(ifd_respstore_get(s, ME, "e"));
    ck_assert_ptr_nonnull(ifd_respstore_get(s, ME, "d")); /* the newest small one stays */
    ck_assert_ptr_null(ifd_respstore_get(s, ME, "a"));
    ck_assert_ptr_null(ifd_respstore_get(s, ME, "c"));
    /* over the byte limit alone: refused, the others kept, an older one of its id gone */
    ck_assert_int_eq(put(s, 100, one - 1, "e", body, ""), IFD_ETOOBIG);
    ck_assert_ptr_null(ifd_respstore_get(s, ME, "e"));
    ck_assert_ptr_nonnull(ifd_respstore_get(s, ME, "d"));
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
            const ifd_respstore_entry_t *e = ifd_respstore_get(s, ME, id);
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
        ck_assert_int_eq(ifd_respstore_delete(s, ME, id), in);
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
    ck_assert_ptr_null(ifd_respstore_lookup(&s, &cfg, ME, "resp_a")); /* nothing made yet */
    ck_assert_ptr_null(s);
    ifd_respstore_keep(&s, &cfg, ME, "resp_a", "{\"a\":1}", 7, "[1]", 3);
    ck_assert_ptr_nonnull(s);
    const ifd_respstore_entry_t *e = ifd_respstore_lookup(&s, &cfg, ME, "resp_a");
    ck_assert_ptr_nonnull(e);
    ck_assert_str_eq(e->conversation, "[1]");
    ifd_respstore_keep(&s, &cfg, ME, "resp_b", "b", 1, "[]", 2);
    ifd_respstore_keep(&s, &cfg, ME, "resp_c", "c", 1, "[]", 2); /* over 2 entries: a goes */
    ck_assert_ptr_null(ifd_respstore_lookup(&s, &cfg, ME, "resp_a"));
    ck_assert_ptr_nonnull(ifd_respstore_lookup(&s, &cfg, ME, "resp_c"));
    /* too big alone: not kept, logged, the others stay */
    char big[101];
    memset(big, 'x', 100);
    big[100] = 0;
    cfg.responses_store_bytes = 200;
    ifd_respstore_keep(&s, &cfg, ME, "resp_d", big, 100, "[]", 2);
    ck_assert_ptr_null(ifd_respstore_lookup(&s, &cfg, ME, "resp_d"));
    ck_assert_ptr_nonnull(ifd_respstore_lookup(&s, &cfg, ME, "resp_c"));
    /* a reload turns it off: freed at the next use, keep or lookup */
    cfg.responses_store_entries = 0;
    ck_assert(!ifd_respstore_enabled(&cfg));
    ck_assert_ptr_null(ifd_respstore_lookup(&s, &cfg, ME, "resp_c"));
    ck_assert_ptr_null(s);
    cfg.responses_store_entries = 2;
    cfg.responses_store_bytes = 1 << 20;
    ifd_respstore_keep(&s, &cfg, ME, "resp_e", "e", 1, "[]", 2);
    ck_assert_ptr_nonnull(s);
    cfg.responses_store_bytes = 0;
    ifd_respstore_keep(&s, &cfg, ME, "resp_f", "f", 1, "[]", 2);
    ck_assert_ptr_null(s);
    ifd_respstore_destroy(s);
}
END_TEST

/* Owners: another client's id is as unknown as one never stored, for get
 * and delete alike, and its get leaves the owner's recency as it was. */
START_TEST(test_owner_only)
{
    ifd_respstore_t *s;
    ck_assert_int_eq(ifd_respstore_create(&s), 0);
    ck_assert_int_eq(ifd_respstore_put(s, 2, BIG, "uid:1", "resp_1", "r1", 2, "[]", 2), 0);
    ck_assert_int_eq(ifd_respstore_put(s, 2, BIG, "uid:1", "resp_2", "r2", 2, "[]", 2), 0);
    ck_assert_ptr_null(ifd_respstore_get(s, "uid:2", "resp_1"));
    ck_assert_ptr_null(ifd_respstore_get(s, "key:1", "resp_1"));
    ck_assert(!ifd_respstore_delete(s, "uid:2", "resp_1"));
    const ifd_respstore_entry_t *e = ifd_respstore_get(s, "uid:1", "resp_2");
    ck_assert_ptr_nonnull(e);
    ck_assert_str_eq(e->owner, "uid:1");
    /* uid:2's get did not refresh resp_1: it is still uid:1's oldest */
    ck_assert_ptr_null(ifd_respstore_get(s, "uid:2", "resp_1"));
    ck_assert_int_eq(ifd_respstore_put(s, 2, BIG, "uid:1", "resp_3", "r3", 2, "[]", 2), 0);
    ck_assert_ptr_null(ifd_respstore_get(s, "uid:1", "resp_1"));
    ck_assert_ptr_nonnull(ifd_respstore_get(s, "uid:1", "resp_2"));
    ck_assert(ifd_respstore_delete(s, "uid:1", "resp_2"));
    size_t n, b;
    ifd_respstore_owner_stats(s, "uid:1", &n, &b);
    ck_assert_uint_eq(n, 1);
    ifd_respstore_owner_stats(s, "uid:2", &n, &b);
    ck_assert_uint_eq(n + b, 0);
    ifd_respstore_destroy(s);
}
END_TEST

/* A flood by one owner evicts only its own entries while the other holds
 * less; the largest owner's oldest goes first (bytes, then entries); a new
 * entry that makes its owner the largest with nothing older is not kept. */
START_TEST(test_fair_eviction)
{
    ifd_respstore_t *s;
    ck_assert_int_eq(ifd_respstore_create(&s), 0);
    char big[2001];
    memset(big, 'v', 2000);
    big[2000] = 0;
    enum { ME_ = 50, MB = 64 * 1024 };
    ck_assert_int_eq(ifd_respstore_put(s, ME_, MB, "uid:1", "resp_victim", "secret", 6, "[]", 2),
                     0);
    for (int i = 0; i < 10000; i++) {
        char id[32];
        snprintf(id, sizeof id, "resp_flood%d", i);
        ck_assert_int_eq(
            ifd_respstore_put(s, ME_, MB, "uid:2", id, big, i % 3 ? 2000 : 10, "[]", 2), 0);
    }
    const ifd_respstore_entry_t *e = ifd_respstore_get(s, "uid:1", "resp_victim");
    ck_assert_ptr_nonnull(e);
    ck_assert_str_eq(e->response, "secret");
    size_t n, b, n2, b2;
    uint64_t ev;
    ifd_respstore_stats(s, &n, &b, &ev);
    ck_assert_uint_le(n, ME_);
    ck_assert_uint_le(b, MB);
    ck_assert_uint_gt(ev, 9000);
    ifd_respstore_owner_stats(s, "uid:2", &n2, &b2);
    ck_assert_uint_eq(n2 + 1, n);
    /* the entry limit binds too: 50 tiny entries of uid:2, then 10 of uid:1 */
    ifd_respstore_destroy(s);
    ck_assert_int_eq(ifd_respstore_create(&s), 0);
    for (int i = 0; i < 60; i++) {
        char id[32];
        snprintf(id, sizeof id, "resp_t%d", i);
        ck_assert_int_eq(ifd_respstore_put(s, 4, MB, i < 50 ? "uid:2" : "uid:1", id, "x", 1, "", 0),
                         0);
    }
    /* equal bytes per entry: the owner holding more loses its oldest, so
     * the two settle at 2 and 2, each keeping its newest */
    ifd_respstore_owner_stats(s, "uid:1", &n, &b);
    ifd_respstore_owner_stats(s, "uid:2", &n2, &b2);
    ck_assert_uint_eq(n, 2);
    ck_assert_uint_eq(n2, 2);
    ck_assert_ptr_nonnull(ifd_respstore_get(s, "uid:1", "resp_t59"));
    ck_assert_ptr_nonnull(ifd_respstore_get(s, "uid:1", "resp_t58"));
    ck_assert_ptr_nonnull(ifd_respstore_get(s, "uid:2", "resp_t49"));
    ck_assert_ptr_nonnull(ifd_respstore_get(s, "uid:2", "resp_t48"));
    ifd_respstore_destroy(s);
    /* a newcomer larger than all the others together, in a full store: it
     * is its owner's only entry and the largest, so it is not kept */
    ck_assert_int_eq(ifd_respstore_create(&s), 0);
    ck_assert_int_eq(ifd_respstore_put(s, 10, 3000, "uid:1", "resp_a", "a", 1, "", 0), 0);
    ck_assert_int_eq(ifd_respstore_put(s, 10, 3000, "uid:2", "resp_b", big, 1000, "", 0), 0);
    ck_assert_int_eq(ifd_respstore_put(s, 10, 3000, "uid:3", "resp_c", big, 2000, "", 0),
                     IFD_ETOOBIG);
    ck_assert_ptr_null(ifd_respstore_get(s, "uid:3", "resp_c"));
    ck_assert_ptr_nonnull(ifd_respstore_get(s, "uid:1", "resp_a"));
    ck_assert_ptr_nonnull(ifd_respstore_get(s, "uid:2", "resp_b"));
    ifd_respstore_stats(s, &n, &b, &ev);
    ck_assert_uint_eq(n, 2);
    ck_assert_uint_eq(ev, 0);
    ifd_respstore_destroy(s);
}
END_TEST

/* Random puts, gets and deletes by five owners against a model. Each owner's
 * entries count a prime number of bytes above the entry limit, so two owners
 * never hold the same bytes and the model's choice is the store's. */
START_TEST(test_owners_against_model)
{
    enum { OWNERS = 5, CAP = 40, IDS = 300, OPS = 20000 };
    static const size_t k_bytes[OWNERS] = {211, 223, 227, 229, 233};
    const size_t max_bytes = 3000;
    struct {
        int owner; /* -1: not in the store */
        uint64_t used;
    } m[IDS];
    for (int i = 0; i < IDS; i++)
        m[i].owner = -1;
    ifd_respstore_t *s;
    ck_assert_int_eq(ifd_respstore_create(&s), 0);
    char body[128];
    memset(body, 'b', sizeof body);
    srand(11);
    uint64_t clock = 0;
    for (int op = 0; op < OPS; op++) {
        int k = rand() % IDS, o = rand() % OWNERS, what = rand() % 4;
        char id[16], owner[16];
        snprintf(id, sizeof id, "resp_%04d", k); /* 9 bytes: entry bytes = 140 + response */
        snprintf(owner, sizeof owner, "uid:%d", o);
        if (what == 0) {
            const ifd_respstore_entry_t *e = ifd_respstore_get(s, owner, id);
            ck_assert_int_eq(e != NULL, m[k].owner == o);
            if (e)
                m[k].used = ++clock;
            continue;
        }
        if (what == 1) {
            bool had = m[k].owner == o;
            ck_assert_int_eq(ifd_respstore_delete(s, owner, id), had);
            if (had)
                m[k].owner = -1;
            continue;
        }
        int rc = ifd_respstore_put(s, CAP, max_bytes, owner, id, body, k_bytes[o] - 140, "", 0);
        m[k].owner = o;
        m[k].used = ++clock;
        int expect = 0;
        for (;;) {
            size_t n = 0, bytes = 0, ob[OWNERS] = {0};
            for (int i = 0; i < IDS; i++) {
                if (m[i].owner >= 0) {
                    n++;
                    bytes += k_bytes[m[i].owner];
                    ob[m[i].owner] += k_bytes[m[i].owner];
                }
            }
            if (n <= CAP && bytes <= max_bytes)
                break;
            int big = 0;
            for (int x = 1; x < OWNERS; x++)
                if (ob[x] > ob[big])
                    big = x;
            int old = -1;
            for (int i = 0; i < IDS; i++)
                if (m[i].owner == big && (old < 0 || m[i].used < m[old].used))
                    old = i;
            m[old].owner = -1;
            if (old == k) {
                expect = IFD_ETOOBIG;
                break;
            }
        }
        ck_assert_int_eq(rc, expect);
        for (int x = 0; x < OWNERS; x++) {
            size_t n = 0, b = 0, mn = 0;
            snprintf(owner, sizeof owner, "uid:%d", x);
            ifd_respstore_owner_stats(s, owner, &n, &b);
            for (int i = 0; i < IDS; i++)
                mn += m[i].owner == x;
            ck_assert_uint_eq(n, mn);
            ck_assert_uint_eq(b, mn * k_bytes[x]);
        }
    }
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
    tcase_add_test(tc, test_owner_only);
    tcase_add_test(tc, test_fair_eviction);
    tcase_add_test(tc, test_owners_against_model);
    suite_add_tcase(s, tc);
    return ifd_test_run(s);
}
