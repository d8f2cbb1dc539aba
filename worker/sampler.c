/*
 * sampler.c — the CPU sampler: the definition in sampler.h, computed without
 * sorting the vocabulary.
 *
 * Per call: one pass checks the row (copying it first when bias or
 * penalties apply; penalties touch only the history's ids, through a per-id
 * counter array that is all zeros between calls) and takes the maximum of
 * every 1024-token block, which gives the argmax. For a random draw,
 * vectorized passes scale the row and compute every integer weight
 * (sampling_math.h; zero where min-p fails) with its bin: floor(8 * nats
 * below the maximum). Without top-k and top-p the draw walks the weights in
 * id order. Otherwise a histogram of count and weight per bin locates each
 * cut: bins are ordered by value, so the cut lies in one bin, every token in
 * an earlier bin survives and none in a later one. The exact cut inside that
 * bin comes from a quickselect over its few tokens, and the draw walks the
 * list of survivors in id order, as the definition requires. Tight cuts lie
 * near the maximum, so the histogram first covers only the first 8 nats
 * (skipping 64-token blocks with nothing there) and widens when needed.
 * Cost: a few vectorized passes over the row; no sort.
 *
 * The row loops ("row kernels") are compiled twice, for the baseline ISA and
 * for AVX2 (picked at create time from ifd_cpu_features()); their "omp simd"
 * pragmas take effect through -fopenmp-simd (no OpenMP runtime). Vector and
 * scalar code give identical results: the weights are a fixed sequence of
 * IEEE operations, and the reductions are integer sums, max, or OR.
 *
 * Invariants: s->counts[] is all zeros outside ifd_sampler_sample /
 * ifd_sampler_process_logits; no allocation after ifd_sampler_create.
 * This file must be compiled without FP contraction (see sampling_math.h).
 */
#include "sampler.h"

#include "error.h"
#include "kernels.h"
#include "log.h"
#include "sampling_math.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(IFD_SAMPLER_MAX_VOCAB == IFD_SAMPLING_MAX_VOCAB, "vocabulary limits differ");

/* The prompt-membership flag in counts[]; the low bits count generated ids. */
#define PROMPT_BIT 0x80000000u

/* Block size of the fused check-and-maximum scan of a row. */
#define SCAN_BLOCK      1024
#define MAX_SCAN_BLOCKS (IFD_SAMPLER_MAX_VOCAB / SCAN_BLOCK)

/* Histogram bins per nat below the maximum; candidates lie within 30 nats.
 * Bin NO_BIN counts the tokens with weight 0. */
#define BINS_PER_NAT 8
#define NBINS        (30 * BINS_PER_NAT + 1)
#define NO_BIN       255
/* The histogram first covers bins 0..GUESS_BINS (8 nats below the maximum),
 * then, when a cut lies deeper, twice that, then all. */
#define GUESS_BINS (8 * BINS_PER_NAT)
/* Tokens per entry of the block-minimum index over bins, which lets scans
 * for the tokens near the maximum skip whole blocks. */
#define BIN_BLOCK      64
#define MAX_BIN_BLOCKS (IFD_SAMPLER_MAX_VOCAB / BIN_BLOCK)
_Static_assert(NBINS <= NO_BIN, "bins must fit in a byte");

typedef struct {
    float s;    /* scaled logit */
    int32_t id; /* token id */
    uint64_t q; /* integer weight (sampling_math.h) */
} cand_t;

/* The row kernels, in one ISA flavour (see the file comment). */
typedef struct {
    int (*any_bad)(const float *x, int32_t n);
    float (*row_max)(const float *x, int32_t n);
    int (*scan)(const float *x, int32_t n, float *bmax);
    void (*scale)(const float *x, int32_t n, float t, float *out);
    uint64_t (*weights)(const float *s, int32_t n, float m, uint64_t qmin, uint64_t *q,
                        uint8_t *bin, float *vtmp);
    uint64_t (*weight_sum)(const float *s, int32_t n, float m, float *vtmp);
    int32_t (*count_ge)(const float *x, int32_t n, float v);
    void (*bin_min)(const uint8_t *bin, int32_t n, uint8_t *bmin);
} row_kernels_t;

struct ifd_sampler {
    int32_t vocab;
    const row_kernels_t *k;
    float *logits;    /* [vocab] processed copy of the row */
    float *scaled;    /* [vocab] processed logits / temperature */
    uint64_t *q;      /* [vocab] integer weights; then top-p scratch */
    uint8_t *bin;     /* [vocab] histogram bin of each weight */
    float *fwork;     /* [vocab] float scratch: weights, quickselects */
    cand_t *work;     /* [vocab] the survivor list, ascending id */
    uint32_t *counts; /* [vocab] history counters, zero between calls */
    uint32_t *mask;   /* [(vocab + 31) / 32] a constraint's allowed tokens */
    float block_max[MAX_SCAN_BLOCKS];
    uint8_t bin_min[MAX_BIN_BLOCKS]; /* smallest bin of each BIN_BLOCK tokens */
    uint32_t bin_count[NO_BIN + 1];
    uint64_t bin_mass[NO_BIN + 1];
    /* Four interleaved partial histograms: consecutive tokens often share a
     * bin, and one array would chain every update through memory. */
    uint32_t part_count[4][NO_BIN + 1];
    uint64_t part_mass[4][NO_BIN + 1];
};

/* ---- row kernels ----------------------------------------------------------- */

#define IFD__ALWAYS_INLINE static inline __attribute__((always_inline))

IFD__ALWAYS_INLINE int any_bad_body(const float *restrict x, int32_t n)
{
    int bad = 0;
#pragma omp simd reduction(| : bad)
    for (int32_t i = 0; i < n; i++)
        bad |= (x[i] != x[i]) | (x[i] > FLT_MAX);
    return bad;
}

