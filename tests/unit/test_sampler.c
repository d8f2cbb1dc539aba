/*
 * test_sampler.c — the sampler (worker/sampler.h) against its written
 * definition and against plain probability theory:
 *  - the weight and target primitives of kernels/sampling_math.h;
 *  - greedy, each filter on small hand-made distributions, penalties and
 *    bias to the exact float, logprobs against a double log-softmax;
 *  - conformance: on thousands of random rows and parameter sets, the token
 *    equals a deliberately plain reference of the definition (sorting,
 *    quadratic sums), with the vectorized kernels and with the scalar ones;
 *  - statistics: 10^5 seeded draws per case (2 * 10^4 when
 *    $INFERD_TEST_SANITIZED) pass a chi-square test against
 *    the softmax distribution computed in double (threshold: the 0.999
 *    quantile of chi-square with the pooled degrees of freedom, so a correct
 *    sampler fails a case with probability 1e-3 — and the seeds are fixed, so
 *    the outcome is deterministic);
 *  - determinism across sampler objects, call order and interleaving;
 *  - edge cases and every error.
 */
#include "testutil.h"

#include "error.h"
#include "sampling_math.h"
#include "worker/sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define W43 ((uint64_t)1 << 43)

/* ---- helpers ----------------------------------------------------------------- */

static uint64_t xs_state;

static void xs_seed(uint64_t s)
{
    xs_state = s * 0x9e3779b97f4a7c15ull + 1;
}

static uint64_t xs_next(void)
{
    xs_state ^= xs_state << 13;
    xs_state ^= xs_state >> 7;
    xs_state ^= xs_state << 17;
    return xs_state;
}

static double xs_unif(void)
{
    return (double)(xs_next() >> 11) * (1.0 / 9007199254740992.0);
}

static double xs_gauss(void)
{
    double u = xs_unif(), v = xs_unif();
    return sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}

static ifd_sampler_t *make(int32_t vocab)
{
    ifd_sampler_t *s = NULL;
    ck_assert_int_eq(ifd_sampler_create(vocab, &s), 0);
    ck_assert_ptr_nonnull(s);
    return s;
}

static int32_t sample1(ifd_sampler_t *s, const ifd_sampling_params_t *p, const float *l,
                       uint64_t pos)
{
    ifd_sample_result_t r;
    int err = ifd_sampler_sample(s, p, l, NULL, pos, &r);
    IFD_CHECK(err == 0, "sample: %s", ifd_strerror(err));
    return r.token;
}

/* Logits with softmax exactly proportional (in double) to probs. */
static void logits_of(const double *probs, int n, float *l)
{
    for (int i = 0; i < n; i++)
        l[i] = probs[i] > 0 ? (float)log(probs[i]) : -INFINITY;
}

/* ---- reference of the definition (sampler.h steps 4-7) ----------------------- */

static const float *ref_sort_key;

static int cmp_desc(const void *a, const void *b)
{
    float x = ref_sort_key[*(const int32_t *)a], y = ref_sort_key[*(const int32_t *)b];
    return (x < y) - (x > y);
}

/* The token the definition prescribes for processed logits l [V]. Plain and
 * slow on purpose: sorts, and sums top-p masses per token. */
static int32_t ref_token(const float *l, int32_t V, const ifd_sampling_params_t *p, uint64_t pos)
{
    if (p->temperature < IFD_SAMPLER_GREEDY_TEMP) {
        int32_t best = 0;
        for (int32_t i = 1; i < V; i++)
            if (l[i] > l[best])
                best = i;
        return best;
    }
    float *s = malloc((size_t)V * sizeof *s);
    uint64_t *q = malloc((size_t)V * sizeof *q);
    char *keep = malloc((size_t)V);
    int32_t *idx = malloc((size_t)V * sizeof *idx);
    float m = -INFINITY;
    for (int32_t i = 0; i < V; i++) {
        s[i] = p->temperature == 1.0f ? l[i] : l[i] / p->temperature;
        if (s[i] > m)
            m = s[i];
    }
    uint64_t qmin = (uint64_t)ceil((double)p->min_p * 0x1p43);
    if (qmin < 1)
        qmin = 1;
    size_t na = 0;
    for (int32_t i = 0; i < V; i++) {
        q[i] = ifd_sampling_weight(s[i] == m ? 0.0f : s[i] - m);
        keep[i] = q[i] >= qmin; /* a. min-p */
        if (keep[i])
            idx[na++] = i;
    }
    ref_sort_key = s;
    qsort(idx, na, sizeof *idx, cmp_desc);
    if (p->top_k > 0 && (size_t)p->top_k < na) { /* b. top-k */
        float sk = s[idx[p->top_k - 1]];
        for (int32_t i = 0; i < V; i++)
            keep[i] = keep[i] && s[i] >= sk;
    }
    if (p->top_p < 1.0f) { /* c. top-p */
        uint64_t Q = 0;
        for (int32_t i = 0; i < V; i++)
            Q += keep[i] ? q[i] : 0;
        char *keep2 = malloc((size_t)V);
        for (int32_t i = 0; i < V; i++) {
            keep2[i] = 0;
            if (!keep[i])
                continue;
            uint64_t g = 0;
            for (int32_t j = 0; j < V; j++)
                if (keep[j] && s[j] > s[i])
                    g += q[j];
            keep2[i] = s[i] == m || (double)g < (double)p->top_p * (double)Q;
        }
        memcpy(keep, keep2, (size_t)V);
        free(keep2);
    }
    uint64_t Z = 0;
    for (int32_t i = 0; i < V; i++)
        Z += keep[i] ? q[i] : 0;
    uint64_t t = ifd_sampling_target(p->seed, pos, Z), run = 0;
    int32_t tok = -1;
    for (int32_t i = 0; i < V && tok < 0; i++) {
        run += keep[i] ? q[i] : 0;
        if (run > t)
            tok = i;
    }
    free(s);
    free(q);
    free(keep);
    free(idx);
    return tok;
}

/* The distribution the definition approximates, in double: softmax of l / T,
 * min-p, top-k, top-p (tie-aware, as in the definition), renormalized. */
static void ref_probs(const float *l, int V, const ifd_sampling_params_t *p, double *out)
{
    double m = -INFINITY, z = 0;
    float *s = malloc((size_t)V * sizeof *s);
    for (int i = 0; i < V; i++) {
        s[i] = p->temperature == 1.0f ? l[i] : l[i] / p->temperature;
        if (s[i] > m)
            m = s[i];
    }
    for (int i = 0; i < V; i++)
        z += out[i] = exp((double)s[i] - m);
    for (int i = 0; i < V; i++) {
        out[i] /= z;
        if (out[i] < (double)p->min_p * (1.0 / z))
            out[i] = 0;
    }
    if (p->top_k > 0 && p->top_k < V) {
        int cnt = 0;
        for (int i = 0; i < V; i++)
            cnt += out[i] > 0;
        if (cnt > p->top_k) {
            for (int i = 0; i < V; i++) {
                int above = 0;
                for (int j = 0; j < V; j++)
                    above += out[j] > 0 && s[j] > s[i];
                if (above >= p->top_k)
                    out[i] = 0;
            }
        }
    }
    if (p->top_p < 1.0f) {
        double tot = 0;
        for (int i = 0; i < V; i++)
            tot += out[i];
        double *keep = calloc((size_t)V, sizeof *keep);
        for (int i = 0; i < V; i++) {
            double g = 0;
            for (int j = 0; j < V; j++)
                if (s[j] > s[i])
                    g += out[j];
            keep[i] = out[i] > 0 && ((double)s[i] == m || g < p->top_p * tot);
        }
        for (int i = 0; i < V; i++)
            out[i] = keep[i] ? out[i] : 0;
        free(keep);
    }
    z = 0;
    for (int i = 0; i < V; i++)
        z += out[i];
    for (int i = 0; i < V; i++)
        out[i] /= z;
    free(s);
}

