/*
 * hmatmul.c — matrix products on f16/bf16 weights in 16-row panels
 * (hmatmul.h has the layout and the contract).
 *
 * The scheme is matmul.c's packed one with 16-bit panels: for each panel and
 * k-block (kc × 16 × 2 bytes, in L1), every group of up to 6 rows of x (12
 * on AVX-512, where one vector holds a row's 16 outputs) runs
 * a micro-kernel that broadcasts one x element and multiplies it with the
 * 16 weights of that column, converted on the fly (F16C vcvtph2ps for f16,
 * a 16-bit shift for bf16: both exact). The accumulators are the 16
 * outputs of each x row; no horizontal sums, so the order per output is one
 * fma chain per k-block and does not depend on m. On AVX-512 with more than
 * 12 rows (prefill, a vision tower's patches) the rows come in blocks of
 * HMC (kept in L2), each pair of panels' k-block is converted to f32 once
 * per block into an L1 copy, and a 12 × 32 micro-kernel runs on it: the
 * same chains, so the same bits.
 *
 * Parallelism: tasks take contiguous ranges of panels (one range per thread,
 * each a sequential stream of weights; 16 floats of y = one cache line).
 */
#include "hmatmul.h"

#include "cpu_kernels.h"
#include "cpu_simd.h"
#include "error.h"
#include "modelfile/ggml_types.h"

#include <math.h>
#include <string.h>

enum {
    HNR = 16,  /* rows per panel */
    HMR = 6,   /* x rows per micro-kernel call */
    HKC = 384, /* most columns per k-block (matmul.c's IFD__MM_KC) */
};

bool ifd_cpu_htype_supported(uint32_t type)
{
    return type == IFD_GGML_F16 || type == IFD_GGML_BF16;
}

int64_t ifd_cpu_hweight_elems(int n, int k)
{
    if (n <= 0 || k <= 0)
        return IFD_EINVAL;
    return (int64_t)((n + HNR - 1) / HNR) * HNR * k;
}

int ifd_cpu_hweight_pack(uint16_t *restrict dst, const uint16_t *restrict src, int n, int k)
{
    if (n <= 0 || k <= 0 || !dst || !src)
        return IFD_EINVAL;
    for (int j0 = 0; j0 < n; j0 += HNR) {
        uint16_t *panel = dst + (int64_t)j0 * k;
        const int nv = n - j0 < HNR ? n - j0 : HNR;
        if (nv < HNR)
            memset(panel, 0, sizeof(uint16_t) * (size_t)k * HNR);
        for (int j = 0; j < nv; j++) {
            const uint16_t *row = src + (int64_t)(j0 + j) * k;
            for (int p = 0; p < k; p++)
                panel[(int64_t)p * HNR + j] = row[p];
        }
    }
    return 0;
}

static inline float h2f(uint16_t h, int bf)
{
    return bf ? ifd_bf16_to_f32(h) : ifd_f16_to_f32(h);
}

int ifd_cpu_hweight_row(float *restrict y, const uint16_t *restrict wp, uint32_t type, int n, int k,
                        int row)
{
    if (!ifd_cpu_htype_supported(type))
        return IFD_ENOTSUP;
    if (n <= 0 || k <= 0 || row < 0 || row >= n || !y || !wp)
        return IFD_EINVAL;
    const int bf = type == IFD_GGML_BF16;
    const uint16_t *panel = wp + (int64_t)(row / HNR) * HNR * k + row % HNR;
    for (int p = 0; p < k; p++)
        y[p] = h2f(panel[(int64_t)p * HNR], bf);
    return 0;
}

/* Equal k-blocks of at most HKC, multiples of 16: matmul.c's ifd__kc_for,
 * so the two agree on the order (hmatmul.h). */
static int hkc_for(int k)
{
    int kblocks = (k + HKC - 1) / HKC;
    int kc = ((k + kblocks - 1) / kblocks + 15) / 16 * 16;
    return kc > HKC ? HKC : kc;
}

typedef struct {
    float *y;
    int64_t ldy;
    const float *x;
    const uint16_t *w;
    int m, n, k, kc, bf;
    int rows_per_task; /* a multiple of HNR */
    int isa;
} hmm_t;

