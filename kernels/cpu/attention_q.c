/*
 * attention_q.c — the quantized-query path of the CPU attention over Q8_0 and
 * Q4_0 K/V (attention.c has the rest: the rows, the f32/f16 paths and the
 * scheduling that calls these per chunk; attention_impl.h what they share).
 *
 * For the block types the query is quantized once per (token, query head)
 * before any work, as GGML's vec_dot_q8_0_q8_0 / vec_dot_q4_0_q8_0 do (its
 * vec_dot_type for both K types is q8_0): int8 per value, one f32 scale per
 * 32 values, quantize_row_q8_0_ref's rounding (d = amax/127, q = round(x/d);
 * llama.cpp also rounds d to f16, we keep it f32). Then q·k per 32-value
 * block is an integer dot product and one float multiply by the two scales:
 *   q·k = Σ_b (dq_b·dk_b) · Σ_i qq_{32b+i}·kq_{32b+i}
 * (exact integer sums, f32 for the rest), and p·v accumulates the unscaled
 * V quants times p_j·dv_{j,b}, one scalar product per position and block
 * instead of a multiply per value. The rows of the quantized query are
 * padded to IFD__QROW values with zero quants and zero scales, so the
 * AVX-512 path reads 64-value chunks whatever head_dim (a multiple of 32).
 * Every path computes with these quantized queries (the reference
 * test_cpu_attention holds them to), so the result is that of the f32
 * kernel on the dequantized query and the dequantized K/V, up to f32
 * summation order.
 */
#include "attention_impl.h"

#include <math.h>
#include <string.h>

/* One query row x[hd] into qi[ifd__qrow(hd)] and qd[ifd__qrow(hd) / 32]. A
 * NaN or infinite input gives some finite quant (never undefined behaviour);
 * its row's output is then as meaningless as the f32 kernel's would be. */
void ifd__quant_query(int8_t *restrict qi, float *restrict qd, const float *restrict x, int hd)
{
    const int nb = (int)(ifd__qrow(hd) / IFD__QK);
    for (int b = 0; b < nb; b++) {
        int8_t *o = qi + b * IFD__QK;
        if (b * IFD__QK >= hd) {
            memset(o, 0, IFD__QK);
            qd[b] = 0;
            continue;
        }
        const float *xb = x + b * IFD__QK;
        float amax = 0;
        for (int j = 0; j < IFD__QK; j++)
            amax = fabsf(xb[j]) > amax ? fabsf(xb[j]) : amax;
        const float d = amax / 127;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        for (int j = 0; j < IFD__QK; j++) {
            const float v = roundf(xb[j] * id);
            o[j] = (int8_t)(v >= -127.0f && v <= 127.0f ? (int)v : v > 0 ? 127 : v < 0 ? -127 : 0);
        }
        qd[b] = d;
    }
}

void ifd__quant_query_offsets(int32_t *restrict qo, const int8_t *restrict qi, int hd, int dt)
{
    const int o = dt == IFD_DTYPE_Q8_0 ? 128 : 8;
    for (int b = 0; b < (int)(ifd__qrow(hd) / IFD__QK); b++) {
        int32_t sum = 0;
        for (int i = 0; i < IFD__QK; i++)
            sum += qi[b * IFD__QK + i];
        qo[b] = -o * sum;
    }
}

/* The scalar chunk on Q8_0/Q4_0 rows: integer dot products per block for
 * the scores, V through the f32 buffer (ifd__rows_f32). qi/qd: the G
 * quantized query rows (ifd__qrow(hd) bytes / floats apart). */
void ifd__chunk_qscalar(const int8_t *qi, const float *qd, const ifd_kv_layer_t *kv, int64_t base,
                        int n, int G, float scale, float *m, float *l, float *acc, float *vbuf)
{
    const int hd = kv->head_dim, dt = kv->dtype, nb = hd / IFD__QK;
    const int64_t stride = ifd__row_bytes(dt, hd), qs = ifd__qrow(hd);
    const char *K = (const char *)kv->k + base;
    const float *V = ifd__rows_f32(kv, kv->v, base, n, vbuf);
    for (int g = 0; g < G; g++) {
        const int8_t *qg = qi + g * qs;
        const float *dg = qd + g * (qs / IFD__QK);
        float s[IFD__ATT_CHUNK];
        for (int j = 0; j < n; j++) {
            const char *kr = K + j * stride;
            float d = 0;
            for (int b = 0; b < nb; b++) {
                int32_t dot = 0;
                for (int i = b * IFD__QK; i < (b + 1) * IFD__QK; i++)
                    dot += qg[i] * ifd__row_quant(kr, i, dt);
                d += dg[b] * ifd__row_scale(kr, dt, hd, b) * (float)dot;
            }
            s[j] = d * scale;
        }
        ifd__online_scalar(s, n, V, hd, m + g, l + g, acc + (int64_t)g * hd);
    }
}

#if IFD__X86

/* ---- the quantized-query chunk kernels (Q8_0/Q4_0 K/V) ----------------------- */

