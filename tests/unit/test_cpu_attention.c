/*
 * test_cpu_attention.c — the paged KV cache kernels: ifd_cpu_kv_write and
 * ifd_cpu_paged_attention against a double-precision reference.
 *
 * Each case builds one layer's K/V pool poisoned with NaN everywhere, gives
 * five sequences shuffled, non-contiguous physical blocks (unused block-table
 * entries −1), writes their K/V through kv_write in shuffled batches with
 * padding slots, and then runs one ragged batch mixing a prefill chunk on top
 * of cached context, a whole prompt, a first token and two decode tokens,
 * interleaved, plus padding rows (seq −1). Outputs start as NaN. Cases cover
 * f32/f16/bf16, q8_0/q4_0 and fp8 KV, GQA group sizes 1..5 and 8, head dims 8..256 (not
 * all multiples of the SIMD width), block sizes 1..32 and sliding windows.
 *
 * Every row kv_write stored must be byte for byte what this file's own
 * encoder gives (ref_encode: f16/bf16 rounding, for q8_0/q4_0 GGML's
 * reference quantizers in the row layout cpu_kernels.h documents, for fp8 the
 * nearest e4m3 code found by search); every row
 * it did not store keeps its poison bytes.
 *
 * Tolerance: |out − ref| ≤ 4e-6 (outputs are convex combinations of V rows
 * with |v| ≤ 1; f32 scores and accumulation; the double reference uses the
 * K/V values as stored, i.e. after f16/bf16 rounding or quantization, decoded
 * by ref_decode, and over q8_0/q4_0 K/V the query as the kernel quantizes it,
 * quant_query_ref: int8 per value, an f32 scale per 32). The pool's result
 * must be bitwise equal to the single-thread result.
 *
 * CTest runs this binary natively and with INFERD_CPU=avx2 / scalar.
 */
#include "testutil.h"

#include "cpu/cpu_kernels.h"
#include "cpu/kv_fp8.h"
#include "error.h"
#include "kernels.h"
#include "rng.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    return ifd_rng_mix64(rng_state += 0x9e3779b97f4a7c15ull); /* SplitMix64 */
}

static float rnd(float lo, float hi)
{
    return lo + (hi - lo) * (float)((rng_next() >> 40) * (1.0 / 16777216.0));
}

static void shuffle_int(int *a, int n)
{
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(rng_next() % (uint64_t)(i + 1));
        int t = a[i];
        a[i] = a[j], a[j] = t;
    }
}

/* The bytes of one K/V row of hd values x as dtype dt stores them: f16/bf16
 * rounded to nearest even, q8_0/q4_0 per 32 values as GGML's
 * quantize_row_q8_0_ref / quantize_row_q4_0_ref, quants first then the f16
 * scales. */
/* The value of e4m3 code c by its definition (bias 7, 3 mantissa bits). */
static double e4m3_ref(int c)
{
    const int e = (c >> 3) & 15, m = c & 7;
    const double v = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
    return c & 0x80 ? -v : v;
}

/* The finite e4m3 code nearest to x by search (a tie: the even code; the
 * sign of a zero kept), independent of kv_fp8.h's bit arithmetic. */
static int e4m3_nearest(double x)
{
    int best = signbit(x) ? 0x80 : 0;
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7f) == 0x7f || (c & 0x80) != (signbit(x) ? 0x80 : 0))
            continue;
        const double d = fabs(e4m3_ref(c) - x), db = fabs(e4m3_ref(best) - x);
        if (d < db || (d == db && (c & 1) == 0 && (best & 1)))
            best = c;
    }
    return best;
}

static void ref_encode(uint8_t *row, ifd_dtype_t dt, const float *x, int hd)
{
    if (dt == IFD_DTYPE_F32) {
        memcpy(row, x, sizeof(float) * (size_t)hd);
        return;
    }
    if (dt == IFD_DTYPE_F16 || dt == IFD_DTYPE_BF16) {
        for (int e = 0; e < hd; e++) {
            const uint16_t h = dt == IFD_DTYPE_F16 ? ifd_f32_to_f16(x[e]) : ifd_f32_to_bf16(x[e]);
            memcpy(row + 2 * e, &h, 2);
        }
        return;
    }
    if (dt == IFD_DTYPE_FP8) { /* s = amax / 448, codes the nearest to x / s */
        float amax = 0;
        for (int e = 0; e < hd; e++)
            amax = fabsf(x[e]) > amax ? fabsf(x[e]) : amax;
        const float s = amax / 448, is = s ? 1.0f / s : 0.0f;
        for (int e = 0; e < hd; e++)
            row[e] = (uint8_t)e4m3_nearest(x[e] * is);
        memcpy(row + hd, &s, 4);
        return;
    }
    const int qbytes = dt == IFD_DTYPE_Q8_0 ? hd : hd / 2;
    for (int b = 0; b < hd / 32; b++) {
        const float *v = x + 32 * b;
        float amax = 0, max = 0;
        for (int j = 0; j < 32; j++)
            if (amax < fabsf(v[j]))
                amax = fabsf(v[j]), max = v[j];
        const float d = dt == IFD_DTYPE_Q8_0 ? amax / 127 : max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        for (int j = 0; j < 32; j++) {
            if (dt == IFD_DTYPE_Q8_0) {
                row[32 * b + j] = (uint8_t)(int8_t)roundf(v[j] * id);
            } else if (j < 16) {
                int lo = (int8_t)(v[j] * id + 8.5f), hi = (int8_t)(v[j + 16] * id + 8.5f);
                lo = lo > 15 ? 15 : lo, hi = hi > 15 ? 15 : hi;
                row[16 * b + j] = (uint8_t)(lo | hi << 4);
            }
        }
        const uint16_t h = ifd_f32_to_f16(d);
        memcpy(row + qbytes + 2 * b, &h, 2);
    }
}