/* Scalar: the reference order, one output at a time. */
static void hmm_scalar(const hmm_t *c, int n0, int n1)
{
    const int k = c->k;
    for (int j0 = n0; j0 < n1; j0 += HNR) {
        const int nv = n1 - j0 < HNR ? n1 - j0 : HNR;
        const uint16_t *panel = c->w + (int64_t)j0 * k;
        for (int p0 = 0; p0 < k; p0 += c->kc) {
            const int kc = k - p0 < c->kc ? k - p0 : c->kc;
            const uint16_t *wb = panel + (int64_t)p0 * HNR;
            for (int i = 0; i < c->m; i++) {
                const float *xr = c->x + (int64_t)i * k + p0;
                float *yr = c->y + (int64_t)i * c->ldy + j0;
                for (int j = 0; j < nv; j++) {
                    float acc = 0.0f;
                    for (int p = 0; p < kc; p++)
                        acc = fmaf(xr[p], h2f(wb[(int64_t)p * HNR + j], c->bf), acc);
                    yr[j] = p0 > 0 ? yr[j] + acc : acc;
                }
            }
        }
    }
}

#if IFD__X86

IFD__TARGET_AVX2 IFD__INLINE __m256 h8_avx2(const uint16_t *p, const int BF)
{
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
    if (BF)
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
    return _mm256_cvtph_ps(v);
}

/* y[MI rows, 16] (+)= x[MI rows, kc] · wb[kc][16] */
IFD__TARGET_AVX2 IFD__INLINE void hukr_avx2(float *y, int64_t ldy, const float *x, int64_t ldx,
                                            const uint16_t *wb, int kc, __m256i m0, __m256i m1,
                                            int accumulate, const int MI, const int BF)
{
    __m256 c0[HMR], c1[HMR];
#pragma GCC unroll 6
    for (int i = 0; i < MI; i++)
        c0[i] = _mm256_setzero_ps(), c1[i] = _mm256_setzero_ps();
    for (int p = 0; p < kc; p++) {
        const __m256 b0 = h8_avx2(wb + p * HNR, BF), b1 = h8_avx2(wb + p * HNR + 8, BF);
#pragma GCC unroll 6
        for (int i = 0; i < MI; i++) {
            const __m256 a = _mm256_broadcast_ss(x + i * ldx + p);
            c0[i] = _mm256_fmadd_ps(a, b0, c0[i]);
            c1[i] = _mm256_fmadd_ps(a, b1, c1[i]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < MI; i++) {
        float *yr = y + i * ldy;
        if (accumulate) {
            c0[i] = _mm256_add_ps(c0[i], _mm256_maskload_ps(yr, m0));
            c1[i] = _mm256_add_ps(c1[i], _mm256_maskload_ps(yr + 8, m1));
        }
        _mm256_maskstore_ps(yr, m0, c0[i]);
        _mm256_maskstore_ps(yr + 8, m1, c1[i]);
    }
}

IFD__TARGET_AVX2 IFD__INLINE void hmm_avx2(const hmm_t *c, int n0, int n1, const int BF)
{
    const int k = c->k;
    for (int j0 = n0; j0 < n1; j0 += HNR) {
        const int nv = n1 - j0 < HNR ? n1 - j0 : HNR;
        const __m256i m0 = ifd__mask8(nv < 8 ? nv : 8), m1 = ifd__mask8(nv > 8 ? nv - 8 : 0);
        const uint16_t *panel = c->w + (int64_t)j0 * k;
        for (int p0 = 0; p0 < k; p0 += c->kc) {
            const int kc = k - p0 < c->kc ? k - p0 : c->kc, acc = p0 > 0;
            const uint16_t *wb = panel + (int64_t)p0 * HNR;
            const float *xb = c->x + p0;
            float *yb = c->y + j0;
            int i = 0;
            for (; i + HMR <= c->m; i += HMR)
                hukr_avx2(yb + i * c->ldy, c->ldy, xb + (int64_t)i * k, k, wb, kc, m0, m1, acc, HMR,
                          BF);
            float *yr = yb + i * c->ldy;
            const float *xr = xb + (int64_t)i * k;
            switch (c->m - i) {
            case 5:
                hukr_avx2(yr, c->ldy, xr, k, wb, kc, m0, m1, acc, 5, BF);
                break;
            case 4:
                hukr_avx2(yr, c->ldy, xr, k, wb, kc, m0, m1, acc, 4, BF);
                break;
            case 3:
                hukr_avx2(yr, c->ldy, xr, k, wb, kc, m0, m1, acc, 3, BF);
                break;
            case 2:
                hukr_avx2(yr, c->ldy, xr, k, wb, kc, m0, m1, acc, 2, BF);
                break;
            case 1:
                hukr_avx2(yr, c->ldy, xr, k, wb, kc, m0, m1, acc, 1, BF);
                break;
            default:
                break;
            }
        }
    }
}

IFD__TARGET_AVX2 static void hmm_avx2_f16(const hmm_t *c, int n0, int n1)
{
    hmm_avx2(c, n0, n1, 0);
}

IFD__TARGET_AVX2 static void hmm_avx2_bf16(const hmm_t *c, int n0, int n1)
{
    hmm_avx2(c, n0, n1, 1);
}

/* AVX-512: the 16 outputs of an x row in one vector, up to 12 rows a call
 * (the AVX2 kernel's two half-vector chains per row, joined: the same fma
 * chain per output, so the same bits). */
enum { HMR512 = 12 };

IFD__TARGET_AVX512 IFD__INLINE __m512 h16_avx512(const uint16_t *p, const int BF)
{
    __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)p);
    if (BF)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
    return _mm512_cvtph_ps(v);
}

