/* test_hash.c — common/hash.h against a brute-force reference: random
 * inserts, removals and replacements with few distinct hashes (long probe
 * runs, wrap-around at the end of the slots), growth, clear. */
#include "testutil.h"

#include "error.h"
#include "hash.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define N 4000

/* The values stored under hash, found by the table's walk, sorted. */
/* One of 97 hashes, keyed by k; their homes lie at the two ends of the
 * slots (tags 0xffffffc0.. and 0..32), so probe runs wrap around. */
static uint64_t few_hash(int k)
{
    uint32_t tag = (uint32_t)(ifd_hash_u64((uint64_t)k) % 97) + 0xffffffc0u;
    return (uint64_t)tag * 0x100000001ULL;
}

static int walk(const ifd_hash_t *h, uint64_t hv, int32_t *out)
{
    int n = 0;
    uint32_t it = ifd_hash_first(h, hv);
    for (int32_t v; (v = ifd_hash_next(h, hv, &it)) >= 0;)
        out[n++] = v;
    return n;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Every hash's walk finds exactly the reference's values for it (a walk may
 * also meet values of other hashes whose low 32 bits agree: none here). */
static void check_against(const ifd_hash_t *h, const uint64_t *hash_of, const int8_t *live)
{
    static int32_t got[N], want[N];
    uint32_t n_live = 0;
    for (int v = 0; v < N; v++)
        n_live += live[v] != 0;
    ck_assert_uint_eq(h->count, n_live);
    for (int k = 0; k < 64; k++) {
        uint64_t hv = few_hash(k);
        int ng = walk(h, hv, got), nw = 0;
        for (int v = 0; v < N; v++)
            if (live[v] && hash_of[v] == hv)
                want[nw++] = v;
        qsort(got, (size_t)ng, sizeof *got, cmp_i32);
        ck_assert_int_eq(ng, nw);
        for (int i = 0; i < ng; i++)
            ck_assert_int_eq(got[i], want[i]);
    }
}

START_TEST(test_hash_random_vs_reference)
{
    static uint64_t hash_of[N];
    static int8_t live[N];
    memset(live, 0, sizeof live);
    ifd_hash_t h;
    ck_assert_int_eq(ifd_hash_init(&h, 0), 0);
    ck_assert_int_eq(ifd_hash_next(&h, 5, &(uint32_t){0}), -1); /* empty, no slots */
    srand(7);
    for (int step = 0; step < 40000; step++) {
        int v = rand() % N;
        if (!live[v]) {
            hash_of[v] = few_hash(rand() % 64);
            ck_assert_int_eq(ifd_hash_insert(&h, hash_of[v], v), 0);
            live[v] = 1;
        } else if (rand() % 3) {
            ck_assert_int_eq(ifd_hash_remove(&h, hash_of[v], v), 0);
            ck_assert_int_eq(ifd_hash_remove(&h, hash_of[v], v), IFD_ENOTFOUND);
            live[v] = 0;
        } else {
            int w = rand() % N;
            if (!live[w]) {
                ck_assert_int_eq(ifd_hash_replace(&h, hash_of[v], v, w), 0);
                live[v] = 0;
                live[w] = 1;
                hash_of[w] = hash_of[v];
            }
        }
        if (step % 997 == 0)
            check_against(&h, hash_of, live);
    }
    check_against(&h, hash_of, live);
    ck_assert_uint_le((size_t)h.count * 2, (size_t)h.mask + 1);
    ifd_hash_clear(&h);
    memset(live, 0, sizeof live);
    check_against(&h, hash_of, live);
    ifd_hash_close(&h);
}
END_TEST

START_TEST(test_hash_strings_and_errors)
{
    static const char *words[] = {"alpha", "beta", "gamma", "delta", "", "alpha2"};
    ifd_hash_t h;
    ck_assert_int_eq(ifd_hash_init(&h, 3), 0);
    for (int32_t i = 0; i < 6; i++)
        ck_assert_int_eq(ifd_hash_insert(&h, ifd_hash_bytes(words[i], strlen(words[i])), i), 0);
    for (int32_t i = 0; i < 6; i++) {
        uint64_t hv = ifd_hash_bytes(words[i], strlen(words[i]));
        int32_t found = -1;
        uint32_t it = ifd_hash_first(&h, hv);
        for (int32_t v; (v = ifd_hash_next(&h, hv, &it)) >= 0;)
            if (strcmp(words[v], words[i]) == 0)
                found = v;
        ck_assert_int_eq(found, i);
    }
    ck_assert_int_eq(ifd_hash_insert(&h, 1, -1), IFD_EINVAL);
    ck_assert_int_eq(ifd_hash_replace(&h, 1, 0, -2), IFD_EINVAL);
    ck_assert_int_eq(ifd_hash_replace(&h, 1, 99, 3), IFD_ENOTFOUND);
    ck_assert_uint_ne(ifd_hash_bytes("a", 1), ifd_hash_bytes("b", 1));
    ifd_hash_close(&h);
    ifd_hash_close(&h); /* twice is fine */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hash");
    ifd_test_case(s, "core", 0,
                  IFD_TESTS(test_hash_random_vs_reference, test_hash_strings_and_errors));
    return ifd_test_run(s);
}
