/*
 * activations.c — row softmax, SwiGLU, GeGLU and plain GELU (tanh approximation).
 *
 * softmax: max-subtracted, exp in f32, the row sum accumulated in double
 * (as ggml does), then one multiply by 1/sum. A row of all −inf yields NaN,
 * as the definition does (0/0).
 * swiglu: silu(g)·u with silu(g) = g / (1 + e^−g).
 * gelu_tanh: gelu(x) alone (SigLIP's MLP), the same code with u = 1.
 * geglu_tanh: gelu(g)·u with gelu's tanh form 0.5·g·(1 + tanh(√(2/π)(g + 0.044715g³))),
 * evaluated through the identity 1 + tanh(z) = 2 / (1 + e^−2z), i.e.
 * gelu(g) = g / (1 + e^−2z); it has no cancellation for negative g, where
 * 1 + tanh(z) would lose every digit.
 *
 * The AVX2/AVX-512 paths use the vector exp of cpu_simd.h (≤ 2 ulp); the
 * scalar path uses libm's expf. Outputs may alias inputs element for element.
 * Single-threaded; callers split large tensors themselves.
 */
#include "cpu_kernels.h"

#include "cpu_simd.h"
#include "error.h"

#include <math.h>
#include <stdint.h>

#define IFD__GELU_K 0.7978845608028654f /* √(2/π) */
#define IFD__GELU_A 0.044715f

/* ---- scalar ---------------------------------------------------------------- */

static void ifd__softmax_scalar(float *x, int n)
{
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}

static inline float ifd__gelu_scalar(float g)
{
    const float z = IFD__GELU_K * g * (1.0f + IFD__GELU_A * g * g);
    return g / (1.0f + expf(-2.0f * z));
}

#if IFD__X86

/* ---- AVX2 ------------------------------------------------------------------ */

IFD__TARGET_AVX2 static void ifd__softmax_avx2(float *x, int n)
{
    __m256 mv = _mm256_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
    float mx = ifd__hmax8(mv);
    for (; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    const __m256 mb = _mm256_set1_ps(mx);
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    for (i = 0; i < n; i += 8) {
        int rem = n - i < 8 ? n - i : 8;
        __m256i mk = ifd__mask8(rem);
        __m256 e = ifd__exp8(_mm256_sub_ps(_mm256_maskload_ps(x + i, mk), mb));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(mk));
        _mm256_maskstore_ps(x + i, mk, e);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    s0 = _mm256_add_pd(s0, s1);
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(s0), _mm256_extractf128_pd(s0, 1));
    double sum = _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
    const __m256 inv = _mm256_set1_ps((float)(1.0 / sum));
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    for (; i < n; i++)
        x[i] *= (float)(1.0 / sum);
}

IFD__TARGET_AVX2 IFD__INLINE __m256 ifd__gelu8(__m256 g)
{
    __m256 z = _mm256_mul_ps(
        _mm256_mul_ps(_mm256_set1_ps(IFD__GELU_K), g),
        _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(IFD__GELU_A), g), g, _mm256_set1_ps(1.0f)));
    __m256 e = ifd__exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0f), z));
    return _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

IFD__TARGET_AVX2 IFD__INLINE __m256 ifd__silu8(__m256 g)
{
    __m256 e = ifd__exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

IFD__TARGET_AVX2 static void ifd__glu_avx2(float *out, const float *gate, const float *up,
                                           int64_t n, int gelu)
{
    for (int64_t i = 0; i < n; i += 8) {
        __m256i mk = ifd__mask8(n - i < 8 ? (int)(n - i) : 8);
        __m256 g = _mm256_maskload_ps(gate + i, mk);
        __m256 u = up ? _mm256_maskload_ps(up + i, mk) : _mm256_set1_ps(1.0f);
        __m256 a = gelu ? ifd__gelu8(g) : ifd__silu8(g);
        _mm256_maskstore_ps(out + i, mk, _mm256_mul_ps(a, u));
    }
}

/* ---- AVX-512 --------------------------------------------------------------- */

IFD__TARGET_AVX512 static void ifd__softmax_avx512(float *x, int n)
{
    __m512 mv = _mm512_set1_ps(-INFINITY);
    for (int i = 0; i < n; i += 16) {
        __mmask16 mk = ifd__mask16(n - i < 16 ? n - i : 16);
        mv = _mm512_mask_max_ps(mv, mk, mv, _mm512_maskz_loadu_ps(mk, x + i));
    }
    const double sum = ifd__exp_sum_avx512(x, n, _mm512_reduce_max_ps(mv));
    const __m512 inv = _mm512_set1_ps((float)(1.0 / sum));
    for (int i = 0; i < n; i += 16) {
        __mmask16 mk = ifd__mask16(n - i < 16 ? n - i : 16);
        _mm512_mask_storeu_ps(x + i, mk, _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, x + i), inv));
    }
}

