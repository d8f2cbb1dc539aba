/*
 * test_kvhost.c — the host-RAM tier (common/kvpool/kvhost.h): random
 * blocks put under a hash chain come back byte for byte; a hash with other
 * tokens or another salt is a miss; the bound evicts the least recently
 * used (a get refreshes); the pool's counters and gauges follow, and the
 * gauges go back to zero when the tier is destroyed; bad parameters are
 * refused.
 */
#include "testutil.h"

#include "error.h"
#include "kvpool/kvhost.h"
#include "kvpool/kvpool.h"

#include <stdlib.h>
#include <string.h>

#define BS   4
#define DATA 96

static ifd_kvpool_t *make_pool(void)
{
    ifd_kvpool_params_t p = ifd_kvpool_default_params();
    p.n_layers = 2, p.n_kv_heads = 1, p.head_dim = 8, p.dtype = IFD_KV_F32;
    p.block_size = BS, p.n_blocks = 8, p.n_workers = 2, p.fingerprint = 0xbeefULL;
    ifd_kvpool_t *pool = NULL;
    ck_assert_int_eq(ifd_kvpool_create(&p, &pool), 0);
    return pool;
}

static uint64_t ctr(ifd_kvpool_t *pool, ifd_kvtier_ctr_t c)
{
    uint64_t v[IFD_KVTIER_COUNT];
    ifd_kvpool_tier_get(pool, v);
    return v[c];
}

/* n blocks of a chain: tokens t[b*BS..], hashes h[b], data d[b][DATA]. */
static void chain(int n, uint64_t salt, int32_t *t, ifd_kvhash_t *h, uint8_t (*d)[DATA],
                  unsigned seed)
{
    srand(seed);
    ifd_kvhash_t prev = {0, 0};
    for (int b = 0; b < n; b++) {
        for (int i = 0; i < BS; i++)
            t[b * BS + i] = rand() % 1000;
        h[b] = prev = ifd_kvpool_hash_block(&prev, salt, t + b * BS, BS);
        for (int i = 0; i < DATA; i++)
            d[b][i] = (uint8_t)rand();
    }
}

static void put(ifd_kvhost_t *h, const ifd_kvhash_t *k, uint64_t salt, const int32_t *t,
                const uint8_t *d)
{
    void *buf = ifd_kvhost_put(h, k, salt, t);
    ck_assert_ptr_nonnull(buf);
    memcpy(buf, d, DATA);
}

START_TEST(test_roundtrip_and_misses)
{
    ifd_kvpool_t *pool = make_pool();
    ifd_kvhost_params_t p = {
        .max_bytes = 8 * DATA, .data_bytes = DATA, .block_size = BS, .pool = pool};
    ifd_kvhost_t *h = NULL;
    ck_assert_int_eq(ifd_kvhost_create(&p, &h), 0);
    int32_t t[6 * BS];
    ifd_kvhash_t k[6];
    uint8_t d[6][DATA];
    chain(6, 7, t, k, d, 1);
    for (int b = 0; b < 6; b++)
        put(h, &k[b], 7, t + b * BS, d[b]);
    ck_assert_int_eq(ifd_kvhost_blocks(h), 6);
    ck_assert_uint_eq(ifd_kvhost_bytes(h), 6 * DATA);
    for (int b = 5; b >= 0; b--) {
        const uint8_t *got = ifd_kvhost_get(h, &k[b], 7, t + b * BS);
        ck_assert_ptr_nonnull(got);
        ck_assert_int_eq(memcmp(got, d[b], DATA), 0);
    }
    /* the same hash with other tokens or another salt: a miss */
    int32_t other[BS];
    memcpy(other, t, sizeof other);
    other[BS - 1] ^= 1;
    ck_assert_ptr_null(ifd_kvhost_get(h, &k[0], 7, other));
    ck_assert_ptr_null(ifd_kvhost_get(h, &k[0], 8, t));
    ifd_kvhash_t none = {k[0].lo ^ 1, k[0].hi};
    ck_assert_ptr_null(ifd_kvhost_get(h, &none, 7, t));
    /* a put under the same key replaces the entry */
    uint8_t d2[DATA];
    memset(d2, 0x5a, DATA);
    put(h, &k[2], 7, t + 2 * BS, d2);
    ck_assert_int_eq(ifd_kvhost_blocks(h), 6);
    ck_assert_int_eq(memcmp(ifd_kvhost_get(h, &k[2], 7, t + 2 * BS), d2, DATA), 0);
    ck_assert_uint_eq(ctr(pool, IFD_KVTIER_HOST_HIT_BLOCKS), 7);
    ck_assert_uint_eq(ctr(pool, IFD_KVTIER_HOST_HIT_TOKENS), 7 * BS);
    ck_assert_uint_eq(ctr(pool, IFD_KVTIER_HOST_READ_BYTES), 7 * DATA);
    ck_assert_uint_eq(ctr(pool, IFD_KVTIER_HOST_WRITES), 7);
    ck_assert_uint_eq(ctr(pool, IFD_KVTIER_HOST_BLOCKS), 6);
    ck_assert_uint_eq(ctr(pool, IFD_KVTIER_HOST_BYTES), 6 * DATA);
    ck_assert_uint_eq(ctr(pool, IFD_KVTIER_HOST_CAPACITY), 8 * DATA);
    ifd_kvhost_forget(h, &k[3]);
    ck_assert_ptr_null(ifd_kvhost_get(h, &k[3], 7, t + 3 * BS));
    ck_assert_int_eq(ifd_kvhost_blocks(h), 5);
    ifd_kvhost_count_query(h, 12, true);
    ck_assert_uint_eq(ctr(pool, IFD_KVTIER_HOST_QUERY_TOKENS), 12);
    ck_assert_uint_eq(ctr(pool, IFD_KVTIER_HOST_MISSES), 1);
    ifd_kvhost_destroy(h);
    /* the gauges held this tier's share only */
    ck_assert_uint_eq(ctr(pool, IFD_KVTIER_HOST_BLOCKS), 0);
    ck_assert_uint_eq(ctr(pool, IFD_KVTIER_HOST_BYTES), 0);
    ck_assert_uint_eq(ctr(pool, IFD_KVTIER_HOST_CAPACITY), 0);
    ifd_kvpool_destroy(pool);
}
END_TEST