/* x holds no NaN. */
IFD__ALWAYS_INLINE float row_max_body(const float *restrict x, int32_t n)
{
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int32_t i = 0; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

/* The maximum of every SCAN_BLOCK-wide block of x [n] into bmax; returns
 * nonzero if x holds a NaN or +inf (the maxima are then meaningless). */
IFD__ALWAYS_INLINE int scan_body(const float *restrict x, int32_t n, float *restrict bmax)
{
    int bad = 0;
    for (int32_t b = 0; b < n; b += SCAN_BLOCK) {
        const float *restrict xb = x + b;
        int32_t e = n - b < SCAN_BLOCK ? n - b : SCAN_BLOCK;
        float m = -INFINITY;
        int bb = 0;
#pragma omp simd reduction(max : m) reduction(| : bb)
        for (int32_t i = 0; i < e; i++) {
            bb |= (xb[i] != xb[i]) | (xb[i] > FLT_MAX);
            m = xb[i] > m ? xb[i] : m;
        }
        bmax[b / SCAN_BLOCK] = m;
        bad |= bb;
    }
    return bad;
}

IFD__ALWAYS_INLINE void scale_body(const float *restrict x, int32_t n, float t, float *restrict out)
{
#pragma omp simd
    for (int32_t i = 0; i < n; i++)
        out[i] = x[i] / t;
}

/* The bin of a candidate: floor(-x * 8) for x = s - m in [-30, 0]. Monotone
 * in s, so every value in a lower bin is larger than every value in a higher
 * one. */
IFD__ALWAYS_INLINE int bin_of(float x)
{
    float b = -x * (float)BINS_PER_NAT;
    return b < (float)(NBINS - 1) ? (int)b : NBINS - 1;
}

/* q[i] = the weight of s[i] below the maximum m (no NaN in s, m >= all), or 0
 * when under qmin (>= 1), and bin[i] its bin (meaningful where q[i] > 0);
 * returns the sum of q, exact since n <= 2^20. vtmp [n] is scratch: the float
 * part runs at full vector width over 32-bit lanes, the rounding to 64-bit
 * integers in a second loop. */
IFD__ALWAYS_INLINE uint64_t weights_body(const float *restrict s, int32_t n, float m, uint64_t qmin,
                                         uint64_t *restrict q, uint8_t *restrict bin,
                                         float *restrict vtmp)
{
#pragma omp simd
    for (int32_t i = 0; i < n; i++) {
        float x = s[i] == m ? 0.0f : s[i] - m;
        vtmp[i] = ifd_sampling_weight_value(x);
        bin[i] = (uint8_t)bin_of(x);
    }
    uint64_t sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int32_t i = 0; i < n; i++) {
        uint64_t w = ifd_sampling_round(vtmp[i]);
        w = w >= qmin ? w : 0;
        q[i] = w;
        sum += w;
    }
    return sum;
}

/* The sum of the weights of s [n] below m, in blocks through vtmp
 * [SCAN_BLOCK] as in weights_body. */
IFD__ALWAYS_INLINE uint64_t weight_sum_body(const float *restrict s, int32_t n, float m,
                                            float *restrict vtmp)
{
    uint64_t sum = 0;
    for (int32_t b = 0; b < n; b += SCAN_BLOCK) {
        const float *restrict sb = s + b;
        int32_t e = n - b < SCAN_BLOCK ? n - b : SCAN_BLOCK;
#pragma omp simd
        for (int32_t i = 0; i < e; i++)
            vtmp[i] = ifd_sampling_weight_value(sb[i] == m ? 0.0f : sb[i] - m);
        uint64_t bs = 0;
#pragma omp simd reduction(+ : bs)
        for (int32_t i = 0; i < e; i++)
            bs += ifd_sampling_round(vtmp[i]);
        sum += bs;
    }
    return sum;
}

IFD__ALWAYS_INLINE int32_t count_ge_body(const float *restrict x, int32_t n, float v)
{
    int32_t c = 0;
#pragma omp simd reduction(+ : c)
    for (int32_t i = 0; i < n; i++)
        c += x[i] >= v;
    return c;
}

/* bmin[j] = the smallest bin among tokens [j * BIN_BLOCK, (j+1) * BIN_BLOCK). */
IFD__ALWAYS_INLINE void bin_min_body(const uint8_t *restrict bin, int32_t n, uint8_t *restrict bmin)
{
    for (int32_t b = 0; b < n; b += BIN_BLOCK) {
        const uint8_t *restrict bb = bin + b;
        int32_t e = n - b < BIN_BLOCK ? n - b : BIN_BLOCK;
        uint8_t m = 255;
#pragma omp simd reduction(min : m)
        for (int32_t i = 0; i < e; i++)
            m = bb[i] < m ? bb[i] : m;
        bmin[b / BIN_BLOCK] = m;
    }
}