/* The values a stored row holds. */
static void ref_decode(float *y, ifd_dtype_t dt, const uint8_t *row, int hd)
{
    const int qbytes = dt == IFD_DTYPE_Q8_0 ? hd : hd / 2;
    for (int e = 0; e < hd; e++) {
        uint16_t h;
        switch (dt) {
        case IFD_DTYPE_F32:
            memcpy(&y[e], row + 4 * e, 4);
            break;
        case IFD_DTYPE_F16:
        case IFD_DTYPE_BF16:
            memcpy(&h, row + 2 * e, 2);
            y[e] = dt == IFD_DTYPE_F16 ? ifd_f16_to_f32(h) : ifd_bf16_to_f32(h);
            break;
        case IFD_DTYPE_FP8: {
            float s;
            memcpy(&s, row + hd, 4);
            y[e] = (float)e4m3_ref(row[e]) * s;
            break;
        }
        default:
            memcpy(&h, row + qbytes + 2 * (e / 32), 2);
            if (dt == IFD_DTYPE_Q8_0) {
                y[e] = (float)(int8_t)row[e] * ifd_f16_to_f32(h);
            } else {
                const uint8_t byte = row[16 * (e / 32) + e % 16];
                y[e] = (float)((e % 32 < 16 ? byte & 15 : byte >> 4) - 8) * ifd_f16_to_f32(h);
            }
            break;
        }
    }
}

typedef struct {
    int n_heads, n_kv, hd, bs;
    ifd_dtype_t dt;
    int window;
} att_cfg_t;

enum { NSEQ = 5 };

typedef struct {
    const att_cfg_t *cfg;
    int len[NSEQ]; /* cached length of each sequence after this step */
    int max_blocks;
    int32_t *bt;  /* [NSEQ, max_blocks] */
    float *src_k; /* [NSEQ, maxlen, n_kv, hd] the f32 rows written */
    float *src_v;
    float *ref_k; /* the same shape: the values stored (ref_decode ∘ ref_encode) */
    float *ref_v;
    int maxlen;
    ifd_kv_layer_t kv;
    int64_t pool_rows; /* rows of row_bytes in each region */
    int64_t row_bytes;
} att_world_t;

static float *src_row(const att_world_t *w, float *base, int s, int p, int h)
{
    return base + (((int64_t)s * w->maxlen + p) * w->cfg->n_kv + h) * w->cfg->hd;
}

static void world_build(att_world_t *w, const att_cfg_t *cfg)
{
    static const int lens[NSEQ] = {150, 1, 141, 80, 9};
    memset(w, 0, sizeof *w);
    w->cfg = cfg;
    int total_blocks = 0;
    for (int s = 0; s < NSEQ; s++) {
        w->len[s] = lens[s];
        int nb = (lens[s] + cfg->bs - 1) / cfg->bs;
        total_blocks += nb;
        if (nb + 2 > w->max_blocks)
            w->max_blocks = nb + 2;
        if (lens[s] > w->maxlen)
            w->maxlen = lens[s];
    }
    /* Physical blocks: a shuffled permutation of a pool with spare blocks. */
    const int n_blocks = total_blocks + 7;
    int *perm = malloc(sizeof(int) * (size_t)n_blocks);
    for (int i = 0; i < n_blocks; i++)
        perm[i] = i;
    shuffle_int(perm, n_blocks);
    w->bt = malloc(sizeof(int32_t) * (size_t)NSEQ * w->max_blocks);
    int next = 0;
    for (int s = 0; s < NSEQ; s++)
        for (int b = 0; b < w->max_blocks; b++)
            w->bt[s * w->max_blocks + b] =
                b < (w->len[s] + cfg->bs - 1) / cfg->bs ? perm[next++] : -1;
    free(perm);

    w->kv.dtype = cfg->dt;
    w->kv.block_size = cfg->bs;
    w->kv.n_kv_heads = cfg->n_kv;
    w->kv.head_dim = cfg->hd;
    w->pool_rows = (int64_t)n_blocks * cfg->n_kv * cfg->bs;
    w->row_bytes = ifd_kv_row_bytes(cfg->dt, cfg->hd);
    ck_assert_int_gt(w->row_bytes, 0);
    /* Poison: all-ones bytes are NaN in every float type and a NaN scale. */
    w->kv.k = malloc((size_t)(w->row_bytes * w->pool_rows));
    w->kv.v = malloc((size_t)(w->row_bytes * w->pool_rows));
    memset(w->kv.k, 0xff, (size_t)(w->row_bytes * w->pool_rows));
    memset(w->kv.v, 0xff, (size_t)(w->row_bytes * w->pool_rows));
    const int64_t src_n = (int64_t)NSEQ * w->maxlen * cfg->n_kv * cfg->hd;
    w->src_k = malloc(sizeof(float) * (size_t)src_n);
    w->src_v = malloc(sizeof(float) * (size_t)src_n);
    w->ref_k = malloc(sizeof(float) * (size_t)src_n);
    w->ref_v = malloc(sizeof(float) * (size_t)src_n);
    for (int64_t i = 0; i < src_n; i++) {
        w->src_k[i] = rnd(-1, 1);
        w->src_v[i] = rnd(-1, 1);
    }
    uint8_t *enc = malloc((size_t)w->row_bytes);
    for (int64_t r = 0; r < src_n / cfg->hd; r++) {
        const int64_t o = r * cfg->hd;
        ref_encode(enc, cfg->dt, w->src_k + o, cfg->hd);
        ref_decode(w->ref_k + o, cfg->dt, enc, cfg->hd);
        ref_encode(enc, cfg->dt, w->src_v + o, cfg->hd);
        ref_decode(w->ref_v + o, cfg->dt, enc, cfg->hd);
    }
    free(enc);

    /* Write every (seq, pos) through kv_write: shuffled, in batches of up to 13
     * tokens with a padding slot (−1) after every fifth token. */
    int n_rows = 0;
    for (int s = 0; s < NSEQ; s++)
        n_rows += w->len[s];
    int *order = malloc(sizeof(int) * (size_t)n_rows);
    int *row_seq = malloc(sizeof(int) * (size_t)n_rows),
        *row_pos = malloc(sizeof(int) * (size_t)n_rows);
    for (int s = 0, r = 0; s < NSEQ; s++)
        for (int p = 0; p < w->len[s]; p++, r++)
            row_seq[r] = s, row_pos[r] = p, order[r] = r;
    shuffle_int(order, n_rows);
    const int hd = cfg->hd, nkv = cfg->n_kv;
    float *kb = malloc(sizeof(float) * 16 * (size_t)nkv * hd);
    float *vb = malloc(sizeof(float) * 16 * (size_t)nkv * hd);
    int64_t slot[16];
    for (int r = 0; r < n_rows;) {
        int n = 0;
        while (n < 16 && r < n_rows) {
            if (n % 6 == 5) {
                slot[n] = -1; /* padding row: its data must not land anywhere */
                for (int i = 0; i < nkv * hd; i++)
                    kb[n * nkv * hd + i] = vb[n * nkv * hd + i] = 1e9f;
                n++;
                continue;
            }
            const int s = row_seq[order[r]], p = row_pos[order[r]];
            slot[n] = (int64_t)w->bt[s * w->max_blocks + p / cfg->bs] * cfg->bs + p % cfg->bs;
            memcpy(kb + n * nkv * hd, src_row(w, w->src_k, s, p, 0), sizeof(float) * nkv * hd);
            memcpy(vb + n * nkv * hd, src_row(w, w->src_v, s, p, 0), sizeof(float) * nkv * hd);
            n++, r++;
        }
        ck_assert_int_eq(ifd_cpu_kv_write(&w->kv, kb, vb, slot, n), 0);
    }
    free(kb), free(vb), free(order), free(row_seq), free(row_pos);
}

