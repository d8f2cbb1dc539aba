/*
 * matmul.c — y = x · wᵀ in f32 for the CPU backend (ifd_cpu_matmul_f32), plus
 * ifd_dtype_size.
 *
 * Two shapes matter: decode (m = 1..a few: a matrix-vector product bound by
 * the bandwidth of streaming w once) and prefill (m = tens to hundreds: bound
 * by FMA throughput). Hence two algorithms:
 *
 *  - "dot" (m < IFD__MM_PACK_MIN_M): for a group of 4 rows of w and up to 4 rows
 *    of x, keep one vector accumulator per (x row, w row) pair along k and
 *    reduce horizontally at the end. w is read straight from memory, once.
 *  - "packed" (larger m), the BLIS scheme turned to our row-major x·wᵀ: a
 *    panel of NR rows of w (one k-block of at most KC columns) is transposed
 *    into a contiguous [KC][NR] buffer that stays in L1, then every MR-row
 *    group of x runs a register-blocked outer-product micro-kernel over it
 *    (broadcast one x element, FMA with NR w values). AVX-512: MR 12 × NR 32
 *    (24 zmm accumulators); AVX2: MR 6 × NR 16 (12 ymm accumulators). Panels
 *    are padded with zeros to NR and the results stored through lane masks;
 *    k-blocks after the first add into y.
 *
 * Pre-packed weights (ifd_cpu_matmul_pack) are one sequential stream per
 * task; the micro-kernel prefetches the next block into L2 while it computes
 * the current one, since a decode batch of a few dozen rows is bound by
 * reading the weights as much as by the FMAs.
 *
 * Parallelism: the tasks split n into contiguous ranges (multiples of 16
 * rows, so no two threads write one cache line of y); each task packs its own
 * panels and reads all of x, so tasks share nothing and need no barrier.
 * Summation order depends on the path and on k but never on the thread count,
 * so results are bitwise reproducible for a given machine and ISA cap.
 */
#include "cpu_kernels.h"

#include "cpu_simd.h"
#include "error.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

enum {
    IFD__MM_PACK_MIN_M = 16, /* from here on the packed path wins (bench_cpu_kernels) */
    IFD__MM_KC = 384,        /* k-block: a [KC][32] f32 panel is 48 KiB */
};

int ifd_dtype_size(ifd_dtype_t t)
{
    switch (t) {
    case IFD_DTYPE_F32:
        return 4;
    case IFD_DTYPE_F16:
    case IFD_DTYPE_BF16:
        return 2;
    case IFD_DTYPE_Q8_0:
    case IFD_DTYPE_Q4_0:
    case IFD_DTYPE_FP8:
        break; /* row types with scales: ifd_kv_row_bytes */
    }
    return IFD_EINVAL;
}

typedef struct {
    float *y;
    const float *x;
    const float *w;
    int m, n, k;
    int rows_per_task; /* a multiple of 16 (and of the panel width NR) */
    int kc;            /* k-block of the packed path, <= IFD__MM_KC */
    ifd__isa_t isa;
    int packed;
    const float *wpre; /* pre-packed panels (ifd_cpu_matmul_pack) or NULL */
} ifd__mm_t;

/* ---- scalar ---------------------------------------------------------------- */

static void ifd__mm_scalar(const ifd__mm_t *c, int n0, int n1)
{
    const int k = c->k;
    for (int i = 0; i < c->m; i++) {
        const float *xr = c->x + (int64_t)i * k;
        float *yr = c->y + (int64_t)i * c->n;
        int j = n0;
        for (; j + 4 <= n1; j += 4) {
            const float *w0 = c->w + (int64_t)j * k;
            float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (int p = 0; p < k; p++) {
                float xv = xr[p];
                s0 += xv * w0[p];
                s1 += xv * w0[k + p];
                s2 += xv * w0[2 * k + p];
                s3 += xv * w0[3 * k + p];
            }
            yr[j] = s0, yr[j + 1] = s1, yr[j + 2] = s2, yr[j + 3] = s3;
        }
        for (; j < n1; j++) {
            const float *wr = c->w + (int64_t)j * k;
            float s = 0;
            for (int p = 0; p < k; p++)
                s += xr[p] * wr[p];
            yr[j] = s;
        }
    }
}

