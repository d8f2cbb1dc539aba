/*
 * attention.c — the paged KV cache on the CPU: writing K/V rows into their
 * slots (ifd_cpu_kv_write) and causal grouped-query attention over them for a
 * ragged batch (ifd_cpu_paged_attention), with Gemma 3's image blocks (a
 * token sees up to its `last` position instead of its own).
 *
 * Layout of one layer's K (and V) region: [block][kv_head][token] of rows of
 * ifd_kv_row_bytes(kv->dtype, head_dim) bytes, so the rows of one head inside
 * a block are contiguous and a run of positions inside a block is read (and
 * converted to f32) in one piece. All offsets are computed in 64-bit, in
 * bytes.
 *
 * Q8_0/Q4_0 rows (quants, then one f16 scale per 32 values) are quantized
 * here on write, as GGML's reference quantizers do, and read in place by
 * every path against a quantized query (attention_q.c, "the quantized-query path":
 * integer q·k per 32-value block, p·v on the unscaled V quants). FP8 rows
 * (e4m3 codes, one f32 scale per row; the CUDA kernels' type) are written
 * here too, and read by every path through an f32 buffer (dequantized per
 * chunk, not in registers: a reference and a fallback, not a fast path).
 * Every path computes with the values ifd_cpu_kv_dequant_row gives (and over
 * Q8_0/Q4_0 with the quantized query).
 *
 * Attention work item = (query token, KV head): it serves the G = n_heads /
 * n_kv_heads query heads that share the KV head, so each K/V row is loaded
 * and converted once for the whole group. Positions are visited in chunks of
 * at most IFD__ATT_CHUNK rows (never crossing a block) with an online softmax
 * (running max m, running sum l, f32 accumulator):
 *   s_j = scale·(q·k_j);  m' = max(m, max_j s_j);  acc = acc·e^(m−m') + Σ_j e^(s_j−m')·v_j
 *   l = l·e^(m−m') + Σ_j e^(s_j−m');  out = acc / l.
 * Only the positions a token may see are touched, so unused or stale slots
 * (NaN-poisoned in the tests) never enter the arithmetic.
 *
 * Partitions: a token's window is cut at absolute positions that are
 * multiples of IFD__ATT_PART (64) into partitions; each partition runs its
 * own online softmax from scratch (m = −inf, l = 0, acc = 0) and the
 * partitions are folded in position order (ifd__att_fold: with M = max(m,
 * m'), acc = acc·e^(m−M) + acc'·e^(m'−M), likewise l), then acc / l. The cut
 * depends only on the token's own positions, never on the batch, so that
 * one arithmetic serves two ways of running it:
 *   whole mode: work item = (token, run of KV heads), partitions one after
 *     the other in the item; items are claimed dynamically by the pool's
 *     threads, which balances causal prefill (later tokens see more);
 *   split mode, when a small batch would leave threads idle (a lone decode
 *     token of a model with one KV head is one item): work item = one
 *     partition of one (token, run of KV heads), its state written to a
 *     workspace, then folded in order on the caller (flash-decoding).
 * Both give every output bitwise the same value (test_cpu_attention checks
 * each token alone against its batched row), so results depend neither on
 * the thread count nor on the batch.
 */
#include "attention_impl.h"

#include "cpu_simd.h"
#include "cpu/kv_fp8.h"
#include "cpu/kv_rot.h"
#include "error.h"
#include "fp16.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int64_t ifd_kv_row_bytes(ifd_dtype_t t, int head_dim)
{
    return head_dim > 0 ? ifd__row_bytes(t, head_dim) : 0;
}

static int ifd__kv_check(const ifd_kv_layer_t *kv)
{
    if (!kv || !kv->k || !kv->v || kv->block_size <= 0 || kv->n_kv_heads <= 0 || kv->head_dim <= 0)
        return IFD_EINVAL;
    return ifd__row_bytes(kv->dtype, kv->head_dim) ? 0 : IFD_ENOTSUP;
}

/* Byte offset of (block, head, token-in-block) in a K or V region. */
static inline int64_t ifd__kv_off(const ifd_kv_layer_t *kv, int64_t block, int head, int tok)
{
    return ((block * kv->n_kv_heads + head) * kv->block_size + tok) *
           ifd__row_bytes(kv->dtype, kv->head_dim);
}

/* GGML's quantize_row_q8_0_ref / quantize_row_q4_0_ref on one row of hd
 * values (hd a multiple of 32), into the row layout above. */
static void ifd__quant_row(char *row, const float *x, int dt, int hd)
{
    for (int b = 0; b < hd / IFD__QK; b++) {
        const float *xb = x + b * IFD__QK;
        float amax = 0, max = 0;
        for (int j = 0; j < IFD__QK; j++)
            if (fabsf(xb[j]) > amax)
                amax = fabsf(xb[j]), max = xb[j];
        float d;
        if (dt == IFD_DTYPE_Q8_0) {
            d = amax / 127;
            const float id = d != 0 ? 1.0f / d : 0.0f;
            for (int j = 0; j < IFD__QK; j++)
                ((int8_t *)row)[b * IFD__QK + j] = (int8_t)roundf(xb[j] * id);
        } else {
            d = max / -8;
            const float id = d != 0 ? 1.0f / d : 0.0f;
            uint8_t *nib = (uint8_t *)row + b * (IFD__QK / 2);
            for (int j = 0; j < IFD__QK / 2; j++) {
                const int lo = (int8_t)(xb[j] * id + 8.5f), hi = (int8_t)(xb[j + 16] * id + 8.5f);
                nib[j] = (uint8_t)((lo < 15 ? lo : 15) | (hi < 15 ? hi : 15) << 4);
            }
        }
        const uint16_t h = ifd_f32_to_f16(d);
        memcpy(row + ifd__row_qbytes(dt, hd) + 2 * b, &h, 2);
    }
}

/* An FP8 row: s = amax / 448 over the row, e = e4m3(x · (1 / s)), s kept in
 * f32 after the codes (rope_kv.cu does the same operations). */
static void ifd__fp8_row(char *row, const float *x, int hd)
{
    float amax = 0;
    for (int e = 0; e < hd; e++)
        amax = fabsf(x[e]) > amax ? fabsf(x[e]) : amax;
    const float s = amax / IFD_FP8_E4M3_MAX;
    const float is = s != 0 ? 1.0f / s : 0.0f;
    for (int e = 0; e < hd; e++)
        ((uint8_t *)row)[e] = ifd_fp8_e4m3_from_f32(x[e] * is);
    memcpy(row + hd, &s, 4);
}

int ifd_cpu_kv_dequant_row(float *restrict y, const void *restrict row, ifd_dtype_t dtype,
                           int head_dim)
{
    const int hd = head_dim;
    if (hd <= 0 || !ifd__row_bytes(dtype, hd))
        return IFD_ENOTSUP;
    const char *r = row;
    switch (dtype) {
    case IFD_DTYPE_F16:
        ifd_f16_to_f32_n(y, row, hd);
        break;
    case IFD_DTYPE_BF16:
        ifd_bf16_to_f32_n(y, row, hd);
        break;
    case IFD_DTYPE_Q8_0:
        for (int e = 0; e < hd; e++)
            y[e] = (float)((const int8_t *)r)[e] * ifd__row_scale(r, dtype, hd, e / IFD__QK);
        break;
    case IFD_DTYPE_Q4_0:
        for (int e = 0; e < hd; e++) {
            const uint8_t byte = ((const uint8_t *)r)[e / IFD__QK * 16 + e % 16];
            const int q = (e % IFD__QK < 16 ? byte & 15 : byte >> 4) - 8;
            y[e] = (float)q * ifd__row_scale(r, dtype, hd, e / IFD__QK);
        }
        break;
    case IFD_DTYPE_FP8: {
        float s;
        memcpy(&s, r + hd, 4);
        for (int e = 0; e < hd; e++)
            y[e] = ifd_fp8_e4m3_to_f32(((const uint8_t *)r)[e]) * s;
        break;
    }
    default:
        memcpy(y, row, sizeof(float) * (size_t)hd);
        break;
    }
    return 0;
}