static void world_free(att_world_t *w)
{
    free(w->bt), free(w->src_k), free(w->src_v), free(w->kv.k), free(w->kv.v);
    free(w->ref_k), free(w->ref_v);
}

/* Every written row holds ref_encode's bytes (and ifd_cpu_kv_dequant_row
 * decodes them as ref_decode does); every other row still holds its poison. */
static void check_pool(const att_world_t *w)
{
    const att_cfg_t *cfg = w->cfg;
    const size_t rb = (size_t)w->row_bytes;
    char *written = calloc((size_t)w->pool_rows, 1);
    uint8_t *want = malloc(rb);
    float *got = malloc(sizeof(float) * (size_t)cfg->hd);
    for (int s = 0; s < NSEQ; s++)
        for (int p = 0; p < w->len[s]; p++)
            for (int h = 0; h < cfg->n_kv; h++) {
                const int64_t blk = w->bt[s * w->max_blocks + p / cfg->bs];
                const int64_t r = (blk * cfg->n_kv + h) * cfg->bs + p % cfg->bs;
                for (int kv = 0; kv < 2; kv++) {
                    const uint8_t *row =
                        (const uint8_t *)(kv ? w->kv.v : w->kv.k) + r * (int64_t)rb;
                    ref_encode(want, cfg->dt, src_row(w, kv ? w->src_v : w->src_k, s, p, h),
                               cfg->hd);
                    IFD_CHECK(memcmp(row, want, rb) == 0, "%c row of seq %d pos %d head %d",
                              kv ? 'V' : 'K', s, p, h);
                    ck_assert_int_eq(ifd_cpu_kv_dequant_row(got, row, cfg->dt, cfg->hd), 0);
                    IFD_CHECK(memcmp(got, src_row(w, kv ? w->ref_v : w->ref_k, s, p, h),
                                     sizeof(float) * (size_t)cfg->hd) == 0,
                              "kv_dequant_row of seq %d pos %d head %d", s, p, h);
                }
                written[r] = 1;
            }
    for (int64_t r = 0; r < w->pool_rows; r++)
        for (size_t i = 0; !written[r] && i < rb; i++)
            IFD_CHECK(((const uint8_t *)w->kv.k)[r * (int64_t)rb + i] == 0xff &&
                          ((const uint8_t *)w->kv.v)[r * (int64_t)rb + i] == 0xff,
                      "kv_write touched unused row %lld", (long long)r);
    free(written), free(want), free(got);
}

/* The query as the kernel uses it over Q8_0/Q4_0 K/V (cpu_kernels.h): per
 * 32 values d = amax/127 in f32, q = round(x/d) (quantize_row_q8_0_ref's
 * rounding, the scale kept in f32), y = q·d. */
static void quant_query_ref(float *y, const float *x, int hd)
{
    for (int b = 0; b < hd / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++)
            amax = fabsf(x[32 * b + j]) > amax ? fabsf(x[32 * b + j]) : amax;
        const float d = amax / 127, id = d != 0 ? 1.0f / d : 0.0f;
        for (int j = 0; j < 32; j++)
            y[32 * b + j] = roundf(x[32 * b + j] * id) * d;
    }
}