/* The online-softmax update of one head by 16 scaled scores (lanes ≥ n
 * masked out): p (the weights, 0 past n) and the correction e^(m − m'). */
IFD__TARGET_AVX512 IFD__INLINE void ifd__softmax16(__m512 sv, __mmask16 nm, float *m, float *l,
                                                   float *p, float *corr)
{
    sv = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), nm, sv);
    const float cmax = _mm512_reduce_max_ps(sv);
    const float mnew = cmax > *m ? cmax : *m;
    const __m512 cv = ifd__exp16(_mm512_set1_ps(*m - mnew)); /* e^-inf = 0 */
    const __m512 pv = _mm512_maskz_mov_ps(nm, ifd__exp16(_mm512_sub_ps(sv, _mm512_set1_ps(mnew))));
    _mm512_store_ps(p, pv);
    *corr = _mm512_cvtss_f32(cv);
    *l = *l * *corr + _mm512_reduce_add_ps(pv);
    *m = mnew;
}

/* 64 K quants from element 64c of a row as unsigned bytes k + o (o = 128
 * for Q8_0: k ^ 0x80; 8 for Q4_0: the nibbles as stored), in element order;
 * past head_dim (a last chunk of 32) zero bytes, whose query quants are 0. */
IFD__TARGET_AVX512VNNI IFD__INLINE __m512i ifd__kq64(const char *row, int c, int hd, const int dt)
{
    const int full = hd - IFD__QROW * c >= IFD__QROW;
    if (dt == IFD_DTYPE_Q8_0) {
        const char *r = row + IFD__QROW * c;
        const __m512i x =
            full ? _mm512_loadu_si512((const void *)r)
                 : _mm512_inserti64x4(_mm512_setzero_si512(),
                                      _mm256_loadu_si256((const __m256i *)(const void *)r), 0);
        return _mm512_xor_si512(x, _mm512_set1_epi8((char)0x80));
    }
    const char *r = row + 32 * c; /* blocks 2c, 2c + 1: 16 bytes each */
    const __m128i m4 = _mm_set1_epi8(15);
    const __m128i a = _mm_loadu_si128((const __m128i *)(const void *)r);
    __m512i x = _mm512_castsi128_si512(_mm_and_si128(a, m4));
    x = _mm512_inserti32x4(x, _mm_and_si128(_mm_srli_epi16(a, 4), m4), 1);
    __m128i b0 = _mm_setzero_si128(), b1 = _mm_setzero_si128();
    if (full) {
        const __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(r + 16));
        b0 = _mm_and_si128(b, m4), b1 = _mm_and_si128(_mm_srli_epi16(b, 4), m4);
    }
    x = _mm512_inserti32x4(x, b0, 2);
    return _mm512_inserti32x4(x, b1, 3);
}

/* 16 V quants (unscaled) from element e (a multiple of 16) as f32. */
IFD__TARGET_AVX512 IFD__INLINE __m512 ifd__vq16(const char *row, int e, const int dt)
{
    __m128i b;
    if (dt == IFD_DTYPE_Q8_0) {
        b = _mm_loadu_si128((const __m128i *)(const void *)(row + e));
    } else {
        b = _mm_loadu_si128((const __m128i *)(const void *)(row + e / IFD__QK * 16));
        if (e % IFD__QK >= 16)
            b = _mm_srli_epi16(b, 4);
        b = _mm_sub_epi8(_mm_and_si128(b, _mm_set1_epi8(15)), _mm_set1_epi8(8));
    }
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
}

/* acc[u] = acc[u]·corr[u] + Σ_j Σ_b w[u][b][j]·vq_j (vq_j: the unscaled V
 * quants of position j, w = p·dv) for GB heads, 64 values at a time. */
IFD__TARGET_AVX512 IFD__INLINE void ifd__pv_q512(float *ab, const float *corr,
                                                 const float (*w)[IFD__QMAXB][IFD__ATT_CHUNK],
                                                 const char *V, int64_t stride, int n, int hd,
                                                 const int GB, const int dt)
{
    for (int e0 = 0; e0 < hd; e0 += 64) {
        const int full = hd - e0 >= 64, b0 = e0 / IFD__QK;
        __m512 a[4][4];
#pragma GCC unroll 4
        for (int u = 0; u < GB; u++) {
            const __m512 cv = _mm512_set1_ps(corr[u]);
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++)
                a[u][v] =
                    v < 2 || full
                        ? _mm512_mul_ps(_mm512_loadu_ps(ab + (int64_t)u * hd + e0 + 16 * v), cv)
                        : _mm512_setzero_ps();
        }
        for (int j = 0; j < n; j++) {
            const char *vr = V + j * stride;
            __m512 x[4];
            x[0] = ifd__vq16(vr, e0, dt);
            x[1] = ifd__vq16(vr, e0 + 16, dt);
            x[2] = full ? ifd__vq16(vr, e0 + 32, dt) : _mm512_setzero_ps();
            x[3] = full ? ifd__vq16(vr, e0 + 48, dt) : _mm512_setzero_ps();
#pragma GCC unroll 4
            for (int u = 0; u < GB; u++) {
                const __m512 w0 = _mm512_set1_ps(w[u][b0][j]);
                a[u][0] = _mm512_fmadd_ps(w0, x[0], a[u][0]);
                a[u][1] = _mm512_fmadd_ps(w0, x[1], a[u][1]);
                if (full) {
                    const __m512 w1 = _mm512_set1_ps(w[u][b0 + 1][j]);
                    a[u][2] = _mm512_fmadd_ps(w1, x[2], a[u][2]);
                    a[u][3] = _mm512_fmadd_ps(w1, x[3], a[u][3]);
                }
            }
        }
#pragma GCC unroll 4
        for (int u = 0; u < GB; u++)
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++)
                if (v < 2 || full)
                    _mm512_storeu_ps(ab + (int64_t)u * hd + e0 + 16 * v, a[u][v]);
    }
}