int ifd_cpu_kv_write(const ifd_kv_layer_t *kv, const float *k, const float *v, const int64_t *slot,
                     int n_tok)
{
    int rc = ifd__kv_check(kv);
    if (rc)
        return rc;
    if (n_tok < 0)
        return IFD_EINVAL;
    const int hd = kv->head_dim, nkv = kv->n_kv_heads, bs = kv->block_size;
    for (int t = 0; t < n_tok; t++) {
        if (slot[t] < 0)
            continue;
        const int64_t block = slot[t] / bs;
        const int off = (int)(slot[t] % bs);
        for (int h = 0; h < nkv; h++) {
            const int64_t src = ((int64_t)t * nkv + h) * hd;
            const int64_t dst = ifd__kv_off(kv, block, h, off);
            char *kd = (char *)kv->k + dst;
            char *vd = (char *)kv->v + dst;
            switch (kv->dtype) {
            case IFD_DTYPE_F32:
                memcpy(kd, k + src, sizeof(float) * (size_t)hd);
                memcpy(vd, v + src, sizeof(float) * (size_t)hd);
                break;
            case IFD_DTYPE_F16:
                ifd_f32_to_f16_n((uint16_t *)kd, k + src, hd);
                ifd_f32_to_f16_n((uint16_t *)vd, v + src, hd);
                break;
            case IFD_DTYPE_BF16:
                ifd_f32_to_bf16_n((uint16_t *)kd, k + src, hd);
                ifd_f32_to_bf16_n((uint16_t *)vd, v + src, hd);
                break;
            case IFD_DTYPE_FP8:
                ifd__fp8_row(kd, k + src, hd);
                ifd__fp8_row(vd, v + src, hd);
                break;
            default: /* Q8_0, Q4_0 */
                ifd__quant_row(kd, k + src, kv->dtype, hd);
                ifd__quant_row(vd, v + src, kv->dtype, hd);
                break;
            }
        }
    }
    return 0;
}

int ifd_cpu_kv_rotate(float *x, int64_t n_rows, int head_dim, ifd_dtype_t dtype)
{
    if (n_rows < 0 || head_dim <= 0)
        return IFD_EINVAL;
    const int n = ifd_kv_k_rot(dtype, head_dim);
    if (!n)
        return 0;
    const float s = ifd_kv_rot_scale(n);
    const int64_t runs = n_rows * (head_dim / n);
    for (int64_t r = 0; r < runs; r++)
        ifd_kv_fwht(x + r * n, n, s);
    return 0;
}

/* ---- attention ------------------------------------------------------------- */

typedef struct {
    float *out;
    const float *q;
    const ifd_kv_layer_t *kv;
    const int32_t *seq;
    const int32_t *pos;
    const int32_t *last; /* or NULL: pos */
    const int32_t *block_tables;
    int max_blocks;
    int n_heads;
    int group;
    float scale;
    int window;
    int heads_per_item; /* KV heads one work item serves */
    int items_per_tok;
    ifd__isa_t isa;
    int raw_avx2; /* AVX2 reads K/V rows in place (head_dim % 8 == 0) */
    /* Q8_0/Q4_0: the quantized query rows ([n_tok · n_heads] rows of
     * ifd__qrow(hd) quants / ifd__qrow(hd) / 32 scales), else NULL; qpath
     * 2 AVX-512 VNNI, 1 AVX2, 0 scalar. */
    int8_t *qi;
    float *qd;
    int32_t *qo; /* qpath 2: the rows' offsets (ifd__quant_query_offsets) */
    int qpath;
    /* Split mode (small batches on a pool): one work item per (token, run
     * of KV heads, partition); its partial state goes to ws[piece]. */
    float *ws;
    int64_t piece_floats;   /* nq·hd accumulators, then m[nq], l[nq] */
    const int32_t *tok_off; /* [n_tok + 1]: the first piece of each token */
    int n_tok;
} ifd__att_t;

/* Returns f32 rows [n, hd] of a K or V run at byte offset off: the region
 * itself for F32, else converted (dequantized) into buf. */
const float *ifd__rows_f32(const ifd_kv_layer_t *kv, const void *region, int64_t off, int n,
                           float *buf)
{
    const char *r = (const char *)region + off;
    const int hd = kv->head_dim;
    const int64_t cnt = (int64_t)n * hd;
    switch (kv->dtype) {
    case IFD_DTYPE_F16:
        ifd_f16_to_f32_n(buf, (const uint16_t *)r, cnt);
        return buf;
    case IFD_DTYPE_BF16:
        ifd_bf16_to_f32_n(buf, (const uint16_t *)r, cnt);
        return buf;
    case IFD_DTYPE_Q8_0:
    case IFD_DTYPE_Q4_0:
    case IFD_DTYPE_FP8:
        for (int j = 0; j < n; j++)
            ifd_cpu_kv_dequant_row(buf + (int64_t)j * hd, r + j * ifd__row_bytes(kv->dtype, hd),
                                   kv->dtype, hd);
        return buf;
    default:
        return (const float *)r;
    }
}

/* Positions [p, p + n) form one chunk: at most IFD__ATT_CHUNK, inside one block. */
static inline int ifd__chunk_len(int p, int p_end, int bs)
{
    int n = bs - p % bs;
    if (n > p_end - p + 1)
        n = p_end - p + 1;
    return n < IFD__ATT_CHUNK ? n : IFD__ATT_CHUNK;
}

/* Asks for the K and V rows of a chunk ahead of use: chunks sit in different
 * blocks, which the hardware prefetcher cannot guess, and a decode step is
 * bound by reading every sequence's cache from memory. */
static inline void ifd__prefetch_rows(const ifd_kv_layer_t *kv, int64_t off, int n)
{
    const char *k = (const char *)kv->k + off, *v = (const char *)kv->v + off;
    const int64_t bytes = (int64_t)n * ifd__row_bytes(kv->dtype, kv->head_dim);
    for (int64_t b = 0; b < bytes; b += 64) {
        __builtin_prefetch(k + b, 0, 3);
        __builtin_prefetch(v + b, 0, 3);
    }
}

/* The online-softmax update of one query head by a chunk's n scores s
 * (scaled; overwritten with their weights): m, l and its accumulator row ag
 * over the chunk's f32 V rows. */
void ifd__online_scalar(float *s, int n, const float *V, int hd, float *m, float *l, float *ag)
{
    float cmax = -INFINITY;
    for (int j = 0; j < n; j++)
        cmax = s[j] > cmax ? s[j] : cmax;
    const float mnew = cmax > *m ? cmax : *m;
    const float corr = expf(*m - mnew);
    float lsum = 0;
    for (int j = 0; j < n; j++) {
        s[j] = expf(s[j] - mnew);
        lsum += s[j];
    }
    *l = *l * corr + lsum;
    *m = mnew;
    for (int e = 0; e < hd; e++) {
        float a = ag[e] * corr;
        for (int j = 0; j < n; j++)
            a += s[j] * V[(int64_t)j * hd + e];
        ag[e] = a;
    }
}

/*
 * One chunk of n positions for the G query heads: s[g][j] scores, then the
 * online-softmax update of m[g], l[g] and acc (= out rows [G][hd]).
 */
static void ifd__chunk_scalar(const float *q, const float *K, const float *V, int n, int G, int hd,
                              float scale, float *m, float *l, float *acc)
{
    for (int g = 0; g < G; g++) {
        const float *qg = q + (int64_t)g * hd;
        float *ag = acc + (int64_t)g * hd;
        float s[IFD__ATT_CHUNK];
        for (int j = 0; j < n; j++) {
            const float *kj = K + (int64_t)j * hd;
            float d = 0;
            for (int e = 0; e < hd; e++)
                d += qg[e] * kj[e];
            s[j] = d * scale;
        }
        ifd__online_scalar(s, n, V, hd, m + g, l + g, ag);
    }
}

#if IFD__X86

/*
 * The SIMD chunk kernels. Scores: one accumulator per position (16 for
 * AVX-512, 8 per half for AVX2), all advanced together over head_dim with
 * the query vector loaded once, then summed across lanes for all positions at
 * once by a transpose-and-add tree. Rows past n reuse row n − 1 (valid memory
 * of the same run) and their scores are masked out. PV: blocks of 4 vectors
 * of head_dim with two accumulator sets (even/odd positions), 8 independent
 * FMA chains. head_dim needs no particular multiple: the last vector is
 * masked.
 */