static void att_case(const att_cfg_t *cfg, bool images, ifd_threadpool_t *tp)
{
    att_world_t w;
    world_build(&w, cfg);
    check_pool(&w);

    /* The batch: seq 0 prefill chunk 130..149 over 130 cached positions, seq 1
     * first token, seq 2 decode at 140, seq 3 whole prompt 0..79, seq 4 decode
     * at 8, two padding rows; shuffled. Windows past 64 positions span
     * several of the kernel's partitions. Images (Gemma 3's bidirectional
     * blocks: a token of one sees up to the image's last position): seq 0
     * 120..137 (begun in the cached prefix) and 140..149 (to the chunk's
     * end), seq 3 3..20 (longer than the small windows), 30..30 and 50..74
     * (across the partition boundary at 64). */
    static const int img[][3] = {{0, 120, 18}, {0, 140, 10}, {3, 3, 18}, {3, 30, 1}, {3, 50, 25}};
    int tok_seq[128], tok_pos[128], tok_last[128], n_tok = 0;
    for (int p = 130; p < 150; p++)
        tok_seq[n_tok] = 0, tok_pos[n_tok++] = p;
    tok_seq[n_tok] = 1, tok_pos[n_tok++] = 0;
    tok_seq[n_tok] = 2, tok_pos[n_tok++] = 140;
    for (int p = 0; p < 80; p++)
        tok_seq[n_tok] = 3, tok_pos[n_tok++] = p;
    tok_seq[n_tok] = 4, tok_pos[n_tok++] = 8;
    tok_seq[n_tok] = -1, tok_pos[n_tok++] = 0;
    tok_seq[n_tok] = -1, tok_pos[n_tok++] = 12345;
    for (int i = 0; i < n_tok; i++) {
        tok_last[i] = tok_pos[i];
        for (size_t k = 0; k < sizeof img / sizeof img[0]; k++)
            if (tok_seq[i] == img[k][0] && tok_pos[i] >= img[k][1] &&
                tok_pos[i] < img[k][1] + img[k][2])
                tok_last[i] = img[k][1] + img[k][2] - 1;
    }
    int order[128];
    for (int i = 0; i < n_tok; i++)
        order[i] = i;
    shuffle_int(order, n_tok);
    int32_t seq[128], pos[128], last[128];
    for (int i = 0; i < n_tok; i++)
        seq[i] = tok_seq[order[i]], pos[i] = tok_pos[order[i]], last[i] = tok_last[order[i]];
    const int32_t *lp = images ? last : NULL; /* NULL: causal */
    if (!lp)
        memcpy(last, pos, sizeof pos);

    const int nh = cfg->n_heads, hd = cfg->hd, G = cfg->n_heads / cfg->n_kv;
    const int64_t qn = (int64_t)n_tok * nh * hd;
    float *q = malloc(sizeof(float) * (size_t)qn);
    float *out = malloc(sizeof(float) * (size_t)qn), *out1 = malloc(sizeof(float) * (size_t)qn);
    for (int64_t i = 0; i < qn; i++)
        q[i] = rnd(-3, 3), out[i] = out1[i] = NAN;
    const float scale = 1.0f / sqrtf((float)hd);
    ck_assert_int_eq(ifd_cpu_paged_attention(out, q, &w.kv, seq, pos, lp, w.bt, w.max_blocks, n_tok,
                                             nh, scale, cfg->window, tp),
                     0);
    ck_assert_int_eq(ifd_cpu_paged_attention(out1, q, &w.kv, seq, pos, lp, w.bt, w.max_blocks,
                                             n_tok, nh, scale, cfg->window, NULL),
                     0);
    ck_assert_msg(memcmp(out, out1, sizeof(float) * (size_t)qn) == 0,
                  "attention differs between the pool and one thread");
    /* Batch invariance: each token alone (on the pool a lone token's window
     * is split into partitions worked in parallel) gives its batched row
     * bitwise; so do pairs, and a padding row next to a token. */
    float *one = malloc(sizeof(float) * (size_t)nh * hd * 2);
    for (int t = 0; t < n_tok; t++) {
        const int64_t row = (int64_t)nh * hd;
        for (int k = 1; k <= 2; k++) {
            const int u = k == 2 ? (t + 1) % n_tok : t;
            const int32_t s2[2] = {seq[t], seq[u]}, p2[2] = {pos[t], pos[u]};
            const int32_t l2[2] = {last[t], last[u]};
            for (int64_t i = 0; i < row * k; i++)
                one[i] = NAN;
            ck_assert_int_eq(ifd_cpu_paged_attention(one, q + t * row, &w.kv, s2, p2,
                                                     lp ? l2 : NULL, w.bt, w.max_blocks, 1, nh,
                                                     scale, cfg->window, tp),
                             0);
            if (k == 2) { /* rows t and u next to each other: q rows copied together */
                float *q2 = malloc(sizeof(float) * (size_t)row * 2);
                memcpy(q2, q + t * row, sizeof(float) * (size_t)row);
                memcpy(q2 + row, q + u * row, sizeof(float) * (size_t)row);
                ck_assert_int_eq(ifd_cpu_paged_attention(one, q2, &w.kv, s2, p2, lp ? l2 : NULL,
                                                         w.bt, w.max_blocks, 2, nh, scale,
                                                         cfg->window, tp),
                                 0);
                free(q2);
                IFD_CHECK(memcmp(one + row, out + u * row, sizeof(float) * (size_t)row) == 0,
                          "token %d (seq %d pos %d) paired with %d differs from its batched row", u,
                          seq[u], pos[u], t);
            }
            IFD_CHECK(memcmp(one, out + t * row, sizeof(float) * (size_t)row) == 0,
                      "token %d (seq %d pos %d) alone (k=%d) differs from its batched row", t,
                      seq[t], pos[t], k);
        }
    }
    free(one);

    double *sc = malloc(sizeof(double) * (size_t)w.maxlen);
    double worst = 0;
    const bool quant_q = cfg->dt == IFD_DTYPE_Q8_0 || cfg->dt == IFD_DTYPE_Q4_0;
    float qbuf[256];
    for (int t = 0; t < n_tok; t++)
        for (int h = 0; h < nh; h++) {
            const float *o = out + ((int64_t)t * nh + h) * hd;
            if (seq[t] < 0) {
                for (int e = 0; e < hd; e++)
                    IFD_TASSERT(o[e] == 0.0f);
                continue;
            }
            const float *qh = q + ((int64_t)t * nh + h) * hd;
            if (quant_q) { /* the kernel's query: GGML's q8_0 rounding, f32 scale */
                quant_query_ref(qbuf, qh, hd);
                qh = qbuf;
            }
            const int kvh = h / G, s = seq[t];
            const int lo =
                cfg->window > 0 && pos[t] - cfg->window + 1 > 0 ? pos[t] - cfg->window + 1 : 0;
            double mx = -INFINITY, sum = 0;
            for (int p = lo; p <= last[t]; p++) {
                const float *k = src_row(&w, w.ref_k, s, p, kvh);
                double d = 0;
                for (int e = 0; e < hd; e++)
                    d += (double)qh[e] * k[e];
                sc[p] = d * scale;
                mx = sc[p] > mx ? sc[p] : mx;
            }
            for (int p = lo; p <= last[t]; p++)
                sum += (sc[p] = exp(sc[p] - mx));
            for (int e = 0; e < hd; e++) {
                double ref = 0;
                for (int p = lo; p <= last[t]; p++)
                    ref += sc[p] / sum * src_row(&w, w.ref_v, s, p, kvh)[e];
                const double err = fabs(o[e] - ref);
                IFD_CHECK(err <= 4e-6,
                          "attention t=%d (seq %d pos %d) head %d dim %d: %.9g ref %.9g", t, s,
                          pos[t], h, e, o[e], ref);
                worst = err > worst ? err : worst;
            }
        }
    printf("attention heads %d/%d hd %d bs %d dtype %d window %d images %d: max |err| %.3g\n", nh,
           cfg->n_kv, hd, cfg->bs, (int)cfg->dt, cfg->window, lp != NULL, worst);
    free(sc), free(q), free(out), free(out1);
    world_free(&w);
}