START_TEST(test_bound_evicts_lru)
{
    ifd_kvpool_t *pool = make_pool();
    /* 3.5 blocks: room for 3 */
    ifd_kvhost_params_t p = {
        .max_bytes = 3 * DATA + DATA / 2, .data_bytes = DATA, .block_size = BS, .pool = pool};
    ifd_kvhost_t *h = NULL;
    ck_assert_int_eq(ifd_kvhost_create(&p, &h), 0);
    int32_t t[5 * BS];
    ifd_kvhash_t k[5];
    uint8_t d[5][DATA];
    chain(5, 3, t, k, d, 2);
    for (int b = 0; b < 3; b++)
        put(h, &k[b], 3, t + b * BS, d[b]);
    ck_assert_ptr_nonnull(ifd_kvhost_get(h, &k[0], 3, t)); /* 0 is now the most recent */
    put(h, &k[3], 3, t + 3 * BS, d[3]);                    /* evicts 1 */
    ck_assert_ptr_null(ifd_kvhost_get(h, &k[1], 3, t + BS));
    put(h, &k[4], 3, t + 4 * BS, d[4]); /* evicts 2 */
    ck_assert_ptr_null(ifd_kvhost_get(h, &k[2], 3, t + 2 * BS));
    for (int b = 0; b < 5; b += (b == 0 ? 3 : 1)) {
        const uint8_t *got = ifd_kvhost_get(h, &k[b], 3, t + b * BS);
        ck_assert_ptr_nonnull(got);
        ck_assert_int_eq(memcmp(got, d[b], DATA), 0);
    }
    ck_assert_int_eq(ifd_kvhost_blocks(h), 3);
    ck_assert_uint_le(ifd_kvhost_bytes(h), p.max_bytes);
    ck_assert_uint_eq(ctr(pool, IFD_KVTIER_HOST_EVICTED), 2);
    ifd_kvhost_destroy(h);
    ifd_kvpool_destroy(pool);
}
END_TEST

START_TEST(test_bad_params)
{
    ifd_kvhost_t *h = NULL;
    ifd_kvhost_params_t p = {.max_bytes = DATA - 1, .data_bytes = DATA, .block_size = BS};
    ck_assert_int_eq(ifd_kvhost_create(&p, &h), IFD_EINVAL); /* not one block */
    p.max_bytes = DATA, p.block_size = 0;
    ck_assert_int_eq(ifd_kvhost_create(&p, &h), IFD_EINVAL);
    p.block_size = BS, p.data_bytes = 0;
    ck_assert_int_eq(ifd_kvhost_create(&p, &h), IFD_EINVAL);
    ck_assert_ptr_null(h);
    ifd_kvhost_destroy(NULL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kvhost");
    TCase *tc = tcase_create("kvhost");
    tcase_add_test(tc, test_roundtrip_and_misses);
    tcase_add_test(tc, test_bound_evicts_lru);
    tcase_add_test(tc, test_bad_params);
    suite_add_tcase(s, tc);
    return ifd_test_run(s);
}
