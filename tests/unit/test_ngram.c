/*
 * test_ngram.c — the n-gram proposer (worker/ngram.h): hand-made histories
 * (longest n wins, most recent occurrence, proposals cut at k and at the
 * history's end, the bounds on n), and random histories over small
 * alphabets against a deliberately plain reference of the definition.
 */
#include "testutil.h"

#include "worker/ngram.h"

#include <stdlib.h>
#include <string.h>

static int32_t propose(const int32_t *h, int32_t n, int32_t lo, int32_t hi, int32_t k, int32_t *out)
{
    return ifd_ngram_propose(h, n, lo, hi, k, out);
}

START_TEST(test_longest_and_most_recent)
{
    /* suffix "1 2 3": "1 2 3" occurs at 0 (then 9) and "2 3" at 5 (then 7) */
    const int32_t h[] = {1, 2, 3, 9, 4, 2, 3, 7, 5, 1, 2, 3};
    int32_t out[8];
    ck_assert_int_eq(propose(h, 12, 1, 3, 4, out), 4);
    ck_assert_int_eq(out[0], 9);
    ck_assert_int_eq(out[1], 4);
    ck_assert_int_eq(out[3], 3);
    /* max_n 2: "2 3" most recently at 5, followed by 7 5 1 2 */
    ck_assert_int_eq(propose(h, 12, 1, 2, 4, out), 4);
    ck_assert_int_eq(out[0], 7);
    ck_assert_int_eq(out[3], 2);
    /* min_n 4: nothing of length 4 repeats */
    ck_assert_int_eq(propose(h, 12, 4, 5, 4, out), 0);
}
END_TEST

START_TEST(test_cut_at_history_end_and_k)
{
    const int32_t h[] = {5, 6, 5}; /* "5" at 0, followed by 6 5 */
    int32_t out[8];
    ck_assert_int_eq(propose(h, 3, 1, 4, 8, out), 2);
    ck_assert_int_eq(out[0], 6);
    ck_assert_int_eq(out[1], 5);
    ck_assert_int_eq(propose(h, 3, 1, 4, 1, out), 1);
    ck_assert_int_eq(out[0], 6);
    ck_assert_int_eq(propose(h, 3, 1, 4, 0, out), 0);
    /* a run: the suffix "7 7" occurs at 1 (most recent with a token after it) */
    const int32_t r[] = {7, 7, 7, 7};
    ck_assert_int_eq(propose(r, 4, 2, 2, 5, out), 1);
    ck_assert_int_eq(out[0], 7);
}
END_TEST

START_TEST(test_degenerate)
{
    const int32_t h[] = {1, 2};
    int32_t out[4];
    ck_assert_int_eq(propose(h, 1, 1, 3, 4, out), 0);
    ck_assert_int_eq(propose(h, 2, 1, 3, 4, out), 0); /* 2 never occurred before */
    ck_assert_int_eq(propose(NULL, 0, 1, 3, 4, out), 0);
    ck_assert_int_eq(propose(h, 2, 3, 2, 4, out), 0); /* min > max */
    const int32_t t[] = {3, 3};
    ck_assert_int_eq(propose(t, 2, 0, 100, 4, out), 1); /* bounds clamped */
    ck_assert_int_eq(out[0], 3);
}
END_TEST

/* The definition, plainly: every n from max down, every start from the
 * latest down, compared element by element. */
static int32_t reference(const int32_t *h, int32_t nh, int32_t lo, int32_t hi, int32_t k,
                         int32_t *out)
{
    if (lo < 1)
        lo = 1;
    if (hi > IFD_NGRAM_MAX_N)
        hi = IFD_NGRAM_MAX_N;
    for (int32_t n = hi; n >= lo; n--) {
        if (n > nh - 1)
            continue;
        for (int32_t j = nh - 1 - n; j >= 0; j--) {
            int eq = 1;
            for (int32_t i = 0; i < n; i++)
                eq &= h[j + i] == h[nh - n + i];
            if (!eq)
                continue;
            int32_t m = 0;
            while (m < k && j + n + m < nh) {
                out[m] = h[j + n + m];
                m++;
            }
            return m;
        }
    }
    return 0;
}

START_TEST(test_random_against_reference)
{
    uint64_t x = 88172645463325252ull;
    int32_t h[300], a[16], b[16];
    for (int it = 0; it < 20000; it++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const int32_t alpha = 2 + (int32_t)(x % 6);
        const int32_t nh = 1 + (int32_t)((x >> 8) % 300);
        const int32_t lo = (int32_t)((x >> 20) % 4), hi = lo + (int32_t)((x >> 24) % 5);
        const int32_t k = (int32_t)((x >> 28) % 12);
        for (int32_t i = 0; i < nh; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            h[i] = (int32_t)(x % (uint64_t)alpha);
        }
        const int32_t na = propose(h, nh, lo, hi, k, a), nb = reference(h, nh, lo, hi, k, b);
        ck_assert_int_eq(na, nb);
        ck_assert_int_eq(memcmp(a, b, (size_t)na * sizeof *a), 0);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ngram");
    ifd_test_case(s, "propose", 60,
                  IFD_TESTS(test_longest_and_most_recent, test_cut_at_history_end_and_k,
                            test_degenerate, test_random_against_reference));
    return ifd_test_run(s);
}