static const att_cfg_t att_cfgs[] = {
    {9, 3, 64, 16, IFD_DTYPE_F32, 0}, /* SmolLM2 */
    {9, 3, 64, 16, IFD_DTYPE_F16, 0},
    {9, 3, 64, 16, IFD_DTYPE_BF16, 0},
    {4, 1, 256, 16, IFD_DTYPE_BF16, 5}, /* Gemma 3 270M-like, sliding window */
    {8, 8, 40, 7, IFD_DTYPE_F32, 1},    /* window 1: only the token itself */
    {6, 2, 17, 5, IFD_DTYPE_F16, 3},
    {16, 4, 128, 32, IFD_DTYPE_F32, 0},
    {2, 1, 8, 1, IFD_DTYPE_F32, 0},
    {3, 3, 24, 3, IFD_DTYPE_F16, 40},
    /* q8_0 / q4_0 blocks: SmolLM2, Gemma-like with a window, partial chunks
     * (block sizes 5 and 3), a wide GQA group */
    {9, 3, 64, 16, IFD_DTYPE_Q8_0, 0},
    {9, 3, 64, 16, IFD_DTYPE_Q4_0, 0},
    {4, 1, 256, 16, IFD_DTYPE_Q8_0, 5},
    {6, 2, 32, 5, IFD_DTYPE_Q4_0, 3},
    {16, 4, 128, 32, IFD_DTYPE_Q4_0, 0},
    {3, 3, 96, 3, IFD_DTYPE_Q8_0, 40},
    /* GQA groups of 8 and 5 (the AVX-512 kernels' compile-time groups go to 8) */
    {16, 2, 64, 16, IFD_DTYPE_Q8_0, 0},
    {10, 2, 64, 16, IFD_DTYPE_F16, 0},
    /* fp8 rows: SmolLM2, Gemma-like with a window, partial chunks */
    {9, 3, 64, 16, IFD_DTYPE_FP8, 0},
    {4, 1, 256, 16, IFD_DTYPE_FP8, 5},
    {3, 3, 96, 3, IFD_DTYPE_FP8, 40},
    {3, 3, 32, 5, IFD_DTYPE_FP8, 0},
};

START_TEST(test_attention)
{
    rng_state = 100 + (uint64_t)_i;
    ifd_threadpool_t *tp = NULL;
    ck_assert_int_eq(ifd_threadpool_create(&tp, 3), 0);
    att_case(&att_cfgs[_i / 2], _i % 2, tp); /* each causal, then with images */
    ifd_threadpool_destroy(tp);
}
END_TEST

START_TEST(test_errors)
{
    float kbuf[64] = {0}, vbuf[64] = {0}, q[64] = {0}, out[64];
    int32_t bt[2] = {0, -1}, seq = 0, pos = 3;
    int64_t slot = 0;
    ifd_kv_layer_t kv = {kbuf, vbuf, IFD_DTYPE_F32, 4, 1, 8};
    ck_assert_int_eq(ifd_cpu_kv_write(&kv, q, q, &slot, 1), 0);
    ck_assert_int_eq(
        ifd_cpu_paged_attention(out, q, &kv, &seq, &pos, NULL, bt, 2, 1, 2, 1, 0, NULL), 0);
    pos = 4; /* block 1 is unmapped */
    ck_assert_int_eq(
        ifd_cpu_paged_attention(out, q, &kv, &seq, &pos, NULL, bt, 2, 1, 2, 1, 0, NULL),
        IFD_EINVAL);
    pos = 8; /* past max_blocks */
    ck_assert_int_eq(
        ifd_cpu_paged_attention(out, q, &kv, &seq, &pos, NULL, bt, 2, 1, 2, 1, 0, NULL),
        IFD_EINVAL);
    pos = 3;
    ck_assert_int_eq(
        ifd_cpu_paged_attention(out, q, &kv, &seq, &pos, NULL, bt, 2, 1, 2, 1, -1, NULL),
        IFD_EINVAL);
    int32_t last = 2; /* an image's last position before the token's own */
    ck_assert_int_eq(
        ifd_cpu_paged_attention(out, q, &kv, &seq, &pos, &last, bt, 2, 1, 2, 1, 0, NULL),
        IFD_EINVAL);
    last = 4; /* its image reaches into the unmapped block 1 */
    ck_assert_int_eq(
        ifd_cpu_paged_attention(out, q, &kv, &seq, &pos, &last, bt, 2, 1, 2, 1, 0, NULL),
        IFD_EINVAL);
    last = 3;
    ck_assert_int_eq(
        ifd_cpu_paged_attention(out, q, &kv, &seq, &pos, &last, bt, 2, 1, 2, 1, 0, NULL), 0);
    kv.n_kv_heads = 2; /* 3 query heads over 2 KV heads */
    ck_assert_int_eq(
        ifd_cpu_paged_attention(out, q, &kv, &seq, &pos, NULL, bt, 2, 1, 3, 1, 0, NULL),
        IFD_EINVAL);
    kv.n_kv_heads = 1;
    kv.head_dim = 300;
    ck_assert_int_eq(
        ifd_cpu_paged_attention(out, q, &kv, &seq, &pos, NULL, bt, 2, 1, 1, 1, 0, NULL),
        IFD_ENOTSUP);
    kv.head_dim = 8;
    kv.dtype = (ifd_dtype_t)9;
    ck_assert_int_eq(ifd_cpu_kv_write(&kv, q, q, &slot, 1), IFD_ENOTSUP);
    ck_assert_int_eq(
        ifd_cpu_paged_attention(out, q, &kv, &seq, &pos, NULL, bt, 2, 1, 1, 1, 0, NULL),
        IFD_ENOTSUP);
    /* the block types need head_dim a multiple of 32 */
    kv.dtype = IFD_DTYPE_Q8_0;
    ck_assert_int_eq(ifd_cpu_kv_write(&kv, q, q, &slot, 1), IFD_ENOTSUP);
    ck_assert_int_eq(
        ifd_cpu_paged_attention(out, q, &kv, &seq, &pos, NULL, bt, 2, 1, 1, 1, 0, NULL),
        IFD_ENOTSUP);
    ck_assert_int_eq(ifd_cpu_kv_dequant_row(out, kbuf, IFD_DTYPE_Q4_0, 8), IFD_ENOTSUP);
    kv.dtype = IFD_DTYPE_F32;
    kv.block_size = 0;
    ck_assert_int_eq(ifd_cpu_kv_write(&kv, q, q, &slot, 1), IFD_EINVAL);
}
END_TEST