/* Chi-square of counts [V] (n draws) against probs [V], pooling categories
 * with expected count < 5; also asserts that probability-0 tokens never
 * appear. Returns 1 if below the 0.999 quantile (Wilson-Hilferty). */
static int chi2_ok(const long *counts, const double *probs, int V, long n, double *stat_out,
                   int *df_out)
{
    double stat = 0, pool_e = 0;
    long pool_c = 0;
    int cats = 0;
    for (int i = 0; i < V; i++) {
        if (probs[i] == 0) {
            ck_assert_msg(counts[i] == 0, "token %d has probability 0 but was drawn %ld times", i,
                          counts[i]);
            continue;
        }
        double e = probs[i] * (double)n;
        if (e < 5) {
            pool_e += e;
            pool_c += counts[i];
            continue;
        }
        stat += ((double)counts[i] - e) * ((double)counts[i] - e) / e;
        cats++;
    }
    if (pool_e > 0) {
        stat += ((double)pool_c - pool_e) * ((double)pool_c - pool_e) / pool_e;
        cats++;
    }
    int df = cats - 1;
    *stat_out = stat;
    *df_out = df;
    if (df < 1)
        return 1;
    double z = 3.0902; /* the 0.999 quantile of the standard normal */
    double a = 2.0 / (9.0 * df);
    double q = df * pow(1.0 - a + z * sqrt(a), 3);
    return stat < q;
}

/* 10^5 draws (2 * 10^4 in the sanitized build, where a draw costs ~10x) at
 * positions 0.. of l [V] with p; chi-square against the reference
 * distribution (its threshold holds for any number of draws). */
static void check_distribution(const float *l, int V, ifd_sampling_params_t p, const char *what)
{
    const long N = ifd_test_sanitized() ? 20000 : 100000;
    ifd_sampler_t *s = make(V);
    long *counts = calloc((size_t)V, sizeof *counts);
    double *probs = malloc((size_t)V * sizeof *probs);
    ref_probs(l, V, &p, probs);
    for (uint64_t pos = 0; pos < (uint64_t)N; pos++)
        counts[sample1(s, &p, l, pos)]++;
    double stat;
    int df;
    int ok = chi2_ok(counts, probs, V, N, &stat, &df);
    fprintf(stderr, "chi-square %-28s: %8.2f with %3d degrees of freedom\n", what, stat, df);
    ck_assert_msg(ok, "%s: chi-square %.2f too large for %d degrees of freedom", what, stat, df);
    free(counts);
    free(probs);
    ifd_sampler_destroy(s);
}

/* ---- primitives ------------------------------------------------------------------ */

START_TEST(test_weight_function)
{
    ck_assert_uint_eq(ifd_sampling_weight(0.0f), W43);
    ck_assert_uint_eq(ifd_sampling_weight(-0.0f), W43);
    ck_assert_uint_eq(ifd_sampling_weight(1.0f), W43); /* x > 0 counts as 0 */
    ck_assert_uint_eq(ifd_sampling_weight(-30.0001f), 0);
    ck_assert_uint_eq(ifd_sampling_weight(-INFINITY), 0);
    ck_assert_uint_eq(ifd_sampling_weight(NAN), 0);
    ck_assert_uint_ge(ifd_sampling_weight(-30.0f), 1); /* e^-30 * 2^43 = 0.82 rounds up */
    /* Accuracy: within 4e-7 relative plus the integer rounding. */
    xs_seed(1);
    double worst = 0;
    for (int i = 0; i < 1000000; i++) {
        float x = -(float)(xs_unif() * 30.0);
        if (i < 1000)
            x = -(float)i * 0.03f;
        double exact = exp((double)x) * 0x1p43;
        uint64_t q = ifd_sampling_weight(x);
        IFD_CHECK(q <= W43, "weight(%a) = %llu > 2^43", (double)x, (unsigned long long)q);
        double err = fabs((double)q - exact) - 0.5;
        double rel = err > 0 ? err / exact : 0;
        if (rel > worst)
            worst = rel;
    }
    fprintf(stderr, "weight: worst relative error beyond rounding %.3g\n", worst);
    ck_assert_double_lt(worst, 4e-7);
}
END_TEST

START_TEST(test_target_function)
{
    /* With Z = 2^53 the target is the 53-bit uniform itself. */
    for (uint64_t pos = 0; pos < 1000; pos++) {
        uint64_t u = ifd_rng_u64(7, pos, IFD_SAMPLING_COUNTER_DRAW) >> 11;
        ck_assert_uint_eq(ifd_sampling_target(7, pos, (uint64_t)1 << 53), u);
        uint64_t z = (xs_next() >> 1) | 1;
        ck_assert_uint_lt(ifd_sampling_target(7, pos, z), z);
        ck_assert_uint_eq(ifd_sampling_target(7, pos, 1), 0);
    }
    /* floor(u * Z) exactly, checked against long double for Z < 2^60. */
    for (int i = 0; i < 1000; i++) {
        uint64_t z = xs_next() >> 4;
        uint64_t u = ifd_rng_u64(3, (uint64_t)i, 0) >> 11;
        long double e = floorl((long double)u * (long double)z / 9007199254740992.0L);
        uint64_t t = ifd_sampling_target(3, (uint64_t)i, z);
        ck_assert(fabsl((long double)t - e) <= 1.0L);
    }
}
END_TEST

/* ---- parameters and errors ------------------------------------------------------- */

START_TEST(test_defaults_and_param_checks)
{
    ifd_sampling_params_t d = ifd_sampling_default_params();
    ck_assert(d.temperature == 1.0f && d.top_p == 1.0f && d.min_p == 0.0f && d.top_k == 0);
    ck_assert(d.repetition_penalty == 1.0f && d.frequency_penalty == 0.0f);
    ck_assert(d.presence_penalty == 0.0f && d.n_logit_bias == 0 && d.logit_bias == NULL);
    ck_assert_int_eq(d.n_logprobs, -1);
    ck_assert_int_eq(d.logprobs_mode, IFD_LOGPROBS_RAW);
    ck_assert_int_eq(ifd_sampling_params_check(&d, 10), 0);

    ifd_sampling_params_t p;
#define BAD(stmt, code)                                                                            \
    do {                                                                                           \
        p = d;                                                                                     \
        stmt;                                                                                      \
        ck_assert_int_eq(ifd_sampling_params_check(&p, 10), code);                                 \
    } while (0)
    BAD(p.temperature = -0.1f, IFD_EINVAL);
    BAD(p.temperature = NAN, IFD_EINVAL);
    BAD(p.temperature = INFINITY, IFD_EINVAL);
    BAD(p.top_p = 1.01f, IFD_EINVAL);
    BAD(p.top_p = -0.01f, IFD_EINVAL);
    BAD(p.top_p = NAN, IFD_EINVAL);
    BAD(p.min_p = -0.5f, IFD_EINVAL);
    BAD(p.min_p = 2.0f, IFD_EINVAL);
    BAD(p.repetition_penalty = 0.0f, IFD_EINVAL);
    BAD(p.repetition_penalty = -1.0f, IFD_EINVAL);
    BAD(p.frequency_penalty = NAN, IFD_EINVAL);
    BAD(p.presence_penalty = INFINITY, IFD_EINVAL);
    BAD(p.n_logprobs = -2, IFD_EINVAL);
    BAD(p.n_logprobs = IFD_SAMPLER_MAX_VOCAB + 1, IFD_EINVAL);
    BAD(p.logprobs_mode = (ifd_logprobs_mode_t)7, IFD_EINVAL);
    BAD(p.n_logit_bias = 1, IFD_EINVAL); /* NULL array */
    ifd_logit_bias_t lb[2] = {{1, 1.0f}, {10, 1.0f}};
    BAD((p.logit_bias = lb, p.n_logit_bias = 2), IFD_ERANGE);
    lb[1].id = -1;
    BAD((p.logit_bias = lb, p.n_logit_bias = 2), IFD_ERANGE);
    lb[1] = (ifd_logit_bias_t){2, NAN};
    BAD((p.logit_bias = lb, p.n_logit_bias = 2), IFD_EINVAL);
    lb[1] = (ifd_logit_bias_t){2, INFINITY};
    BAD((p.logit_bias = lb, p.n_logit_bias = 2), IFD_EINVAL);
    lb[1] = (ifd_logit_bias_t){2, -INFINITY}; /* a ban: allowed */
    BAD((p.logit_bias = lb, p.n_logit_bias = 2), 0);
    BAD((p.top_k = -1, p.top_p = 0.0f, p.min_p = 1.0f, p.temperature = 0.0f), 0);
#undef BAD
    ck_assert_int_eq(ifd_sampling_params_check(&d, 0), IFD_EINVAL);
}
END_TEST