IFD__TARGET_AVX512 IFD__INLINE void hukr_avx512(float *y, int64_t ldy, const float *x, int64_t ldx,
                                                const uint16_t *wb, int kc, __mmask16 mk,
                                                int accumulate, const int MI, const int BF)
{
    __m512 c0[HMR512];
#pragma GCC unroll 12
    for (int i = 0; i < MI; i++)
        c0[i] = _mm512_setzero_ps();
    for (int p = 0; p < kc; p++) {
        const __m512 b = h16_avx512(wb + p * HNR, BF);
#pragma GCC unroll 12
        for (int i = 0; i < MI; i++)
            c0[i] = _mm512_fmadd_ps(_mm512_set1_ps(x[i * ldx + p]), b, c0[i]);
    }
#pragma GCC unroll 12
    for (int i = 0; i < MI; i++) {
        float *yr = y + i * ldy;
        if (accumulate)
            c0[i] = _mm512_add_ps(c0[i], _mm512_maskz_loadu_ps(mk, yr));
        _mm512_mask_storeu_ps(yr, mk, c0[i]);
    }
}

/* The same product on a panel k-block already converted to f32 (wf [kc][16],
 * 64-byte aligned): the same fma chain per output, so the same bits. */
IFD__TARGET_AVX512 IFD__INLINE void hukr_avx512_f(float *y, int64_t ldy, const float *x,
                                                  int64_t ldx, const float *wf, int kc,
                                                  __mmask16 mk, int accumulate, const int MI)
{
    __m512 c0[HMR512];
#pragma GCC unroll 12
    for (int i = 0; i < MI; i++)
        c0[i] = _mm512_setzero_ps();
    for (int p = 0; p < kc; p++) {
        const __m512 b = _mm512_load_ps(wf + p * HNR);
#pragma GCC unroll 12
        for (int i = 0; i < MI; i++)
            c0[i] = _mm512_fmadd_ps(_mm512_set1_ps(x[i * ldx + p]), b, c0[i]);
    }
#pragma GCC unroll 12
    for (int i = 0; i < MI; i++) {
        float *yr = y + i * ldy;
        if (accumulate)
            c0[i] = _mm512_add_ps(c0[i], _mm512_maskz_loadu_ps(mk, yr));
        _mm512_mask_storeu_ps(yr, mk, c0[i]);
    }
}

/* Two panels at once (wf [kc][32]: panel j0's 16 columns, then j0 + 16's):
 * one broadcast of x feeds two fmas. */