#define IFD__ROW_KERNELS(SUFFIX, ATTR)                                                             \
    ATTR static int any_bad_##SUFFIX(const float *x, int32_t n)                                    \
    {                                                                                              \
        return any_bad_body(x, n);                                                                 \
    }                                                                                              \
    ATTR static float row_max_##SUFFIX(const float *x, int32_t n)                                  \
    {                                                                                              \
        return row_max_body(x, n);                                                                 \
    }                                                                                              \
    ATTR static int scan_##SUFFIX(const float *x, int32_t n, float *bmax)                          \
    {                                                                                              \
        return scan_body(x, n, bmax);                                                              \
    }                                                                                              \
    ATTR static void scale_##SUFFIX(const float *x, int32_t n, float t, float *out)                \
    {                                                                                              \
        scale_body(x, n, t, out);                                                                  \
    }                                                                                              \
    ATTR static uint64_t weights_##SUFFIX(const float *s, int32_t n, float m, uint64_t qmin,       \
                                          uint64_t *q, uint8_t *bin, float *vtmp)                  \
    {                                                                                              \
        return weights_body(s, n, m, qmin, q, bin, vtmp);                                          \
    }                                                                                              \
    ATTR static uint64_t weight_sum_##SUFFIX(const float *s, int32_t n, float m, float *vtmp)      \
    {                                                                                              \
        return weight_sum_body(s, n, m, vtmp);                                                     \
    }                                                                                              \
    ATTR static int32_t count_ge_##SUFFIX(const float *x, int32_t n, float v)                      \
    {                                                                                              \
        return count_ge_body(x, n, v);                                                             \
    }                                                                                              \
    ATTR static void bin_min_##SUFFIX(const uint8_t *bin, int32_t n, uint8_t *bmin)                \
    {                                                                                              \
        bin_min_body(bin, n, bmin);                                                                \
    }                                                                                              \
    static const row_kernels_t row_kernels_##SUFFIX = {                                            \
        any_bad_##SUFFIX, row_max_##SUFFIX,    scan_##SUFFIX,     scale_##SUFFIX,                  \
        weights_##SUFFIX, weight_sum_##SUFFIX, count_ge_##SUFFIX, bin_min_##SUFFIX,                \
    };

IFD__ROW_KERNELS(base, )
#if defined(__x86_64__) && defined(__GNUC__)
#define IFD__SAMPLER_HAVE_AVX2 1
IFD__ROW_KERNELS(avx2, __attribute__((target("avx2"))))
#endif

static const row_kernels_t *pick_row_kernels(void)
{
#ifdef IFD__SAMPLER_HAVE_AVX2
    if (ifd_cpu_features()->avx2)
        return &row_kernels_avx2;
#endif
    return &row_kernels_base;
}

ifd_sampling_params_t ifd_sampling_default_params(void)
{
    ifd_sampling_params_t p = {
        .temperature = 1.0f,
        .top_k = 0,
        .top_p = 1.0f,
        .min_p = 0.0f,
        .repetition_penalty = 1.0f,
        .frequency_penalty = 0.0f,
        .presence_penalty = 0.0f,
        .logit_bias = NULL,
        .n_logit_bias = 0,
        .n_logprobs = -1,
        .logprobs_mode = IFD_LOGPROBS_RAW,
        .seed = 0,
    };
    return p;
}

int ifd_sampling_params_check(const ifd_sampling_params_t *p, int32_t vocab)
{
    if (!p || vocab < 1 || vocab > IFD_SAMPLER_MAX_VOCAB)
        return IFD_EINVAL;
    if (!(isfinite(p->temperature) && p->temperature >= 0.0f))
        return IFD_EINVAL;
    if (!(p->top_p >= 0.0f && p->top_p <= 1.0f))
        return IFD_EINVAL;
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return IFD_EINVAL;
    if (!(isfinite(p->repetition_penalty) && p->repetition_penalty > 0.0f))
        return IFD_EINVAL;
    if (!isfinite(p->frequency_penalty) || !isfinite(p->presence_penalty))
        return IFD_EINVAL;
    if (p->n_logprobs < -1 || p->n_logprobs > IFD_SAMPLER_MAX_VOCAB)
        return IFD_EINVAL;
    if (p->logprobs_mode != IFD_LOGPROBS_RAW && p->logprobs_mode != IFD_LOGPROBS_PROCESSED)
        return IFD_EINVAL;
    if (p->n_logit_bias > 0 && !p->logit_bias)
        return IFD_EINVAL;
    if (p->n_lp_ids > IFD_SAMPLER_MAX_LP_IDS || (p->n_lp_ids && !p->lp_ids))
        return IFD_EINVAL;
    for (uint32_t i = 0; i < p->n_lp_ids; i++)
        if (p->lp_ids[i] < 0 || p->lp_ids[i] >= vocab)
            return IFD_ERANGE;
    for (uint32_t i = 0; i < p->n_logit_bias; i++) {
        float b = p->logit_bias[i].bias;
        if (isnan(b) || b == INFINITY)
            return IFD_EINVAL;
        if (p->logit_bias[i].id < 0 || p->logit_bias[i].id >= vocab)
            return IFD_ERANGE;
    }
    return 0;
}

int ifd_sampling_allowed_mask(const int32_t *ids, size_t n, int32_t vocab, uint32_t **out)
{
    *out = NULL;
    if (n == 0 || vocab < 1)
        return IFD_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return IFD_ERANGE;
    uint32_t *m = calloc(((size_t)vocab + 31) / 32, sizeof *m);
    if (!m)
        return IFD_ENOMEM;
    for (size_t i = 0; i < n; i++)
        m[ids[i] / 32] |= 1u << (ids[i] % 32);
    *out = m;
    return 0;
}

int ifd_sampler_create(int32_t vocab, ifd_sampler_t **out)
{
    *out = NULL;
    if (vocab < 1 || vocab > IFD_SAMPLER_MAX_VOCAB)
        return IFD_EINVAL;
    ifd_sampler_t *s = calloc(1, sizeof *s);
    if (!s)
        return IFD_ENOMEM;
    size_t n = (size_t)vocab;
    s->vocab = vocab;
    s->k = pick_row_kernels();
    s->logits = malloc(n * sizeof *s->logits);
    s->scaled = malloc(n * sizeof *s->scaled);
    s->q = malloc(n * sizeof *s->q);
    s->bin = malloc(n * sizeof *s->bin);
    s->fwork = malloc(n * sizeof *s->fwork);
    s->work = malloc(n * sizeof *s->work);
    s->counts = calloc(n, sizeof *s->counts);
    /* zeroed: a constraint writes only its tokenizer's words, and ids past
     * them (a padded vocabulary) stay disallowed, as their -inf bias says */
    s->mask = calloc((n + 31) / 32, sizeof *s->mask);
    if (!s->logits || !s->scaled || !s->q || !s->bin || !s->fwork || !s->work || !s->counts ||
        !s->mask) {
        IFD_ERROR("sampler: allocating scratch for a vocabulary of %d failed", vocab);
        ifd_sampler_destroy(s);
        return IFD_ENOMEM;
    }
    *out = s;
    return 0;
}