/* Scalar kernel over pre-packed panels of 16 rows: per output, the same
 * k-block sums as the SIMD packed kernels (one chain per k-block, added into
 * y), so every row is computed the same way whatever m is. */
static void ifd__packed_scalar(const ifd__mm_t *c, int n0, int n1)
{
    enum { NR = 16 };
    const int k = c->k;
    for (int j0 = n0; j0 < n1; j0 += NR) {
        int nv = n1 - j0 < NR ? n1 - j0 : NR;
        const float *panel = c->wpre + (int64_t)(j0 / NR) * NR * k;
        for (int p0 = 0; p0 < k; p0 += c->kc) {
            int kc = k - p0 < c->kc ? k - p0 : c->kc;
            const float *wb = panel + (int64_t)p0 * NR;
            for (int i = 0; i < c->m; i++) {
                const float *xr = c->x + (int64_t)i * k + p0;
                float *yr = c->y + (int64_t)i * c->n + j0;
                for (int j = 0; j < nv; j++) {
                    float acc = 0.0f;
                    for (int p = 0; p < kc; p++)
                        acc = fmaf(xr[p], wb[(int64_t)p * NR + j], acc);
                    yr[j] = p0 > 0 ? yr[j] + acc : acc;
                }
            }
        }
    }
}

#if IFD__X86

/* ---- AVX2 + FMA ------------------------------------------------------------ */