/* Lane j of the result = Σ lanes of d[j], for 8 vectors. */
IFD__TARGET_AVX2 IFD__INLINE __m256 ifd__hsum8x8(const __m256 *d)
{
    __m256 b[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        b[i] = _mm256_add_ps(_mm256_unpacklo_ps(d[2 * i], d[2 * i + 1]),
                             _mm256_unpackhi_ps(d[2 * i], d[2 * i + 1]));
    __m256 c[2];
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++) {
        __m256d x = _mm256_castps_pd(b[2 * i]), y = _mm256_castps_pd(b[2 * i + 1]);
        c[i] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(x, y)),
                             _mm256_castpd_ps(_mm256_unpackhi_pd(x, y)));
    }
    return _mm256_add_ps(_mm256_permute2f128_ps(c[0], c[1], 0x20),
                         _mm256_permute2f128_ps(c[0], c[1], 0x31));
}

/* Scores of rows K[0..7] (rows ≥ n alias row n − 1) for one query. */
IFD__TARGET_AVX2 IFD__INLINE __m256 ifd__scores8(const float *qg, const float *K, int n, int hd)
{
    const float *kr[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
        kr[j] = K + (int64_t)(j < n ? j : n - 1) * hd;
    __m256 d[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
        d[j] = _mm256_setzero_ps();
    int e = 0;
    for (; e + 8 <= hd; e += 8) {
        __m256 qv = _mm256_loadu_ps(qg + e);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            d[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kr[j] + e), d[j]);
    }
    if (e < hd) {
        __m256i mk = ifd__mask8(hd - e);
        __m256 qv = _mm256_maskload_ps(qg + e, mk);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            d[j] = _mm256_fmadd_ps(qv, _mm256_maskload_ps(kr[j] + e, mk), d[j]);
    }
    return ifd__hsum8x8(d);
}

IFD__TARGET_AVX2 static void ifd__chunk_avx2(const float *q, const float *K, const float *V, int n,
                                             int G, int hd, float scale, float *m, float *l,
                                             float *acc)
{
    const __m256i m_lo = ifd__mask8(n < 8 ? n : 8), m_hi = ifd__mask8(n > 8 ? n - 8 : 0);
    for (int g = 0; g < G; g++) {
        const float *qg = q + (int64_t)g * hd;
        float *ag = acc + (int64_t)g * hd;
        float s[IFD__ATT_CHUNK] __attribute__((aligned(32)));
        const __m256 sc = _mm256_set1_ps(scale), ninf = _mm256_set1_ps(-INFINITY);
        __m256 s0 = _mm256_mul_ps(ifd__scores8(qg, K, n, hd), sc);
        s0 = _mm256_blendv_ps(ninf, s0, _mm256_castsi256_ps(m_lo));
        __m256 s1 = ninf;
        if (n > 8) {
            s1 = _mm256_mul_ps(ifd__scores8(qg, K + 8 * (int64_t)hd, n - 8, hd), sc);
            s1 = _mm256_blendv_ps(ninf, s1, _mm256_castsi256_ps(m_hi));
        }
        const float cmax = ifd__hmax8(_mm256_max_ps(s0, s1));
        const float mnew = cmax > m[g] ? cmax : m[g];
        const float corr = expf(m[g] - mnew);
        const __m256 mb = _mm256_set1_ps(mnew);
        __m256 p0 = _mm256_and_ps(ifd__exp8(_mm256_sub_ps(s0, mb)), _mm256_castsi256_ps(m_lo));
        __m256 p1 = _mm256_and_ps(ifd__exp8(_mm256_sub_ps(s1, mb)), _mm256_castsi256_ps(m_hi));
        _mm256_store_ps(s, p0);
        _mm256_store_ps(s + 8, p1);
        l[g] = l[g] * corr + ifd__hsum8(_mm256_add_ps(p0, p1));
        m[g] = mnew;

        const __m256 cv = _mm256_set1_ps(corr);
        for (int e0 = 0; e0 < hd; e0 += 32) {
            __m256i mk[4];
            __m256 a[4], b[4];
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) {
                const int left = hd - e0 - 8 * u;
                mk[u] = ifd__mask8(left <= 0 ? 0 : left < 8 ? left : 8);
                a[u] = _mm256_mul_ps(_mm256_maskload_ps(ag + e0 + 8 * u, mk[u]), cv);
                b[u] = _mm256_setzero_ps();
            }
            int j = 0;
            for (; j + 2 <= n; j += 2) {
                const float *v0 = V + (int64_t)j * hd + e0, *v1 = v0 + hd;
                const __m256 pa = _mm256_set1_ps(s[j]), pb = _mm256_set1_ps(s[j + 1]);
#pragma GCC unroll 4
                for (int u = 0; u < 4; u++) {
                    a[u] = _mm256_fmadd_ps(pa, _mm256_maskload_ps(v0 + 8 * u, mk[u]), a[u]);
                    b[u] = _mm256_fmadd_ps(pb, _mm256_maskload_ps(v1 + 8 * u, mk[u]), b[u]);
                }
            }
            if (j < n) {
                const float *v0 = V + (int64_t)j * hd + e0;
                const __m256 pa = _mm256_set1_ps(s[j]);
#pragma GCC unroll 4
                for (int u = 0; u < 4; u++)
                    a[u] = _mm256_fmadd_ps(pa, _mm256_maskload_ps(v0 + 8 * u, mk[u]), a[u]);
            }
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++)
                _mm256_maskstore_ps(ag + e0 + 8 * u, mk[u], _mm256_add_ps(a[u], b[u]));
        }
    }
}

/*
 * The AVX2 chunk kernel on K/V rows read in place (head_dim a multiple of
 * 8, any KV dtype; the common case, so no conversion buffer and no masked
 * loads). The G query heads of the KV head are worked in blocks of up to 4
 * so each K or V vector is loaded and converted once per block:
 *   scores: GB heads × JB positions (GB·JB ≤ 8 accumulators), the query
 *     vectors loaded from L1; every score is the sum of its 8 lanes (lane i
 *     holds the elements ≡ i mod 8, in order) by the hsum8x8 tree, the same
 *     whatever tile it was computed in;
 *   PV: GB heads × DW vectors of head_dim, one FMA chain per output element
 *     over the chunk's positions in order (acc·corr first).
 */

/* 8 f32 lanes of a raw K or V row at element e (e + 8 ≤ head_dim, e a
 * multiple of 8). */
IFD__TARGET_AVX2 IFD__INLINE __m256 ifd__kv8(const char *row, int e, int hd, const int dt)
{
    switch (dt) {
    case IFD_DTYPE_Q8_0:
    case IFD_DTYPE_Q4_0: {
        uint16_t h;
        memcpy(&h, row + ifd__row_qbytes(dt, hd) + 2 * (e / IFD__QK), 2);
        const __m256 d = _mm256_cvtph_ps(_mm_set1_epi16((short)h));
        __m128i b;
        if (dt == IFD_DTYPE_Q8_0) {
            int64_t w;
            memcpy(&w, row + e, 8);
            b = _mm_cvtsi64_si128(w);
            return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), d);
        }
        int64_t w;
        memcpy(&w, row + e / IFD__QK * 16 + e % 16, 8);
        b = _mm_cvtsi64_si128(w);
        if (e % IFD__QK >= 16)
            b = _mm_srli_epi16(b, 4);
        b = _mm_sub_epi8(_mm_and_si128(b, _mm_set1_epi8(15)), _mm_set1_epi8(8));
        return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), d);
    }
    case IFD_DTYPE_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + e)));
    case IFD_DTYPE_BF16:
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + e))),
            16));
    default:
        return _mm256_loadu_ps((const float *)row + e);
    }
}

/* Unscaled scores of heads [0, GB) of qb × rows j0 .. j0 + JB − 1 (rows ≥ n
 * alias row n − 1 and are ignored by the caller) into s[u][j]. */