void ifd_sampler_destroy(ifd_sampler_t *s)
{
    if (!s)
        return;
    free(s->logits);
    free(s->scaled);
    free(s->q);
    free(s->bin);
    free(s->fwork);
    free(s->work);
    free(s->counts);
    free(s->mask);
    free(s);
}

int32_t ifd_sampler_vocab(const ifd_sampler_t *s)
{
    return s->vocab;
}

/* ---- steps 1-3: bias and penalties ------------------------------------- */

static bool bad_value(float v)
{
    return isnan(v) || v == INFINITY;
}

/* For a row known to hold a NaN or +inf: logs the first, returns IFD_EINVAL. */
static int report_bad(const float *x, int32_t n)
{
    for (int32_t i = 0; i < n; i++) {
        if (bad_value(x[i])) {
            IFD_WARN("sampler: logit of token %d is %f", i, (double)x[i]);
            break;
        }
    }
    return IFD_EINVAL;
}

static bool penalties_active(const ifd_sampling_params_t *p)
{
    return p->repetition_penalty != 1.0f || p->frequency_penalty != 0.0f ||
           p->presence_penalty != 0.0f;
}

static int check_history(const int32_t *ids, size_t n, int32_t vocab, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= vocab) {
            IFD_DEBUG("sampler: %s token %zu is %d, outside the vocabulary of %d", what, i, ids[i],
                      vocab);
            return IFD_ERANGE;
        }
    }
    return 0;
}

/* Applies the penalties to l for each distinct id of ids[], using and
 * clearing counts[]. Returns true if a result is NaN or +inf (counts are
 * cleared regardless). */
static bool penalize_ids(const ifd_sampling_params_t *p, float *restrict l,
                         uint32_t *restrict counts, const int32_t *ids, size_t n)
{
    const float rp = p->repetition_penalty;
    const float fp = p->frequency_penalty;
    const float pp = p->presence_penalty;
    bool bad = false;
    for (size_t i = 0; i < n; i++) {
        int32_t t = ids[i];
        uint32_t c = counts[t];
        if (!c)
            continue; /* already done, or a duplicate */
        counts[t] = 0;
        float v = l[t];
        if (rp != 1.0f)
            v = v > 0.0f ? v / rp : v * rp;
        uint32_t gen = c & ~PROMPT_BIT;
        if (gen) {
            v = v - fp * (float)gen;
            v = v - pp;
        }
        l[t] = v;
        bad |= bad_value(v);
    }
    return bad;
}

/*
 * Steps 1-3 from `in` into `dst`, checking the row and the history. With dst
 * NULL only checks the history, for a caller that knows nothing applies and
 * checks the row itself. Returns 0, IFD_EINVAL or IFD_ERANGE.
 */
static int process(ifd_sampler_t *s, const ifd_sampling_params_t *p, const float *in,
                   const ifd_sampler_history_t *hist, float *dst)
{
    const int32_t V = s->vocab;
    static const ifd_sampler_history_t empty = {0};
    if (!hist)
        hist = &empty;
    if ((hist->n_prompt && !hist->prompt) || (hist->n_generated && !hist->generated))
        return IFD_EINVAL;
    int err = check_history(hist->prompt, hist->n_prompt, V, "prompt");
    if (!err)
        err = check_history(hist->generated, hist->n_generated, V, "generated");
    if (err)
        return err;

    if (!dst)
        return 0;
    if (s->k->any_bad(in, V))
        return report_bad(in, V);
    memcpy(dst, in, (size_t)V * sizeof *dst);

    bool badv = false;
    for (uint32_t i = 0; i < p->n_logit_bias; i++) {
        int32_t id = p->logit_bias[i].id;
        dst[id] = dst[id] + p->logit_bias[i].bias;
        badv |= bad_value(dst[id]);
    }
    if (penalties_active(p) && (hist->n_prompt || hist->n_generated)) {
        uint32_t *counts = s->counts;
        for (size_t i = 0; i < hist->n_generated; i++)
            counts[hist->generated[i]] += 1; /* histories are far below 2^31 */
        for (size_t i = 0; i < hist->n_prompt; i++)
            counts[hist->prompt[i]] |= PROMPT_BIT;
        badv |= penalize_ids(p, dst, counts, hist->generated, hist->n_generated);
        badv |= penalize_ids(p, dst, counts, hist->prompt, hist->n_prompt);
    }
    if (badv) {
        IFD_WARN("sampler: logit bias or penalties made a logit NaN or +inf");
        return IFD_EINVAL;
    }
    return 0;
}

int ifd_sampler_process_logits(ifd_sampler_t *s, const ifd_sampling_params_t *p,
                               const float *logits, const ifd_sampler_history_t *hist, float *out)
{
    int err = ifd_sampling_params_check(p, s->vocab);
    if (err)
        return err;
    /* Work in the scratch row so that an error leaves `out` untouched. */
    err = process(s, p, logits, hist, s->logits);
    if (err)
        return err;
    memcpy(out, s->logits, (size_t)s->vocab * sizeof *out);
    return 0;
}

/* ---- selection ----------------------------------------------------------- */

/* Index of the first maximum of x [n] (n >= 1, no NaN) from its block
 * maxima bmax (see scan_body): the first block holding the maximum, then the
 * index within it. */
static int32_t argmax(const float *x, int32_t n, const float *bmax)
{
    int32_t nb = (n + SCAN_BLOCK - 1) / SCAN_BLOCK, best = 0;
    for (int32_t b = 1; b < nb; b++)
        if (bmax[b] > bmax[best])
            best = b;
    int32_t lo = best * SCAN_BLOCK, hi = n - lo < SCAN_BLOCK ? n : lo + SCAN_BLOCK;
    for (int32_t i = lo; i < hi; i++)
        if (x[i] == bmax[best])
            return i;
    return lo;
}