/* The row sizes (kvpool.h's ifd_kvpool_row_bytes gives the same numbers,
 * pinned in test_kvpool) and the enum values the pool's dtype codes equal. */
START_TEST(test_row_bytes)
{
    ck_assert_int_eq(IFD_DTYPE_Q8_0, 3);
    ck_assert_int_eq(IFD_DTYPE_Q4_0, 4);
    ck_assert_int_eq(ifd_kv_row_bytes(IFD_DTYPE_F32, 64), 256);
    ck_assert_int_eq(ifd_kv_row_bytes(IFD_DTYPE_F16, 64), 128);
    ck_assert_int_eq(ifd_kv_row_bytes(IFD_DTYPE_BF16, 64), 128);
    ck_assert_int_eq(ifd_kv_row_bytes(IFD_DTYPE_Q8_0, 64), 68);
    ck_assert_int_eq(ifd_kv_row_bytes(IFD_DTYPE_Q4_0, 64), 36);
    ck_assert_int_eq(ifd_kv_row_bytes(IFD_DTYPE_Q8_0, 256), 272);
    ck_assert_int_eq(ifd_kv_row_bytes(IFD_DTYPE_Q4_0, 256), 144);
    ck_assert_int_eq(ifd_kv_row_bytes(IFD_DTYPE_Q8_0, 48), 0);
    ck_assert_int_eq(ifd_kv_row_bytes(IFD_DTYPE_Q4_0, 0), 0);
    ck_assert_int_eq(ifd_kv_row_bytes((ifd_dtype_t)9, 64), 0);
    ck_assert_int_eq(IFD_DTYPE_FP8, 5);
    ck_assert_int_eq(ifd_kv_row_bytes(IFD_DTYPE_FP8, 64), 68);
    ck_assert_int_eq(ifd_kv_row_bytes(IFD_DTYPE_FP8, 256), 260);
    ck_assert_int_eq(ifd_kv_row_bytes(IFD_DTYPE_FP8, 48), 0);
}
END_TEST

/* The e4m3 code (kv_fp8.h, shared with the CUDA kernels) against its
 * definition: every code decodes to its value and encodes back; random and
 * boundary inputs round to the nearest finite code (ties to the even
 * mantissa), saturating at ±448. */
START_TEST(test_fp8_code)
{
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7f) == 0x7f) {
            ck_assert(isnan(ifd_fp8_e4m3_to_f32((uint8_t)c)));
            continue;
        }
        IFD_CHECK(ifd_fp8_e4m3_to_f32((uint8_t)c) == (float)e4m3_ref(c), "code %#x", c);
        IFD_CHECK(ifd_fp8_e4m3_from_f32((float)e4m3_ref(c)) == c, "code %#x", c);
    }
    ck_assert_int_eq(ifd_fp8_e4m3_from_f32(NAN) & 0x7f, 0x7f);
    for (int i = 0; i < 200000; i++) {
        const int mag = i % 4;
        float x = rnd(-1.0f, 1.0f);
        x *= mag == 0 ? 500.0f : mag == 1 ? 1.0f : mag == 2 ? 0.02f : 4e-3f;
        if (i % 97 == 0) /* an exact midpoint between two neighbours */
            x = (float)((e4m3_ref(i % 126) + e4m3_ref(i % 126 + 1)) / 2);
        const int got = ifd_fp8_e4m3_from_f32(x);
        double best = INFINITY;
        for (int c = 0; c < 256; c++)
            if ((c & 0x7f) != 0x7f && fabs(e4m3_ref(c) - x) < best)
                best = fabs(e4m3_ref(c) - x);
        IFD_CHECK(fabs(e4m3_ref(got) - x) == best, "x %.9g: code %#x", x, got);
        const int other = fabs(x) >= 448 ? got : got ^ 1; /* a tie's other side */
        if (fabs(e4m3_ref(other) - x) == best && (other & 0x7f) != 0x7f && other != got)
            IFD_CHECK((got & 1) == 0, "x %.9g: tie to %#x (odd)", x, got);
    }
    ck_assert_int_eq(ifd_fp8_e4m3_from_f32(1e9f), 0x7e);
    ck_assert_int_eq(ifd_fp8_e4m3_from_f32(-463.9f), 0xfe);
    ck_assert_int_eq(ifd_fp8_e4m3_from_f32(1e-30f), 0);
}
END_TEST

/* FP8 rows (ifd_cpu_kv_write): s = amax / 448 as f32 after the codes, each
 * value within half a step of its input (2^-4 relative, or 2^-10 · s among
 * the subnormals); a zero row has scale 0; attention over the one position
 * is that row's dequantized V. */