START_TEST(test_create_errors)
{
    ifd_sampler_t *s = (ifd_sampler_t *)1;
    ck_assert_int_eq(ifd_sampler_create(0, &s), IFD_EINVAL);
    ck_assert_ptr_null(s);
    ck_assert_int_eq(ifd_sampler_create(-5, &s), IFD_EINVAL);
    ck_assert_int_eq(ifd_sampler_create(IFD_SAMPLER_MAX_VOCAB + 1, &s), IFD_EINVAL);
    s = make(IFD_SAMPLER_MAX_VOCAB);
    ck_assert_int_eq(ifd_sampler_vocab(s), IFD_SAMPLER_MAX_VOCAB);
    ifd_sampler_destroy(s);
    ifd_sampler_destroy(NULL);
}
END_TEST

START_TEST(test_bad_rows_and_ids)
{
    ifd_sampler_t *s = make(4);
    ifd_sampling_params_t p = ifd_sampling_default_params();
    ifd_sample_result_t r, untouched;
    memset(&untouched, 0xab, sizeof untouched);
    float row[4] = {1, 2, 3, 4};
#define EXPECT(code, l, h)                                                                         \
    do {                                                                                           \
        memcpy(&r, &untouched, sizeof r);                                                          \
        ck_assert_int_eq(ifd_sampler_sample(s, &p, l, h, 0, &r), code);                            \
        ck_assert(memcmp(&r, &untouched, sizeof r) == 0);                                          \
    } while (0)
    float nan_row[4] = {1, NAN, 3, 4};
    EXPECT(IFD_EINVAL, nan_row, NULL);
    float inf_row[4] = {1, 2, INFINITY, 4};
    EXPECT(IFD_EINVAL, inf_row, NULL);
    float dead[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    EXPECT(IFD_EINVAL, dead, NULL);
    p.temperature = 0.0f;
    EXPECT(IFD_EINVAL, nan_row, NULL); /* greedy checks too */
    EXPECT(IFD_EINVAL, dead, NULL);
    p = ifd_sampling_default_params();

    /* A bias that bans the only finite token leaves nothing. */
    float one[4] = {-INFINITY, 5, -INFINITY, -INFINITY};
    ifd_logit_bias_t ban = {1, -INFINITY};
    p.logit_bias = &ban;
    p.n_logit_bias = 1;
    EXPECT(IFD_EINVAL, one, NULL);
    /* A bias that overflows to +inf. */
    float big[4] = {3e38f, 0, 0, 0};
    ifd_logit_bias_t up = {0, 3e38f};
    p.logit_bias = &up;
    EXPECT(IFD_EINVAL, big, NULL);
    p = ifd_sampling_default_params();

    /* History ids out of range, with and without penalties. */
    int32_t hbad[2] = {1, 4};
    ifd_sampler_history_t h = {hbad, 2, NULL, 0};
    EXPECT(IFD_ERANGE, row, &h);
    p.repetition_penalty = 1.5f;
    EXPECT(IFD_ERANGE, row, &h);
    ifd_sampler_history_t h2 = {NULL, 0, hbad, 2};
    EXPECT(IFD_ERANGE, row, &h2);
    int32_t hneg[1] = {-1};
    ifd_sampler_history_t h3 = {NULL, 0, hneg, 1};
    EXPECT(IFD_ERANGE, row, &h3);
    ifd_sampler_history_t h4 = {NULL, 3, NULL, 0};
    EXPECT(IFD_EINVAL, row, &h4);
    /* Bad params. */
    p.top_p = 2.0f;
    EXPECT(IFD_EINVAL, row, NULL);
#undef EXPECT
    /* The sampler still works, and its counters were left clean: penalties on
     * an empty history change nothing. */
    p = ifd_sampling_default_params();
    p.repetition_penalty = 2.0f;
    p.frequency_penalty = 1.0f;
    float out[4];
    int32_t hok[1] = {3};
    ifd_sampler_history_t h5 = {NULL, 0, hok, 1};
    ck_assert_int_eq(ifd_sampler_process_logits(s, &p, row, &h5, out), 0);
    ck_assert(out[0] == 1 && out[1] == 2 && out[2] == 3 && out[3] == 4.0f / 2.0f - 1.0f);
    ifd_sampler_destroy(s);
}
END_TEST

/* ---- greedy ------------------------------------------------------------------------- */

START_TEST(test_greedy)
{
    ifd_sampler_t *s = make(6);
    ifd_sampling_params_t p = ifd_sampling_default_params();
    p.temperature = 0.0f;
    float l[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9999f, -INFINITY};
    for (uint64_t seed = 0; seed < 20; seed++) {
        p.seed = seed;
        ck_assert_int_eq(sample1(s, &p, l, seed * 7), 1); /* tie: lowest id */
    }
    p.temperature = 9e-6f; /* below IFD_SAMPLER_GREEDY_TEMP: still greedy */
    ck_assert_int_eq(sample1(s, &p, l, 3), 1);
    /* Greedy ignores the filters but sees bias and penalties. */
    p.top_k = 1;
    p.top_p = 0.1f;
    ifd_logit_bias_t b = {4, 0.01f};
    p.logit_bias = &b;
    p.n_logit_bias = 1;
    ck_assert_int_eq(sample1(s, &p, l, 0), 4);
    p.n_logit_bias = 0;
    int32_t gen[1] = {1};
    ifd_sampler_history_t h = {NULL, 0, gen, 1};
    p.presence_penalty = 0.5f;
    ifd_sample_result_t r;
    ck_assert_int_eq(ifd_sampler_sample(s, &p, l, &h, 0, &r), 0);
    ck_assert_int_eq(r.token, 3);
    /* The maximum at the last index, past the first 1024-wide block. */
    ifd_sampler_t *big = make(5000);
    float *row = calloc(5000, sizeof *row);
    row[4999] = 1.0f;
    row[3000] = 0.999f;
    ck_assert_int_eq(sample1(big, &p, row, 0), 4999);
    row[1024] = 1.0f;
    ck_assert_int_eq(sample1(big, &p, row, 0), 1024);
    free(row);
    ifd_sampler_destroy(big);
    ifd_sampler_destroy(s);
}
END_TEST

/* ---- filters on hand-made distributions --------------------------------------------- */

/* The set of tokens drawn in 2000 positions. */
static unsigned drawn_set(ifd_sampler_t *s, const ifd_sampling_params_t *p, const float *l)
{
    unsigned set = 0;
    for (uint64_t pos = 0; pos < 2000; pos++)
        set |= 1u << sample1(s, p, l, pos);
    return set;
}

START_TEST(test_top_k_sets)
{
    ifd_sampler_t *s = make(5);
    ifd_sampling_params_t p = ifd_sampling_default_params();
    p.seed = 11;
    float l[5] = {3.0f, 2.0f, 2.0f, 1.0f, 0.0f};
    p.top_k = 1;
    ck_assert_uint_eq(drawn_set(s, &p, l), 0x01);
    p.top_k = 2; /* the tie at the boundary keeps both 2.0s */
    ck_assert_uint_eq(drawn_set(s, &p, l), 0x07);
    p.top_k = 3;
    ck_assert_uint_eq(drawn_set(s, &p, l), 0x07);
    p.top_k = 4;
    ck_assert_uint_eq(drawn_set(s, &p, l), 0x0f);
    p.top_k = 5; /* k >= V: off */
    ck_assert_uint_eq(drawn_set(s, &p, l), 0x1f);
    p.top_k = 0;
    ck_assert_uint_eq(drawn_set(s, &p, l), 0x1f);
    p.top_k = -1;
    ck_assert_uint_eq(drawn_set(s, &p, l), 0x1f);
    ifd_sampler_destroy(s);
}
END_TEST

/* vLLM's allowed_token_ids: the mask's bits across a word boundary, the
 * draw only among them (an allowed id of low logit included), greedy the
 * best allowed, processed logprobs over the allowed set alone; the mask's
 * own errors. And vLLM's logprob_token_ids: chosen ids' logprobs. */
START_TEST(test_allowed_ids)
{
    enum { V = 70 };
    ifd_sampler_t *s = make(V);
    float l[V];
    for (int i = 0; i < V; i++)
        l[i] = (float)((i * 37 + 11) % 101) / 25.0f; /* scattered over [0, 4] */
    l[10] = 50.0f;                                   /* the best, not allowed */
    static const int32_t ids[] = {3, 33, 64, 69};
    uint32_t *mask = NULL;
    ck_assert_int_eq(ifd_sampling_allowed_mask(ids, 4, V, &mask), 0);
    ck_assert_uint_eq(mask[0], 1u << 3);
    ck_assert_uint_eq(mask[1], 1u << 1);
    ck_assert_uint_eq(mask[2], (1u << 0) | (1u << 5));
    ifd_sampling_params_t p = ifd_sampling_default_params();
    p.allowed = mask;
    p.seed = 5;
    bool seen[V] = {false};
    for (uint64_t pos = 0; pos < 2000; pos++)
        seen[sample1(s, &p, l, pos)] = true;
    for (int i = 0; i < V; i++)
        ck_assert_msg(seen[i] == (i == 3 || i == 33 || i == 64 || i == 69), "id %d", i);
    p.temperature = 0.0f;
    int32_t best = ids[0];
    for (int k = 1; k < 4; k++)
        if (l[ids[k]] > l[best])
            best = ids[k];
    ck_assert_int_eq(sample1(s, &p, l, 0), best);
    ifd_sample_result_t r;
    p.n_logprobs = 4;
    p.logprobs_mode = IFD_LOGPROBS_PROCESSED;
    ck_assert_int_eq(ifd_sampler_sample(s, &p, l, NULL, 0, &r), 0);
    double z = 0.0;
    for (int k = 0; k < 4; k++)
        z += exp((double)l[ids[k]] - (double)l[best]);
    ck_assert_double_eq_tol(r.logprob, -log(z), 1e-5);
    for (int k = 0; k < r.n_top; k++)
        ck_assert(r.top_ids[k] == 3 || r.top_ids[k] == 33 || r.top_ids[k] == 64 ||
                  r.top_ids[k] == 69);
    /* logprob_token_ids: those ids' processed logprobs, in their order (one
     * masked out: -inf), instead of the top ones */
    static const int32_t want[] = {64, 10, 3};
    p.lp_ids = want;
    p.n_lp_ids = 3;
    ck_assert_int_eq(ifd_sampler_sample(s, &p, l, NULL, 0, &r), 0);
    ck_assert_int_eq(r.n_top, 3);
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(r.top_ids[k], want[k]);
        if (want[k] == 10)
            ck_assert(isinf(r.top_logprobs[k]) && r.top_logprobs[k] < 0);
        else
            ck_assert_double_eq_tol(r.top_logprobs[k],
                                    (double)l[want[k]] - (double)l[best] - log(z), 1e-5);
    }
    /* more than the inline 20: in the caller's room, which must hold them */
    int32_t many[25], mids[25];
    float mlps[25];
    for (int k = 0; k < 25; k++)
        many[k] = (k * 3) % V;
    p.lp_ids = many;
    p.n_lp_ids = 25;
    r.more_ids = NULL;
    r.more_logprobs = NULL;
    r.more_cap = 0;
    ck_assert_int_eq(ifd_sampler_sample(s, &p, l, NULL, 0, &r), IFD_EINVAL); /* no room */
    r.more_ids = mids;
    r.more_logprobs = mlps;
    r.more_cap = 24;
    ck_assert_int_eq(ifd_sampler_sample(s, &p, l, NULL, 0, &r), IFD_EINVAL); /* too little */
    r.more_cap = 25;
    ck_assert_int_eq(ifd_sampler_sample(s, &p, l, NULL, 0, &r), 0);
    ck_assert_int_eq(r.n_top, 25);
    for (int k = 0; k < 25; k++) {
        const int32_t id = many[k];
        ck_assert_int_eq(ifd_sample_top_ids(&r)[k], id);
        const float v = ifd_sample_top_logprobs(&r)[k];
        if (id == 3 || id == 33 || id == 64 || id == 69)
            ck_assert_double_eq_tol(v, (double)l[id] - (double)l[best] - log(z), 1e-5);
        else
            ck_assert(isinf(v) && v < 0);
    }
    r.more_ids = NULL;
    r.more_logprobs = NULL;
    r.more_cap = 0;
    p.lp_ids = want;
    p.n_lp_ids = IFD_SAMPLER_MAX_LP_IDS + 1; /* too many */
    ck_assert_int_eq(ifd_sampler_sample(s, &p, l, NULL, 0, &r), IFD_EINVAL);
    static const int32_t past[] = {V};
    p.lp_ids = past;
    p.n_lp_ids = 1;
    ck_assert_int_eq(ifd_sampler_sample(s, &p, l, NULL, 0, &r), IFD_ERANGE);
    p.lp_ids = NULL;
    p.n_lp_ids = 0;
    free(mask);
    static const int32_t bad[] = {3, V};
    ck_assert_int_eq(ifd_sampling_allowed_mask(bad, 2, V, &mask), IFD_ERANGE);
    ck_assert_ptr_null(mask);
    ck_assert_int_eq(ifd_sampling_allowed_mask(ids, 0, V, &mask), IFD_EINVAL);
    ifd_sampler_destroy(s);
}
END_TEST