static float median3(float a, float b, float c)
{
    if (a < b) {
        if (b < c)
            return b;
        return a < c ? c : a;
    }
    if (a < c)
        return a;
    return b < c ? c : b;
}

/* The k-th largest value of a [n] (1 <= k <= n), counted with multiplicity;
 * reorders a. Quickselect with a three-way partition, so runs of equal
 * values cost one step. */
static float kth_largest(float *a, size_t n, size_t k)
{
    size_t lo = 0, hi = n;
    for (;;) {
        float piv = median3(a[lo], a[lo + (hi - lo) / 2], a[hi - 1]);
        /* [lo, gt) > piv, [gt, i) == piv, [lt, hi) < piv */
        size_t gt = lo, i = lo, lt = hi;
        while (i < lt) {
            float v = a[i];
            if (v > piv) {
                a[i] = a[gt];
                a[gt] = v;
                gt++;
                i++;
            } else if (v < piv) {
                lt--;
                a[i] = a[lt];
                a[lt] = v;
            } else {
                i++;
            }
        }
        size_t ngt = gt - lo, neq = lt - gt;
        if (k <= ngt) {
            hi = gt;
        } else if (k <= ngt + neq) {
            return piv;
        } else {
            k -= ngt + neq;
            lo = lt;
        }
    }
}

/*
 * The top-p cut within one bin: the smallest value v among vs [n] (n >= 1,
 * with weights vq [n]) such that (double)(acc + sum of vq over elements with
 * vs > v) < thr, or v == m, where acc is the weight of all survivors above
 * the bin. The caller guarantees the bin's largest value qualifies. Reorders
 * both arrays alike. Invariant: [lo, hi) holds the undecided values, all
 * below the current cut and above every value known to fail; acc is the
 * weight of every element above [lo, hi).
 */
static float topp_cut(float *vs, uint64_t *vq, size_t n, double thr, float m, uint64_t acc)
{
    float cut = INFINITY;
    size_t lo = 0, hi = n;
#define SWAP(a, b)                                                                                 \
    do {                                                                                           \
        float ts = vs[a];                                                                          \
        uint64_t tq = vq[a];                                                                       \
        vs[a] = vs[b];                                                                             \
        vq[a] = vq[b];                                                                             \
        vs[b] = ts;                                                                                \
        vq[b] = tq;                                                                                \
    } while (0)
    while (lo < hi) {
        float piv = median3(vs[lo], vs[lo + (hi - lo) / 2], vs[hi - 1]);
        size_t gt = lo, i = lo, lt = hi;
        uint64_t wgt = 0, weq = 0;
        while (i < lt) {
            if (vs[i] > piv) {
                wgt += vq[i];
                SWAP(i, gt);
                gt++;
                i++;
            } else if (vs[i] < piv) {
                lt--;
                SWAP(i, lt);
            } else {
                weq += vq[i];
                i++;
            }
        }
        if ((double)(acc + wgt) < thr || piv == m) {
            cut = piv; /* kept: so is everything above; look below */
            acc += wgt + weq;
            lo = lt;
        } else {
            hi = gt; /* dropped: so is everything below; look above */
        }
    }
#undef SWAP
    IFD_ASSERT(cut != INFINITY);
    return cut;
}

/* The bin of a survivor from its scaled logit. */
static int bin_of_s(float sv, float m)
{
    return bin_of(sv == m ? 0.0f : sv - m);
}

/* The count and weight of the tokens with nonzero weight in each bin
 * 0..upto into s->bin_count / s->bin_mass (other bins zero). */
static void histogram(ifd_sampler_t *s, int upto)
{
    const int32_t V = s->vocab;
    const uint64_t *restrict q = s->q;
    const uint8_t *restrict bin = s->bin;
    uint32_t *restrict bc = s->bin_count;
    uint64_t *restrict bm = s->bin_mass;
    memset(bc, 0, sizeof s->bin_count);
    memset(bm, 0, sizeof s->bin_mass);
    if (upto < NBINS - 1) {
        /* Few tokens lie near the maximum: visit only their blocks. */
        for (int32_t j = 0; j * BIN_BLOCK < V; j++) {
            if (s->bin_min[j] > upto)
                continue;
            int32_t e = V - j * BIN_BLOCK < BIN_BLOCK ? V : (j + 1) * BIN_BLOCK;
            for (int32_t i = j * BIN_BLOCK; i < e; i++) {
                if (bin[i] <= upto && q[i]) {
                    bc[bin[i]]++;
                    bm[bin[i]] += q[i];
                }
            }
        }
        return;
    }
    /* All bins: branch-free, weight-0 tokens into NO_BIN (all ones) by a
     * mask, over four interleaved partial histograms. */
    memset(s->part_count, 0, sizeof s->part_count);
    memset(s->part_mass, 0, sizeof s->part_mass);
#define HIST(j, i)                                                                                 \
    do {                                                                                           \
        uint64_t qi = q[i];                                                                        \
        unsigned b = bin[i] | (0u - (unsigned)(qi == 0));                                          \
        b &= NO_BIN;                                                                               \
        s->part_count[j][b]++;                                                                     \
        s->part_mass[j][b] += qi;                                                                  \
    } while (0)
    int32_t i = 0;
    for (; i + 4 <= V; i += 4) {
        HIST(0, i);
        HIST(1, i + 1);
        HIST(2, i + 2);
        HIST(3, i + 3);
    }
    for (; i < V; i++)
        HIST(0, i);
#undef HIST
    for (int b = 0; b < NBINS; b++) {
        bc[b] =
            s->part_count[0][b] + s->part_count[1][b] + s->part_count[2][b] + s->part_count[3][b];
        bm[b] = s->part_mass[0][b] + s->part_mass[1][b] + s->part_mass[2][b] + s->part_mass[3][b];
    }
}

