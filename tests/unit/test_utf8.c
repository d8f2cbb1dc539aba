/*
 * test_utf8.c — common/utf8: every scalar value round-trips through
 * put/check/get; surrogates, overlongs, values past U+10FFFF, stray
 * continuation bytes and truncations are classified with the maximal
 * subpart Unicode specifies, checked against an independent reference
 * (a decoder written from the definition: decode greedily, then re-encode
 * and compare).
 */
#include "testutil.h"

#include "utf8.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

START_TEST(test_every_scalar_round_trips)
{
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF)
            continue;
        uint8_t b[4];
        size_t n = ifd_utf8_put(b, cp);
        size_t want = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
        ck_assert_uint_eq(n, want);
        ck_assert_int_eq(ifd_utf8_check(b, n), (int)n);
        for (size_t k = 1; k < n; k++) /* every proper prefix is unfinished */
            ck_assert_int_eq(ifd_utf8_check(b, k), 0);
        size_t len;
        ck_assert_uint_eq(ifd_utf8_get(b, n, &len), cp);
        ck_assert_uint_eq(len, n);
    }
}
END_TEST

/* Reference: the longest prefix of p that is a prefix of some well-formed
 * sequence (found by trying all scalar values' encodings' prefixes). */
static size_t ref_valid_prefix(const uint8_t *p, size_t n, size_t *complete)
{
    size_t best = 0;
    *complete = 0;
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF)
            continue;
        uint8_t b[4];
        size_t m = ifd_utf8_put(b, cp);
        size_t k = 0;
        while (k < m && k < n && b[k] == p[k])
            k++;
        if (k == m)
            *complete = m;
        if (k > best)
            best = k;
    }
    return best;
}

START_TEST(test_invalid_maximal_subpart)
{
    static const uint8_t cases[][4] = {
        {0x80}, {0xBF}, {0xC0, 0x80}, {0xC1, 0xBF}, {0xE0, 0x80, 0x80}, {0xED, 0xA0, 0x80},
        {0xF0, 0x80, 0x80, 0x80}, {0xF4, 0x90, 0x80, 0x80}, {0xF5, 0x80}, {0xFF},
        {0xE2, 0x82, 0x41}, {0xF0, 0x9F, 0x98, 0x41}, {0xC3, 0x41}, {0xE2, 0x41},
    };
    srand(7);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0] + 200; c++) {
        uint8_t p[4];
        if (c < sizeof cases / sizeof cases[0]) {
            memcpy(p, cases[c], 4);
        } else {
            for (int i = 0; i < 4; i++)
                p[i] = (uint8_t)(0x80 + rand() % 0x80); /* mostly multi-byte */
            p[0] |= 0x40;
        }
        size_t complete, pre = ref_valid_prefix(p, 4, &complete);
        int k = ifd_utf8_check(p, 4);
        if (complete) {
            ck_assert_int_eq(k, (int)complete);
        } else {
            ck_assert_int_lt(k, 0);
            ck_assert_int_eq(-k, pre ? (int)pre : 1);
            size_t len;
            ck_assert_uint_eq(ifd_utf8_get(p, 4, &len), 0xFFFFFFFFu);
            ck_assert_uint_eq(len, 1);
        }
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("utf8");
    TCase *tc = tcase_create("utf8");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_every_scalar_round_trips);
    tcase_add_test(tc, test_invalid_maximal_subpart);
    suite_add_tcase(s, tc);
    return ifd_test_run(s);
}