/* The per-block sums of 16 int32 vectors d[j] whose 128-bit lanes 0-1 hold
 * block A's and lanes 2-3 block B's partial sums (one 64-value chunk of
 * position j): lane j of *A = Σ lanes 0..7 of d[j], of *B = Σ lanes 8..15.
 * The hsum16x16 tree in integers, its last two levels pairing 128-bit lanes
 * 0+1 and 2+3 instead of 0+2 and 1+3. Exact. */
IFD__TARGET_AVX512 IFD__INLINE void ifd__hsum16x16_ab(const __m512i *d, __m512i *A, __m512i *B)
{
    __m512i b[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        b[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(d[2 * i], d[2 * i + 1]),
                                _mm512_unpackhi_epi32(d[2 * i], d[2 * i + 1]));
    __m512i c[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        c[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(b[2 * i], b[2 * i + 1]),
                                _mm512_unpackhi_epi64(b[2 * i], b[2 * i + 1]));
    /* c[i], 128-bit lane L: positions 4i..4i+3 summed over lane L of d. */
    const __m512i e01 = _mm512_add_epi32(_mm512_shuffle_i32x4(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                         _mm512_shuffle_i32x4(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i e23 = _mm512_add_epi32(_mm512_shuffle_i32x4(c[2], c[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                         _mm512_shuffle_i32x4(c[2], c[3], _MM_SHUFFLE(3, 1, 3, 1)));
    *A = _mm512_shuffle_i32x4(e01, e23, _MM_SHUFFLE(2, 0, 2, 0));
    *B = _mm512_shuffle_i32x4(e01, e23, _MM_SHUFFLE(3, 1, 3, 1));
}

/* The scales of blocks 2c, 2c + 1 of 16 rows, from their f16 pairs p[j]
 * (block 2c in the low half; x, or their 16 dwords at p): *A lane j =
 * block 2c's scale of row j, *B block 2c + 1's. */
IFD__TARGET_AVX512 IFD__INLINE void ifd__scales16v(__m512i x, __m512 *A, __m512 *B)
{
    const __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(x));
    const __m512 hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(x, 1));
    const __m512i ia = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    *A = _mm512_permutex2var_ps(lo, ia, hi);
    *B = _mm512_permutex2var_ps(lo, _mm512_add_epi32(ia, _mm512_set1_epi32(1)), hi);
}

IFD__TARGET_AVX512 IFD__INLINE void ifd__scales16(const uint32_t *p, __m512 *A, __m512 *B)
{
    ifd__scales16v(_mm512_loadu_si512((const void *)p), A, B);
}

/*
 * A chunk of n ≤ 16 Q8_0/Q4_0 rows (K, V at their first row) with AVX-512
 * VNNI. Once per chunk, for all G heads: the K quants of each position as
 * unsigned bytes (ifd__kq64; rows ≥ n alias row n − 1, masked out later),
 * and the K and V scales as vectors over the 16 positions (one per block).
 * Per head and 64 values (blocks A, B): one vpdpbusd per position of those
 * bytes against the query's quants, its accumulator started at −o·Σ(its 4
 * query quants) per lane (so each lane holds the exact Σ k·q of its 4
 * values); the 16 positions' lanes are reduced per block in integers
 * (ifd__hsum16x16_ab), and only then converted and scaled: per head and 16
 * positions, two converts and two FMAs by dk·dq.
 */
IFD__TARGET_AVX512VNNI IFD__INLINE void ifd__chunk_q512(const int8_t *qi, const float *qd,
                                                        const char *K, const char *V, int n, int G,
                                                        int hd, float scale, float *m, float *l,
                                                        float *acc, const int dt)
{
    const int64_t stride = ifd__row_bytes(dt, hd), qb = ifd__row_qbytes(dt, hd), qs = ifd__qrow(hd);
    const int nc = (int)(qs / IFD__QROW), nb = hd / IFD__QK;
    const __mmask16 nm = ifd__mask16(n);
    __m512i ku[IFD__QMAXC][IFD__ATT_CHUNK];
    uint32_t kp[IFD__QMAXC][IFD__ATT_CHUNK] __attribute__((aligned(64)));
    uint32_t vp[IFD__QMAXC][IFD__ATT_CHUNK] __attribute__((aligned(64)));
    for (int j = 0; j < IFD__ATT_CHUNK; j++) {
        const int r = j < n ? j : n - 1;
        const char *kr = K + r * stride, *vr = V + r * stride;
        for (int c = 0; c < nc; c++) {
            /* the chunk's two f16 scales; a last chunk of one block has one (constant-size
             * copies: a variable size compiles to a byte loop, 15% of this kernel) */
            if (2 * c + 1 < nb) {
                memcpy(&kp[c][j], kr + qb + 4 * c, 4);
                memcpy(&vp[c][j], vr + qb + 4 * c, 4);
            } else {
                uint16_t hk, hv;
                memcpy(&hk, kr + qb + 4 * c, 2);
                memcpy(&hv, vr + qb + 4 * c, 2);
                kp[c][j] = hk, vp[c][j] = hv;
            }
            ku[c][j] = ifd__kq64(kr, c, hd, dt);
        }
    }
    __m512 dk[IFD__QMAXC][2], dv[IFD__QMAXC][2];
    for (int c = 0; c < nc; c++) {
        ifd__scales16(kp[c], &dk[c][0], &dk[c][1]);
        ifd__scales16(vp[c], &dv[c][0], &dv[c][1]);
    }
    const __m512i off = _mm512_set1_epi8(dt == IFD_DTYPE_Q8_0 ? (char)0x80 : 8);
    float p[IFD__ATT_MAX_GROUP][IFD__ATT_CHUNK] __attribute__((aligned(64)));
    float corr[IFD__ATT_MAX_GROUP];
    for (int g = 0; g < G; g++) {
        const int8_t *qg = qi + g * qs;
        const float *dg = qd + g * (qs / IFD__QK);
        __m512 s = _mm512_setzero_ps();
        for (int c = 0; c < nc; c++) {
            const __m512i qv = _mm512_loadu_si512((const void *)(qg + IFD__QROW * c));
            const __m512i bias = _mm512_sub_epi32(
                _mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), off, qv));
            __m512i d[16];
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++)
                d[j] = _mm512_dpbusd_epi32(bias, ku[c][j], qv);
            __m512i A, B;
            ifd__hsum16x16_ab(d, &A, &B);
            s = _mm512_fmadd_ps(_mm512_cvtepi32_ps(A),
                                _mm512_mul_ps(dk[c][0], _mm512_set1_ps(dg[2 * c])), s);
            s = _mm512_fmadd_ps(_mm512_cvtepi32_ps(B),
                                _mm512_mul_ps(dk[c][1], _mm512_set1_ps(dg[2 * c + 1])), s);
        }
        ifd__softmax16(_mm512_mul_ps(s, _mm512_set1_ps(scale)), nm, m + g, l + g, p[g], corr + g);
    }
    float w[IFD__ATT_MAX_GROUP][IFD__QMAXB][IFD__ATT_CHUNK] __attribute__((aligned(64)));
    for (int g = 0; g < G; g++)
        for (int b = 0; b < nb; b++)
            _mm512_store_ps(w[g][b], _mm512_mul_ps(_mm512_load_ps(p[g]), dv[b / 2][b % 2]));
    for (int g0 = 0; g0 < G; g0 += 4) {
        float *ab = acc + (int64_t)g0 * hd;
        switch (G - g0 < 4 ? G - g0 : 4) {
        case 1:
            ifd__pv_q512(ab, corr + g0, w + g0, V, stride, n, hd, 1, dt);
            break;
        case 2:
            ifd__pv_q512(ab, corr + g0, w + g0, V, stride, n, hd, 2, dt);
            break;
        case 3:
            ifd__pv_q512(ab, corr + g0, w + g0, V, stride, n, hd, 3, dt);
            break;
        default:
            ifd__pv_q512(ab, corr + g0, w + g0, V, stride, n, hd, 4, dt);
            break;
        }
    }
}

/* The byte offsets of a chunk's 16 rows from its first (rows ≥ n alias row
 * n − 1, as everywhere in these kernels). */
IFD__TARGET_AVX512 IFD__INLINE __m512i ifd__row_offsets16(int n, int64_t stride)
{
    const __m512i j = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    return _mm512_mullo_epi32(_mm512_min_epi32(j, _mm512_set1_epi32(n - 1)),
                              _mm512_set1_epi32((int)stride));
}

/* The f16 scale pairs of blocks 2c, 2c + 1 of 16 rows (s: the scales of the
 * first row; ro: ifd__row_offsets16), one gather (scalar stores read back
 * as a vector stall on store forwarding: a third of the kernel's time). A
 * last chunk of one block keeps its one scale, 0 in the high half: its 4
 * bytes are read 2 earlier (the previous scale, or the last quants), never
 * past the row, which may end the region. */
IFD__TARGET_AVX512 IFD__INLINE __m512i ifd__scale_pairs16(const char *s, __m512i ro, int c, int nb)
{
    if (2 * c + 1 < nb)
        return _mm512_i32gather_epi32(ro, (const void *)(s + 4 * c), 1);
    return _mm512_srli_epi32(_mm512_i32gather_epi32(ro, (const void *)(s + 4 * c - 2), 1), 16);
}

/* The 16×16 transpose of int32 lanes: lane j of t[i] = lane i of r[j] (64
 * shuffles: two levels inside 128-bit lanes, two across them). */
IFD__TARGET_AVX512 IFD__INLINE void ifd__transpose16(const __m512i *r, __m512i *t)
{
    __m512i a[16], b[16];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        a[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
        a[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
    }
    /* b[4k + i], 128-bit lane L: lane 4L + i of rows 4k .. 4k + 3 */
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        b[4 * k] = _mm512_unpacklo_epi64(a[4 * k], a[4 * k + 2]);
        b[4 * k + 1] = _mm512_unpackhi_epi64(a[4 * k], a[4 * k + 2]);
        b[4 * k + 2] = _mm512_unpacklo_epi64(a[4 * k + 1], a[4 * k + 3]);
        b[4 * k + 3] = _mm512_unpackhi_epi64(a[4 * k + 1], a[4 * k + 3]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        const __m512i c0 = _mm512_shuffle_i32x4(b[i], b[4 + i], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512i c1 = _mm512_shuffle_i32x4(b[i], b[4 + i], _MM_SHUFFLE(3, 2, 3, 2));
        const __m512i c2 = _mm512_shuffle_i32x4(b[8 + i], b[12 + i], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512i c3 = _mm512_shuffle_i32x4(b[8 + i], b[12 + i], _MM_SHUFFLE(3, 2, 3, 2));
        t[i] = _mm512_shuffle_i32x4(c0, c2, _MM_SHUFFLE(2, 0, 2, 0));
        t[4 + i] = _mm512_shuffle_i32x4(c0, c2, _MM_SHUFFLE(3, 1, 3, 1));
        t[8 + i] = _mm512_shuffle_i32x4(c1, c3, _MM_SHUFFLE(2, 0, 2, 0));
        t[12 + i] = _mm512_shuffle_i32x4(c1, c3, _MM_SHUFFLE(3, 1, 3, 1));
    }
}

/*
 * The chunk of ifd__chunk_q512 for a group of G = 2..8 query heads (G a
 * compile-time constant: p, the corrections and the scores stay in
 * registers), with the same results bit for bit: every score is the same
 * exact integer per block, then the same float operations. What differs is
 * how the integers are summed: the 16 positions' K quants of a 64-value
 * chunk are transposed once for all heads (ifd__transpose16: lane j of t[d]
 * = bytes 4d .. 4d + 3 of position j), so each head's block sums are 8
 * vpdpbusd per block against its query's 4 bytes broadcast, positions
 * already in lanes, no reduction per head (ifd__chunk_q512 reduces 16
 * vectors per head: 44 instructions against the transpose's 64 for all).
 * The query's offset o·Σ q per block (qo: computed once per query row) is
 * taken off at the start. The G
 * corrections e^(m − m') are one exp16.
 */
IFD__TARGET_AVX512VNNI IFD__INLINE void ifd__chunk_q512t(const int8_t *qi, const float *qd,
                                                         const int32_t *qo, const char *K,
                                                         const char *V, int n, int hd, float scale,
                                                         float *m, float *l, float *acc,
                                                         const int G, const int dt)
{
    const int64_t stride = ifd__row_bytes(dt, hd), qb = ifd__row_qbytes(dt, hd), qs = ifd__qrow(hd);
    const int nc = (int)(qs / IFD__QROW), nb = hd / IFD__QK;
    const __mmask16 nm = ifd__mask16(n);
    const char *rows[IFD__ATT_CHUNK];
    for (int j = 0; j < IFD__ATT_CHUNK; j++)
        rows[j] = K + (j < n ? j : n - 1) * stride;
    const __m512i ro = ifd__row_offsets16(n, stride);
    __m512 s[8];
#pragma GCC unroll 8
    for (int g = 0; g < G; g++)
        s[g] = _mm512_setzero_ps();
    __m512 dv[IFD__QMAXC][2];
    for (int c = 0; c < nc; c++) {
        __m512 dk[2];
        ifd__scales16v(ifd__scale_pairs16(K + qb, ro, c, nb), &dk[0], &dk[1]);
        ifd__scales16v(ifd__scale_pairs16(V + qb, ro, c, nb), &dv[c][0], &dv[c][1]);
        __m512i t[16];
        {
            __m512i r[16];
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++)
                r[j] = ifd__kq64(rows[j], c, hd, dt);
            ifd__transpose16(r, t);
        }
#pragma GCC unroll 8
        for (int g = 0; g < G; g++) {
            const int8_t *qc = qi + g * qs + IFD__QROW * c;
            const float *dg = qd + g * (qs / IFD__QK);
            const int32_t *og = qo + g * (qs / IFD__QK) + 2 * c;
            __m512i A = _mm512_set1_epi32(og[0]), B = _mm512_set1_epi32(og[1]);
#pragma GCC unroll 8
            for (int d = 0; d < 8; d++) {
                int32_t qa, qb4;
                memcpy(&qa, qc + 4 * d, 4);
                memcpy(&qb4, qc + 32 + 4 * d, 4);
                A = _mm512_dpbusd_epi32(A, t[d], _mm512_set1_epi32(qa));
                B = _mm512_dpbusd_epi32(B, t[8 + d], _mm512_set1_epi32(qb4));
            }
            s[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(A),
                                   _mm512_mul_ps(dk[0], _mm512_set1_ps(dg[2 * c])), s[g]);
            s[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(B),
                                   _mm512_mul_ps(dk[1], _mm512_set1_ps(dg[2 * c + 1])), s[g]);
        }
    }
    /* the online softmax of every head (ifd__softmax16's operations), the
     * corrections in one exp16 */
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    float dm[16] __attribute__((aligned(64))) = {0};
    float mnew[8];
    __m512 p[8];
#pragma GCC unroll 8
    for (int g = 0; g < G; g++) {
        const __m512 sv = _mm512_mask_mov_ps(ninf, nm, _mm512_mul_ps(s[g], _mm512_set1_ps(scale)));
        const float cmax = _mm512_reduce_max_ps(sv);
        mnew[g] = cmax > m[g] ? cmax : m[g];
        dm[g] = m[g] - mnew[g];
        p[g] = _mm512_maskz_mov_ps(nm, ifd__exp16(_mm512_sub_ps(sv, _mm512_set1_ps(mnew[g]))));
    }
    float corr[16] __attribute__((aligned(64)));
    _mm512_store_ps(corr, ifd__exp16(_mm512_load_ps(dm))); /* e^-inf = 0 */
    float w[8][IFD__QMAXB][IFD__ATT_CHUNK] __attribute__((aligned(64)));
#pragma GCC unroll 8
    for (int g = 0; g < G; g++) {
        l[g] = l[g] * corr[g] + _mm512_reduce_add_ps(p[g]);
        m[g] = mnew[g];
        for (int b = 0; b < nb; b++)
            _mm512_store_ps(w[g][b], _mm512_mul_ps(p[g], dv[b / 2][b % 2]));
    }
#pragma GCC unroll 2
    for (int g0 = 0; g0 < G; g0 += 4)
        ifd__pv_q512(acc + (int64_t)g0 * hd, corr + g0, w + g0, V, stride, n, hd,
                     G - g0 < 4 ? G - g0 : 4, dt);
}

/* ifd__chunk_q512t for G = 2..8 (a compile-time G), else ifd__chunk_q512. */
IFD__TARGET_AVX512VNNI IFD__INLINE void ifd__chunk_q512_g(const int8_t *qi, const float *qd,
                                                          const int32_t *qo, const char *K,
                                                          const char *V, int n, int G, int hd,
                                                          float scale, float *m, float *l,
                                                          float *acc, const int dt)
{
    switch (G) {
#define IFD__Q512T(g)                                                                              \
    case g:                                                                                        \
        ifd__chunk_q512t(qi, qd, qo, K, V, n, hd, scale, m, l, acc, g, dt);                        \
        return;
        IFD__Q512T(2)
        IFD__Q512T(3)
        IFD__Q512T(4)
        IFD__Q512T(5)
        IFD__Q512T(6)
        IFD__Q512T(7)
        IFD__Q512T(8)
#undef IFD__Q512T
    default:
        ifd__chunk_q512(qi, qd, K, V, n, G, hd, scale, m, l, acc, dt);
        return;
    }
}

IFD__TARGET_AVX512VNNI void ifd__chunk_q512_kv(const ifd_kv_layer_t *kv, int64_t base, int n,
                                               const int8_t *qi, const float *qd, const int32_t *qo,
                                               int G, float scale, float *m, float *l, float *acc)
{
    const char *K = (const char *)kv->k + base, *V = (const char *)kv->v + base;
    if (kv->dtype == IFD_DTYPE_Q8_0)
        ifd__chunk_q512_g(qi, qd, qo, K, V, n, G, kv->head_dim, scale, m, l, acc, IFD_DTYPE_Q8_0);
    else
        ifd__chunk_q512_g(qi, qd, qo, K, V, n, G, kv->head_dim, scale, m, l, acc, IFD_DTYPE_Q4_0);
}

/* Lane j of the result = Σ lanes of d[j], for 8 int32 vectors (exact). */
IFD__TARGET_AVX2 IFD__INLINE __m256i ifd__hsum8x8_epi32(const __m256i *d)
{
    __m256i b[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        b[i] = _mm256_add_epi32(_mm256_unpacklo_epi32(d[2 * i], d[2 * i + 1]),
                                _mm256_unpackhi_epi32(d[2 * i], d[2 * i + 1]));
    __m256i c[2];
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++)
        c[i] = _mm256_add_epi32(_mm256_unpacklo_epi64(b[2 * i], b[2 * i + 1]),
                                _mm256_unpackhi_epi64(b[2 * i], b[2 * i + 1]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(c[0], c[1], 0x20),
                            _mm256_permute2x128_si256(c[0], c[1], 0x31));
}

/* 32 K quants of block b as signed bytes, in element order. */
IFD__TARGET_AVX2 IFD__INLINE __m256i ifd__kq32(const char *row, int b, const int dt)
{
    if (dt == IFD_DTYPE_Q8_0)
        return _mm256_loadu_si256((const __m256i *)(const void *)(row + IFD__QK * b));
    const __m128i m4 = _mm_set1_epi8(15);
    const __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(row + 16 * b));
    const __m256i x =
        _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(a, 4), m4), _mm_and_si128(a, m4));
    return _mm256_sub_epi8(x, _mm256_set1_epi8(8));
}

/* 8 V quants (unscaled) from element e (a multiple of 8) as f32. */
IFD__TARGET_AVX2 IFD__INLINE __m256 ifd__vq8(const char *row, int e, const int dt)
{
    int64_t x;
    if (dt == IFD_DTYPE_Q8_0) {
        memcpy(&x, row + e, 8);
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(x)));
    }
    memcpy(&x, row + e / IFD__QK * 16 + e % 16, 8);
    __m128i b = _mm_cvtsi64_si128(x);
    if (e % IFD__QK >= 16)
        b = _mm_srli_epi16(b, 4);
    b = _mm_sub_epi8(_mm_and_si128(b, _mm_set1_epi8(15)), _mm_set1_epi8(8));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
}