/* The next histogram range after bins 0..upto. */
static int widen(int upto)
{
    return upto < 2 * GUESS_BINS ? 2 * GUESS_BINS : NBINS - 1;
}

/* Lists the tokens with nonzero weight in bins 0..b into list, in id order;
 * returns their number. Branchy on purpose: few tokens qualify when a cut
 * is tight, and a branch-free store would chain every iteration on n. */
static size_t list_bins(ifd_sampler_t *s, const float *restrict sc, int b)
{
    const int32_t V = s->vocab;
    const uint64_t *restrict q = s->q;
    const uint8_t *restrict bin = s->bin;
    cand_t *restrict list = s->work;
    size_t n = 0;
    for (int32_t j = 0; j * BIN_BLOCK < V; j++) {
        if (s->bin_min[j] > b)
            continue;
        int32_t e = V - j * BIN_BLOCK < BIN_BLOCK ? V : (j + 1) * BIN_BLOCK;
        for (int32_t i = j * BIN_BLOCK; i < e; i++) {
            if (bin[i] <= b && q[i]) {
                list[n].s = sc[i];
                list[n].id = i;
                list[n].q = q[i];
                n++;
            }
        }
    }
    return n;
}

/* The draw over every token, weights q [V] in id order, for a target below
 * their sum. */
static int32_t walk_row(const uint64_t *restrict q, int32_t V, uint64_t target)
{
    uint64_t run = 0;
    for (int32_t i = 0; i < V; i++) {
        run += q[i];
        if (run > target)
            return i;
    }
    IFD_ASSERT(!"sampler: the draw ran past the total weight");
    return -1;
}

/* Steps 5-7 on the processed row l [V] with maximum lmax (finite or +inf).
 * *z_row is set to the sum of all weights of l at T = 1 when this draw
 * computed it on the way (T == 1, no min-p), else to 0. */
static int32_t draw(ifd_sampler_t *s, const ifd_sampling_params_t *p, const float *l, float lmax,
                    uint64_t position, uint64_t *z_row)
{
    const int32_t V = s->vocab;
    const float T = p->temperature;
    /* Division by T > 0 is monotone, so max(l / T) == max(l) / T. */
    const float *sc = l;
    float m = lmax;
    if (T != 1.0f) {
        s->k->scale(l, V, T, s->scaled);
        sc = s->scaled;
        m = lmax / T;
    }
    /* a. min-p: q >= ceil(min_p * 2^43), the integer form of the definition;
     * the kernel zeroes the weights below. */
    double minq = ceil((double)p->min_p * (double)(1ull << IFD_SAMPLING_WEIGHT_BITS));
    const uint64_t qmin = minq > 1.0 ? (uint64_t)minq : 1;
    uint64_t total = s->k->weights(sc, V, m, qmin, s->q, s->bin, s->fwork);
    IFD_ASSERT(total >= (1ull << IFD_SAMPLING_WEIGHT_BITS));
    *z_row = T == 1.0f && qmin == 1 ? total : 0;
    uint64_t *restrict q = s->q;

    bool use_k = p->top_k > 0 && p->top_k < V;
    bool use_p = p->top_p < 1.0f;
    if (!use_k && !use_p)
        return walk_row(q, V, ifd_sampling_target(p->seed, position, total));

    /* The histogram, first of the bins within GUESS_BINS of the maximum
     * only (where tight cuts lie; cheap when few tokens are there), widened
     * when a cut lies deeper. */
    const uint64_t *restrict bm = s->bin_mass;
    const uint32_t *restrict bc = s->bin_count;
    s->k->bin_min(s->bin, V, s->bin_min);
    int upto = GUESS_BINS;
    histogram(s, upto);

    /* The list: survivors so far, in id order, built once from the row and
     * then only filtered. Every cut lies in one bin: tokens in bins before it
     * survive whole, tokens in bins after it not at all. */
    cand_t *restrict list = s->work;
    size_t n = 0;
    int last = NBINS - 1; /* the last bin that can hold survivors */
    bool listed = false;

    /* b. top-k: the bin holding the k-th largest value of the min-p
     * survivors (with fewer than k survivors nothing is cut). */
    if (use_k) {
        size_t k = (size_t)p->top_k, cnt = 0;
        for (int b = 0; b <= upto; b++)
            cnt += bc[b];
        while (cnt < k && upto < NBINS - 1) {
            upto = widen(upto);
            histogram(s, upto);
            cnt = 0;
            for (int b = 0; b <= upto; b++)
                cnt += bc[b];
        }
        if (cnt >= k) {
            size_t before = 0;
            int b = 0;
            while (before + bc[b] < k)
                before += bc[b++];
            n = list_bins(s, sc, b);
            listed = true;
            size_t nb = 0;
            for (size_t j = 0; j < n; j++)
                if (bin_of_s(list[j].s, m) == b)
                    s->fwork[nb++] = list[j].s;
            float cut = kth_largest(s->fwork, nb, k - before);
            size_t w = 0;
            uint64_t mass = 0;
            for (size_t j = 0; j < n; j++) {
                list[w] = list[j];
                w += list[j].s >= cut;
                mass += list[j].s >= cut && bin_of_s(list[j].s, m) == b ? list[j].q : 0;
            }
            n = w;
            last = b;
            total = mass;
            for (int bb = 0; bb < last; bb++)
                total += bm[bb];
        }
    }

    /* c. top-p: the first bin at which the running weight reaches the
     * threshold holds the cut (after a top-k cut, within its bins). */
    if (use_p) {
        const double thr = (double)p->top_p * (double)total;
        uint64_t acc;
        int b;
        for (;;) {
            int lim = last < upto ? last : upto;
            acc = 0;
            b = 0;
            while (b < lim && (double)(acc + bm[b]) < thr)
                acc += bm[b++];
            if (b < last && b == upto && (double)(acc + bm[b]) < thr) {
                upto = widen(upto); /* the cut lies deeper */
                histogram(s, upto);
                continue;
            }
            break;
        }
        if (!listed) {
            n = list_bins(s, sc, b);
            listed = true;
        }
        /* The cut bin's values and weights, for the quickselect (the row's
         * weights are no longer needed, so q[] is scratch now). */
        size_t nb = 0;
        for (size_t j = 0; j < n; j++) {
            if (bin_of_s(list[j].s, m) == b) {
                s->fwork[nb] = list[j].s;
                q[nb] = list[j].q;
                nb++;
            }
        }
        float cut = topp_cut(s->fwork, q, nb, thr, m, acc);
        size_t w = 0;
        for (size_t j = 0; j < n; j++) {
            list[w] = list[j];
            w += list[j].s >= cut;
        }
        n = w;
    }

    if (!listed) /* top-k cut nothing, and no top-p */
        return walk_row(q, V, ifd_sampling_target(p->seed, position, total));
    total = 0;
    for (size_t j = 0; j < n; j++)
        total += list[j].q;
    uint64_t target = ifd_sampling_target(p->seed, position, total), run = 0;
    for (size_t j = 0; j < n; j++) {
        run += list[j].q;
        if (run > target)
            return list[j].id;
    }
    IFD_ASSERT(!"sampler: the draw ran past the total weight");
    return -1;
}