START_TEST(test_fp8_rows)
{
    float k[2 * 64], y[64];
    uint8_t row[68];
    for (int c = 0; c < 3; c++) {
        for (int e = 0; e < 64; e++)
            k[e] = c == 0   ? 0.0f
                   : c == 1 ? rnd(-3.0f, 3.0f)
                            : (e == 5 ? 900.0f : rnd(-5e-4f, 5e-4f));
        memcpy(k + 64, k, 64 * 4);
        ifd_kv_layer_t kv = {row, row, IFD_DTYPE_FP8, 1, 1, 64};
        const int64_t slot = 0;
        ck_assert_int_eq(ifd_cpu_kv_write(&kv, k, k + 64, &slot, 1), 0);
        float amax = 0, s;
        for (int e = 0; e < 64; e++)
            amax = fabsf(k[e]) > amax ? fabsf(k[e]) : amax;
        memcpy(&s, row + 64, 4);
        ck_assert(s == amax / 448.0f);
        ck_assert_int_eq(ifd_cpu_kv_dequant_row(y, row, IFD_DTYPE_FP8, 64), 0);
        for (int e = 0; e < 64; e++)
            IFD_CHECK(fabsf(y[e] - k[e]) <= fabsf(k[e]) / 16 + s / 1024 * 1.0001f,
                      "case %d elem %d: %g for %g", c, e, y[e], k[e]);
    }
    float q[64] = {0}, out[64];
    int32_t bt[1] = {0}, seq = 0, pos = 0;
    ifd_kv_layer_t kv = {row, row, IFD_DTYPE_FP8, 1, 1, 64};
    ck_assert_int_eq(
        ifd_cpu_paged_attention(out, q, &kv, &seq, &pos, NULL, bt, 1, 1, 1, 1, 0, NULL), 0);
    for (int e = 0; e < 64; e++) /* == (acc = 0 + 1 · v turns −0 into +0) */
        ck_assert(out[e] == y[e]);
}
END_TEST

/* Quantizer edge cases against ref_encode: all zeros (scale 0), one large
 * negative value, small integers, the q4_0 clamp at 15 (−max). */
/* ifd_cpu_kv_rotate (kv_rot.h): for Q8_0/Q4_0 with head_dim a multiple of 64
 * each run of n values (the largest power of two dividing head_dim, n ≥ 64)
 * is multiplied by the orthonormal Walsh-Hadamard matrix, built here
 * by Sylvester's construction in double; q·k is unchanged; applying it
 * twice gives the row back; other dtypes and head_dims are left alone. */
static int sylvester(int i, int j) /* H[i][j] · √n: (−1)^popcount(i & j) */
{
    return __builtin_popcount((unsigned)(i & j)) & 1 ? -1 : 1;
}

START_TEST(test_kv_rotate)
{
    static const struct {
        int hd, n;
    } sh[] = {{64, 64}, {128, 128}, {192, 64}, {256, 256}, {320, 64}, {384, 128}};
    const ifd_dtype_t ts[] = {IFD_DTYPE_Q8_0, IFD_DTYPE_Q4_0};
    enum { ROWS = 3 };
    for (size_t si = 0; si < sizeof sh / sizeof sh[0]; si++)
        for (int ti = 0; ti < 2; ti++) {
            const int hd = sh[si].hd, n = sh[si].n;
            float x[ROWS * 384], y[ROWS * 384], z[ROWS * 384];
            for (int i = 0; i < ROWS * hd; i++)
                x[i] = rnd(-1, 1) * (i % 17 == 3 ? 30.0f : 1.0f); /* a few outliers */
            memcpy(y, x, sizeof(float) * ROWS * hd);
            ck_assert_int_eq(ifd_cpu_kv_rotate(y, ROWS, hd, ts[ti]), 0);
            double num = 0, den = 0, dot_x = 0, dot_y = 0;
            for (int r = 0; r < ROWS * hd / n; r++)
                for (int i = 0; i < n; i++) {
                    double ref = 0;
                    for (int j = 0; j < n; j++)
                        ref += sylvester(i, j) * (double)x[r * n + j];
                    ref /= sqrt((double)n);
                    num += (y[r * n + i] - ref) * (y[r * n + i] - ref), den += ref * ref;
                }
            ck_assert_msg(sqrt(num / den) < 1e-6, "hd %d: rel L2 %g", hd, sqrt(num / den));
            for (int i = 0; i < hd; i++) /* row 0 · row 1, before and after */
                dot_x += (double)x[i] * x[hd + i], dot_y += (double)y[i] * y[hd + i];
            ck_assert_msg(fabs(dot_x - dot_y) < 1e-4 * (1 + fabs(dot_x)), "q·k %g vs %g", dot_x,
                          dot_y);
            memcpy(z, y, sizeof(float) * ROWS * hd);
            ck_assert_int_eq(ifd_cpu_kv_rotate(z, ROWS, hd, ts[ti]), 0);
            for (int i = 0; i < ROWS * hd; i++)
                ck_assert_msg(fabsf(z[i] - x[i]) <= 1e-5f * 30, "H·H·x != x at %d", i);
        }
    /* Nothing rotates for another dtype or a head_dim not a multiple of 64. */
    const ifd_dtype_t other[] = {IFD_DTYPE_F32, IFD_DTYPE_F16, IFD_DTYPE_BF16, IFD_DTYPE_FP8};
    float x[256], y[256];
    for (int i = 0; i < 256; i++)
        x[i] = rnd(-1, 1);
    for (int ti = 0; ti < 4; ti++) {
        memcpy(y, x, sizeof x);
        ck_assert_int_eq(ifd_cpu_kv_rotate(y, 2, 128, other[ti]), 0);
        ck_assert(memcmp(x, y, sizeof x) == 0);
    }
    static const int hds[] = {32, 96, 160};
    for (int i = 0; i < 3; i++) {
        memcpy(y, x, sizeof x);
        ck_assert_int_eq(ifd_cpu_kv_rotate(y, 1, hds[i], IFD_DTYPE_Q8_0), 0);
        ck_assert(memcmp(x, y, sizeof x) == 0);
    }
    ck_assert_int_eq(ifd_cpu_kv_rotate(y, -1, 64, IFD_DTYPE_Q8_0), IFD_EINVAL);
    ck_assert_int_eq(ifd_cpu_kv_rotate(y, 1, 0, IFD_DTYPE_Q8_0), IFD_EINVAL);
}
END_TEST