IFD__TARGET_AVX2 IFD__INLINE void ifd__scores_tile(const float *qb, const char *K, int64_t stride,
                                                   int j0, int n, int hd,
                                                   float (*s)[IFD__ATT_CHUNK], const int GB,
                                                   const int JB, const int dt)
{
    const char *kr[8];
#pragma GCC unroll 8
    for (int j = 0; j < JB; j++)
        kr[j] = K + (int64_t)(j0 + j < n ? j0 + j : n - 1) * stride;
    __m256 d[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        d[i] = _mm256_setzero_ps();
    for (int e = 0; e < hd; e += 8) {
        __m256 kv[8];
#pragma GCC unroll 8
        for (int j = 0; j < JB; j++)
            kv[j] = ifd__kv8(kr[j], e, hd, dt);
#pragma GCC unroll 4
        for (int u = 0; u < GB; u++) {
            const __m256 qv = _mm256_loadu_ps(qb + (int64_t)u * hd + e);
#pragma GCC unroll 8
            for (int j = 0; j < JB; j++)
                d[u * JB + j] = _mm256_fmadd_ps(qv, kv[j], d[u * JB + j]);
        }
    }
    float r[8] __attribute__((aligned(32)));
    _mm256_store_ps(r, ifd__hsum8x8(d));
#pragma GCC unroll 4
    for (int u = 0; u < GB; u++)
#pragma GCC unroll 8
        for (int j = 0; j < JB; j++)
            if (j0 + j < n)
                s[u][j0 + j] = r[u * JB + j];
}

/* acc[u][e] = acc[u][e]·corr[u] + Σ_j p[u][j]·v_j[e] for heads [0, GB) and
 * the DW vectors of head_dim at e0 (fewer at the end of the row). */
IFD__TARGET_AVX2 IFD__INLINE void ifd__pv_tile(float *ab, const float *corr, const char *V,
                                               int64_t stride, int n, int hd, int e0,
                                               float (*p)[IFD__ATT_CHUNK], const int GB,
                                               const int DW, const int dt)
{
    const int nv = (hd - e0) / 8 < DW ? (hd - e0) / 8 : DW;
    __m256 a[4][8];
#pragma GCC unroll 4
    for (int u = 0; u < GB; u++) {
        const __m256 cv = _mm256_set1_ps(corr[u]);
#pragma GCC unroll 8
        for (int w = 0; w < DW; w++)
            a[u][w] = w < nv ? _mm256_mul_ps(_mm256_loadu_ps(ab + (int64_t)u * hd + e0 + 8 * w), cv)
                             : _mm256_setzero_ps();
    }
    for (int j = 0; j < n; j++) {
        const char *vr = V + (int64_t)j * stride;
        __m256 v[8];
#pragma GCC unroll 8
        for (int w = 0; w < DW; w++)
            v[w] = w < nv ? ifd__kv8(vr, e0 + 8 * w, hd, dt) : _mm256_setzero_ps();
#pragma GCC unroll 4
        for (int u = 0; u < GB; u++) {
            const __m256 pb = _mm256_set1_ps(p[u][j]);
#pragma GCC unroll 8
            for (int w = 0; w < DW; w++)
                if (w < nv)
                    a[u][w] = _mm256_fmadd_ps(pb, v[w], a[u][w]);
        }
    }
#pragma GCC unroll 4
    for (int u = 0; u < GB; u++)
#pragma GCC unroll 8
        for (int w = 0; w < DW; w++)
            if (w < nv)
                _mm256_storeu_ps(ab + (int64_t)u * hd + e0 + 8 * w, a[u][w]);
}

/* One block of GB heads (queries qb, accumulators ab, state m, l). */
IFD__TARGET_AVX2 IFD__INLINE void ifd__chunk_avx2_heads(const float *qb, const char *K,
                                                        const char *V, int64_t stride, int n,
                                                        int hd, float scale, float *m, float *l,
                                                        float *ab, const int GB, const int dt)
{
    const int JB = GB == 1 ? 8 : GB == 2 ? 4 : 2, DW = GB == 1 ? 8 : GB == 2 ? 4 : 2;
    float s[4][IFD__ATT_CHUNK] __attribute__((aligned(32)));
    for (int j0 = 0; j0 < n; j0 += JB)
        ifd__scores_tile(qb, K, stride, j0, n, hd, s, GB, JB, dt);
    const __m256i m_lo = ifd__mask8(n < 8 ? n : 8), m_hi = ifd__mask8(n > 8 ? n - 8 : 0);
    const __m256 sc = _mm256_set1_ps(scale), ninf = _mm256_set1_ps(-INFINITY);
    float corr[4];
#pragma GCC unroll 4
    for (int u = 0; u < GB; u++) {
        __m256 s0 = _mm256_mul_ps(_mm256_maskload_ps(s[u], m_lo), sc);
        __m256 s1 = _mm256_mul_ps(_mm256_maskload_ps(s[u] + 8, m_hi), sc);
        s0 = _mm256_blendv_ps(ninf, s0, _mm256_castsi256_ps(m_lo));
        s1 = _mm256_blendv_ps(ninf, s1, _mm256_castsi256_ps(m_hi));
        const float cmax = ifd__hmax8(_mm256_max_ps(s0, s1));
        const float mnew = cmax > m[u] ? cmax : m[u];
        corr[u] = expf(m[u] - mnew);
        const __m256 mb = _mm256_set1_ps(mnew);
        const __m256 p0 =
            _mm256_and_ps(ifd__exp8(_mm256_sub_ps(s0, mb)), _mm256_castsi256_ps(m_lo));
        const __m256 p1 =
            _mm256_and_ps(ifd__exp8(_mm256_sub_ps(s1, mb)), _mm256_castsi256_ps(m_hi));
        _mm256_store_ps(s[u], p0);
        _mm256_store_ps(s[u] + 8, p1);
        l[u] = l[u] * corr[u] + ifd__hsum8(_mm256_add_ps(p0, p1));
        m[u] = mnew;
    }
    for (int e0 = 0; e0 < hd; e0 += 8 * DW)
        ifd__pv_tile(ab, corr, V, stride, n, hd, e0, s, GB, DW, dt);
}

IFD__TARGET_AVX2 IFD__INLINE void ifd__chunk_avx2_rows(const float *q, const char *K, const char *V,
                                                       int n, int G, int hd, float scale, float *m,
                                                       float *l, float *acc, const int dt)
{
    const int64_t stride = ifd__row_bytes(dt, hd);
    for (int g0 = 0; g0 < G; g0 += 4) {
        const float *qb = q + (int64_t)g0 * hd;
        float *ab = acc + (int64_t)g0 * hd;
        switch (G - g0 < 4 ? G - g0 : 4) {
        case 1:
            ifd__chunk_avx2_heads(qb, K, V, stride, n, hd, scale, m + g0, l + g0, ab, 1, dt);
            break;
        case 2:
            ifd__chunk_avx2_heads(qb, K, V, stride, n, hd, scale, m + g0, l + g0, ab, 2, dt);
            break;
        case 3:
            ifd__chunk_avx2_heads(qb, K, V, stride, n, hd, scale, m + g0, l + g0, ab, 3, dt);
            break;
        default:
            ifd__chunk_avx2_heads(qb, K, V, stride, n, hd, scale, m + g0, l + g0, ab, 4, dt);
            break;
        }
    }
}

/* A chunk of n rows at byte offset base of the layer, in place. */
IFD__TARGET_AVX2 static void ifd__chunk_avx2_kv(const ifd_kv_layer_t *kv, int64_t base, int n,
                                                const float *q, int G, float scale, float *m,
                                                float *l, float *acc)
{
    const int hd = kv->head_dim;
    const char *K = (const char *)kv->k + base, *V = (const char *)kv->v + base;
    switch (kv->dtype) {
    case IFD_DTYPE_Q8_0:
        ifd__chunk_avx2_rows(q, K, V, n, G, hd, scale, m, l, acc, IFD_DTYPE_Q8_0);
        return;
    case IFD_DTYPE_Q4_0:
        ifd__chunk_avx2_rows(q, K, V, n, G, hd, scale, m, l, acc, IFD_DTYPE_Q4_0);
        return;
    case IFD_DTYPE_F16:
        ifd__chunk_avx2_rows(q, K, V, n, G, hd, scale, m, l, acc, IFD_DTYPE_F16);
        return;
    case IFD_DTYPE_BF16:
        ifd__chunk_avx2_rows(q, K, V, n, G, hd, scale, m, l, acc, IFD_DTYPE_BF16);
        return;
    default:
        ifd__chunk_avx2_rows(q, K, V, n, G, hd, scale, m, l, acc, IFD_DTYPE_F32);
        return;
    }
}

/* Lane j of the result = Σ lanes of d[j], for 16 vectors. */
IFD__TARGET_AVX512 IFD__INLINE __m512 ifd__hsum16x16(const __m512 *d)
{
    __m512 b[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        b[i] = _mm512_add_ps(_mm512_unpacklo_ps(d[2 * i], d[2 * i + 1]),
                             _mm512_unpackhi_ps(d[2 * i], d[2 * i + 1]));
    __m512 c[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        __m512d x = _mm512_castps_pd(b[2 * i]), y = _mm512_castps_pd(b[2 * i + 1]);
        c[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    /* c[i] holds, per 128-bit lane L, the partial sums of d[4i..4i+3]. */
    __m512 e01 = _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(1, 0, 1, 0)),
                               _mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 e23 = _mm512_add_ps(_mm512_shuffle_f32x4(c[2], c[3], _MM_SHUFFLE(1, 0, 1, 0)),
                               _mm512_shuffle_f32x4(c[2], c[3], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(e01, e23, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(e01, e23, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* 16 f32 lanes of a K or V row at element e, converted from the KV dtype:
 * the raw path reads f16/bf16 rows whole (head_dim a multiple of 16, so no
 * mask is needed), Q8_0/Q4_0 rows dequantized (head_dim a multiple of 32);
 * f32 rows may end in a masked vector. */
IFD__TARGET_AVX512 IFD__INLINE __m512 ifd__kv16(const void *row, int e, int hd, __mmask16 mk,
                                                const int dt)
{
    switch (dt) {
    case IFD_DTYPE_Q8_0:
    case IFD_DTYPE_Q4_0: {
        const char *r = row;
        uint16_t h;
        memcpy(&h, r + ifd__row_qbytes(dt, hd) + 2 * (e / IFD__QK), 2);
        const __m512 d = _mm512_cvtph_ps(_mm256_set1_epi16((short)h));
        __m128i b;
        if (dt == IFD_DTYPE_Q8_0) {
            b = _mm_loadu_si128((const __m128i *)(const void *)(r + e));
        } else {
            b = _mm_loadu_si128((const __m128i *)(const void *)(r + e / IFD__QK * 16));
            if (e % IFD__QK >= 16)
                b = _mm_srli_epi16(b, 4);
            b = _mm_sub_epi8(_mm_and_si128(b, _mm_set1_epi8(15)), _mm_set1_epi8(8));
        }
        return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), d);
    }
    case IFD_DTYPE_F16:
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + e)));
    case IFD_DTYPE_BF16:
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + e))),
            16));
    default:
        return _mm512_maskz_loadu_ps(mk, (const float *)row + e);
    }
}