START_TEST(test_top_p_sets)
{
    ifd_sampler_t *s = make(4);
    ifd_sampling_params_t p = ifd_sampling_default_params();
    p.seed = 5;
    const double probs[4] = {0.5, 0.3, 0.15, 0.05};
    float l[4];
    logits_of(probs, 4, l);
    /* Kept: tokens whose more probable predecessors hold < top_p. */
    const struct {
        float top_p;
        unsigned set;
    } cases[] = {{0.0f, 0x1},  {0.3f, 0x1},  {0.49f, 0x1}, {0.51f, 0x3}, {0.79f, 0x3},
                 {0.81f, 0x7}, {0.94f, 0x7}, {0.96f, 0xf}, {1.0f, 0xf}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        p.top_p = cases[i].top_p;
        ck_assert_msg(drawn_set(s, &p, l) == cases[i].set, "top_p %g", (double)p.top_p);
    }
    /* top_p = 0 is greedy, unless the maximum is tied. */
    float tied[4] = {1.0f, 3.0f, 0.0f, 3.0f};
    p.top_p = 0.0f;
    ck_assert_uint_eq(drawn_set(s, &p, tied), 0xa);
    /* top-p after top-k renormalizes over top-k's survivors: with k = 2,
     * {0.5, 0.3} -> {0.625, 0.375}; top_p 0.6 keeps only token 0. */
    p.top_k = 2;
    p.top_p = 0.6f;
    ck_assert_uint_eq(drawn_set(s, &p, l), 0x1);
    p.top_p = 0.63f;
    ck_assert_uint_eq(drawn_set(s, &p, l), 0x3);
    ifd_sampler_destroy(s);
}
END_TEST

