/*
 * test_spec.c — the per-sequence speculation policy (worker/spec.h): a
 * request's setting over the engine's (defaults, overrides, crossing
 * bounds, ranges), the proposal length's adaptation and back-off, and
 * proposals cut to the caller's limit.
 */
#include "testutil.h"

#include "error.h"
#include "worker/spec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

START_TEST(test_resolve)
{
    ifd_spec_state_t st;
    const ifd_spec_params_t none = {IFD_SPEC_DEFAULT, 0, 0, 0};
    const ifd_spec_params_t eng = {IFD_SPEC_NGRAM, 6, 2, 5};
    ck_assert_int_eq(ifd_spec_resolve(&st, &none, &none, true, false), 0);
    ck_assert_int_eq(st.kmax, 0); /* the engine's default is off */
    ck_assert_int_eq(ifd_spec_resolve(&st, &none, &eng, true, false), 0);
    ck_assert(st.kmax == 6 && st.k == 6 && st.nmin == 2 && st.nmax == 5);
    ck_assert_int_eq(ifd_spec_resolve(&st, &none, &eng, false, false), 0);
    ck_assert_int_eq(st.kmax, 0); /* no KV cache: off */
    const ifd_spec_params_t off = {IFD_SPEC_OFF, 0, 0, 0};
    ck_assert_int_eq(ifd_spec_resolve(&st, &off, &eng, true, false), 0);
    ck_assert_int_eq(st.kmax, 0);
    const ifd_spec_params_t on = {IFD_SPEC_NGRAM, 0, 0, 0};
    ck_assert_int_eq(ifd_spec_resolve(&st, &on, &none, true, false), 0);
    ck_assert(st.kmax == IFD_SPEC_DEFAULT_TOKENS && st.nmin == 1 &&
              st.nmax == 4);                                 /* the built-in defaults */
    const ifd_spec_params_t lo7 = {IFD_SPEC_NGRAM, 3, 7, 0}; /* above the engine's max 5 */
    ck_assert_int_eq(ifd_spec_resolve(&st, &lo7, &eng, true, false), 0);
    ck_assert(st.kmax == 3 && st.nmin == 7 && st.nmax == 7);
    const ifd_spec_params_t hi1 = {IFD_SPEC_NGRAM, 0, 0, 1}; /* below the engine's min 2 */
    ck_assert_int_eq(ifd_spec_resolve(&st, &hi1, &eng, true, false), 0);
    ck_assert(st.nmin == 1 && st.nmax == 1);
    const ifd_spec_params_t bad[] = {{4, 0, 0, 0},
                                     {IFD_SPEC_NGRAM, IFD_SPEC_MAX_TOKENS + 1, 0, 0},
                                     {IFD_SPEC_NGRAM, -1, 0, 0},
                                     {IFD_SPEC_NGRAM, 0, 3, 2},
                                     {IFD_SPEC_NGRAM, 0, IFD_NGRAM_MAX_N + 1, 0},
                                     {IFD_SPEC_NGRAM, 0, 0, -1}};
    /* the draft model: only with one */
    const ifd_spec_params_t draft = {IFD_SPEC_DRAFT, 3, 0, 0};
    ck_assert_int_eq(ifd_spec_resolve(&st, &draft, &eng, true, true), 0);
    ck_assert(st.kmax == 3 && st.method == IFD_SPEC_DRAFT);
    ck_assert_int_eq(ifd_spec_resolve(&st, &draft, &eng, false, true), 0);
    ck_assert(st.kmax == 0 && st.method == IFD_SPEC_OFF);
    st.kmax = 99;
    ck_assert_int_eq(ifd_spec_resolve(&st, &draft, &eng, true, false), IFD_EINVAL);
    ck_assert_int_eq(st.kmax, 99);
    const ifd_spec_params_t eng_draft = {IFD_SPEC_DRAFT, 5, 0, 0};
    ck_assert_int_eq(ifd_spec_resolve(&st, &none, &eng_draft, true, true), 0);
    ck_assert(st.kmax == 5 && st.method == IFD_SPEC_DRAFT);
    ck_assert_int_eq(ifd_spec_resolve(&st, &on, &eng_draft, true, true), 0);
    ck_assert(st.method == IFD_SPEC_NGRAM);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        st.kmax = 99;
        ck_assert_int_eq(ifd_spec_check(&bad[i]), IFD_EINVAL);
        ck_assert_int_eq(ifd_spec_resolve(&st, &bad[i], &eng, true, false), IFD_EINVAL);
        ck_assert_int_eq(st.kmax, 99); /* untouched */
    }
}
END_TEST