/* K holds 16 readable rows (rows >= n are finite filler whose scores are
 * masked out), V holds n rows, both of dtype dt with row stride hd. The
 * softmax correction e^(m - m') is computed in vector registers too: a libm
 * call here would spill every live vector register around it. */
IFD__TARGET_AVX512 IFD__INLINE void ifd__chunk_avx512(const float *q, const void *K, const void *V,
                                                      int n, int G, int hd, float scale, float *m,
                                                      float *l, float *acc, const int dt)
{
    const int64_t stride = ifd__row_bytes(dt, hd); /* bytes per row */
    const char *Kb = K, *Vb = V;
    const __mmask16 nm = ifd__mask16(n);
    for (int g = 0; g < G; g++) {
        const float *qg = q + (int64_t)g * hd;
        float *ag = acc + (int64_t)g * hd;
        float s[IFD__ATT_CHUNK] __attribute__((aligned(64)));
        __m512 d[16];
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++)
            d[j] = _mm512_setzero_ps();
        int e = 0;
        for (; e + 16 <= hd; e += 16) {
            __m512 qv = _mm512_loadu_ps(qg + e);
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++)
                d[j] = _mm512_fmadd_ps(qv, ifd__kv16(Kb + j * stride, e, hd, 0xffff, dt), d[j]);
        }
        if (e < hd) { /* f32 only */
            __mmask16 mk = ifd__mask16(hd - e);
            __m512 qv = _mm512_maskz_loadu_ps(mk, qg + e);
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++)
                d[j] = _mm512_fmadd_ps(qv, ifd__kv16(Kb + j * stride, e, hd, mk, dt), d[j]);
        }
        const __m512 sv = _mm512_mask_mul_ps(_mm512_set1_ps(-INFINITY), nm, ifd__hsum16x16(d),
                                             _mm512_set1_ps(scale));
        const float cmax = _mm512_reduce_max_ps(sv);
        const float mnew = cmax > m[g] ? cmax : m[g];
        const __m512 cv = ifd__exp16(_mm512_set1_ps(m[g] - mnew)); /* e^-inf = 0 */
        const __m512 p =
            _mm512_maskz_mov_ps(nm, ifd__exp16(_mm512_sub_ps(sv, _mm512_set1_ps(mnew))));
        _mm512_store_ps(s, p);
        l[g] = l[g] * _mm512_cvtss_f32(cv) + _mm512_reduce_add_ps(p);
        m[g] = mnew;

        for (int e0 = 0; e0 < hd; e0 += 64) {
            __mmask16 mk[4];
            __m512 a[4], b[4];
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) {
                const int left = hd - e0 - 16 * u;
                mk[u] = ifd__mask16(left <= 0 ? 0 : left < 16 ? left : 16);
                a[u] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk[u], ag + e0 + 16 * u), cv);
                b[u] = _mm512_setzero_ps();
            }
            int j = 0;
            for (; j + 2 <= n; j += 2) {
                const char *v0 = Vb + j * stride, *v1 = v0 + stride;
                const __m512 pa = _mm512_set1_ps(s[j]), pb = _mm512_set1_ps(s[j + 1]);
#pragma GCC unroll 4
                for (int u = 0; u < 4; u++)
                    if (mk[u]) {
                        a[u] = _mm512_fmadd_ps(pa, ifd__kv16(v0, e0 + 16 * u, hd, mk[u], dt), a[u]);
                        b[u] = _mm512_fmadd_ps(pb, ifd__kv16(v1, e0 + 16 * u, hd, mk[u], dt), b[u]);
                    }
            }
            if (j < n) {
                const char *v0 = Vb + j * stride;
                const __m512 pa = _mm512_set1_ps(s[j]);
#pragma GCC unroll 4
                for (int u = 0; u < 4; u++)
                    if (mk[u])
                        a[u] = _mm512_fmadd_ps(pa, ifd__kv16(v0, e0 + 16 * u, hd, mk[u], dt), a[u]);
            }
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++)
                _mm512_mask_storeu_ps(ag + e0 + 16 * u, mk[u], _mm512_add_ps(a[u], b[u]));
        }
    }
}

/*
 * ifd__chunk_avx512 on a whole chunk (16 rows) of f16/bf16 rows (head_dim a
 * multiple of 32) for a group of G = 2..8 query heads (a compile-time G),
 * with the same results bit for bit: every score and every output element
 * is the same chain of FMAs in the same order. What differs is that each K
 * and V vector is converted once for the group (ifd__chunk_avx512 converts
 * it once per head): scores in tiles of G heads × JB positions (their
 * accumulators parked in d until each head's hsum16x16), PV in passes of
 * 32 values for blocks of up to 4 heads.
 */