START_TEST(test_min_p_sets)
{
    ifd_sampler_t *s = make(4);
    ifd_sampling_params_t p = ifd_sampling_default_params();
    p.seed = 9;
    const double probs[4] = {0.5, 0.3, 0.15, 0.05};
    float l[4];
    logits_of(probs, 4, l);
    p.min_p = 0.2f; /* threshold 0.1 */
    ck_assert_uint_eq(drawn_set(s, &p, l), 0x7);
    p.min_p = 0.5f; /* threshold 0.25 */
    ck_assert_uint_eq(drawn_set(s, &p, l), 0x3);
    p.min_p = 1.0f;
    ck_assert_uint_eq(drawn_set(s, &p, l), 0x1);
    /* min-p is measured after temperature: at T = 0.5 the ratios square
     * (0.3/0.5)^2 = 0.36, (0.15/0.5)^2 = 0.09. */
    p.temperature = 0.5f;
    p.min_p = 0.2f;
    ck_assert_uint_eq(drawn_set(s, &p, l), 0x3);
    p.min_p = 0.08f;
    ck_assert_uint_eq(drawn_set(s, &p, l), 0x7);
    ifd_sampler_destroy(s);
}
END_TEST

/* ---- statistics ----------------------------------------------------------------------- */

START_TEST(test_distribution_small)
{
    const double probs[8] = {0.3, 0.2, 0.15, 0.12, 0.1, 0.08, 0.04, 0.01};
    float l[8];
    logits_of(probs, 8, l);
    ifd_sampling_params_t p = ifd_sampling_default_params();
    p.seed = 12345;
    check_distribution(l, 8, p, "T=1");
    p.temperature = 0.7f;
    check_distribution(l, 8, p, "T=0.7");
    p.temperature = 1.6f;
    check_distribution(l, 8, p, "T=1.6");
    p.temperature = 1.0f;
    p.top_k = 3;
    check_distribution(l, 8, p, "top_k=3");
    p.top_k = 0;
    p.top_p = 0.8f;
    check_distribution(l, 8, p, "top_p=0.8");
    p.top_p = 1.0f;
    p.min_p = 0.3f;
    check_distribution(l, 8, p, "min_p=0.3");
    p.min_p = 0.05f;
    p.top_k = 6;
    p.top_p = 0.9f;
    p.temperature = 0.8f;
    p.seed = 777;
    check_distribution(l, 8, p, "T=0.8 k=6 p=0.9 min_p=0.05");
}
END_TEST

START_TEST(test_distribution_wide)
{
    /* A language-model-like row: Gaussian logits with a few strong tokens. */
    enum { V = 2000 };
    float *l = malloc(V * sizeof *l);
    xs_seed(42);
    for (int i = 0; i < V; i++)
        l[i] = (float)(1.5 * xs_gauss());
    l[17] = 7.0f;
    l[1000] = 6.5f;
    l[1999] = 6.0f;
    ifd_sampling_params_t p = ifd_sampling_default_params();
    p.seed = 2024;
    check_distribution(l, V, p, "wide T=1");
    p.top_p = 0.95f;
    p.temperature = 0.9f;
    check_distribution(l, V, p, "wide T=0.9 top_p=0.95");
    p.top_p = 1.0f;
    p.top_k = 40;
    check_distribution(l, V, p, "wide T=0.9 top_k=40");
    p.top_k = 0;
    p.min_p = 0.02f;
    check_distribution(l, V, p, "wide T=0.9 min_p=0.02");
    free(l);
}
END_TEST

/* ---- penalties and bias ------------------------------------------------------------ */

START_TEST(test_penalties_exact)
{
    ifd_sampler_t *s = make(7);
    ifd_sampling_params_t p = ifd_sampling_default_params();
    const float l[7] = {2.0f, -2.0f, 1.0f, 0.5f, 3.0f, 1.0f, 0.0f};
    int32_t prompt[4] = {0, 1, 5, 0};
    int32_t gen[4] = {2, 2, 1, 6};
    ifd_sampler_history_t h = {prompt, 4, gen, 4};
    ifd_logit_bias_t bias[3] = {{0, 2.0f}, {4, -1.0f}, {5, -3.0f}};
    p.logit_bias = bias;
    p.n_logit_bias = 3;
    p.repetition_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    float out[7];
    ck_assert_int_eq(ifd_sampler_process_logits(s, &p, l, &h, out), 0);
    /* token 0: prompt only; bias first (vLLM order): (2 + 2) / 2 */
    ck_assert(out[0] == 2.0f);
    /* token 1: prompt and once generated: -2 * 2 - 0.5 * 1 - 0.25 */
    ck_assert(out[1] == -4.75f);
    /* token 2: generated twice: 1 / 2 - 0.5 * 2 - 0.25 */
    ck_assert(out[2] == -0.75f);
    ck_assert(out[3] == 0.5f);  /* untouched */
    ck_assert(out[4] == 2.0f);  /* bias only */
    ck_assert(out[5] == -4.0f); /* bias turns it negative, then multiplied: (1 - 3) * 2 */
    /* token 6: 0 is neither divided nor multiplied into anything else */
    ck_assert(out[6] == -0.75f);

    /* Each penalty alone, with exact float expectations. */
    p = ifd_sampling_default_params();
    p.repetition_penalty = 1.3f;
    ck_assert_int_eq(ifd_sampler_process_logits(s, &p, l, &h, out), 0);
    ck_assert(out[0] == 2.0f / 1.3f && out[1] == -2.0f * 1.3f && out[2] == 1.0f / 1.3f);
    ck_assert(out[3] == 0.5f && out[4] == 3.0f && out[5] == 1.0f / 1.3f && out[6] == 0.0f);
    p = ifd_sampling_default_params();
    p.frequency_penalty = -0.7f; /* negative: encourages repeats */
    ck_assert_int_eq(ifd_sampler_process_logits(s, &p, l, &h, out), 0);
    ck_assert(out[0] == 2.0f && out[2] == 1.0f - (-0.7f) * 2.0f);
    ck_assert(out[1] == -2.0f - (-0.7f) && out[6] == 0.0f + 0.7f && out[5] == 1.0f);
    p = ifd_sampling_default_params();
    p.presence_penalty = 1.1f; /* generated tokens only, once each */
    ck_assert_int_eq(ifd_sampler_process_logits(s, &p, l, &h, out), 0);
    ck_assert(out[0] == 2.0f && out[1] == -2.0f - 1.1f && out[2] == 1.0f - 1.1f);
    ck_assert(out[5] == 1.0f && out[6] == -1.1f);

    /* In place, and repeated calls see clean counters. */
    float row[7];
    memcpy(row, l, sizeof row);
    ck_assert_int_eq(ifd_sampler_process_logits(s, &p, row, &h, row), 0);
    ck_assert_int_eq(ifd_sampler_process_logits(s, &p, l, &h, out), 0);
    ck_assert(memcmp(row, out, sizeof row) == 0);

    /* Sampling sees the processed row: a -inf bias bans, presence flips greedy. */
    p = ifd_sampling_default_params();
    ifd_logit_bias_t ban = {4, -INFINITY};
    p.logit_bias = &ban;
    p.n_logit_bias = 1;
    for (uint64_t pos = 0; pos < 500; pos++)
        ck_assert_int_ne(sample1(s, &p, l, pos), 4);
    ifd_sampler_destroy(s);
}
END_TEST