/* Dot form: y[i0..i0+MI, j0..j0+NJ] for MI x rows and NJ w rows. */
IFD__TARGET_AVX2 IFD__INLINE void ifd__dot_avx2(const ifd__mm_t *c, int i0, int j0, const int MI,
                                                const int NJ)
{
    const int k = c->k;
    const float *x = c->x + (int64_t)i0 * k;
    const float *w = c->w + (int64_t)j0 * k;
    __m256 acc[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < MI; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NJ; j++)
            acc[i][j] = _mm256_setzero_ps();
    int p = 0;
    for (; p + 8 <= k; p += 8) {
        __m256 wv[4];
#pragma GCC unroll 4
        for (int j = 0; j < NJ; j++)
            wv[j] = _mm256_loadu_ps(w + (int64_t)j * k + p);
#pragma GCC unroll 4
        for (int i = 0; i < MI; i++) {
            __m256 xv = _mm256_loadu_ps(x + (int64_t)i * k + p);
#pragma GCC unroll 4
            for (int j = 0; j < NJ; j++)
                acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
    if (p < k) {
        __m256i mk = ifd__mask8(k - p);
        __m256 wv[4];
#pragma GCC unroll 4
        for (int j = 0; j < NJ; j++)
            wv[j] = _mm256_maskload_ps(w + (int64_t)j * k + p, mk);
#pragma GCC unroll 4
        for (int i = 0; i < MI; i++) {
            __m256 xv = _mm256_maskload_ps(x + (int64_t)i * k + p, mk);
#pragma GCC unroll 4
            for (int j = 0; j < NJ; j++)
                acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < MI; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NJ; j++)
            c->y[(int64_t)(i0 + i) * c->n + j0 + j] = ifd__hsum8(acc[i][j]);
}

/* Rows [j0, j1) of y for all m rows of x: each group of 4 w rows stays in L1
 * while every group of up to 4 x rows passes over it. */
IFD__TARGET_AVX2 static void ifd__dot_rows_avx2(const ifd__mm_t *c, int j0, int j1)
{
#define IFD__DOTJ2(NJ)                                                                             \
    do {                                                                                           \
        for (int i = 0; i < c->m; i += 4) {                                                        \
            switch (c->m - i) {                                                                    \
            case 1:                                                                                \
                ifd__dot_avx2(c, i, j, 1, NJ);                                                     \
                break;                                                                             \
            case 2:                                                                                \
                ifd__dot_avx2(c, i, j, 2, NJ);                                                     \
                break;                                                                             \
            case 3:                                                                                \
                ifd__dot_avx2(c, i, j, 3, NJ);                                                     \
                break;                                                                             \
            default:                                                                               \
                ifd__dot_avx2(c, i, j, 4, NJ);                                                     \
                break;                                                                             \
            }                                                                                      \
        }                                                                                          \
    } while (0)
    int j = j0;
    for (; j + 4 <= j1; j += 4)
        IFD__DOTJ2(4);
    for (; j < j1; j++)
        IFD__DOTJ2(1);
#undef IFD__DOTJ2
}

/* Transposes rows [j0, j0+nv) × cols [p0, p0+kc) of w into wp[kc][NR], zero padded. */
IFD__TARGET_AVX2 static void ifd__pack_avx2(float *restrict wp, const float *restrict w, int k,
                                            int j0, int nv, int p0, int kc, const int NR)
{
    int j = 0;
    for (; j + 8 <= nv; j += 8) {
        const float *src = w + (int64_t)(j0 + j) * k + p0;
        int p = 0;
        for (; p + 8 <= kc; p += 8) {
            __m256 r0 = _mm256_loadu_ps(src + p), r1 = _mm256_loadu_ps(src + k + p);
            __m256 r2 = _mm256_loadu_ps(src + 2 * (int64_t)k + p);
            __m256 r3 = _mm256_loadu_ps(src + 3 * (int64_t)k + p);
            __m256 r4 = _mm256_loadu_ps(src + 4 * (int64_t)k + p);
            __m256 r5 = _mm256_loadu_ps(src + 5 * (int64_t)k + p);
            __m256 r6 = _mm256_loadu_ps(src + 6 * (int64_t)k + p);
            __m256 r7 = _mm256_loadu_ps(src + 7 * (int64_t)k + p);
            __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
            __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
            __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
            __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
            __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
            __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
            __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
            __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
            float *d = wp + (int64_t)p * NR + j;
            _mm256_storeu_ps(d + 0 * NR, _mm256_permute2f128_ps(u0, u4, 0x20));
            _mm256_storeu_ps(d + 1 * NR, _mm256_permute2f128_ps(u1, u5, 0x20));
            _mm256_storeu_ps(d + 2 * NR, _mm256_permute2f128_ps(u2, u6, 0x20));
            _mm256_storeu_ps(d + 3 * NR, _mm256_permute2f128_ps(u3, u7, 0x20));
            _mm256_storeu_ps(d + 4 * NR, _mm256_permute2f128_ps(u0, u4, 0x31));
            _mm256_storeu_ps(d + 5 * NR, _mm256_permute2f128_ps(u1, u5, 0x31));
            _mm256_storeu_ps(d + 6 * NR, _mm256_permute2f128_ps(u2, u6, 0x31));
            _mm256_storeu_ps(d + 7 * NR, _mm256_permute2f128_ps(u3, u7, 0x31));
        }
        for (; p < kc; p++)
            for (int jj = 0; jj < 8; jj++)
                wp[(int64_t)p * NR + j + jj] = src[(int64_t)jj * k + p];
    }
    for (; j < nv; j++) {
        const float *src = w + (int64_t)(j0 + j) * k + p0;
        for (int p = 0; p < kc; p++)
            wp[(int64_t)p * NR + j] = src[p];
    }
    if (nv < NR)
        for (int p = 0; p < kc; p++)
            memset(wp + (int64_t)p * NR + nv, 0, sizeof(float) * (size_t)(NR - nv));
}

/* Micro-kernel: y[MI rows, 16] (+)= x[MI rows, kc] · wp[kc][16]. */
IFD__TARGET_AVX2 IFD__INLINE void ifd__ukr_avx2(float *y, int ldy, const float *x, int ldx,
                                                const float *wp, int kc, __m256i m0, __m256i m1,
                                                int accumulate, const int MI)
{
    __m256 c0[6], c1[6];
#pragma GCC unroll 6
    for (int i = 0; i < MI; i++)
        c0[i] = _mm256_setzero_ps(), c1[i] = _mm256_setzero_ps();
    for (int p = 0; p < kc; p++) {
        __m256 b0 = _mm256_loadu_ps(wp + p * 16), b1 = _mm256_loadu_ps(wp + p * 16 + 8);
#pragma GCC unroll 6
        for (int i = 0; i < MI; i++) {
            __m256 a = _mm256_broadcast_ss(x + (int64_t)i * ldx + p);
            c0[i] = _mm256_fmadd_ps(a, b0, c0[i]);
            c1[i] = _mm256_fmadd_ps(a, b1, c1[i]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < MI; i++) {
        float *yr = y + (int64_t)i * ldy;
        if (accumulate) {
            c0[i] = _mm256_add_ps(c0[i], _mm256_maskload_ps(yr, m0));
            c1[i] = _mm256_add_ps(c1[i], _mm256_maskload_ps(yr + 8, m1));
        }
        _mm256_maskstore_ps(yr, m0, c0[i]);
        _mm256_maskstore_ps(yr + 8, m1, c1[i]);
    }
}

IFD__TARGET_AVX2 static void ifd__packed_avx2(const ifd__mm_t *c, int n0, int n1)
{
    enum { NR = 16, MR = 6 };
    float wp[IFD__MM_KC * NR] __attribute__((aligned(64)));
    const int k = c->k;
    for (int j0 = n0; j0 < n1; j0 += NR) {
        int nv = n1 - j0 < NR ? n1 - j0 : NR;
        __m256i m0 = ifd__mask8(nv < 8 ? nv : 8), m1 = ifd__mask8(nv > 8 ? nv - 8 : 0);
        for (int p0 = 0; p0 < k; p0 += c->kc) {
            int kc = k - p0 < c->kc ? k - p0 : c->kc;
            const float *wb = wp;
            if (c->wpre)
                wb = c->wpre + (int64_t)(j0 / NR) * NR * k + (int64_t)p0 * NR;
            else
                ifd__pack_avx2(wp, c->w, k, j0, nv, p0, kc, NR);
            int acc = p0 > 0;
            const float *xb = c->x + p0;
            float *yb = c->y + j0;
            int i = 0;
            for (; i + MR <= c->m; i += MR)
                ifd__ukr_avx2(yb + (int64_t)i * c->n, c->n, xb + (int64_t)i * k, k, wb, kc, m0, m1,
                              acc, MR);
            float *yr = yb + (int64_t)i * c->n;
            const float *xr = xb + (int64_t)i * k;
            switch (c->m - i) {
            case 5:
                ifd__ukr_avx2(yr, c->n, xr, k, wb, kc, m0, m1, acc, 5);
                break;
            case 4:
                ifd__ukr_avx2(yr, c->n, xr, k, wb, kc, m0, m1, acc, 4);
                break;
            case 3:
                ifd__ukr_avx2(yr, c->n, xr, k, wb, kc, m0, m1, acc, 3);
                break;
            case 2:
                ifd__ukr_avx2(yr, c->n, xr, k, wb, kc, m0, m1, acc, 2);
                break;
            case 1:
                ifd__ukr_avx2(yr, c->n, xr, k, wb, kc, m0, m1, acc, 1);
                break;
            default:
                break;
            }
        }
    }
}

/* ---- AVX-512 --------------------------------------------------------------- */

IFD__TARGET_AVX512 IFD__INLINE void ifd__dot_avx512(const ifd__mm_t *c, int i0, int j0,
                                                    const int MI, const int NJ)
{
    const int k = c->k;
    const float *x = c->x + (int64_t)i0 * k;
    const float *w = c->w + (int64_t)j0 * k;
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < MI; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NJ; j++)
            acc[i][j] = _mm512_setzero_ps();
    int p = 0;
    for (; p + 16 <= k; p += 16) {
        __m512 wv[4];
#pragma GCC unroll 4
        for (int j = 0; j < NJ; j++)
            wv[j] = _mm512_loadu_ps(w + (int64_t)j * k + p);
#pragma GCC unroll 4
        for (int i = 0; i < MI; i++) {
            __m512 xv = _mm512_loadu_ps(x + (int64_t)i * k + p);
#pragma GCC unroll 4
            for (int j = 0; j < NJ; j++)
                acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
    if (p < k) {
        __mmask16 mk = ifd__mask16(k - p);
        __m512 wv[4];
#pragma GCC unroll 4
        for (int j = 0; j < NJ; j++)
            wv[j] = _mm512_maskz_loadu_ps(mk, w + (int64_t)j * k + p);
#pragma GCC unroll 4
        for (int i = 0; i < MI; i++) {
            __m512 xv = _mm512_maskz_loadu_ps(mk, x + (int64_t)i * k + p);
#pragma GCC unroll 4
            for (int j = 0; j < NJ; j++)
                acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < MI; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NJ; j++)
            c->y[(int64_t)(i0 + i) * c->n + j0 + j] = _mm512_reduce_add_ps(acc[i][j]);
}

/* Rows [j0, j1) of y for all m rows of x: each group of 4 w rows stays in L1
 * while every group of up to 4 x rows passes over it. */
IFD__TARGET_AVX512 static void ifd__dot_rows_avx512(const ifd__mm_t *c, int j0, int j1)
{
#define IFD__DOTJ5(NJ)                                                                             \
    do {                                                                                           \
        for (int i = 0; i < c->m; i += 4) {                                                        \
            switch (c->m - i) {                                                                    \
            case 1:                                                                                \
                ifd__dot_avx512(c, i, j, 1, NJ);                                                   \
                break;                                                                             \
            case 2:                                                                                \
                ifd__dot_avx512(c, i, j, 2, NJ);                                                   \
                break;                                                                             \
            case 3:                                                                                \
                ifd__dot_avx512(c, i, j, 3, NJ);                                                   \
                break;                                                                             \
            default:                                                                               \
                ifd__dot_avx512(c, i, j, 4, NJ);                                                   \
                break;                                                                             \
            }                                                                                      \
        }                                                                                          \
    } while (0)
    int j = j0;
    for (; j + 4 <= j1; j += 4)
        IFD__DOTJ5(4);
    for (; j < j1; j++)
        IFD__DOTJ5(1);
#undef IFD__DOTJ5
}

IFD__TARGET_AVX512 IFD__INLINE void ifd__ukr_avx512(float *y, int ldy, const float *x, int ldx,
                                                    const float *wp, const char *pf, int npf, int kc,
                                                    __mmask16 m0, __mmask16 m1, int accumulate,
                                                    const int MI)
{
    __m512 c0[12], c1[12];
#pragma GCC unroll 12
    for (int i = 0; i < MI; i++)
        c0[i] = _mm512_setzero_ps(), c1[i] = _mm512_setzero_ps();
    for (int p = 0; p < kc; p++) {
        __m512 b0 = _mm512_load_ps(wp + p * 32), b1 = _mm512_load_ps(wp + p * 32 + 16);
        if (p < npf)
            _mm_prefetch(pf + (int64_t)p * 64, _MM_HINT_T1);
        if (p + kc < npf)
            _mm_prefetch(pf + (int64_t)(p + kc) * 64, _MM_HINT_T1);
#pragma GCC unroll 12
        for (int i = 0; i < MI; i++) {
            __m512 a = _mm512_set1_ps(x[(int64_t)i * ldx + p]);
            c0[i] = _mm512_fmadd_ps(a, b0, c0[i]);
            c1[i] = _mm512_fmadd_ps(a, b1, c1[i]);
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < MI; i++) {
        float *yr = y + (int64_t)i * ldy;
        if (accumulate) {
            c0[i] = _mm512_add_ps(c0[i], _mm512_maskz_loadu_ps(m0, yr));
            c1[i] = _mm512_add_ps(c1[i], _mm512_maskz_loadu_ps(m1, yr + 16));
        }
        _mm512_mask_storeu_ps(yr, m0, c0[i]);
        _mm512_mask_storeu_ps(yr + 16, m1, c1[i]);
    }
}

IFD__TARGET_AVX512 static void ifd__packed_avx512(const ifd__mm_t *c, int n0, int n1)
{
    enum { NR = 32, MR = 12 };
    float wp[IFD__MM_KC * NR] __attribute__((aligned(64)));
    const int k = c->k;
    for (int j0 = n0; j0 < n1; j0 += NR) {
        int nv = n1 - j0 < NR ? n1 - j0 : NR;
        __mmask16 m0 = ifd__mask16(nv < 16 ? nv : 16), m1 = ifd__mask16(nv > 16 ? nv - 16 : 0);
        for (int p0 = 0; p0 < k; p0 += c->kc) {
            int kc = k - p0 < c->kc ? k - p0 : c->kc;
            const float *wb = wp;
            if (c->wpre)
                wb = c->wpre + (int64_t)(j0 / NR) * NR * k + (int64_t)p0 * NR;
            else
                ifd__pack_avx2(wp, c->w, k, j0, nv, p0, kc, NR);
            int acc = p0 > 0;
            const float *xb = c->x + p0;
            float *yb = c->y + j0;
            /* While computing a pre-packed block, pull the next block of the
             * stream (the same size or smaller) into L2, each pass over the
             * block asking for its share of the lines: one line per step of
             * p, two when a single pass covers all of m. */
            const int passes = (c->m + MR - 1) / MR;
            const int lines = c->wpre ? kc * NR * 4 / 64 : 0;
            const int share = (lines + passes - 1) / passes;
            const char *pf = (const char *)(wb + (int64_t)kc * NR);
            int i = 0;
            for (; i + MR <= c->m; i += MR, pf += (int64_t)share * 64)
                ifd__ukr_avx512(yb + (int64_t)i * c->n, c->n, xb + (int64_t)i * k, k, wb, pf,
                                share, kc, m0, m1, acc, MR);
            float *yr = yb + (int64_t)i * c->n;
            const float *xr = xb + (int64_t)i * k;
#define IFD__TAIL5(R)                                                                              \
    case R:                                                                                        \
        ifd__ukr_avx512(yr, c->n, xr, k, wb, pf, share, kc, m0, m1, acc, R);                                 \
        break
            switch (c->m - i) {
                IFD__TAIL5(11);
                IFD__TAIL5(10);
                IFD__TAIL5(9);
                IFD__TAIL5(8);
                IFD__TAIL5(7);
                IFD__TAIL5(6);
                IFD__TAIL5(5);
                IFD__TAIL5(4);
                IFD__TAIL5(3);
                IFD__TAIL5(2);
                IFD__TAIL5(1);
            default:
                break;
            }
#undef IFD__TAIL5
        }
    }
}

#endif /* IFD__X86 */

/* ---- dispatch -------------------------------------------------------------- */

static void ifd__mm_task(void *arg, int task, int n_tasks)
{
    (void)n_tasks;
    const ifd__mm_t *c = arg;
    int n0 = task * c->rows_per_task;
    int n1 = n0 + c->rows_per_task < c->n ? n0 + c->rows_per_task : c->n;
    if (n0 >= n1)
        return;
    switch (c->isa) {
#if IFD__X86
    case IFD__ISA_AVX512:
        if (c->packed)
            ifd__packed_avx512(c, n0, n1);
        else
            ifd__dot_rows_avx512(c, n0, n1);
        return;
    case IFD__ISA_AVX2:
        if (c->packed)
            ifd__packed_avx2(c, n0, n1);
        else
            ifd__dot_rows_avx2(c, n0, n1);
        return;
#endif
    default:
        if (c->wpre)
            ifd__packed_scalar(c, n0, n1);
        else
            ifd__mm_scalar(c, n0, n1);
        return;
    }
}

/* Equal k-blocks (576 = 2 x 288, not 384 + 192), multiples of 16. Depends
 * on k only, so a packed layout and the kernels agree on it. */
static int ifd__kc_for(int k)
{
    int kblocks = (k + IFD__MM_KC - 1) / IFD__MM_KC;
    int kc = ((k + kblocks - 1) / kblocks + 15) / 16 * 16;
    return kc > IFD__MM_KC ? IFD__MM_KC : kc;
}

/* Panel width of the packed layout for an ISA. */
static int ifd__nr_for(ifd__isa_t isa)
{
    return isa == IFD__ISA_AVX512 ? 32 : 16;
}

static void ifd__mm_run(ifd__mm_t *c, ifd_threadpool_t *tp)
{
    const int m = c->m, n = c->n, k = c->k;
    c->kc = ifd__kc_for(k);
    /* A task's rows of w: whole micro-panels, and whole 64-byte lines of y. */
    int grain = c->packed && c->isa == IFD__ISA_AVX512 ? 32 : 16;

    /* One contiguous range of w per thread: each task streams its weights
     * with the next block always prefetched, and a task's first block is the
     * one read cold, so fewer tasks read faster (bench_engine: +5% at
     * concurrency 16 over 4 tasks per thread). Tasks are still claimed
     * dynamically: if a worker is late, the caller runs its task too. No task
     * is smaller than ~64K multiply-adds (a run costs a few microseconds). */
    int threads = ifd_threadpool_size(tp);
    int64_t grains = (n + grain - 1) / grain;
    int64_t work_per_grain = (int64_t)m * k * grain;
    int64_t max_tasks = (work_per_grain * grains) / (1 << 16) + 1;
    int64_t tasks = threads;
    if (tasks > max_tasks)
        tasks = max_tasks;
    if (tasks > grains)
        tasks = grains;
    int64_t grains_per_task = (grains + tasks - 1) / tasks;
    c->rows_per_task = (int)(grains_per_task * grain);
    tasks = (n + c->rows_per_task - 1) / c->rows_per_task;
    ifd_threadpool_run(tp, ifd__mm_task, c, (int)tasks);
}

int ifd_cpu_matmul_f32(float *restrict y, const float *restrict x, const float *restrict w, int m,
                       int n, int k, ifd_threadpool_t *tp)
{
    if (m < 0 || n < 0 || k < 0)
        return IFD_EINVAL;
    if (m == 0 || n == 0)
        return 0;
    if (k == 0) {
        memset(y, 0, sizeof(float) * (size_t)m * (size_t)n);
        return 0;
    }
    ifd__mm_t c = {.y = y, .x = x, .w = w, .m = m, .n = n, .k = k, .isa = ifd__cpu_isa()};
    c.packed = m >= IFD__MM_PACK_MIN_M;
    ifd__mm_run(&c, tp);
    return 0;
}

int64_t ifd_cpu_matmul_packed_floats(int n, int k)
{
    if (n <= 0 || k <= 0)
        return IFD_EINVAL;
    int nr = ifd__nr_for(ifd__cpu_isa());
    return (int64_t)((n + nr - 1) / nr) * nr * k;
}

int ifd_cpu_matmul_pack(float *restrict wp, const float *restrict w, int n, int k)
{
    if (n <= 0 || k <= 0)
        return IFD_EINVAL;
    const int nr = ifd__nr_for(ifd__cpu_isa());
    const int kc = ifd__kc_for(k);
    for (int j0 = 0; j0 < n; j0 += nr) {
        int nv = n - j0 < nr ? n - j0 : nr;
        float *panel = wp + (int64_t)(j0 / nr) * nr * k;
        for (int p0 = 0; p0 < k; p0 += kc) {
            int kcb = k - p0 < kc ? k - p0 : kc;
            float *dst = panel + (int64_t)p0 * nr;
            for (int p = 0; p < kcb; p++) {
                for (int j = 0; j < nr; j++)
                    dst[(int64_t)p * nr + j] = j < nv ? w[(int64_t)(j0 + j) * k + p0 + p] : 0.0f;
            }
        }
    }
    return 0;
}

int ifd_cpu_matmul_packed(float *restrict y, const float *restrict x, const float *restrict wp,
                          int m, int n, int k, ifd_threadpool_t *tp)
{
    if (m < 0 || n < 0 || k < 0 || !wp)
        return IFD_EINVAL;
    if (m == 0 || n == 0)
        return 0;
    if (k == 0) {
        memset(y, 0, sizeof(float) * (size_t)m * (size_t)n);
        return 0;
    }
    ifd__mm_t c = {.y = y, .x = x, .wpre = wp, .m = m, .n = n, .k = k, .isa = ifd__cpu_isa()};
    c.packed = 1;
    ifd__mm_run(&c, tp);
    return 0;
}