IFD__TARGET_AVX512 IFD__INLINE __m512 ifd__gelu16(__m512 g)
{
    __m512 z = _mm512_mul_ps(
        _mm512_mul_ps(_mm512_set1_ps(IFD__GELU_K), g),
        _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(IFD__GELU_A), g), g, _mm512_set1_ps(1.0f)));
    __m512 e = ifd__exp16(_mm512_mul_ps(_mm512_set1_ps(-2.0f), z));
    return _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

IFD__TARGET_AVX512 IFD__INLINE __m512 ifd__silu16(__m512 g)
{
    __m512 e = ifd__exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
    return _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

IFD__TARGET_AVX512 static void ifd__glu_avx512(float *out, const float *gate, const float *up,
                                               int64_t n, int gelu)
{
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 mk = ifd__mask16(n - i < 16 ? (int)(n - i) : 16);
        __m512 g = _mm512_maskz_loadu_ps(mk, gate + i);
        __m512 u = up ? _mm512_maskz_loadu_ps(mk, up + i) : _mm512_set1_ps(1.0f);
        __m512 a = gelu ? ifd__gelu16(g) : ifd__silu16(g);
        _mm512_mask_storeu_ps(out + i, mk, _mm512_mul_ps(a, u));
    }
}

#endif

/* ---- API ------------------------------------------------------------------- */

int ifd_cpu_softmax(float *x, int rows, int n)
{
    if (rows < 0 || n <= 0)
        return IFD_EINVAL;
    ifd__isa_t isa = ifd__cpu_isa();
    for (int r = 0; r < rows; r++) {
        float *xr = x + (int64_t)r * n;
        switch (isa) {
#if IFD__X86
        case IFD__ISA_AVX512:
            ifd__softmax_avx512(xr, n);
            break;
        case IFD__ISA_AVX2:
            ifd__softmax_avx2(xr, n);
            break;
#endif
        default:
            ifd__softmax_scalar(xr, n);
            break;
        }
    }
    return 0;
}

/* up NULL: the activation alone (a · 1 is a exactly). */
static int ifd__glu(float *out, const float *gate, const float *up, int64_t n, int gelu)
{
    if (n < 0)
        return IFD_EINVAL;
    switch (ifd__cpu_isa()) {
#if IFD__X86
    case IFD__ISA_AVX512:
        ifd__glu_avx512(out, gate, up, n, gelu);
        return 0;
    case IFD__ISA_AVX2:
        ifd__glu_avx2(out, gate, up, n, gelu);
        return 0;
#endif
    default:
        for (int64_t i = 0; i < n; i++) {
            const float g = gate[i];
            const float a = gelu ? ifd__gelu_scalar(g) : g / (1.0f + expf(-g));
            out[i] = up ? a * up[i] : a;
        }
        return 0;
    }
}

int ifd_cpu_swiglu(float *out, const float *gate, const float *up, int64_t n)
{
    return ifd__glu(out, gate, up, n, 0);
}

int ifd_cpu_geglu_tanh(float *out, const float *gate, const float *up, int64_t n)
{
    return ifd__glu(out, gate, up, n, 1);
}

int ifd_cpu_gelu_tanh(float *out, const float *x, int64_t n)
{
    return ifd__glu(out, x, NULL, n, 1);
}