/* ---- logprobs ---------------------------------------------------------------------- */

START_TEST(test_logprobs)
{
    enum { V = 300 };
    ifd_sampler_t *s = make(V);
    float l[V];
    xs_seed(3);
    for (int i = 0; i < V; i++)
        l[i] = (float)(2.0 * xs_gauss());
    l[7] = l[8] = 9.0f; /* a tie at the top */
    l[9] = -INFINITY;
    double m = 9.0, z = 0;
    for (int i = 0; i < V; i++)
        z += exp((double)l[i] - m);
    double lse = m + log(z);

    ifd_sampling_params_t p = ifd_sampling_default_params();
    p.n_logprobs = 5;
    p.temperature = 0.5f; /* logprobs ignore temperature and truncation */
    p.top_k = 3;
    p.seed = 1;
    ifd_sample_result_t r;
    for (uint64_t pos = 0; pos < 50; pos++) {
        ck_assert_int_eq(ifd_sampler_sample(s, &p, l, NULL, pos, &r), 0);
        ck_assert(fabs(r.logprob - ((double)l[r.token] - lse)) < 1e-5);
        int rank = 0;
        for (int i = 0; i < V; i++)
            rank += l[i] >= l[r.token];
        ck_assert_int_eq(r.rank, rank);
        ck_assert_int_eq(r.n_top, 5);
        ck_assert_int_eq(r.top_ids[0], 7); /* tie: ascending id */
        ck_assert_int_eq(r.top_ids[1], 8);
        for (int j = 0; j < 5; j++) {
            ck_assert(fabs(r.top_logprobs[j] - ((double)l[r.top_ids[j]] - lse)) < 1e-5);
            if (j)
                ck_assert(r.top_logprobs[j] <= r.top_logprobs[j - 1]);
        }
        /* nothing outside the list beats its last entry */
        for (int i = 0; i < V; i++) {
            int listed = 0;
            for (int j = 0; j < 5; j++)
                listed |= r.top_ids[j] == i;
            if (!listed)
                ck_assert(l[i] <= l[r.top_ids[4]]);
        }
    }
    /* At T = 1 without min-p the sampler reuses the draw's weight sum as
     * the normalizer: the same values. */
    p = ifd_sampling_default_params();
    p.n_logprobs = 2;
    p.top_p = 0.9f;
    for (uint64_t pos = 0; pos < 20; pos++) {
        ck_assert_int_eq(ifd_sampler_sample(s, &p, l, NULL, pos, &r), 0);
        ck_assert(fabs(r.logprob - ((double)l[r.token] - lse)) < 1e-5);
        ck_assert(fabs(r.top_logprobs[0] - (9.0 - lse)) < 1e-5);
    }

    /* n_logprobs = 0: the chosen token's logprob only. */
    p = ifd_sampling_default_params();
    p.n_logprobs = 0;
    p.temperature = 0.0f;
    ck_assert_int_eq(ifd_sampler_sample(s, &p, l, NULL, 0, &r), 0);
    ck_assert_int_eq(r.token, 7);
    ck_assert_int_eq(r.n_top, 0);
    ck_assert_int_eq(r.rank, 2);
    ck_assert(fabs(r.logprob - (9.0 - lse)) < 1e-5);
    /* n_logprobs = -1: nothing. */
    p.n_logprobs = -1;
    ck_assert_int_eq(ifd_sampler_sample(s, &p, l, NULL, 0, &r), 0);
    ck_assert(r.token == 7 && r.n_top == 0 && r.rank == 0 && r.logprob == 0.0f);

    /* RAW ignores bias and penalties; PROCESSED sees them. */
    p = ifd_sampling_default_params();
    p.temperature = 0.0f;
    p.n_logprobs = 2;
    ifd_logit_bias_t b = {100, 20.0f};
    p.logit_bias = &b;
    p.n_logit_bias = 1;
    ck_assert_int_eq(ifd_sampler_sample(s, &p, l, NULL, 0, &r), 0);
    ck_assert_int_eq(r.token, 100);
    ck_assert(fabs(r.logprob - ((double)l[100] - lse)) < 1e-5);
    ck_assert_int_eq(r.top_ids[0], 7);
    p.logprobs_mode = IFD_LOGPROBS_PROCESSED;
    ck_assert_int_eq(ifd_sampler_sample(s, &p, l, NULL, 0, &r), 0);
    ck_assert_int_eq(r.top_ids[0], 100);
    ck_assert_int_eq(r.rank, 1);
    double z2 = z - exp((double)l[100] - m) + exp((double)l[100] + 20.0 - m);
    ck_assert(fabs(r.logprob - ((double)l[100] + 20.0 - (m + log(z2)))) < 1e-5);
    p.temperature = 1.0f; /* sampled: the normalizer comes from the draw */
    for (uint64_t pos = 0; pos < 20; pos++) {
        ck_assert_int_eq(ifd_sampler_sample(s, &p, l, NULL, pos, &r), 0);
        ck_assert_int_eq(r.token, 100);
        ck_assert(fabs(r.logprob - ((double)l[100] + 20.0 - (m + log(z2)))) < 1e-5);
    }
    ifd_sampler_destroy(s);

    /* More alternatives asked than the vocabulary has; -inf entries. */
    ifd_sampler_t *s3 = make(3);
    float l3[3] = {0.0f, -INFINITY, 0.0f};
    p = ifd_sampling_default_params();
    p.n_logprobs = 20;
    ck_assert_int_eq(ifd_sampler_sample(s3, &p, l3, NULL, 0, &r), 0);
    ck_assert_int_eq(r.n_top, 3);
    ck_assert(r.top_ids[0] == 0 && r.top_ids[1] == 2 && r.top_ids[2] == 1);
    ck_assert(fabs(r.top_logprobs[0] - log(0.5)) < 1e-6);
    ck_assert(r.top_logprobs[2] == -INFINITY);
    ck_assert(r.token == 0 || r.token == 2);
    ifd_sampler_destroy(s3);
}
END_TEST

/* ---- conformance with the definition -------------------------------------------- */

