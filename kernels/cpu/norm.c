/*
 * norm.c — RMSNorm (ifd_cpu_rmsnorm).
 *
 * Numerics follow ggml's rms_norm so results sit within rounding of
 * llama.cpp: the sum of squares is accumulated in double, the scale is
 * 1/sqrtf(mean + eps) in float, and y = (x · scale) · w with two roundings
 * (ggml applies the weight as a separate multiply). Rows are independent, so
 * y may alias x; the row is read completely before it is written.
 *
 * Single-threaded: a row of a few thousand elements is far below the cost of
 * a pool run; the caller may split rows itself.
 */
#include "cpu_kernels.h"

#include "cpu_simd.h"
#include "error.h"

#include <math.h>
#include <stdint.h>

static double ifd__sumsq_scalar(const float *x, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return s;
}

static void ifd__scale_mul_scalar(float *y, const float *x, const float *w, float scale, int n)
{
    for (int i = 0; i < n; i++)
        y[i] = (x[i] * scale) * w[i];
}

#if IFD__X86

IFD__TARGET_AVX2 static double ifd__sumsq_avx2(const float *x, int n)
{
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
        __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        a0 = _mm256_fmadd_pd(lo, lo, a0);
        a1 = _mm256_fmadd_pd(hi, hi, a1);
    }
    a0 = _mm256_add_pd(a0, a1);
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(a0), _mm256_extractf128_pd(a0, 1));
    double r = _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
    for (; i < n; i++)
        r += (double)x[i] * x[i];
    return r;
}

IFD__TARGET_AVX2 static void ifd__scale_mul_avx2(float *y, const float *x, const float *w,
                                                 float scale, int n)
{
    __m256 sv = _mm256_set1_ps(scale);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), sv),
                                              _mm256_loadu_ps(w + i)));
    for (; i < n; i++)
        y[i] = (x[i] * scale) * w[i];
}

IFD__TARGET_AVX512 static double ifd__sumsq_avx512(const float *x, int n)
{
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    int i = 0;
    for (; i < n; i += 16) {
        __m512 v = _mm512_maskz_loadu_ps(ifd__mask16(n - i < 16 ? n - i : 16), x + i);
        __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
        __m512d hi =
            _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
        a0 = _mm512_fmadd_pd(lo, lo, a0);
        a1 = _mm512_fmadd_pd(hi, hi, a1);
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
}

IFD__TARGET_AVX512 static void ifd__scale_mul_avx512(float *y, const float *x, const float *w,
                                                     float scale, int n)
{
    __m512 sv = _mm512_set1_ps(scale);
    for (int i = 0; i < n; i += 16) {
        __mmask16 mk = ifd__mask16(n - i < 16 ? n - i : 16);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, x + i), sv);
        _mm512_mask_storeu_ps(y + i, mk, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(mk, w + i)));
    }
}

#endif

int ifd_cpu_rmsnorm(float *y, const float *x, const float *w, int rows, int dim, float eps)
{
    if (rows < 0 || dim <= 0 || !(eps >= 0))
        return IFD_EINVAL;
    ifd__isa_t isa = ifd__cpu_isa();
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (int64_t)r * dim;
        float *yr = y + (int64_t)r * dim;
        double ss;
        switch (isa) {
#if IFD__X86
        case IFD__ISA_AVX512:
            ss = ifd__sumsq_avx512(xr, dim);
            break;
        case IFD__ISA_AVX2:
            ss = ifd__sumsq_avx2(xr, dim);
            break;
#endif
        default:
            ss = ifd__sumsq_scalar(xr, dim);
            break;
        }
        const float mean = (float)(ss / dim);
        const float scale = 1.0f / sqrtf(mean + eps);
        switch (isa) {
#if IFD__X86
        case IFD__ISA_AVX512:
            ifd__scale_mul_avx512(yr, xr, w, scale, dim);
            break;
        case IFD__ISA_AVX2:
            ifd__scale_mul_avx2(yr, xr, w, scale, dim);
            break;
#endif
        default:
            ifd__scale_mul_scalar(yr, xr, w, scale, dim);
            break;
        }
    }
    return 0;
}