/* The AVX2 form of ifd__pv_q512: 16 values (two vectors, one block) at a
 * time. */
IFD__TARGET_AVX2 IFD__INLINE void ifd__pv_q256(float *ab, const float *corr,
                                               const float (*w)[IFD__QMAXB][IFD__ATT_CHUNK],
                                               const char *V, int64_t stride, int n, int hd,
                                               const int GB, const int dt)
{
    for (int e0 = 0; e0 < hd; e0 += 16) {
        const int b = e0 / IFD__QK;
        __m256 a[4][2];
#pragma GCC unroll 4
        for (int u = 0; u < GB; u++) {
            const __m256 cv = _mm256_set1_ps(corr[u]);
            a[u][0] = _mm256_mul_ps(_mm256_loadu_ps(ab + (int64_t)u * hd + e0), cv);
            a[u][1] = _mm256_mul_ps(_mm256_loadu_ps(ab + (int64_t)u * hd + e0 + 8), cv);
        }
        for (int j = 0; j < n; j++) {
            const char *vr = V + j * stride;
            const __m256 x0 = ifd__vq8(vr, e0, dt), x1 = ifd__vq8(vr, e0 + 8, dt);
#pragma GCC unroll 4
            for (int u = 0; u < GB; u++) {
                const __m256 wv = _mm256_set1_ps(w[u][b][j]);
                a[u][0] = _mm256_fmadd_ps(wv, x0, a[u][0]);
                a[u][1] = _mm256_fmadd_ps(wv, x1, a[u][1]);
            }
        }
#pragma GCC unroll 4
        for (int u = 0; u < GB; u++) {
            _mm256_storeu_ps(ab + (int64_t)u * hd + e0, a[u][0]);
            _mm256_storeu_ps(ab + (int64_t)u * hd + e0 + 8, a[u][1]);
        }
    }
}