static void conformance(uint64_t seed, int cases)
{
    xs_seed(seed);
    ifd_sampler_t *s = make(700);
    float *l = malloc(700 * sizeof *l);
    int checked = 0;
    for (int c = 0; c < cases; c++) {
        int32_t V = 1 + (int32_t)(xs_next() % 600);
        if (c % 50 == 0)
            V = 700;
        ifd_sampler_t *sv = V == 700 ? s : make(V);
        double spread = 0.5 + 6.0 * xs_unif();
        for (int32_t i = 0; i < V; i++) {
            l[i] = (float)(spread * xs_gauss());
            uint64_t r = xs_next() % 20;
            if (r == 0)
                l[i] = -INFINITY;
            else if (r == 1 && i > 0)
                l[i] = l[xs_next() % (uint64_t)i]; /* ties */
            else if (r == 2)
                l[i] = roundf(l[i]); /* more ties */
        }
        if (c % 7 == 0) /* far-out values: weights near the -30 cut */
            for (int32_t i = 0; i < V; i++)
                l[i] = l[i] == -INFINITY ? l[i] : l[i] * 8.0f;
        l[xs_next() % (uint64_t)V] = 3.0f; /* at least one finite */
        ifd_sampling_params_t p = ifd_sampling_default_params();
        p.seed = xs_next();
        const float temps[] = {1.0f, 0.25f, 0.7f, 1.3f, 2.0f, 0.0f};
        p.temperature = temps[xs_next() % 6];
        if (xs_next() % 2)
            p.top_k = (int32_t)(xs_next() % (uint64_t)(V + 2)) - 1;
        if (xs_next() % 2)
            p.top_p = (float)xs_unif();
        if (xs_next() % 4 == 0)
            p.top_p = 0.0f;
        if (xs_next() % 3 == 0)
            p.min_p = (float)(xs_unif() * xs_unif());
        for (int k = 0; k < 3; k++) {
            uint64_t pos = xs_next() % 100000;
            int32_t want = ref_token(l, V, &p, pos);
            int32_t got = sample1(sv, &p, l, pos);
            ck_assert_msg(got == want,
                          "case %d: V %d T %g k %d p %g min_p %g pos %llu: got %d, want %d", c, V,
                          (double)p.temperature, p.top_k, (double)p.top_p, (double)p.min_p,
                          (unsigned long long)pos, got, want);
            checked++;
        }
        if (sv != s)
            ifd_sampler_destroy(sv);
    }
    fprintf(stderr, "conformance: %d draws equal to the reference\n", checked);
    free(l);
    ifd_sampler_destroy(s);
}

START_TEST(test_conformance_vector)
{
    conformance(100, 1500);
}
END_TEST

START_TEST(test_conformance_scalar)
{
    /* In this forked test process nothing has read the CPU features yet. */
    setenv("INFERD_CPU", "scalar", 1);
    conformance(100, 1500);
}
END_TEST

START_TEST(test_conformance_large_vocab)
{
    enum { V = 262144 };
    ifd_sampler_t *s = make(V);
    float *l = malloc(V * sizeof *l);
    xs_seed(77);
    for (int i = 0; i < V; i++)
        l[i] = (float)(3.0 * xs_gauss());
    l[123456] = 16.0f;
    l[5] = 15.5f;
    l[V - 1] = 15.0f;
    ifd_sampling_params_t p = ifd_sampling_default_params();
    p.seed = 99;
    /* Sort-based reference for these (top-p's quadratic sum is too slow at
     * this size, so top-p is covered only with few survivors). */
    const struct {
        float t, top_p, min_p;
        int32_t k;
    } cfg[] = {{1.0f, 1.0f, 0.0f, 0},    {0.7f, 1.0f, 0.0f, 50}, {1.0f, 1.0f, 0.1f, 0},
               {1.0f, 1.0f, 0.0f, 1000}, {0.5f, 0.9f, 0.0f, 64}, {1.2f, 0.8f, 0.0f, 20}};
    for (size_t c = 0; c < sizeof cfg / sizeof *cfg; c++) {
        p.temperature = cfg[c].t;
        p.top_p = cfg[c].top_p;
        p.min_p = cfg[c].min_p;
        p.top_k = cfg[c].k;
        for (uint64_t pos = 0; pos < 4; pos++)
            ck_assert_int_eq(sample1(s, &p, l, pos), ref_token(l, V, &p, pos));
    }
    free(l);
    ifd_sampler_destroy(s);
}
END_TEST

/* ---- determinism -------------------------------------------------------------------- */

START_TEST(test_determinism)
{
    enum { V = 1000, N = 200 };
    float *a = malloc(V * sizeof *a), *b = malloc(V * sizeof *b);
    xs_seed(8);
    for (int i = 0; i < V; i++) {
        a[i] = (float)(0.3 * xs_gauss()); /* nearly flat: many tokens likely */
        b[i] = (float)(2.0 * xs_gauss());
    }
    ifd_sampling_params_t pa = ifd_sampling_default_params();
    pa.seed = 31337;
    pa.top_p = 0.97f;
    ifd_sampling_params_t pb = ifd_sampling_default_params();
    pb.seed = 4;
    pb.temperature = 0.8f;

    /* Reference run: sequence A alone, in order. */
    int32_t ref[N];
    ifd_sampler_t *s1 = make(V);
    for (int i = 0; i < N; i++)
        ref[i] = sample1(s1, &pa, a, (uint64_t)i);

    /* Interleaved with sequence B on another sampler, in reverse order. */
    ifd_sampler_t *s2 = make(V);
    for (int i = N - 1; i >= 0; i--) {
        sample1(s2, &pb, b, (uint64_t)(i * 3));
        ck_assert_int_eq(sample1(s2, &pa, a, (uint64_t)i), ref[i]);
        sample1(s2, &pb, a, (uint64_t)i);
    }
    /* Resumed halfway with the same sampler as B used. */
    for (int i = N / 2; i < N; i++)
        ck_assert_int_eq(sample1(s1, &pa, a, (uint64_t)i), ref[i]);

    /* Other seeds differ: 200 draws over ~1000 likely tokens. */
    ifd_sampling_params_t pc = pa;
    pc.seed = pa.seed + 1;
    int same = 0, distinct = 0;
    unsigned char seen[V] = {0};
    for (int i = 0; i < N; i++) {
        same += sample1(s1, &pc, a, (uint64_t)i) == ref[i];
        distinct += !seen[ref[i]];
        seen[ref[i]] = 1;
    }
    ck_assert_int_le(same, 5);
    ck_assert_int_ge(distinct, 100);
    /* Other positions differ too. */
    same = 0;
    for (int i = 0; i < N; i++)
        same += sample1(s1, &pa, a, (uint64_t)i + 1000) == ref[i];
    ck_assert_int_le(same, 5);
    free(a);
    free(b);
    ifd_sampler_destroy(s1);
    ifd_sampler_destroy(s2);
}
END_TEST

/* ---- edge cases --------------------------------------------------------------------- */