START_TEST(test_adapt_and_back_off)
{
    ifd_spec_state_t st = {.kmax = 8, .k = 8, .nmin = 1, .nmax = 1};
    ifd_spec_adapt(&st, 8, 3); /* partial: acc + 1 */
    ck_assert_int_eq(st.k, 4);
    ifd_spec_adapt(&st, 4, 4); /* all: + 2 */
    ck_assert_int_eq(st.k, 6);
    ifd_spec_adapt(&st, 6, 6);
    ifd_spec_adapt(&st, 8, 8);
    ck_assert_int_eq(st.k, 8); /* capped at kmax */
    ifd_spec_adapt(&st, 8, 0); /* none: halves */
    ck_assert_int_eq(st.k, 4);
    ifd_spec_adapt(&st, 4, 0);
    ifd_spec_adapt(&st, 2, 0);
    ck_assert_int_eq(st.k, 1);
    ifd_spec_adapt(&st, 1, 0); /* to 0: wait 8 steps */
    ck_assert(st.k == 0 && st.misses == 1 && st.wait == 8);
    /* history "1 2 1": a match, so only the wait stops proposals */
    const int32_t h[] = {1, 2, 1};
    int32_t out[8];
    for (int i = 0; i < 7; i++)
        ck_assert_int_eq(ifd_spec_propose(&st, h, 3, 8, out), 0);
    ck_assert_int_eq(ifd_spec_propose(&st, h, 3, 8, out), 1); /* the probe, k 1 */
    ck_assert(st.k == 1 && out[0] == 2);
    ifd_spec_adapt(&st, 1, 0); /* a second miss in a row: 16 steps */
    ck_assert(st.k == 0 && st.misses == 2 && st.wait == 16);
    for (int m = 3; m < 8; m++) { /* then 32, 64, and no longer */
        st.k = 1;
        ifd_spec_adapt(&st, 1, 0);
        ck_assert_int_eq(st.wait, 4 << (m < 4 ? m : 4));
    }
    st.k = 1;
    ifd_spec_adapt(&st, 1, 1); /* an acceptance resets the misses */
    ck_assert(st.misses == 0 && st.k == 3);
}
END_TEST

START_TEST(test_propose_limits)
{
    const int32_t h[] = {5, 6, 7, 8, 9, 5};
    int32_t out[16];
    ifd_spec_state_t st = {.kmax = 4, .k = 4, .nmin = 1, .nmax = 3};
    ck_assert_int_eq(ifd_spec_propose(&st, h, 6, 16, out), 4);
    ck_assert(out[0] == 6 && out[3] == 9);
    ck_assert_int_eq(ifd_spec_propose(&st, h, 6, 2, out), 2); /* the caller's limit */
    ck_assert_int_eq(ifd_spec_propose(&st, h, 6, 0, out), 0);
    ck_assert_int_eq(ifd_spec_propose(&st, h, 6, -3, out), 0);
    ck_assert_int_eq(ifd_spec_want(&st, 16), 4);
    ck_assert_int_eq(ifd_spec_want(&st, 3), 3);
    ck_assert_int_eq(ifd_spec_want(&st, -1), 0);
    st.kmax = 0; /* off */
    ck_assert_int_eq(ifd_spec_want(&st, 16), 0);
    ck_assert_int_eq(ifd_spec_propose(&st, h, 6, 16, out), 0);
}
END_TEST

/* During a back-off wait only a long suffix match (IFD_SPEC_PROBE_N tokens
 * or more, a copy resuming) proposes: one token, the wait over. */