/*
 * A chunk of n ≤ 16 Q8_0/Q4_0 rows with AVX2 (and on AVX-512 CPUs without
 * VNNI). Per head, block and 8 positions: maddubs of |q| against k with q's
 * sign (no saturation: |q|, |k| ≤ 127) and madd to 8 int32 lanes per
 * position, the 8 positions' lanes reduced in integers (hsum8x8_epi32), then
 * one convert and one FMA by dk·dq for the 8 positions.
 */
IFD__TARGET_AVX2 IFD__INLINE void ifd__chunk_q256(const int8_t *qi, const float *qd, const char *K,
                                                  const char *V, int n, int G, int hd, float scale,
                                                  float *m, float *l, float *acc, const int dt)
{
    const int64_t stride = ifd__row_bytes(dt, hd), qb = ifd__row_qbytes(dt, hd), qs = ifd__qrow(hd);
    const int nb = hd / IFD__QK;
    __m256i kq[IFD__ATT_CHUNK][IFD__QMAXB];
    float dk[IFD__QMAXB][IFD__ATT_CHUNK] __attribute__((aligned(32)));
    float dv[IFD__QMAXB][IFD__ATT_CHUNK] __attribute__((aligned(32)));
    for (int j = 0; j < IFD__ATT_CHUNK; j++) {
        const int r = j < n ? j : n - 1;
        const char *kr = K + r * stride, *vr = V + r * stride;
        for (int b = 0; b < nb; b++) {
            uint16_t h[2];
            memcpy(&h[0], kr + qb + 2 * b, 2);
            memcpy(&h[1], vr + qb + 2 * b, 2);
            kq[j][b] = ifd__kq32(kr, b, dt);
            dk[b][j] = _cvtsh_ss(h[0]);
            dv[b][j] = _cvtsh_ss(h[1]);
        }
    }
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i m_lo = ifd__mask8(n < 8 ? n : 8), m_hi = ifd__mask8(n > 8 ? n - 8 : 0);
    const __m256 sc = _mm256_set1_ps(scale), ninf = _mm256_set1_ps(-INFINITY);
    float p[IFD__ATT_MAX_GROUP][IFD__ATT_CHUNK] __attribute__((aligned(32)));
    float corr[IFD__ATT_MAX_GROUP];
    for (int g = 0; g < G; g++) {
        const int8_t *qg = qi + g * qs;
        const float *dg = qd + g * (qs / IFD__QK);
        __m256 sv[2] = {ninf, ninf};
        for (int h = 0; h < (n > 8 ? 2 : 1); h++) {
            __m256 s = _mm256_setzero_ps();
            for (int b = 0; b < nb; b++) {
                const __m256i qv = _mm256_loadu_si256((const __m256i *)(const void *)(qg + 32 * b));
                const __m256i aq = _mm256_sign_epi8(qv, qv);
                __m256i x[8];
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++)
                    x[j] = _mm256_madd_epi16(
                        _mm256_maddubs_epi16(aq, _mm256_sign_epi8(kq[8 * h + j][b], qv)), ones);
                /* the 8 positions' block dots, exact, then one convert and scale */
                s = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(ifd__hsum8x8_epi32(x)),
                    _mm256_mul_ps(_mm256_load_ps(dk[b] + 8 * h), _mm256_set1_ps(dg[b])), s);
            }
            sv[h] = _mm256_mul_ps(s, sc);
        }
        const __m256 s0 = _mm256_blendv_ps(ninf, sv[0], _mm256_castsi256_ps(m_lo));
        const __m256 s1 = _mm256_blendv_ps(ninf, sv[1], _mm256_castsi256_ps(m_hi));
        const float cmax = ifd__hmax8(_mm256_max_ps(s0, s1));
        const float mnew = cmax > m[g] ? cmax : m[g];
        corr[g] = expf(m[g] - mnew);
        const __m256 mb = _mm256_set1_ps(mnew);
        const __m256 p0 =
            _mm256_and_ps(ifd__exp8(_mm256_sub_ps(s0, mb)), _mm256_castsi256_ps(m_lo));
        const __m256 p1 =
            _mm256_and_ps(ifd__exp8(_mm256_sub_ps(s1, mb)), _mm256_castsi256_ps(m_hi));
        _mm256_store_ps(p[g], p0);
        _mm256_store_ps(p[g] + 8, p1);
        l[g] = l[g] * corr[g] + ifd__hsum8(_mm256_add_ps(p0, p1));
        m[g] = mnew;
    }
    float w[IFD__ATT_MAX_GROUP][IFD__QMAXB][IFD__ATT_CHUNK] __attribute__((aligned(32)));
    for (int g = 0; g < G; g++)
        for (int b = 0; b < nb; b++)
            for (int h = 0; h < 2; h++)
                _mm256_store_ps(w[g][b] + 8 * h, _mm256_mul_ps(_mm256_load_ps(p[g] + 8 * h),
                                                               _mm256_load_ps(dv[b] + 8 * h)));
    for (int g0 = 0; g0 < G; g0 += 4) {
        float *ab = acc + (int64_t)g0 * hd;
        switch (G - g0 < 4 ? G - g0 : 4) {
        case 1:
            ifd__pv_q256(ab, corr + g0, w + g0, V, stride, n, hd, 1, dt);
            break;
        case 2:
            ifd__pv_q256(ab, corr + g0, w + g0, V, stride, n, hd, 2, dt);
            break;
        case 3:
            ifd__pv_q256(ab, corr + g0, w + g0, V, stride, n, hd, 3, dt);
            break;
        default:
            ifd__pv_q256(ab, corr + g0, w + g0, V, stride, n, hd, 4, dt);
            break;
        }
    }
}

IFD__TARGET_AVX2 void ifd__chunk_q256_kv(const ifd_kv_layer_t *kv, int64_t base, int n,
                                         const int8_t *qi, const float *qd, int G, float scale,
                                         float *m, float *l, float *acc)
{
    const char *K = (const char *)kv->k + base, *V = (const char *)kv->v + base;
    if (kv->dtype == IFD_DTYPE_Q8_0)
        ifd__chunk_q256(qi, qd, K, V, n, G, kv->head_dim, scale, m, l, acc, IFD_DTYPE_Q8_0);
    else
        ifd__chunk_q256(qi, qd, K, V, n, G, kv->head_dim, scale, m, l, acc, IFD_DTYPE_Q4_0);
}

#endif
