/*
 * test_utf8.c — common/utf8: every scalar value round-trips through
 * put/check/get; surrogates, overlongs, values past U+10FFFF, stray
 * continuation bytes and truncations are classified with the maximal
 * subpart Unicode specifies, checked on fixed and random bytes against a
 * reference written from the definition (prefix sets of all encodings;
 * naive decode, re-encode and compare).
 */
#include "testutil.h"

#include "utf8.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Check's asserts record a mark point each (a pipe write in fork mode), so
 * the million-value loop counts mismatches and asserts once. */
START_TEST(test_every_scalar_round_trips)
{
    long bad = 0;
    uint32_t first_bad = 0;
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF)
            continue;
        uint8_t b[4];
        size_t n = ifd_utf8_put(b, cp), len = 0;
        size_t want = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
        bool ok = n == want && ifd_utf8_check(b, n) == (int)n;
        for (size_t k = 1; k < n; k++) /* every proper prefix is unfinished */
            ok = ok && ifd_utf8_check(b, k) == 0;
        ok = ok && ifd_utf8_get(b, n, &len) == cp && len == n;
        if (!ok && !bad++)
            first_bad = cp;
    }
    ck_assert_msg(bad == 0, "%ld code points fail to round-trip, first U+%04X", bad, first_bad);
}
END_TEST

/* Reference, from the definition. prefix[k-1] marks every k-byte prefix
 * (k ≤ 3) of some scalar value's encoding; a complete sequence of length m
 * is one whose naive bit-decode re-encodes to the same m bytes. */
static uint8_t *prefix[3];

static void ref_init(void)
{
    for (int k = 0; k < 3; k++)
        prefix[k] = calloc((size_t)1 << (8 * (k + 1) - 3), 1);
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF)
            continue;
        uint8_t b[4];
        size_t m = ifd_utf8_put(b, cp);
        uint32_t key = 0;
        for (size_t k = 0; k < m && k < 3; k++) {
            key = key << 8 | b[k];
            prefix[k][key >> 3] |= (uint8_t)(1u << (key & 7));
        }
    }
}

static size_t ref_valid_prefix(const uint8_t *p, size_t n, size_t *complete)
{
    size_t best = 0;
    uint32_t key = 0;
    for (size_t k = 0; k < 3 && k < n; k++) {
        key = key << 8 | p[k];
        if (prefix[k][key >> 3] & (1u << (key & 7)))
            best = k + 1;
        else
            break;
    }
    size_t m = p[0] < 0x80 ? 1 : p[0] >= 0xF0 ? 4 : p[0] >= 0xE0 ? 3 : p[0] >= 0xC0 ? 2 : 0;
    *complete = 0;
    if (m && m <= n) {
        uint32_t cp = p[0] & (0xFFu >> (m == 1 ? 1 : m + 1));
        for (size_t i = 1; i < m; i++)
            cp = cp << 6 | (p[i] & 0x3F);
        uint8_t b[4];
        bool scalar = cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
        if (scalar && ifd_utf8_put(b, cp) == m && !memcmp(b, p, m))
            *complete = m;
    }
    return best;
}

START_TEST(test_invalid_maximal_subpart)
{
    static const uint8_t cases[][4] = {
        {0x80},
        {0xBF},
        {0xC0, 0x80},
        {0xC1, 0xBF},
        {0xE0, 0x80, 0x80},
        {0xED, 0xA0, 0x80},
        {0xF0, 0x80, 0x80, 0x80},
        {0xF4, 0x90, 0x80, 0x80},
        {0xF5, 0x80},
        {0xFF},
        {0xE2, 0x82, 0x41},
        {0xF0, 0x9F, 0x98, 0x41},
        {0xC3, 0x41},
        {0xE2, 0x41},
    };
    ref_init();
    srand(7);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0] + 20000; c++) {
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
            IFD_TASSERT_CMP(k, ==, (int)complete);
        } else {
            IFD_TASSERT_CMP(k, <, 0);
            IFD_TASSERT_CMP(-k, ==, pre ? (int)pre : 1);
            size_t len;
            IFD_TASSERT_CMP(ifd_utf8_get(p, 4, &len), ==, 0xFFFFFFFFu);
            IFD_TASSERT_CMP(len, ==, 1);
        }
    }
}
END_TEST

/* Expected strings from Python: bytes.decode("utf-8", errors="replace"). */
START_TEST(test_sanitize_like_python)
{
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"plain", "plain"},
        {"a\xff"
         "b",
         "a\xef\xbf\xbd"
         "b"},
        {"x\xe2\x82", "x\xef\xbf\xbd"},
        {"\xf0\x9f\x98\x41", "\xef\xbf\xbd"
                             "A"},
        {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xc3\xa9\xe6\x97\xa5", "\xc3\xa9\xe6\x97\xa5"},
        {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = strlen(cases[i].in);
        char out[64];
        size_t m = ifd_utf8_sanitize(out, cases[i].in, n);
        ck_assert_uint_le(m, 3 * n);
        ck_assert_msg(m == strlen(cases[i].want) && !memcmp(out, cases[i].want, m), "case %zu", i);
    }
}
END_TEST

/* Characters of valid UTF-8: the bytes that are not continuation bytes. */
static size_t lead_bytes(const char *p, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((uint8_t)p[i] & 0xC0) != 0x80;
    return c;
}

/* ifd_utf8_count is the character count of what ifd_utf8_sanitize writes,
 * on fixed cases (unfinished tails included) and on random bytes. */
START_TEST(test_count_matches_sanitize)
{
    static const char *const fixed[] = {
        "",         "plain",    "a\xffz",       "x\xe2\x82", "\xf0\x9f\x98\x41", "\xed\xa0\x80",
        "\xc3\xa9", "\xc0\xaf", "\xf0\x9f\x98",
    };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        size_t n = strlen(fixed[i]);
        char out[64];
        size_t m = ifd_utf8_sanitize(out, fixed[i], n);
        ck_assert_msg(ifd_utf8_count(fixed[i], n) == lead_bytes(out, m), "case %zu", i);
    }
    srand(11);
    long bad = 0;
    for (int t = 0; t < 20000; t++) {
        char in[16], out[48];
        size_t n = (size_t)(rand() % 16);
        for (size_t i = 0; i < n; i++)
            in[i] = (char)(rand() % 3 ? 0x80 + rand() % 0x80 : rand() % 0x80);
        size_t m = ifd_utf8_sanitize(out, in, n);
        bad += ifd_utf8_count(in, n) != lead_bytes(out, m);
    }
    ck_assert_msg(bad == 0, "%ld random texts counted differently", bad);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("utf8");
    ifd_test_case(s, "utf8", 60,
                  IFD_TESTS(test_every_scalar_round_trips, test_invalid_maximal_subpart,
                            test_sanitize_like_python, test_count_matches_sanitize));
    return ifd_test_run(s);
}