START_TEST(test_edges)
{
    ifd_sample_result_t r;
    ifd_sampling_params_t p = ifd_sampling_default_params();
    p.n_logprobs = 3;

    /* Vocabulary of 1. */
    ifd_sampler_t *s1 = make(1);
    float one[1] = {-7.0f};
    for (uint64_t pos = 0; pos < 10; pos++) {
        ck_assert_int_eq(ifd_sampler_sample(s1, &p, one, NULL, pos, &r), 0);
        ck_assert_int_eq(r.token, 0);
        ck_assert(fabs(r.logprob) < 1e-6);
        ck_assert_int_eq(r.n_top, 1);
        ck_assert_int_eq(r.rank, 1);
    }
    ifd_sampler_destroy(s1);

    /* All -inf but one, under every filter. */
    ifd_sampler_t *s = make(50);
    float l[50];
    for (int i = 0; i < 50; i++)
        l[i] = -INFINITY;
    l[37] = -1000.0f;
    const float tps[] = {0.0f, 0.5f, 1.0f};
    for (int t = 0; t < 3; t++) {
        p.top_p = tps[t];
        p.top_k = t;
        p.min_p = 0.5f * (float)t;
        p.temperature = 0.3f + (float)t;
        for (uint64_t pos = 0; pos < 20; pos++) {
            ck_assert_int_eq(ifd_sampler_sample(s, &p, l, NULL, pos, &r), 0);
            ck_assert_int_eq(r.token, 37);
            ck_assert(r.logprob == 0.0f);
        }
    }

    /* Values so large that l / T overflows to +inf: the overflowed tokens
     * share the draw. */
    p = ifd_sampling_default_params();
    float huge[50];
    for (int i = 0; i < 50; i++)
        huge[i] = 0.0f;
    huge[3] = 3e38f;
    huge[4] = 2e38f;
    p.temperature = 0.01f;
    unsigned set = 0;
    for (uint64_t pos = 0; pos < 200; pos++)
        set |= 1u << sample1(s, &p, huge, pos);
    ck_assert_uint_eq(set, (1u << 3) | (1u << 4));

    /* Differences beyond 30 nats: only the maximum can be drawn. */
    float far[50];
    for (int i = 0; i < 50; i++)
        far[i] = -31.0f;
    far[10] = 0.0f;
    p.temperature = 1.0f;
    for (uint64_t pos = 0; pos < 200; pos++)
        ck_assert_int_eq(sample1(s, &p, far, pos), 10);
    ifd_sampler_destroy(s);
}
END_TEST

/* The reference order of the top list: larger value first, equal values
 * (-0 equal to +0) by ascending id — a full sort of the row. */
static const float *g_ref_row;
static int ref_cmp(const void *a, const void *b)
{
    const int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    const float x = g_ref_row[i], y = g_ref_row[j];
    if (x != y)
        return x > y ? -1 : 1;
    return i < j ? -1 : i > j;
}

/* Top k past the inline 20 (k = 21, 100, 1000, the vocabulary and beyond)
 * from the caller's room, against a full sort of random rows with many
 * ties, -0 / +0 and -inf; raw and processed modes and prompt scoring alike;
 * too little room is IFD_EINVAL and leaves *out alone. */
START_TEST(test_logprobs_large_k)
{
    enum { V = 4099 };
    ifd_sampler_t *s = make(V);
    float *l = malloc(V * sizeof *l), *biased = malloc(V * sizeof *biased);
    int32_t *ref = malloc(V * sizeof *ref), *ids = malloc((V + 8) * sizeof *ids);
    float *lps = malloc((V + 8) * sizeof *lps);
    ck_assert(l && biased && ref && ids && lps);
    static const int32_t ks[] = {21, 100, 1000, V - 1, V, V + 5};
    for (int trial = 0; trial < 12; trial++) {
        xs_seed(100 + (uint64_t)trial);
        for (int i = 0; i < V; i++) /* coarse values: many ties */
            l[i] = trial % 3 == 0 ? (float)(int)(xs_unif() * 16) * 0.5f : (float)(3.0 * xs_gauss());
        l[5] = -0.0f;
        l[6] = 0.0f;
        l[7] = -INFINITY;
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
            const int32_t k = ks[ki], want = k < V ? k : V;
            ifd_sampling_params_t p = ifd_sampling_default_params();
            p.n_logprobs = k;
            p.seed = (uint64_t)trial;
            p.logprobs_mode = trial % 2 ? IFD_LOGPROBS_PROCESSED : IFD_LOGPROBS_RAW;
            const ifd_logit_bias_t lb[] = {{11, 3.0f}, {12, -2.5f}};
            p.logit_bias = lb;
            p.n_logit_bias = 2;
            memcpy(biased, l, V * sizeof *l);
            biased[11] += 3.0f;
            biased[12] -= 2.5f;
            const float *row = p.logprobs_mode == IFD_LOGPROBS_RAW ? l : biased;
            ifd_sample_result_t r = {.more_ids = ids, .more_logprobs = lps, .more_cap = want - 1};
            /* one entry short: refused, untouched */
            ck_assert_int_eq(ifd_sampler_sample(s, &p, l, NULL, 0, &r), IFD_EINVAL);
            ck_assert_int_eq(r.n_top, 0);
            r.more_cap = want;
            ck_assert_int_eq(ifd_sampler_sample(s, &p, l, NULL, 3, &r), 0);
            ck_assert_int_eq(r.n_top, want);
            ck_assert_ptr_eq(ifd_sample_top_ids(&r), ids);
            for (int i = 0; i < V; i++)
                ref[i] = i;
            g_ref_row = row;
            qsort(ref, V, sizeof *ref, ref_cmp);
            double m = -INFINITY, z = 0;
            for (int i = 0; i < V; i++)
                m = row[i] > m ? row[i] : m;
            for (int i = 0; i < V; i++)
                z += exp((double)row[i] - m);
            const double lse = m + log(z);
            for (int32_t j = 0; j < want; j++) {
                ck_assert_int_eq(ids[j], ref[j]);
                if (row[ref[j]] == -INFINITY)
                    ck_assert(isinf(lps[j]) && lps[j] < 0);
                else
                    ck_assert_double_eq_tol(lps[j], (double)row[ref[j]] - lse, 1e-5);
            }
            /* the inline path's values are this list's prefix */
            ifd_sample_result_t small;
            p.n_logprobs = 20;
            ck_assert_int_eq(ifd_sampler_sample(s, &p, l, NULL, 3, &small), 0);
            ck_assert_int_eq(small.token, r.token);
            for (int j = 0; j < 20; j++) {
                ck_assert_int_eq(small.top_ids[j], ids[j]);
                ck_assert(small.top_logprobs[j] == lps[j]);
            }
            /* prompt scoring (raw) */
            ifd_sample_result_t q = {.more_ids = ids, .more_logprobs = lps, .more_cap = want};
            ck_assert_int_eq(ifd_sampler_logprobs(s, l, 42, k, &q), 0);
            ck_assert_int_eq(q.token, 42);
            ck_assert_int_eq(q.n_top, want);
            g_ref_row = l;
            qsort(ref, V, sizeof *ref, ref_cmp);
            for (int32_t j = 0; j < want; j++)
                ck_assert_int_eq(ids[j], ref[j]);
            q.more_ids = NULL;
            ck_assert_int_eq(ifd_sampler_logprobs(s, l, 42, k, &q), IFD_EINVAL);
        }
    }
    free(l);
    free(biased);
    free(ref);
    free(ids);
    free(lps);
    ifd_sampler_destroy(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sampler");
    ifd_test_case(s, "sampler", 120,
                  IFD_TESTS(test_weight_function, test_target_function,
                            test_defaults_and_param_checks, test_create_errors,
                            test_bad_rows_and_ids, test_greedy, test_top_k_sets, test_allowed_ids,
                            test_top_p_sets, test_min_p_sets, test_distribution_small,
                            test_distribution_wide, test_penalties_exact, test_logprobs,
                            test_logprobs_large_k, test_conformance_vector, test_conformance_scalar,
                            test_conformance_large_vocab, test_determinism, test_edges));
    return ifd_test_run(s);
}