/* ---- logprobs ------------------------------------------------------------- */

/* a before b in the top list: larger value first, equal values (-0 equal
 * to +0) by ascending id. A strict total order, so any selection gives the
 * one list a full sort would. */
static inline bool top_before(const cand_t *a, const cand_t *b)
{
    return a->s > b->s || (a->s == b->s && a->id < b->id);
}

static int top_cmp(const void *a, const void *b)
{
    return top_before(a, b) ? -1 : top_before(b, a) ? 1 : 0;
}

/* Reorders c[0..n) so that its first k (0 < k < n) are the k first in
 * top_before order, unsorted (Hoare's quickselect, median-of-three pivot:
 * linear on average, as nth_element). */
static void top_select(cand_t *c, int32_t n, int32_t k)
{
    int32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        const int32_t mid = lo + (hi - lo) / 2;
        cand_t a = c[lo], b = c[mid], d = c[hi], piv;
        if (top_before(&a, &b))
            piv = top_before(&b, &d) ? b : top_before(&a, &d) ? d : a;
        else
            piv = top_before(&a, &d) ? a : top_before(&b, &d) ? d : b;
        int32_t i = lo, j = hi;
        while (i <= j) {
            while (top_before(&c[i], &piv))
                i++;
            while (top_before(&piv, &c[j]))
                j--;
            if (i <= j) {
                cand_t t = c[i];
                c[i++] = c[j];
                c[j--] = t;
            }
        }
        if (k - 1 <= j)
            hi = j;
        else if (k - 1 >= i)
            lo = i;
        else
            return;
    }
}

/* The top k (<= IFD_SAMPLER_INLINE_LOGPROBS) of x [V] into ids / vals, in
 * order, by insertion into a short sorted list: equal values keep ascending
 * id because a later id never passes an equal one. */
static void top_small(const float *x, int32_t V, int32_t k, int32_t *ids, float *vals)
{
    int32_t cnt = 0;
    float floor_v = -INFINITY; /* the smallest listed value once the list is full */
    for (int32_t i = 0; i < V && k > 0; i++) {
        float v = x[i];
        if (cnt == k && !(v > floor_v))
            continue;
        int32_t j = cnt < k ? cnt++ : k - 1;
        while (j > 0 && vals[j - 1] < v) {
            vals[j] = vals[j - 1];
            ids[j] = ids[j - 1];
            j--;
        }
        vals[j] = v;
        ids[j] = i;
        floor_v = vals[cnt - 1];
    }
}

/* The top k (any k <= V) of x [V] into ids / vals, in order: a linear
 * selection over the row in the sampler's candidate scratch, then a sort of
 * the k selected (not of the row). */
static void top_large(ifd_sampler_t *s, const float *x, int32_t V, int32_t k, int32_t *ids,
                      float *vals)
{
    cand_t *c = s->work;
    for (int32_t i = 0; i < V; i++)
        c[i] = (cand_t){x[i], i, 0};
    if (k < V)
        top_select(c, V, k);
    qsort(c, (size_t)k, sizeof *c, top_cmp);
    for (int32_t j = 0; j < k; j++) {
        ids[j] = c[j].id;
        vals[j] = c[j].s;
    }
}

/* The top-k room of out for n entries: inline up to
 * IFD_SAMPLER_INLINE_LOGPROBS, else the caller's (false: too little). */
static bool top_room(ifd_sample_result_t *out, int32_t n, int32_t **ids, float **vals)
{
    if (n <= IFD_SAMPLER_INLINE_LOGPROBS) {
        *ids = out->top_ids;
        *vals = out->top_logprobs;
        return true;
    }
    *ids = out->more_ids;
    *vals = out->more_logprobs;
    return out->more_ids && out->more_logprobs && out->more_cap >= n;
}

/* Logprobs of x [V] (no NaN or +inf) into out (its room checked by the
 * caller, top_room): log-softmax with the normalizer from the integer
 * weights (relative error of a weight < 4e-7, and tokens 30 nats below the
 * maximum add under V * e^-30 to the sum). z, when nonzero, is that sum
 * already computed, with m the row's maximum. */
