/*
 * test_image_cache.c — the worker's image embedding cache (worker/image_cache.h):
 * hits and misses by the 128-bit hash (both words count), the byte bound with
 * least-recently-used eviction (a get refreshes), replacement, an entry over
 * the bound, a zero bound, and many entries through the hash table's growth
 * against a simple model of the LRU.
 */
#include "testutil.h"

#include "error.h"
#include "worker/image_cache.h"

#include <stdlib.h>
#include <string.h>

#define N 64 /* floats per entry: 256 bytes */

static void rows_of(float *r, int k)
{
    for (int i = 0; i < N; i++)
        r[i] = (float)(k * 1000 + i);
}

static bool holds(ifd_image_cache_t *c, uint64_t lo, uint64_t hi, int k)
{
    const uint64_t h[2] = {lo, hi};
    const float *r = ifd_image_cache_get(c, h, N);
    float want[N];
    rows_of(want, k);
    return r && memcmp(r, want, sizeof want) == 0;
}

static void put(ifd_image_cache_t *c, uint64_t lo, uint64_t hi, int k)
{
    const uint64_t h[2] = {lo, hi};
    float r[N];
    rows_of(r, k);
    ck_assert_int_eq(ifd_image_cache_put(c, h, r, N), 0);
}

START_TEST(test_hits_misses_lru)
{
    ifd_image_cache_t *c;
    ck_assert_int_eq(ifd_image_cache_create(&c, 3 * N * sizeof(float)), 0); /* three entries */
    ifd_image_cache_stats_t st;
    ck_assert(!holds(c, 1, 1, 1));
    put(c, 1, 1, 1);
    put(c, 2, 1, 2);
    put(c, 1, 2, 3); /* the same low word, another high word */
    ck_assert(holds(c, 1, 1, 1));
    ck_assert(holds(c, 2, 1, 2));
    ck_assert(holds(c, 1, 2, 3));
    ck_assert(!holds(c, 2, 2, 0));
    const uint64_t h11[2] = {1, 1};
    ck_assert_ptr_null(ifd_image_cache_get(c, h11, N - 1)); /* another size: a miss */
    ifd_image_cache_stats(c, &st);
    ck_assert_uint_eq(st.hits, 3);
    ck_assert_uint_eq(st.misses, 3);
    ck_assert_uint_eq(st.entries, 3);
    ck_assert_uint_eq(st.bytes, 3 * N * sizeof(float));
    /* (1,1) is the least recently used after the gets above: refresh it, then
     * a fourth entry evicts (2,1) */
    ck_assert(holds(c, 1, 1, 1));
    put(c, 3, 3, 4);
    ck_assert(!holds(c, 2, 1, 2));
    ck_assert(holds(c, 1, 1, 1));
    ck_assert(holds(c, 1, 2, 3));
    ck_assert(holds(c, 3, 3, 4));
    ifd_image_cache_stats(c, &st);
    ck_assert_uint_eq(st.evictions, 1);
    ck_assert_uint_eq(st.entries, 3);
    /* replacing keeps one entry with the new rows */
    put(c, 3, 3, 5);
    ck_assert(holds(c, 3, 3, 5));
    ifd_image_cache_stats(c, &st);
    ck_assert_uint_eq(st.entries, 3);
    ck_assert_uint_eq(st.bytes, 3 * N * sizeof(float));
    /* an entry over the bound is not kept, and evicts nothing */
    float big[4 * N] = {0};
    const uint64_t hb[2] = {9, 9};
    ck_assert_int_eq(ifd_image_cache_put(c, hb, big, 4 * N), 0);
    ck_assert_ptr_null(ifd_image_cache_get(c, hb, 4 * N));
    ifd_image_cache_stats(c, &st);
    ck_assert_uint_eq(st.entries, 3);
    ifd_image_cache_destroy(c);
    ifd_image_cache_destroy(NULL);

    ck_assert_int_eq(ifd_image_cache_create(&c, 0), 0); /* keeps nothing */
    put(c, 1, 1, 1);
    ck_assert(!holds(c, 1, 1, 1));
    ifd_image_cache_destroy(c);
}
END_TEST

/* 2,000 random puts and gets over 100 keys with room for 20 entries, against
 * a list in recency order. */
START_TEST(test_against_model)
{
    enum { KEYS = 100, ROOM = 20 };
    ifd_image_cache_t *c;
    ck_assert_int_eq(ifd_image_cache_create(&c, ROOM * N * sizeof(float)), 0);
    int order[KEYS], n = 0; /* keys held, most recent first */
    int val[KEYS] = {0};
    srand(11);
    for (int it = 0; it < 2000; it++) {
        const int k = rand() % KEYS, op = rand() % 2;
        int at = -1;
        for (int i = 0; i < n; i++)
            if (order[i] == k)
                at = i;
        const uint64_t lo = 0x9e3779b97f4a7c15ull * (uint64_t)(k + 1), hi = (uint64_t)k;
        if (op == 0) {
            ck_assert_msg(holds(c, lo, hi, val[k]) == (at >= 0), "it %d key %d", it, k);
            if (at < 0)
                continue;
        } else {
            val[k] = it;
            put(c, lo, hi, it);
            if (at < 0)
                at = n < ROOM ? n++ : ROOM - 1; /* the last one is evicted */
        }
        memmove(order + 1, order, (size_t)at * sizeof *order);
        order[0] = k;
    }
    ifd_image_cache_stats_t st;
    ifd_image_cache_stats(c, &st);
    ck_assert_uint_eq(st.entries, (uint64_t)n);
    ifd_image_cache_destroy(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("image_cache");
    ifd_test_case(s, "cache", 30, IFD_TESTS(test_hits_misses_lru, test_against_model));
    return ifd_test_run(s);
}