START_TEST(test_probe_on_long_match)
{
    /* 5 6 7 8 ... 5 6 7: the last 3 tokens occurred before, followed by 8 */
    const int32_t h[] = {5, 6, 7, 8, 9, 1, 5, 6, 7};
    const int32_t h2[] = {5, 6, 7, 8, 9, 1, 2, 6, 7}; /* only "6 7" (2 tokens) matches */
    int32_t out[8];
    ifd_spec_state_t st = {.kmax = 8, .k = 1, .nmin = 1, .nmax = 4};
    ifd_spec_adapt(&st, 1, 0); /* k 0, wait 8 */
    ck_assert(st.k == 0 && st.wait == 8);
    ck_assert_int_eq(ifd_spec_propose(&st, h2, 9, 8, out), 0); /* a short match waits */
    ck_assert(st.k == 0 && st.wait == 7);
    ck_assert_int_eq(ifd_spec_propose(&st, h, 9, 0, out), 0); /* no room: nothing */
    ck_assert_int_eq(ifd_spec_propose(&st, h, 9, 8, out), 1);
    ck_assert(out[0] == 8 && st.k == 1 && st.wait == 0);
    st = (ifd_spec_state_t){.kmax = 8, .k = 0, .wait = 5, .nmin = 1, .nmax = 2};
    ck_assert_int_eq(ifd_spec_propose(&st, h, 9, 8, out), 0); /* nmax below the probe's n */
    st = (ifd_spec_state_t){.kmax = 0, .k = 0, .wait = 5, .nmin = 1, .nmax = 4};
    ck_assert_int_eq(ifd_spec_propose(&st, h, 9, 8, out), 0); /* off */
}
END_TEST

/* The acceptance estimate: the prior with no evidence, following hits and
 * fails, forgetting them a step at a time; p1 above p by less as the
 * evidence grows. */
START_TEST(test_rate)
{
    ifd_spec_state_t st = {.kmax = 8, .k = 8, .nmin = 1, .nmax = 4};
    float p1;
    ck_assert_float_eq_tol(ifd_spec_rate(&st, &p1), IFD_SPEC_PRIOR, 1e-6);
    ck_assert_float_eq_tol(p1, 1.0f, 1e-6); /* 0.75 + sqrt(0.1875 / 2) > 1 */
    ifd_spec_adapt(&st, 8, 0);              /* a miss: 1.5 / 3 */
    ck_assert_float_eq_tol(ifd_spec_rate(&st, &p1), 0.5f, 1e-6);
    ck_assert_float_eq_tol(p1, 0.5f + sqrtf(0.25f / 3.0f), 1e-6);
    const float after_miss = p1;
    for (int i = 0; i < 40; i++) /* steps forget it */
        ifd_spec_want(&st, 8);
    ck_assert_float_gt(ifd_spec_rate(&st, &p1), 0.6f);
    ck_assert_float_gt(p1, after_miss);
    st = (ifd_spec_state_t){.kmax = 8, .k = 8, .nmin = 1, .nmax = 4};
    for (int i = 0; i < 10; i++) /* copying: every proposal stands */
        ifd_spec_adapt(&st, 8, 8);
    ck_assert_float_gt(ifd_spec_rate(&st, &p1), 0.98f);
    ck_assert_float_le(p1, 1.0f);
    ifd_spec_adapt(&st, 8, 0);
    ck_assert_float_gt(ifd_spec_rate(&st, NULL), 0.95f); /* one miss in a long record */
}
END_TEST

/* The verification budget: checked against the greedy rule's hand results
 * and against an exhaustive search of the yield on small random cases. */
static double yield_of(const ifd_spec_cand_t *c, const int32_t *keep, int n, int base, double knee)
{
    double tok = base, rows = base;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < keep[i]; j++) {
            tok += (double)c[i].p1 * pow(c[i].p, j);
            rows += 1;
        }
    return tok / (knee + rows);
}