START_TEST(test_quant_edges)
{
    const ifd_dtype_t dts[2] = {IFD_DTYPE_Q8_0, IFD_DTYPE_Q4_0};
    float x[64];
    for (int c = 0; c < 4; c++) {
        for (int e = 0; e < 64; e++)
            x[e] = c == 0   ? 0.0f
                   : c == 1 ? (e == 7 ? -5.0f : 0.01f * (float)e)
                   : c == 2 ? (float)(e % 9) - 4.0f
                            : (e == 40 ? 8.0f : -1.0f);
        for (int i = 0; i < 2; i++) {
            uint8_t want[68], got[68];
            float k[2 * 64], y[64], ref[64];
            memcpy(k, x, sizeof x);
            memcpy(k + 64, x, sizeof x);
            ifd_kv_layer_t kv = {got, got, dts[i], 1, 1, 64};
            const int64_t slot = 0;
            ck_assert_int_eq(ifd_cpu_kv_write(&kv, k, k + 64, &slot, 1), 0);
            ref_encode(want, dts[i], x, 64);
            IFD_CHECK(memcmp(got, want, (size_t)ifd_kv_row_bytes(dts[i], 64)) == 0,
                      "case %d dtype %d", c, (int)dts[i]);
            ck_assert_int_eq(ifd_cpu_kv_dequant_row(y, got, dts[i], 64), 0);
            ref_decode(ref, dts[i], want, 64);
            ck_assert_int_eq(memcmp(y, ref, sizeof y), 0);
            /* round to nearest: within half a step (q8_0) / one step (q4_0's
             * asymmetric range: −max lands on 7·d) of the input, plus the f16
             * rounding of the scale (|q| · 2^-11 steps) */
            for (int e = 0; e < 64; e++) {
                float amax = 0;
                for (int j = e / 32 * 32; j < e / 32 * 32 + 32; j++)
                    amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
                const float step = dts[i] == IFD_DTYPE_Q8_0 ? amax / 127 : amax / 8;
                const float bound =
                    dts[i] == IFD_DTYPE_Q8_0 ? 0.5f + 127.0f / 2048 : 1.0f + 8.0f / 2048;
                IFD_CHECK(fabsf(y[e] - x[e]) <= bound * step + 1e-7f,
                          "case %d dtype %d elem %d: %g for %g", c, (int)dts[i], e, y[e], x[e]);
            }
        }
    }
}
END_TEST

/* K and V regions that end where an unreadable page begins: the kernels read
 * no byte past a region's last row (the AVX-512 path gathers the rows' scale
 * pairs 4 bytes at a time, the last scale of a head_dim ≡ 32 mod 64 row
 * alone). Q8_0 and Q4_0, head_dim 32 and 96, one block of 16 positions, the
 * token at its last position: every row is read, the last one last. */
START_TEST(test_region_end)
{
    rng_state = 7;
    const long page = sysconf(_SC_PAGESIZE);
    const ifd_dtype_t dts[2] = {IFD_DTYPE_Q8_0, IFD_DTYPE_Q4_0};
    const int hds[2] = {32, 96};
    ifd_threadpool_t *tp = NULL;
    ck_assert_int_eq(ifd_threadpool_create(&tp, 1), 0);
    for (int d = 0; d < 2; d++)
        for (int h = 0; h < 2; h++) {
            const int hd = hds[h], bs = 16, G = 4;
            const int64_t bytes = ifd_kv_row_bytes(dts[d], hd) * bs;
            const size_t span = (size_t)((bytes + page - 1) / page * page);
            char *m[2];
            void *reg[2];
            for (int r = 0; r < 2; r++) { /* [pages holding the region][PROT_NONE page] */
                m[r] = mmap(NULL, span + (size_t)page, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                ck_assert_ptr_ne(m[r], MAP_FAILED);
                ck_assert_int_eq(mprotect(m[r] + span, (size_t)page, PROT_NONE), 0);
                reg[r] = m[r] + span - bytes;
            }
            ifd_kv_layer_t kv = {.k = reg[0],
                                 .v = reg[1],
                                 .dtype = dts[d],
                                 .block_size = bs,
                                 .n_kv_heads = 1,
                                 .head_dim = hd};
            float k[16 * 96], v[16 * 96], q[4 * 96], out[4 * 96];
            int64_t slot[16];
            for (int i = 0; i < bs * hd; i++)
                k[i] = rnd(-0.5f, 0.5f), v[i] = rnd(-0.5f, 0.5f);
            for (int i = 0; i < bs; i++)
                slot[i] = i;
            ck_assert_int_eq(ifd_cpu_kv_write(&kv, k, v, slot, bs), 0);
            for (int i = 0; i < G * hd; i++)
                q[i] = rnd(-0.5f, 0.5f);
            const int32_t seq = 0, pos = bs - 1, bt = 0;
            ck_assert_int_eq(
                ifd_cpu_paged_attention(out, q, &kv, &seq, &pos, NULL, &bt, 1, 1, G, 0.125f, 0, tp),
                0);
            for (int i = 0; i < G * hd; i++)
                IFD_CHECK(isfinite(out[i]), "dtype %d hd %d: out[%d] = %g", (int)dts[d], hd, i,
                          out[i]);
            for (int r = 0; r < 2; r++)
                munmap(m[r], span + (size_t)page);
        }
    ifd_threadpool_destroy(tp);
}
END_TEST

static Suite *attention_suite(void)
{
    Suite *s = suite_create("cpu_attention");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_attention, 0, 2 * (int)(sizeof att_cfgs / sizeof att_cfgs[0]));
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_row_bytes);
    tcase_add_test(tc, test_quant_edges);
    tcase_add_test(tc, test_fp8_code);
    tcase_add_test(tc, test_fp8_rows);
    tcase_add_test(tc, test_kv_rotate);
    tcase_add_test(tc, test_region_end);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    const char *cap = getenv("INFERD_CPU");
    const ifd_cpu_features_t *f = ifd_cpu_features();
    if (cap && strcmp(cap, "avx2") == 0 && !(f->avx2 && f->fma && f->f16c))
        ifd_test_skip("INFERD_CPU=avx2 but this CPU has no AVX2/FMA/F16C");
    printf("cpu kernels path: %s (INFERD_CPU=%s)\n", ifd_cpu_isa_name(), cap ? cap : "");
    return ifd_test_run(attention_suite());
}