IFD__TARGET_AVX512 IFD__INLINE void hukr2_avx512_f(float *y, int64_t ldy, const float *x,
                                                   int64_t ldx, const float *wf, int kc,
                                                   __mmask16 mk1, int accumulate, const int MI)
{
    __m512 c0[HMR512], c1[HMR512];
#pragma GCC unroll 12
    for (int i = 0; i < MI; i++)
        c0[i] = _mm512_setzero_ps(), c1[i] = _mm512_setzero_ps();
    for (int p = 0; p < kc; p++) {
        const __m512 b0 = _mm512_load_ps(wf + p * 2 * HNR),
                     b1 = _mm512_load_ps(wf + p * 2 * HNR + HNR);
#pragma GCC unroll 12
        for (int i = 0; i < MI; i++) {
            const __m512 a = _mm512_set1_ps(x[i * ldx + p]);
            c0[i] = _mm512_fmadd_ps(a, b0, c0[i]);
            c1[i] = _mm512_fmadd_ps(a, b1, c1[i]);
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < MI; i++) {
        float *yr = y + i * ldy;
        if (accumulate) {
            c0[i] = _mm512_add_ps(c0[i], _mm512_loadu_ps(yr));
            c1[i] = _mm512_add_ps(c1[i], _mm512_maskz_loadu_ps(mk1, yr + HNR));
        }
        _mm512_storeu_ps(yr, c0[i]);
        _mm512_mask_storeu_ps(yr + HNR, mk1, c1[i]);
    }
}

/* Rows [i0, i1) of x against one panel's k-block: 16-bit weights converted
 * on the fly (wf NULL: a few rows, where a conversion pass would not pay)
 * or from the f32 copy wf. */
IFD__TARGET_AVX512 IFD__INLINE void hmm_rows_avx512(float *yb, int64_t ldy, const float *xb,
                                                    int64_t ldx, const uint16_t *wb,
                                                    const float *wf, int kc, __mmask16 mk, int acc,
                                                    int i0, int i1, const int BF)
{
    int i = i0;
    if (wf) {
        for (; i + HMR512 <= i1; i += HMR512)
            hukr_avx512_f(yb + i * ldy, ldy, xb + (int64_t)i * ldx, ldx, wf, kc, mk, acc, HMR512);
#pragma GCC unroll 4
        for (int t = 8; t >= 1; t /= 2) {
            if (i1 - i >= t) {
                hukr_avx512_f(yb + i * ldy, ldy, xb + (int64_t)i * ldx, ldx, wf, kc, mk, acc, t);
                i += t;
            }
        }
        return;
    }
    for (; i + HMR512 <= i1; i += HMR512)
        hukr_avx512(yb + i * ldy, ldy, xb + (int64_t)i * ldx, ldx, wb, kc, mk, acc, HMR512, BF);
        /* the rest in calls of 8, 4, 2 and 1 rows */
#pragma GCC unroll 4
    for (int t = 8; t >= 1; t /= 2) {
        if (i1 - i >= t) {
            hukr_avx512(yb + i * ldy, ldy, xb + (int64_t)i * ldx, ldx, wb, kc, mk, acc, t, BF);
            i += t;
        }
    }
}

IFD__TARGET_AVX512 IFD__INLINE void hmm_rows2_avx512(float *yb, int64_t ldy, const float *xb,
                                                     int64_t ldx, const float *wf, int kc,
                                                     __mmask16 mk1, int acc, int i0, int i1)
{
    int i = i0;
    for (; i + HMR512 <= i1; i += HMR512)
        hukr2_avx512_f(yb + i * ldy, ldy, xb + (int64_t)i * ldx, ldx, wf, kc, mk1, acc, HMR512);
#pragma GCC unroll 4
    for (int t = 8; t >= 1; t /= 2) {
        if (i1 - i >= t) {
            hukr2_avx512_f(yb + i * ldy, ldy, xb + (int64_t)i * ldx, ldx, wf, kc, mk1, acc, t);
            i += t;
        }
    }
}

/* Cache blocking for many rows (a prefill chunk, a vision tower's 4096
 * patches): blocks of HMC rows of x (HMC × kc floats stay in L2 while every
 * panel of the task passes over them), and each panel's k-block converted
 * once per row block into an f32 copy in L1 that its HMC / 12 micro-kernel
 * calls share. The order of the fmas per output is unchanged (k-blocks in
 * order, one chain each), so the bits do not depend on the blocking. */
enum { HMC = 192 };

IFD__TARGET_AVX512 IFD__INLINE void hmm_avx512(const hmm_t *c, int n0, int n1, const int BF)
{
    const int k = c->k;
    _Alignas(64) float wf[HKC * 2 * HNR];
    const int convert = c->m > HMR512; /* the f32 copy pays from two micro-kernel calls on */
    for (int i0 = 0; i0 < c->m; i0 += HMC) {
        const int i1 = c->m - i0 < HMC ? c->m : i0 + HMC;
        for (int p0 = 0; p0 < k; p0 += c->kc) {
            const int kc = k - p0 < c->kc ? k - p0 : c->kc, acc = p0 > 0;
            int j0 = n0;
            for (; convert && j0 + HNR < n1; j0 += 2 * HNR) { /* pairs of panels */
                const int nv = n1 - j0 - HNR < HNR ? n1 - j0 - HNR : HNR;
                const uint16_t *wb = c->w + (int64_t)j0 * k + (int64_t)p0 * HNR;
                const uint16_t *wb1 = wb + (int64_t)HNR * k;
                for (int p = 0; p < kc; p++) {
                    _mm512_store_ps(wf + p * 2 * HNR, h16_avx512(wb + p * HNR, BF));
                    _mm512_store_ps(wf + p * 2 * HNR + HNR, h16_avx512(wb1 + p * HNR, BF));
                }
                hmm_rows2_avx512(c->y + j0, c->ldy, c->x + p0, k, wf, kc, ifd__mask16(nv), acc, i0,
                                 i1);
            }
            for (; j0 < n1; j0 += HNR) {
                const int nv = n1 - j0 < HNR ? n1 - j0 : HNR;
                const __mmask16 mk = ifd__mask16(nv);
                const uint16_t *wb = c->w + (int64_t)j0 * k + (int64_t)p0 * HNR;
                if (convert)
                    for (int p = 0; p < kc; p++)
                        _mm512_store_ps(wf + p * HNR, h16_avx512(wb + p * HNR, BF));
                hmm_rows_avx512(c->y + j0, c->ldy, c->x + p0, k, wb, convert ? wf : NULL, kc, mk,
                                acc, i0, i1, BF);
            }
        }
    }
}

IFD__TARGET_AVX512 static void hmm_avx512_f16(const hmm_t *c, int n0, int n1)
{
    hmm_avx512(c, n0, n1, 0);
}

IFD__TARGET_AVX512 static void hmm_avx512_bf16(const hmm_t *c, int n0, int n1)
{
    hmm_avx512(c, n0, n1, 1);
}

#endif /* IFD__X86 */

static void hmm_task(void *arg, int task, int n_tasks)
{
    (void)n_tasks;
    const hmm_t *c = arg;
    const int n0 = task * c->rows_per_task;
    const int n1 = n0 + c->rows_per_task < c->n ? n0 + c->rows_per_task : c->n;
    if (n0 >= n1)
        return;
#if IFD__X86
    if (c->isa >= IFD__ISA_AVX512) {
        if (c->bf)
            hmm_avx512_bf16(c, n0, n1);
        else
            hmm_avx512_f16(c, n0, n1);
        return;
    }
    if (c->isa >= IFD__ISA_AVX2) {
        if (c->bf)
            hmm_avx2_bf16(c, n0, n1);
        else
            hmm_avx2_f16(c, n0, n1);
        return;
    }
#endif
    hmm_scalar(c, n0, n1);
}

int ifd__cpu_hmatmul_isa(float *restrict y, int64_t ldy, const float *restrict x,
                         const uint16_t *restrict wp, uint32_t type, int m, int n, int k,
                         ifd_threadpool_t *tp, int isa)
{
    if (!ifd_cpu_htype_supported(type))
        return IFD_ENOTSUP;
    if (!y || !x || !wp || m < 0 || n <= 0 || k <= 0 || ldy < n)
        return IFD_EINVAL;
    if (isa < 0 || isa > (int)ifd__cpu_isa())
        return IFD_ENOTSUP;
    if (m == 0)
        return 0;
    hmm_t c = {.y = y,
               .ldy = ldy,
               .x = x,
               .w = wp,
               .m = m,
               .n = n,
               .k = k,
               .kc = hkc_for(k),
               .bf = type == IFD_GGML_BF16,
               .isa = isa};
    /* one contiguous range of panels per thread, none under ~64K fmas */
    const int64_t panels = (n + HNR - 1) / HNR;
    const int64_t work_per_panel = (int64_t)m * k * HNR;
    int64_t tasks = ifd_threadpool_size(tp);
    const int64_t max_tasks = work_per_panel * panels / 65536 + 1;
    if (tasks > max_tasks)
        tasks = max_tasks;
    if (tasks > panels)
        tasks = panels;
    c.rows_per_task = (int)((panels + tasks - 1) / tasks) * HNR;
    tasks = (n + c.rows_per_task - 1) / c.rows_per_task;
    ifd_threadpool_run(tasks > 1 ? tp : NULL, hmm_task, &c, (int)tasks);
    return 0;
}

int ifd_cpu_hmatmul(float *restrict y, int64_t ldy, const float *restrict x,
                    const uint16_t *restrict wp, uint32_t type, int m, int n, int k,
                    ifd_threadpool_t *tp)
{
    return ifd__cpu_hmatmul_isa(y, ldy, x, wp, type, m, n, k, tp, (int)ifd__cpu_isa());
}