IFD__TARGET_AVX512 IFD__INLINE void ifd__chunk_avx512_g(const float *q, const char *K,
                                                        const char *V, int hd, float scale,
                                                        float *m, float *l, float *acc, const int G,
                                                        const int dt)
{
    enum { JB_MAX = 4 };
    const int JB = G <= 4 ? 4 : 2;
    const int64_t stride = ifd__row_bytes(dt, hd);
    __m512 d[8][IFD__ATT_CHUNK];
    for (int j0 = 0; j0 < IFD__ATT_CHUNK; j0 += JB) {
        __m512 t[8][JB_MAX];
#pragma GCC unroll 8
        for (int g = 0; g < G; g++)
#pragma GCC unroll 4
            for (int jj = 0; jj < JB; jj++)
                t[g][jj] = _mm512_setzero_ps();
        for (int e = 0; e < hd; e += 16) {
            __m512 kv[JB_MAX];
#pragma GCC unroll 4
            for (int jj = 0; jj < JB; jj++)
                kv[jj] = ifd__kv16(K + (j0 + jj) * stride, e, hd, 0xffff, dt);
#pragma GCC unroll 8
            for (int g = 0; g < G; g++) {
                const __m512 qv = _mm512_loadu_ps(q + (int64_t)g * hd + e);
#pragma GCC unroll 4
                for (int jj = 0; jj < JB; jj++)
                    t[g][jj] = _mm512_fmadd_ps(qv, kv[jj], t[g][jj]);
            }
        }
#pragma GCC unroll 8
        for (int g = 0; g < G; g++)
#pragma GCC unroll 4
            for (int jj = 0; jj < JB; jj++)
                d[g][j0 + jj] = t[g][jj];
    }
    float s[8][IFD__ATT_CHUNK] __attribute__((aligned(64)));
    float corr[8];
#pragma GCC unroll 8
    for (int g = 0; g < G; g++) {
        const __m512 sv = _mm512_mul_ps(ifd__hsum16x16(d[g]), _mm512_set1_ps(scale));
        const float cmax = _mm512_reduce_max_ps(sv);
        const float mnew = cmax > m[g] ? cmax : m[g];
        const __m512 cv = ifd__exp16(_mm512_set1_ps(m[g] - mnew)); /* e^-inf = 0 */
        const __m512 p = ifd__exp16(_mm512_sub_ps(sv, _mm512_set1_ps(mnew)));
        _mm512_store_ps(s[g], p);
        corr[g] = _mm512_cvtss_f32(cv);
        l[g] = l[g] * corr[g] + _mm512_reduce_add_ps(p);
        m[g] = mnew;
    }
#pragma GCC unroll 2
    for (int g0 = 0; g0 < G; g0 += 4) {
        const int GB = G - g0 < 4 ? G - g0 : 4;
        for (int e0 = 0; e0 < hd; e0 += 32) {
            __m512 a[4][2], b[4][2];
#pragma GCC unroll 4
            for (int u = 0; u < GB; u++) {
                const __m512 cv = _mm512_set1_ps(corr[g0 + u]);
                const float *ag = acc + (int64_t)(g0 + u) * hd + e0;
                a[u][0] = _mm512_mul_ps(_mm512_loadu_ps(ag), cv);
                a[u][1] = _mm512_mul_ps(_mm512_loadu_ps(ag + 16), cv);
                b[u][0] = b[u][1] = _mm512_setzero_ps();
            }
            for (int j = 0; j < IFD__ATT_CHUNK; j += 2) {
                const char *v0 = V + j * stride, *v1 = v0 + stride;
                const __m512 x00 = ifd__kv16(v0, e0, hd, 0xffff, dt);
                const __m512 x01 = ifd__kv16(v0, e0 + 16, hd, 0xffff, dt);
                const __m512 x10 = ifd__kv16(v1, e0, hd, 0xffff, dt);
                const __m512 x11 = ifd__kv16(v1, e0 + 16, hd, 0xffff, dt);
#pragma GCC unroll 4
                for (int u = 0; u < GB; u++) {
                    const __m512 pa = _mm512_set1_ps(s[g0 + u][j]);
                    const __m512 pb = _mm512_set1_ps(s[g0 + u][j + 1]);
                    a[u][0] = _mm512_fmadd_ps(pa, x00, a[u][0]);
                    a[u][1] = _mm512_fmadd_ps(pa, x01, a[u][1]);
                    b[u][0] = _mm512_fmadd_ps(pb, x10, b[u][0]);
                    b[u][1] = _mm512_fmadd_ps(pb, x11, b[u][1]);
                }
            }
#pragma GCC unroll 4
            for (int u = 0; u < GB; u++) {
                float *ag = acc + (int64_t)(g0 + u) * hd + e0;
                _mm512_storeu_ps(ag, _mm512_add_ps(a[u][0], b[u][0]));
                _mm512_storeu_ps(ag + 16, _mm512_add_ps(a[u][1], b[u][1]));
            }
        }
    }
}

/* ifd__chunk_avx512_g for G = 2..8; 0 when G is another. */
IFD__TARGET_AVX512 IFD__INLINE int ifd__chunk_avx512_grp(const float *q, const char *K,
                                                         const char *V, int G, int hd, float scale,
                                                         float *m, float *l, float *acc,
                                                         const int dt)
{
    switch (G) {
#define IFD__A512G(g)                                                                              \
    case g:                                                                                        \
        ifd__chunk_avx512_g(q, K, V, hd, scale, m, l, acc, g, dt);                                 \
        return 1;
        IFD__A512G(2)
        IFD__A512G(3)
        IFD__A512G(4)
        IFD__A512G(5)
        IFD__A512G(6)
        IFD__A512G(7)
        IFD__A512G(8)
#undef IFD__A512G
    default:
        return 0;
    }
}

/* A chunk on AVX-512: a whole chunk (16 rows) is read in place in its own
 * dtype; a partial one, a head_dim that is not a multiple of 16 with 16-bit
 * K/V, or FP8 rows go through f32 copies (K zero-padded to 16 rows; a
 * quantized type's rows dequantized into them). */
IFD__TARGET_AVX512 static void ifd__chunk_avx512_kv(const ifd_kv_layer_t *kv, int64_t base, int n,
                                                    const float *q, int G, float scale, float *m,
                                                    float *l, float *acc, float *kbuf, float *vbuf)
{
    const int hd = kv->head_dim;
    const char *K = (const char *)kv->k + base, *V = (const char *)kv->v + base;
    if (n == IFD__ATT_CHUNK && kv->dtype != IFD_DTYPE_FP8 &&
        (kv->dtype == IFD_DTYPE_F32 || hd % 16 == 0)) {
        if (hd % 32 == 0 && kv->dtype == IFD_DTYPE_F16 &&
            ifd__chunk_avx512_grp(q, K, V, G, hd, scale, m, l, acc, IFD_DTYPE_F16))
            return;
        if (hd % 32 == 0 && kv->dtype == IFD_DTYPE_BF16 &&
            ifd__chunk_avx512_grp(q, K, V, G, hd, scale, m, l, acc, IFD_DTYPE_BF16))
            return;
        switch (kv->dtype) {
        case IFD_DTYPE_Q8_0:
            ifd__chunk_avx512(q, K, V, n, G, hd, scale, m, l, acc, IFD_DTYPE_Q8_0);
            return;
        case IFD_DTYPE_Q4_0:
            ifd__chunk_avx512(q, K, V, n, G, hd, scale, m, l, acc, IFD_DTYPE_Q4_0);
            return;
        case IFD_DTYPE_F16:
            ifd__chunk_avx512(q, K, V, n, G, hd, scale, m, l, acc, IFD_DTYPE_F16);
            return;
        case IFD_DTYPE_BF16:
            ifd__chunk_avx512(q, K, V, n, G, hd, scale, m, l, acc, IFD_DTYPE_BF16);
            return;
        default:
            ifd__chunk_avx512(q, K, V, n, G, hd, scale, m, l, acc, IFD_DTYPE_F32);
            return;
        }
    }
    const float *Kf = ifd__rows_f32(kv, kv->k, base, n, kbuf);
    if (Kf != kbuf)
        memcpy(kbuf, Kf, sizeof(float) * (size_t)n * (size_t)hd);
    memset(kbuf + (int64_t)n * hd, 0, sizeof(float) * (size_t)(IFD__ATT_CHUNK - n) * (size_t)hd);
    const float *Vf = ifd__rows_f32(kv, kv->v, base, n, vbuf);
    ifd__chunk_avx512(q, kbuf, Vf, n, G, hd, scale, m, l, acc, IFD_DTYPE_F32);
}

#endif

/* Positions [max(p_lo, i·P), min(p_end, i·P + P − 1)] form partition i of
 * a token's window: fixed by absolute position, so a token's partitions do
 * not depend on the batch it is in. */
static inline int ifd__part_lo(int i, int p_lo)
{
    return i * IFD__ATT_PART > p_lo ? i * IFD__ATT_PART : p_lo;
}

static inline int ifd__part_hi(int i, int p_end)
{
    return i * IFD__ATT_PART + IFD__ATT_PART - 1 < p_end ? i * IFD__ATT_PART + IFD__ATT_PART - 1
                                                         : p_end;
}

/* The online softmax of query heads [h0·G, h1·G) of token t over positions
 * [pa, pb] of its sequence (block table bt): acc (nq × hd, unnormalized),
 * m, l from scratch. */