START_TEST(test_budget)
{
    /* batch 1, knee 3.5: yield 1/4.5; a fresh sequence (p1 1, p 0.75):
     * 1 (y 2/5.5), 0.75 (2.75/6.5), 0.5625 (3.31/7.5), 0.42 < 0.44: 3 */
    ifd_spec_cand_t c[4] = {{.n = 8, .p1 = 1.0f, .p = 0.75f}};
    ck_assert_int_eq(ifd_spec_budget(c, 1, 1, 3.5, 64), 3);
    ck_assert_int_eq(c[0].keep, 3);
    /* nearly sure proposals: all 8 */
    c[0] = (ifd_spec_cand_t){.n = 8, .p1 = 1.0f, .p = 0.99f};
    ck_assert_int_eq(ifd_spec_budget(c, 1, 1, 3.5, 64), 8);
    /* a sequence that failed (p1 0.79, p 0.5) beside 15 others' decodes: 16
     * rows, yield 16 / 19.5 = 0.82 > 0.79: nothing */
    c[0] = (ifd_spec_cand_t){.n = 4, .p1 = 0.79f, .p = 0.5f};
    ck_assert_int_eq(ifd_spec_budget(c, 1, 16, 3.5, 64), 0);
    ck_assert_int_eq(c[0].keep, 0);
    /* ...but alone it verifies two (0.79 > 1/4.5, 0.395 > 1.79/5.5) */
    ck_assert_int_eq(ifd_spec_budget(c, 1, 1, 3.5, 64), 2);
    /* two sequences in a full step: the one with the better record first */
    c[0] = (ifd_spec_cand_t){.n = 4, .p1 = 0.8f, .p = 0.6f};
    c[1] = (ifd_spec_cand_t){.n = 4, .p1 = 0.99f, .p = 0.97f};
    const int32_t rows = ifd_spec_budget(c, 2, 8, 3.5, 64);
    ck_assert_int_eq(c[0].keep, 1);
    ck_assert_int_eq(c[1].keep, 4);
    ck_assert_int_eq(rows, 5);
    /* no budget (knee <= 0): everything, negative n as none */
    c[0].n = 3;
    c[1].n = -2;
    ck_assert_int_eq(ifd_spec_budget(c, 2, 64, 0, 64), 3);
    ck_assert(c[0].keep == 3 && c[1].keep == 0);
    /* the step's room: the largest gains first (the better record), and
     * without a budget the earlier proposals, up to the room */
    c[0] = (ifd_spec_cand_t){.n = 4, .p1 = 0.9f, .p = 0.8f};
    c[1] = (ifd_spec_cand_t){.n = 4, .p1 = 1.0f, .p = 0.99f};
    ck_assert_int_eq(ifd_spec_budget(c, 2, 1, 3.5, 3), 3);
    ck_assert(c[0].keep == 0 && c[1].keep == 3);
    ck_assert_int_eq(ifd_spec_budget(c, 2, 1, -1, 6), 6);
    ck_assert(c[0].keep == 4 && c[1].keep == 2);
    ck_assert_int_eq(ifd_spec_budget(c, 2, 1, 3.5, 0), 0);
    ck_assert(c[0].keep == 0 && c[1].keep == 0);
    /* ties: the earlier candidate, the same answer every time */
    c[0] = c[1] = (ifd_spec_cand_t){.n = 4, .p1 = 0.9f, .p = 0.9f};
    ifd_spec_budget(c, 2, 8, 3.5, 64);
    ck_assert_int_ge(c[0].keep, c[1].keep);
    /* the rule's choice is the best yield among all cuts (small random cases) */
    srand(3);
    for (int t = 0; t < 2000; t++) {
        const int n = 1 + rand() % 3, base = 1 + rand() % 24;
        const double knee = 0.5 + (rand() % 80) / 10.0;
        for (int i = 0; i < n; i++)
            c[i] = (ifd_spec_cand_t){.n = rand() % 5,
                                     .p1 = (float)(rand() % 101) / 100.0f,
                                     .p = (float)(rand() % 101) / 100.0f};
        for (int i = 0; i < n; i++) /* p1 >= p, as ifd_spec_rate gives */
            if (c[i].p1 < c[i].p)
                c[i].p1 = c[i].p;
        ifd_spec_budget(c, n, base, knee, 64);
        int32_t keep[3] = {0}, best[3] = {0};
        for (int i = 0; i < n; i++)
            keep[i] = c[i].keep;
        const double got = yield_of(c, keep, n, base, knee);
        double top = -1;
        for (int a = 0; a <= c[0].n; a++)
            for (int b = 0; b <= (n > 1 ? c[1].n : 0); b++)
                for (int d = 0; d <= (n > 2 ? c[2].n : 0); d++) {
                    const int32_t k3[3] = {a, b, d};
                    const double y = yield_of(c, k3, n, base, knee);
                    if (y > top) {
                        top = y;
                        memcpy(best, k3, sizeof best);
                    }
                }
        ck_assert_msg(got >= top - 1e-9, "case %d: yield %.6f, best %.6f (%d %d %d)", t, got, top,
                      best[0], best[1], best[2]);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("spec");
    ifd_test_case(s, "policy", 30,
                  IFD_TESTS(test_resolve, test_adapt_and_back_off, test_propose_limits,
                            test_probe_on_long_match, test_rate, test_budget));
    return ifd_test_run(s);
}