static void logprobs(ifd_sampler_t *s, const float *x, int32_t token, int32_t n_top,
                     const int32_t *ids, uint32_t n_ids, uint64_t z, float m,
                     ifd_sample_result_t *out)
{
    const int32_t V = s->vocab;
    if (!z)
        m = s->k->row_max(x, V);
    double lse = INFINITY; /* all -inf: every logprob is -inf */
    if (m != -INFINITY) {
        if (!z)
            z = s->k->weight_sum(x, V, m, s->fwork);
        lse = (double)m + log((double)z * 0x1p-43);
    }
#define LOGPROB(v) ((v) == -INFINITY ? -INFINITY : (float)((double)(v)-lse))

    float xt = x[token];
    out->logprob = LOGPROB(xt);
    out->rank = s->k->count_ge(x, V, xt);
    if (n_ids) { /* logprob_token_ids: these, in their order, not the top */
        int32_t *iid;
        float *iv;
        const bool iroom = top_room(out, (int32_t)n_ids, &iid, &iv);
        IFD_ASSERT(iroom); /* checked by the callers (room_for) */
        for (uint32_t j = 0; j < n_ids; j++) {
            iid[j] = ids[j];
            iv[j] = LOGPROB(x[ids[j]]);
        }
        out->n_top = (int32_t)n_ids;
        return;
    }
    const int32_t k = n_top < V ? n_top : V;
    int32_t *tid;
    float *tv;
    const bool room = top_room(out, k, &tid, &tv);
    IFD_ASSERT(room); /* checked by the callers (room_for) */
    if (k <= IFD_SAMPLER_INLINE_LOGPROBS)
        top_small(x, V, k, tid, tv);
    else
        top_large(s, x, V, k, tid, tv);
    out->n_top = k;
    for (int32_t j = 0; j < k; j++)
        tv[j] = LOGPROB(tv[j]);
#undef LOGPROB
}

/* Whether out has room for the top min(n_top, vocab), or for the n_ids
 * logprob_token_ids that replace them. */
static bool room_for(ifd_sample_result_t *out, int32_t n_top, uint32_t n_ids, int32_t vocab)
{
    int32_t *ids;
    float *vals;
    if (n_top < 0)
        return true;
    return top_room(out, n_ids ? (int32_t)n_ids : n_top < vocab ? n_top : vocab, &ids, &vals);
}

int ifd_sampler_logprobs(ifd_sampler_t *s, const float *logits, int32_t token, int32_t n_top,
                         ifd_sample_result_t *out)
{
    if (n_top < 0 || n_top > IFD_SAMPLER_MAX_VOCAB || !room_for(out, n_top, 0, s->vocab))
        return IFD_EINVAL;
    if (token < 0 || token >= s->vocab)
        return IFD_ERANGE;
    if (s->k->scan(logits, s->vocab, s->block_max))
        return report_bad(logits, s->vocab);
    ifd_sample_result_t r = {0};
    r.token = token;
    r.more_ids = out->more_ids;
    r.more_logprobs = out->more_logprobs;
    r.more_cap = out->more_cap;
    logprobs(s, logits, token, n_top, NULL, 0, 0, 0.0f, &r);
    memcpy(out, &r, sizeof r);
    return 0;
}

/* ---- sampling -------------------------------------------------------------- */

int ifd_sampler_sample(ifd_sampler_t *s, const ifd_sampling_params_t *p, const float *logits,
                       const ifd_sampler_history_t *hist, uint64_t position,
                       ifd_sample_result_t *out)
{
    int err = ifd_sampling_params_check(p, s->vocab);
    if (err)
        return err;
    if (!room_for(out, p->n_logprobs, p->n_lp_ids, s->vocab))
        return IFD_EINVAL;
    bool modify = p->n_logit_bias > 0 || p->constraint || p->allowed ||
                  (penalties_active(p) && hist && (hist->n_prompt || hist->n_generated));
    const float *l = modify ? s->logits : logits;
    err = process(s, p, logits, hist, modify ? s->logits : NULL);
    if (err)
        return err;
    if (p->constraint || p->allowed) {
        if (p->constraint) {
            err = ifd_constraint_mask(p->constraint, hist ? hist->generated : NULL,
                                      hist ? hist->n_generated : 0, s->mask);
            if (err) {
                IFD_WARN("sampler: grammar constraint: %s", ifd_strerror(err));
                return err;
            }
        }
        float *x = s->logits;
        for (int32_t w = 0; w < (s->vocab + 31) / 32; w++) {
            uint32_t m = p->constraint ? s->mask[w] : 0xffffffffu;
            if (p->allowed)
                m &= p->allowed[w];
            if (m == 0xffffffffu)
                continue;
            int32_t base = w * 32;
            int32_t end = base + 32 < s->vocab ? base + 32 : s->vocab;
            for (int32_t i = base; i < end; i++)
                if (!((m >> (i - base)) & 1))
                    x[i] = -INFINITY;
        }
    }
    /* The block maxima, and the check of a row that process() did not copy
     * (a processed row is checked already). */
    if (s->k->scan(l, s->vocab, s->block_max))
        return report_bad(l, s->vocab);

    int32_t best = argmax(l, s->vocab, s->block_max);
    float lmax = l[best];
    if (lmax == -INFINITY) {
        IFD_WARN("sampler: every logit is -inf, nothing can be sampled");
        return IFD_EINVAL;
    }

    ifd_sample_result_t r = {0};
    r.more_ids = out->more_ids;
    r.more_logprobs = out->more_logprobs;
    r.more_cap = out->more_cap;
    uint64_t z_row = 0; /* the weight sum of l at T = 1, if the draw made it */
    if (p->temperature < IFD_SAMPLER_GREEDY_TEMP)
        r.token = best;
    else
        r.token = draw(s, p, l, lmax, position, &z_row);
    if (p->n_logprobs >= 0) {
        const float *src = p->logprobs_mode == IFD_LOGPROBS_RAW ? logits : l;
        logprobs(s, src, r.token, p->n_logprobs, p->lp_ids, p->n_lp_ids, src == l ? z_row : 0, lmax,
                 &r);
    }
    memcpy(out, &r, sizeof r);
    return 0;
}