static void ifd__att_range(const ifd__att_t *c, const int32_t *bt, const float *q, int h0, int h1,
                           int pa, int pb, float *acc, float *m, float *l)
{
    const ifd_kv_layer_t *kv = c->kv;
    const int hd = kv->head_dim, bs = kv->block_size, G = c->group, nq = (h1 - h0) * G;
    memset(acc, 0, sizeof(float) * (size_t)nq * (size_t)hd);
    for (int g = 0; g < nq; g++)
        m[g] = -INFINITY, l[g] = 0;
    float kbuf[IFD__ATT_CHUNK * IFD__ATT_MAX_HEAD_DIM] __attribute__((aligned(64)));
    float vbuf[IFD__ATT_CHUNK * IFD__ATT_MAX_HEAD_DIM] __attribute__((aligned(64)));

    /* Chunk by chunk, each served KV head in turn: the heads' rows of one
     * block lie next to each other, so memory is read in long runs. */
    for (int p = pa; p <= pb;) {
        const int n = ifd__chunk_len(p, pb, bs);
        if (p + n <= pb) { /* the next chunk lives in another block: ask for it now */
            const int pn = p + n, nn = ifd__chunk_len(pn, pb, bs);
            for (int h = h0; h < h1; h++)
                ifd__prefetch_rows(kv, ifd__kv_off(kv, bt[pn / bs], h, pn % bs), nn);
        }
        for (int h = h0; h < h1; h++) {
            const int64_t base = ifd__kv_off(kv, bt[p / bs], h, p % bs);
            const int i = (h - h0) * G; /* first query head of this KV head */
            const float *qh = q + (int64_t)i * hd;
            float *ah = acc + (int64_t)i * hd;
            if (c->qi) { /* Q8_0/Q4_0: the quantized query of this row */
                const int64_t r = (qh - c->q) / hd, qs = ifd__qrow(hd);
                const int8_t *qq = c->qi + r * qs;
                const float *qd = c->qd + r * (qs / IFD__QK);
#if IFD__X86
                if (c->qpath == 2) {
                    ifd__chunk_q512_kv(kv, base, n, qq, qd, c->qo + r * (qs / IFD__QK), G, c->scale,
                                       m + i, l + i, ah);
                    continue;
                }
                if (c->qpath == 1) {
                    ifd__chunk_q256_kv(kv, base, n, qq, qd, G, c->scale, m + i, l + i, ah);
                    continue;
                }
#endif
                ifd__chunk_qscalar(qq, qd, kv, base, n, G, c->scale, m + i, l + i, ah, vbuf);
                continue;
            }
#if IFD__X86
            if (c->isa == IFD__ISA_AVX512) {
                ifd__chunk_avx512_kv(kv, base, n, qh, G, c->scale, m + i, l + i, ah, kbuf, vbuf);
                continue;
            }
            if (c->isa == IFD__ISA_AVX2 && c->raw_avx2) {
                ifd__chunk_avx2_kv(kv, base, n, qh, G, c->scale, m + i, l + i, ah);
                continue;
            }
#endif
            const float *K = ifd__rows_f32(kv, kv->k, base, n, kbuf);
            const float *V = ifd__rows_f32(kv, kv->v, base, n, vbuf);
            switch (c->isa) {
#if IFD__X86
            case IFD__ISA_AVX2:
                ifd__chunk_avx2(qh, K, V, n, G, hd, c->scale, m + i, l + i, ah);
                break;
#endif
            default:
                ifd__chunk_scalar(qh, K, V, n, G, hd, c->scale, m + i, l + i, ah);
                break;
            }
        }
        p += n;
    }
}

/* Folds partition state (acc2, m2, l2) into (acc, m, l): with M = max(m, m2),
 * acc = acc·e^(m−M) + acc2·e^(m2−M), likewise l. Plain C with fmaf (one
 * rounding, as the FMA instruction): the same operations on every path, so
 * a split run and a whole run fold identically. */
#if IFD__X86
IFD__TARGET_AVX2 static void ifd__fold_avx2(float *x, const float *y, float a, float b, int hd)
{
    const __m256 av = _mm256_set1_ps(a), bv = _mm256_set1_ps(b);
    int e = 0;
    for (; e + 8 <= hd; e += 8)
        _mm256_storeu_ps(x + e, _mm256_fmadd_ps(_mm256_loadu_ps(y + e), bv,
                                                _mm256_mul_ps(_mm256_loadu_ps(x + e), av)));
    for (; e < hd; e++)
        x[e] = fmaf(y[e], b, x[e] * a);
}
#endif

static void ifd__att_fold(const ifd__att_t *c, float *restrict acc, float *m, float *l,
                          const float *restrict acc2, const float *m2, const float *l2, int nq,
                          int hd)
{
    for (int g = 0; g < nq; g++) {
        const float M = m2[g] > m[g] ? m2[g] : m[g];
        const float a = expf(m[g] - M), b = expf(m2[g] - M);
        l[g] = fmaf(l2[g], b, l[g] * a);
        m[g] = M;
        float *x = acc + (int64_t)g * hd;
        const float *y = acc2 + (int64_t)g * hd;
#if IFD__X86
        if (c->isa >= IFD__ISA_AVX2) {
            ifd__fold_avx2(x, y, a, b, hd);
            continue;
        }
#endif
        for (int e = 0; e < hd; e++)
            x[e] = fmaf(y[e], b, x[e] * a);
    }
}

static void ifd__att_normalize(float *acc, const float *l, int nq, int hd)
{
    for (int g = 0; g < nq; g++) {
        const float inv = 1.0f / l[g];
        float *ag = acc + (int64_t)g * hd;
        for (int e = 0; e < hd; e++)
            ag[e] *= inv;
    }
}

/* The first position a token at p sees (window 0 = unlimited). */
static inline int ifd__win_lo(int p, int window)
{
    return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
}

/* Token t's window [p_lo, p_end], or −1 for a padding row: from its
 * position's window start to its last visible position (its own, or its
 * image's last one). */
static int ifd__att_window(const ifd__att_t *c, int t, int *p_lo)
{
    if (c->seq[t] < 0)
        return -1;
    *p_lo = ifd__win_lo(c->pos[t], c->window);
    return c->last ? c->last[t] : c->pos[t];
}

/* Run hr of KV heads: [*h0, *h1); returns the query heads it serves. */
static int ifd__att_heads(const ifd__att_t *c, int hr, int *h0, int *h1)
{
    const int nkv = c->kv->n_kv_heads;
    *h0 = hr * c->heads_per_item;
    *h1 = *h0 + c->heads_per_item < nkv ? *h0 + c->heads_per_item : nkv;
    return (*h1 - *h0) * c->group;
}

/* Whole mode: item = (token, run of KV heads), its partitions one after the
 * other, each folded into the output row as it completes. */
static void ifd__att_item(void *arg, int item, int n_items)
{
    (void)n_items;
    const ifd__att_t *c = arg;
    const int hd = c->kv->head_dim, G = c->group;
    const int t = item / c->items_per_tok;
    int h0, h1;
    const int nq = ifd__att_heads(c, item % c->items_per_tok, &h0, &h1);
    const int64_t row = ((int64_t)t * c->n_heads + (int64_t)h0 * G) * hd;
    float *acc = c->out + row;
    int p_lo = 0;
    const int p_end = ifd__att_window(c, t, &p_lo);
    if (p_end < 0) {
        memset(acc, 0, sizeof(float) * (size_t)nq * (size_t)hd);
        return; /* padding row */
    }
    const int32_t *bt = c->block_tables + (int64_t)c->seq[t] * c->max_blocks;
    float m[IFD__ATT_MAX_ITEM_HEADS], l[IFD__ATT_MAX_ITEM_HEADS];
    float m2[IFD__ATT_MAX_ITEM_HEADS], l2[IFD__ATT_MAX_ITEM_HEADS];
    float part[IFD__ATT_MAX_ITEM_HEADS * IFD__ATT_MAX_HEAD_DIM] __attribute__((aligned(64)));
    const int i0 = p_lo / IFD__ATT_PART, i1 = p_end / IFD__ATT_PART;
    ifd__att_range(c, bt, c->q + row, h0, h1, ifd__part_lo(i0, p_lo), ifd__part_hi(i0, p_end), acc,
                   m, l);
    for (int i = i0 + 1; i <= i1; i++) {
        ifd__att_range(c, bt, c->q + row, h0, h1, ifd__part_lo(i, p_lo), ifd__part_hi(i, p_end),
                       part, m2, l2);
        ifd__att_fold(c, acc, m, l, part, m2, l2, nq, hd);
    }
    ifd__att_normalize(acc, l, nq, hd);
}

/* Split mode: item = one piece (token, run of KV heads, partition) into its
 * slot of the workspace; ifd__att_join folds them in partition order. */
static void ifd__att_piece(void *arg, int item, int n_items)
{
    (void)n_items;
    const ifd__att_t *c = arg;
    int t = 0;
    while (c->tok_off[t + 1] <= item)
        t++;
    const int nparts = (c->tok_off[t + 1] - c->tok_off[t]) / c->items_per_tok;
    const int k = item - c->tok_off[t], hr = k / nparts, part = k % nparts;
    const int hd = c->kv->head_dim, G = c->group;
    int h0, h1;
    const int nq = ifd__att_heads(c, hr, &h0, &h1);
    int p_lo = 0;
    const int p_end = ifd__att_window(c, t, &p_lo);
    const int i = p_lo / IFD__ATT_PART + part;
    float *acc = c->ws + (int64_t)item * c->piece_floats;
    float *m = acc + (int64_t)nq * hd, *l = m + nq;
    const int32_t *bt = c->block_tables + (int64_t)c->seq[t] * c->max_blocks;
    const int64_t row = ((int64_t)t * c->n_heads + (int64_t)h0 * G) * hd;
    ifd__att_range(c, bt, c->q + row, h0, h1, ifd__part_lo(i, p_lo), ifd__part_hi(i, p_end), acc, m,
                   l);
}

