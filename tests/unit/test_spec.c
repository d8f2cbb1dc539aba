/*
 * test_spec.c — the per-sequence speculation policy (worker/spec.h): a
 * request's setting over the engine's (defaults, overrides, crossing
 * bounds, ranges), the proposal length's adaptation and back-off, and
 * proposals cut to the caller's limit.
 */
#include "testutil.h"

#include "error.h"
#include "worker/spec.h"

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
    ck_assert(st.kmax == 4 && st.nmin == 1 && st.nmax == 4); /* the built-in defaults */
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

int main(void)
{
    Suite *s = suite_create("spec");
    ifd_test_case(s, "policy", 30,
                  IFD_TESTS(test_resolve, test_adapt_and_back_off, test_propose_limits));
    return ifd_test_run(s);
}