static void ifd__att_join(const ifd__att_t *c)
{
    const int hd = c->kv->head_dim, G = c->group;
    for (int t = 0; t < c->n_tok; t++) {
        const int pieces = c->tok_off[t + 1] - c->tok_off[t];
        for (int hr = 0; hr < c->items_per_tok; hr++) {
            int h0, h1;
            const int nq = ifd__att_heads(c, hr, &h0, &h1);
            float *acc = c->out + ((int64_t)t * c->n_heads + (int64_t)h0 * G) * hd;
            if (pieces == 0) { /* padding row */
                memset(acc, 0, sizeof(float) * (size_t)nq * (size_t)hd);
                continue;
            }
            const int nparts = pieces / c->items_per_tok;
            const float *w = c->ws + (int64_t)(c->tok_off[t] + hr * nparts) * c->piece_floats;
            float m[IFD__ATT_MAX_ITEM_HEADS], l[IFD__ATT_MAX_ITEM_HEADS];
            memcpy(acc, w, sizeof(float) * (size_t)nq * (size_t)hd);
            memcpy(m, w + (int64_t)nq * hd, sizeof(float) * (size_t)nq);
            memcpy(l, w + (int64_t)nq * hd + nq, sizeof(float) * (size_t)nq);
            for (int p = 1; p < nparts; p++) {
                const float *x = w + (int64_t)p * c->piece_floats;
                ifd__att_fold(c, acc, m, l, x, x + (int64_t)nq * hd, x + (int64_t)nq * hd + nq, nq,
                              hd);
            }
            ifd__att_normalize(acc, l, nq, hd);
        }
    }
}

/* Split mode pays when a small batch leaves threads idle: at most this many
 * tokens, and a workspace of at most this many bytes (else whole mode, which
 * computes the same result on fewer threads). */
enum { IFD__ATT_SPLIT_MAX_TOK = 8 };
#define IFD__ATT_SPLIT_MAX_BYTES ((int64_t)32 << 20)

int ifd_cpu_paged_attention(float *restrict out, const float *restrict q, const ifd_kv_layer_t *kv,
                            const int32_t *seq, const int32_t *pos, const int32_t *last,
                            const int32_t *block_tables, int max_blocks, int n_tok, int n_heads,
                            float scale, int window, ifd_threadpool_t *tp)
{
    int rc = ifd__kv_check(kv);
    if (rc)
        return rc;
    if (n_tok < 0 || max_blocks <= 0 || n_heads <= 0 || window < 0 || !isfinite(scale) ||
        n_heads % kv->n_kv_heads != 0)
        return IFD_EINVAL;
    if (kv->head_dim > IFD__ATT_MAX_HEAD_DIM || n_heads / kv->n_kv_heads > IFD__ATT_MAX_GROUP)
        return IFD_ENOTSUP;
    /* Every block a token will read must be mapped (checked here, on the
     * caller's thread, so the workers cannot fail). */
    const int bs = kv->block_size;
    for (int t = 0; t < n_tok; t++) {
        if (seq[t] < 0)
            continue;
        const int p_end = last ? last[t] : pos[t];
        if (pos[t] < 0 || p_end < pos[t] || p_end / bs >= max_blocks)
            return IFD_EINVAL;
        const int p_lo = ifd__win_lo(pos[t], window);
        const int32_t *bt = block_tables + (int64_t)seq[t] * max_blocks;
        for (int b = p_lo / bs; b <= p_end / bs; b++)
            if (bt[b] < 0)
                return IFD_EINVAL;
    }
    /* Work item = (token, run of KV heads): all of a token's heads when
     * there are enough tokens to keep ~4 items per thread, fewer (down to
     * one) when there are not, e.g. a single decode token. */
    const int threads = ifd_threadpool_size(tp), G = n_heads / kv->n_kv_heads;
    int hpi = kv->n_kv_heads;
    while (hpi > 1 && ((int64_t)n_tok * ((kv->n_kv_heads + hpi - 1) / hpi) < 4 * threads ||
                       hpi * G > IFD__ATT_MAX_ITEM_HEADS))
        hpi--;
    ifd__att_t c = {
        .out = out,
        .q = q,
        .kv = kv,
        .seq = seq,
        .pos = pos,
        .last = last,
        .block_tables = block_tables,
        .max_blocks = max_blocks,
        .n_heads = n_heads,
        .group = G,
        .scale = scale,
        .window = window,
        .heads_per_item = hpi,
        .items_per_tok = (kv->n_kv_heads + hpi - 1) / hpi,
        .isa = ifd__cpu_isa(),
        .raw_avx2 = kv->head_dim % 8 == 0 && kv->dtype != IFD_DTYPE_FP8,
        .n_tok = n_tok,
    };
    const int64_t items = (int64_t)n_tok * c.items_per_tok;
    if (items > INT32_MAX)
        return IFD_EINVAL;
    if ((kv->dtype == IFD_DTYPE_Q8_0 || kv->dtype == IFD_DTYPE_Q4_0) && n_tok > 0) {
        /* The queries quantized once, before the workers (attention_q.c: "the
         * quantized-query path"); padding rows are left unset, never read. */
        const int hd = kv->head_dim;
        const int64_t rows = (int64_t)n_tok * n_heads, qs = ifd__qrow(hd);
        c.qi = malloc((size_t)(rows * qs));
        c.qd = malloc(sizeof(float) * (size_t)(rows * (qs / IFD__QK)));
        c.qo = malloc(sizeof(int32_t) * (size_t)(rows * (qs / IFD__QK)));
        if (!c.qi || !c.qd || !c.qo) {
            free(c.qi), free(c.qd), free(c.qo);
            return IFD_ENOMEM;
        }
#if IFD__X86
        c.qpath = c.isa == IFD__ISA_AVX512 && ifd_cpu_features()->avx512vnni ? 2
                  : c.isa >= IFD__ISA_AVX2                                   ? 1
                                                                             : 0;
#endif
        for (int t = 0; t < n_tok; t++)
            for (int h = 0; seq[t] >= 0 && h < n_heads; h++) {
                const int64_t r = (int64_t)t * n_heads + h;
                ifd__quant_query(c.qi + r * qs, c.qd + r * (qs / IFD__QK), q + r * hd, hd);
                if (c.qpath == 2)
                    ifd__quant_query_offsets(c.qo + r * (qs / IFD__QK), c.qi + r * qs, hd,
                                             kv->dtype);
            }
    }
    /* Few items for the pool: split each token's window into its
     * partitions, when that gives at least twice the items. */
    if (threads > 1 && items < 2 * threads && n_tok <= IFD__ATT_SPLIT_MAX_TOK) {
        int32_t off[IFD__ATT_SPLIT_MAX_TOK + 1];
        off[0] = 0;
        for (int t = 0; t < n_tok; t++) {
            int p_lo = 0;
            const int p_end = ifd__att_window(&c, t, &p_lo);
            const int parts = p_end < 0 ? 0 : p_end / IFD__ATT_PART - p_lo / IFD__ATT_PART + 1;
            off[t + 1] = off[t] + parts * c.items_per_tok;
        }
        c.piece_floats = (int64_t)hpi * G * (kv->head_dim + 2);
        const int64_t bytes = (int64_t)off[n_tok] * c.piece_floats * (int64_t)sizeof(float);
        if (off[n_tok] >= 2 * items && bytes <= IFD__ATT_SPLIT_MAX_BYTES &&
            (c.ws = malloc((size_t)bytes)) != NULL) {
            c.tok_off = off;
            ifd_threadpool_run(tp, ifd__att_piece, &c, off[n_tok]);
            ifd__att_join(&c);
            free(c.ws);
            free(c.qi), free(c.qd), free(c.qo);
            return 0;
        }
    }
    ifd_threadpool_run(tp, ifd__att_item, &c, (int)items);
    free(c.qi), free(c.qd), free(c.qo);
    return 0;
}
